// Topic internals shared by topic.cpp and channel.cpp. Private.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "log/format.h"
#include "sluice/log/topic.h"

namespace sluice::log {

// A range of a segment recovery found corrupt: readers jump from `from` to
// `to`, and `lost` records are gone.
struct Skip {
  std::uint64_t from = 0;
  std::uint64_t to = 0;
  std::uint64_t lost = 0;
};

struct Segment {
  std::uint64_t base_seq = 0;
  std::string path;
  int fd = -1;  // read-write for the last segment, read-only before
  // Offset up to which records are complete and visible to readers.
  std::atomic<std::uint64_t> end{kSegmentHeaderSize};
  std::vector<Skip> skips;  // fixed after recovery
  // A later segment exists: `end` is final (readers check it before taking
  // the topic's lock to look for the next segment).
  std::atomic<bool> sealed{false};
  // Writer only. `cap` is the file's size: records plus preallocated zeros
  // (under the topic's mu). `map` is a shared writable mapping of
  // [0, map_len) (null: pwrite only); the writer writes through it only
  // below `cap`, so it never touches a page past the end of the file
  // (SIGBUS), and readers in this process read below `end` through it.
  std::uint64_t cap = 0;
  char* map = nullptr;
  std::size_t map_len = 0;
  ~Segment();
};

// "<op> <path>: <strerror(errno)>" as kIOError.
Status io_error(const std::string& op, const std::string& path, int err);

// Writes all of buf at offset, retrying short writes.
Status pwrite_all(int fd, const char* buf, std::size_t n, std::uint64_t off,
                  const std::string& path);
Status fsync_dir(const std::string& dir);
// Takes a POSIX write lock on the whole file, or says who holds it:
// kInUse "<what> by PID n".
Status lock_file(int fd, const std::string& what);
Result<std::string> read_file(const std::string& path);
// Reads up to n bytes at off; returns bytes read (short at end of file).
Result<std::size_t> pread_some(int fd, char* buf, std::size_t n, std::uint64_t off,
                               const std::string& path);

// The topic's wake-up page, shared by its writer and its readers in other
// processes (file NOTIFY, docs/log_format.md). A reader that found nothing
// new reads `seq`, sets `want`, looks once more, and sleeps on `seq` (a
// shared futex). The writer, after publishing, clears `want` and, if it was
// set, bumps `seq` and wakes every sleeper. Writes through a memory map make
// no inotify events, so this is how readers learn of them.
//
// The same handshake runs the other way for the topic bound: an appender
// waiting for room sleeps on `acked_seq` after setting `acked_want`; a
// channel that acknowledged (in any process) wakes it.
struct NotifyPage {
  std::uint32_t seq;
  std::uint32_t want;
  std::uint32_t acked_seq;
  std::uint32_t acked_want;
};
// Clears *want; if it was set, bumps *seq and wakes its sleepers.
void wake_if_wanted(std::uint32_t* seq, std::uint32_t* want);
constexpr std::size_t kNotifyFileSize = 4096;
// Maps <dir>/NOTIFY (creating it, zeroed, if missing).
Result<NotifyPage*> map_notify(const std::string& dir);
// Sleeps while *word == expected (across processes), until woken, ctx's
// deadline, or ctx's stop, which bumps the word and wakes every sleeper on
// it (they look again and sleep on).
void futex_wait_shared(std::uint32_t* word, std::uint32_t expected, const Context& ctx);
void futex_wake_shared(std::uint32_t* word);

}  // namespace sluice::log

namespace sluice {

struct Topic::Impl {
  std::string dir;
  TopicOptions opt;
  RecoveryReport report;
  int lock_fd = -1;
  bool reader = false;                // opened read_only
  log::NotifyPage* notify = nullptr;  // the shared wake-up page

  mutable std::mutex mu;  // appends and the segment list
  std::vector<std::shared_ptr<log::Segment>> segs;
  std::uint64_t next_seq = 0;           // under mu
  std::uint64_t first_seq = 0;          // under mu: retention moves it
  std::uint64_t disk_bytes = 0;         // under mu: bytes in retained segments
  std::string buf;                      // the append buffer (pwrite path), under mu
  bool preallocate = false;             // fallocate works here (under mu)
  std::condition_variable_any data_cv;  // new records (channels wait on mu)
  int waiters = 0;                      // channels asleep on data_cv, under mu

  // Group commit: bytes written over the topic's life vs bytes known durable.
  std::uint64_t written = 0;  // under mu
  std::uint64_t synced = 0;   // under mu
  bool syncing = false;       // a leader is in fdatasync
  std::condition_variable sync_cv;
  bool dirty = false;  // kInterval: written since the last sync

  std::thread flusher;  // kInterval
  bool stopping = false;
  std::condition_variable stop_cv;

  RetentionStats retention;  // under mu

  // Open channels (one per name) and their acknowledged positions, under mu.
  struct OpenChannel {
    std::uint64_t acked = 0;   // first seq not durably acknowledged
    std::uint64_t capped = 0;  // unacknowledged records a cap deleted while open
  };
  std::map<std::string, OpenChannel> open_channels;

  ~Impl();
  // Writer: wakes readers in other processes that wait for records.
  void wake_other_processes();
  // The segment after s, and the topic's first retained seq (first).
  std::shared_ptr<log::Segment> segment_after(const log::Segment* s,
                                              std::uint64_t* first = nullptr) const;
  std::shared_ptr<log::Segment> segment_for(std::uint64_t seq) const;
  std::string channel_path(std::string_view name) const;
  // Retention: deletes sealed segments that every channel (open or not) has
  // durably passed. A topic without channels keeps everything.
  // Acknowledged positions of every channel: open ones here from memory,
  // the others from their files (unreadable: 0, it has passed nothing).
  Result<std::map<std::string, std::uint64_t>> channel_positions() const;
  // Topic bound: waits (or refuses) until n more records fit. Under mu.
  Status wait_for_room(std::unique_lock<std::mutex>& lk, std::size_t n, const Context& ctx);
  std::uint64_t floor = 0;  // under mu: the slowest channel's position when last looked
  Status trim();
  // A retention cap (size or age) wants the oldest segment gone. Under mu.
  bool over_cap(const log::Segment& oldest) const;
  Status trim_locked(std::unique_lock<std::mutex>& lk);

  // Read-only topics: pick up what the writer appended since we looked
  // (complete, valid records only; a new segment once the old one is final).
  void refresh();
};

}  // namespace sluice
