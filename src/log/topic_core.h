// What every part of a topic shares: its files, the topic lock, the
// retained segments and the seq counters, and the registry of channels open
// here. The parts build on it in layers, each in its own file with its own
// private state:
//   TopicCore  (this file)   segments, seqs, visibility, open channels
//   Commit     (commit.h)    appends: rolls, writes, syncs, group commit
//   Retention  (retention.h) deleting segments, caps, the topic bound
//   Topic::Impl (topic_impl.h) open and recovery, readers in other processes
// Locking rules are checked by Clang's thread-safety analysis (mutex.h).
// Private.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "log/file_system.h"
#include "log/mutex.h"
#include "log/notify.h"
#include "log/segment.h"
#include "sluice/log/topic.h"

namespace sluice::log {

// Test and benchmark hooks, set before the topic opens (log::open_topic).
struct OpenHooks {
  // Write format 1 segments (records without their append time), as a
  // sluice before the append time did: to make old topics in tests, and to
  // measure what the time costs in benchmarks. The writer's open then keeps
  // a format 1 last segment instead of moving on to a format 2 one.
  bool untimed = false;
  // The wall clock appends read (empty: std::chrono::system_clock::now).
  std::function<std::chrono::system_clock::time_point()> clock;
  // A writer opens only a topic whose directory is there: nothing above it
  // is made (kNotFound instead). The store's queues: a writer racing a
  // delete, which renames the queue's directory away, must not make it
  // again as a queue without its queue.meta.
  bool existing_only = false;
};

// Where a reader starts to look for a seq: a record of `seg` at byte `off`
// whose seq is `seq` (at or before the one wanted).
struct Place {
  std::shared_ptr<Segment> seg;
  std::uint64_t off = kSegmentHeaderSize;
  std::uint64_t seq = 0;
};

class TopicCore {
 public:
  TopicCore(FileSystem& file_system, std::string directory, TopicOptions options, bool read_only)
      : fs(file_system), dir(std::move(directory)), opt(options), reader(read_only) {}
  virtual ~TopicCore() = default;
  TopicCore(const TopicCore&) = delete;
  TopicCore& operator=(const TopicCore&) = delete;

  FileSystem& fs;
  const std::string dir;
  const TopicOptions opt;
  const bool reader;  // opened read_only: never changes a file
  Notify notify;      // the shared wake-up page, mapped at open
  OpenHooks hooks;    // set before open, fixed after

  // The format new segments are written in.
  std::uint32_t write_version() const {
    return hooks.untimed ? kUntimedFormatVersion : kFormatVersion;
  }

  mutable Mutex mu;                                                  // the topic lock
  std::vector<std::shared_ptr<Segment>> segs SLUICE_GUARDED_BY(mu);  // oldest first
  std::uint64_t first_seq SLUICE_GUARDED_BY(mu) = 0;                 // the oldest retained
  std::uint64_t next_seq SLUICE_GUARDED_BY(mu) = 0;                  // the next one written
  // Records below it are visible to channels (durable first in the modes
  // that promise it). Each segment's `end` is the same bound in bytes.
  std::uint64_t visible_seq SLUICE_GUARDED_BY(mu) = 0;
  std::uint64_t disk_bytes SLUICE_GUARDED_BY(mu) = 0;  // in retained segments
  // End of stream (Topic::close). `closed`: the mark is durable (written
  // under mu; channels read it without the lock to skip it on the hot path).
  // A read-only topic sets it once it found the mark, after the last record.
  // `closing`: appends are refused, set before the mark is written so that
  // none lands after a mark a failed close may have left on disk.
  std::atomic<bool> closed{false};
  bool closing SLUICE_GUARDED_BY(mu) = false;
  CondVar data_cv;                        // visible_seq moved
  int waiters SLUICE_GUARDED_BY(mu) = 0;  // channels asleep on data_cv

  // Channels open in this process, by name. Entries are added and erased
  // under mu and channels_mu; Topic::stats reads names and `acked` under
  // channels_mu alone (a sync may hold mu for long).
  struct OpenChannel {
    std::atomic<std::uint64_t> acked{0};  // first seq not durably acknowledged (set under mu)
    std::uint64_t capped = 0;             // unacknowledged records a cap deleted while open
    File* file = nullptr;                 // its position file (synced by retention)
  };
  std::map<std::string, OpenChannel, std::less<>> open_channels SLUICE_GUARDED_BY(mu);
  mutable std::mutex channels_mu;  // a leaf: taken under mu, never across I/O

  bool durable_mode() const {
    return opt.durability == Durability::kPerAppend || opt.durability == Durability::kGroupCommit;
  }
  std::string channel_dir() const { return dir + "/channels"; }
  std::string channel_path(std::string_view name) const {
    return channel_dir() + "/" + std::string(name) + ".pos";
  }

  // The segment after s (by base_seq: s may be gone), and first_seq.
  std::shared_ptr<Segment> segment_after(const Segment* s, std::uint64_t* first = nullptr) const
      SLUICE_EXCLUDES(mu);
  // The index entry of the segment holding seq at or before it (the oldest
  // segment's first record if seq is before it): reading on from there
  // reaches seq within kIndexSpacing bytes. Null seg if no segment.
  Place locate(std::uint64_t seq) const SLUICE_EXCLUDES(mu);
  // The first retained record whose append time is at or after `t`
  // (Topic::seq_at_time), among the records written (the writer) or read
  // (a read-only topic) so far; next_seq if none.
  Result<std::uint64_t> seq_at_time(std::chrono::system_clock::time_point t) const
      SLUICE_EXCLUDES(mu);
  // Reads a segment opened from its summary (not verified), its complete
  // records (below end), as recovery would have, and publishes the damage
  // found (Segment::skips).
  // Readers call it when they meet damage there; once per segment.
  Status verify_segment(Segment& seg) const;

  // Makes the records below `seq` visible (the last segment's bytes up to
  // `end`, or all of it if sealed) and wakes channels here and in other
  // processes.
  void publish(Segment& seg, std::uint64_t end, std::uint64_t seq) SLUICE_REQUIRES(mu);
};

}  // namespace sluice::log
