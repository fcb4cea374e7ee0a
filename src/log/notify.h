// The topic's wake-up page NOTIFY, shared by its writer and its readers in
// other processes (docs/log_format.md, "Wake-up page"). Private.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "log/file_system.h"
#include "sluice/context.h"

namespace sluice::log {

// A reader that found nothing new reads `seq`, sets `want`, looks once more,
// and sleeps on `seq` (a shared futex). The writer, after publishing, clears
// `want` and, if it was set, bumps `seq` and wakes every sleeper. Writes
// through a memory map make no inotify events, so this is how readers learn
// of them. The same handshake runs the other way for the topic bound: an
// appender waiting for room sleeps on `acked_seq` after setting
// `acked_want`; a channel that acknowledged (in any process) wakes it.
// `visible_seq` is the writer's high watermark: readers elsewhere deliver
// only records below it. `closed` is 1 once the topic's closed mark is
// durable (Topic::close): readers look for the mark instead of sleeping.
struct NotifyPage {
  std::uint32_t seq;
  std::uint32_t want;
  std::uint32_t acked_seq;
  std::uint32_t acked_want;
  std::uint64_t visible_seq;
  std::uint32_t closed;
  // Bumped (any process) once a new channel's start position is durable:
  // the writer's cached slowest position may be stale, look again.
  std::uint32_t channels;
};
constexpr std::size_t kNotifyFileSize = 4096;

// The mapped page; unmapped with the File it lives in.
class Notify {
 public:
  // Maps <dir>/NOTIFY, creating it zeroed if missing.
  Status open(FileSystem& fs, const std::string& dir);
  NotifyPage* page() const { return page_; }

  // Writer: records below `seq` may be delivered; wakes sleeping readers.
  void publish(std::uint64_t seq);
  std::uint64_t visible() const {
    return std::atomic_ref<std::uint64_t>(page_->visible_seq).load(std::memory_order_acquire);
  }
  // Channels (any process): an acknowledgement may have made room.
  void acked();
  // A channel was made (any process): the bound's slowest position may be
  // behind the writer's cached one.
  void channel_made() { std::atomic_ref<std::uint32_t>(page_->channels).fetch_add(1); }
  std::uint32_t channels_made() const {
    return std::atomic_ref<std::uint32_t>(page_->channels).load();
  }
  // Writer: the closed mark is durable; wakes sleeping readers and appenders
  // blocked on the topic bound.
  void close();
  bool closed() const {
    return std::atomic_ref<std::uint32_t>(page_->closed).load(std::memory_order_seq_cst) != 0;
  }

 private:
  std::unique_ptr<File> file_;
  NotifyPage* page_ = nullptr;
};

// Clears *want; if it was set, bumps *seq and wakes its sleepers.
void wake_if_wanted(std::uint32_t* seq, std::uint32_t* want);
// Sleeps while *word == expected (across processes), until woken, ctx's
// deadline, or ctx's stop, which bumps the word and wakes every sleeper on
// it (they look again and sleep on).
void futex_wait_shared(std::uint32_t* word, std::uint32_t expected, const Context& ctx);
void futex_wake_shared(std::uint32_t* word);

}  // namespace sluice::log
