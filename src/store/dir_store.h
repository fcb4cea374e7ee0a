// The embedded QueueStore: a directory, one Topic per queue. Layout
// (docs/cli.md, "Store layout"):
//   <store>/queues/<name>/queue.meta        "sluice-queue 1\nbound=N\n[max_age_ms=M\n]",
//                                           written once
//   <store>/queues/<name>/topic/            the queue's Topic (its own LOCK, channels/)
//   <store>/queues/<name>/readers/<ch>.lock flock'd by the channel's reader
//   <store>/queues/<name>/readers/<ch>.purged messages purge() dropped, ever
//                                           (decimal; written whole, synced)
//   <store>/tmp/                            staging for create and delete, each
//                                           stage beside its flock'd lock-<stage>
// Our files sit beside the topic directory, not in it: the topic's recovery
// owns what is inside (it removes stray *.tmp files, for one). Private.
//
// Every file the store touches, its own and its topics', goes through one
// log::FileSystem (the real one unless a test gives the simulated disk of
// tests/log/fault_file_system.h): the crash-point tests cut power at each
// of its calls.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "log/file_system.h"
#include "sluice/log/topic.h"
#include "sluice/store.h"

namespace sluice::store {

class DirStore final : public QueueStore {
 public:
  static Result<std::unique_ptr<QueueStore>> open(const std::string& dir,
                                                  const StoreOptions& options);
  // The same on any file system (tests: a simulated disk). `fs` outlives
  // the store and everything it hands out.
  static Result<std::unique_ptr<QueueStore>> open(log::FileSystem& fs, const std::string& dir,
                                                  const StoreOptions& options);
  // dir/queues and dir/tmp, made if missing.
  static Status make_dirs(log::FileSystem& fs, const std::string& dir);

  using QueueStore::create;
  Status create(std::string_view name, const QueueSpec& spec) override;
  Result<std::unique_ptr<QueueWriter>> writer(std::string_view name, const Context& ctx) override;
  using QueueStore::reader;
  Result<std::unique_ptr<QueueReader>> reader(std::string_view name, std::string_view channel,
                                              const Context& ctx,
                                              const ReaderOptions& options) override;
  using QueueStore::peek;
  Result<std::unique_ptr<QueuePeek>> peek(std::string_view name, std::string_view channel,
                                          const PeekFrom& from) override;
  Result<SeekResult> seek(std::string_view name, std::string_view channel, const SeekTarget& to,
                          const Context& ctx) override;
  Result<std::uint64_t> purge(std::string_view name, std::string_view channel,
                              const Context& ctx) override;
  Status close(std::string_view name, const Context& ctx) override;
  Status remove(std::string_view name) override;
  Result<std::vector<std::string>> list() override;
  Result<QueueInfo> stat(std::string_view name) override;

 private:
  DirStore(log::FileSystem& fs, std::string dir, StoreOptions options)
      : fs_(fs), dir_(std::move(dir)), opt_(options) {}
  std::string queue_dir(std::string_view name) const;
  // Removes what crashed creates and deletes left under tmp/ (never a stage
  // a live process works in: its lock file is held). Best effort, at open.
  void clean_tmp();
  // `s`, or "no queue" (kNotFound) if the queue is gone: a delete renamed it
  // away after its queue.meta was read, and `s` is the error of a file that
  // went with it.
  Status gone_or(std::string_view name, Status s) const;
  // The topic in `dir`, on the store's file system.
  Result<std::unique_ptr<Topic>> topic_at(const std::string& dir, const TopicOptions& o) const;
  // What queue.meta records.
  struct Meta {
    std::uint64_t bound = 0;
    std::chrono::milliseconds max_age{0};
  };
  // The queue's topic opened as its writer, waiting for the role under ctx.
  Result<std::unique_ptr<Topic>> writer_topic(std::string_view name, const Meta& meta,
                                              const Context& ctx);
  // The queue's queue.meta; kNotFound "no queue" if it is missing.
  Result<Meta> read_meta(std::string_view name) const;
  // seek() and purge(): the writer's topic and the channel's role, held
  // while `move` runs on the channel; `purged` counts what it dropped.
  struct Moved {
    std::uint64_t from = 0;  // the channel's position before
    std::uint64_t to = 0;    // and after
    std::uint64_t next_seq = 0;
  };
  Result<Moved> move_channel(std::string_view name, std::string_view channel, const Context& ctx,
                             const std::function<Result<std::uint64_t>(Topic&)>& target,
                             bool count_purged);

  log::FileSystem& fs_;
  std::string dir_;
  StoreOptions opt_;
};

}  // namespace sluice::store
