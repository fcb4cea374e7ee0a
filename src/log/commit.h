// The commit pipeline: how appended records reach the disk and become
// visible to channels. Private.
//
// Per mode (docs/durability.md):
//   kNone      write, visible at once; nothing synced until sync() (or
//              retention, which syncs before it deletes).
//   kInterval  as kNone, plus a flusher thread syncing every sync_interval.
//   kPerAppend write, fdatasync, then visible, all under the topic lock.
//   kGroupCommit write under the lock; then one appender (the leader) syncs
//              everything written so far outside the lock while the others
//              wait; records become visible when a sync covered them.
// In every mode a roll syncs the new segment's header before the directory
// entry that names it, and (except kNone, which defers both to the next
// sync) the sealed segment and the directory before the roll returns.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "log/topic_core.h"

namespace sluice::log {

class Commit : public TopicCore {
 public:
  Commit(FileSystem& file_system, std::string directory, TopicOptions options, bool read_only);
  ~Commit() override;

  // A batch of `bytes` does not fit the last segment: roll() first (a batch
  // never spans segments; a record alone in a segment may be as large as
  // allowed). With an age cap, also once the last segment is old enough
  // (aged_out()).
  bool must_roll(std::size_t bytes) const SLUICE_REQUIRES(mu);
  // max_retained_age works on sealed segments: the last one, once it holds
  // a record, is sealed when it is older than a quarter of the cap (since it
  // was made: its birth time on disk, or since this writer opened it where
  // the file system keeps none), so a record lives at most about 1.5x the
  // cap while appends come (sealed within a quarter, deleted by the check
  // at a roll a quarter after the cap), however slowly it fills.
  bool aged_out() const SLUICE_REQUIRES(mu);
  // A quarter of max_retained_age: how old the last segment may get, and
  // how often an append waiting at the bound applies the cap.
  std::chrono::steady_clock::duration age_step() const {
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(opt.max_retained_age) /
           4;
  }
  // Seals the last segment and starts the next.
  Status roll() SLUICE_REQUIRES(mu);
  // Writes the batch into the last segment (the caller checked sizes, the
  // bound and the roll) and makes it visible as the mode allows. Returns
  // the first seq. On failure nothing was appended.
  Result<std::uint64_t> write_batch(std::span<const std::string_view> payloads, std::size_t bytes)
      SLUICE_REQUIRES(mu);
  // kGroupCommit: returns once a sync covered every seq below `upto`,
  // leading one if none runs. Called without the lock: a follower woken by
  // the sync that covered it returns without taking the lock again (on two
  // cores, seven followers queueing for it cost as much as the sync).
  Status wait_durable(std::uint64_t upto) SLUICE_EXCLUDES(mu);
  // Everything written so far durable and visible: sealed segments not yet
  // synced, then the last one. The directory needs none: every roll and
  // removal synced it already.
  Status sync_locked() SLUICE_REQUIRES(mu);

  // Topic::close: syncs everything written, then makes the closed mark
  // durable (a new empty segment flagged kSegmentClosed, or that flag in the
  // header of an empty last segment), then tells channels here and readers
  // elsewhere. Ok if already closed.
  Status mark_closed() SLUICE_REQUIRES(mu);

  // Open: the recovered last segment becomes the one appends go to; appends
  // take their times from the latest one recovered on.
  Status adopt_last() SLUICE_REQUIRES(mu);
  // Open: a last segment in format 1 (written by a sluice before the append
  // time) takes no more records: a roll starts a format 2 one, or, if it
  // holds no record, its header is rewritten in format 2 (synced; a torn
  // header and no record is a segment recovery rewrites from its name).
  // Nothing to do for a closed topic, or with OpenHooks::untimed.
  Status upgrade_last() SLUICE_REQUIRES(mu);
  // Open: channel positions lie past the recovered end (a power cut took
  // an unsynced tail they had passed): continue at `seq`, in a new segment
  // that records the gap, so no seq is ever used twice.
  Status skip_to(std::uint64_t seq) SLUICE_REQUIRES(mu);
  // Open: what recovery found is now durable; start the interval flusher.
  void start(std::uint64_t synced) SLUICE_EXCLUDES(mu);
  // Stops the flusher, gives the reserve back, and syncs (except kNone).
  // Idempotent; the destructor calls it too.
  void close() SLUICE_EXCLUDES(mu);

  std::uint64_t appended() const SLUICE_REQUIRES(mu) { return appended_; }
  std::uint64_t syncs() const SLUICE_REQUIRES(mu) { return syncs_; }
  // Not ok once a segment sync failed (until the topic is reopened).
  const Status& sync_failure() const SLUICE_REQUIRES(mu) { return sync_failed_; }
  // Whether sync_failure() is set, without the lock (a hot path's look).
  bool sync_failed() const noexcept { return sync_failed_seen_.load(std::memory_order_acquire); }

 protected:
  // Publishes the counters Topic::stats reads without the lock (Retention,
  // which has them all; the lock runs it before each release too).
  virtual void publish_stats() SLUICE_REQUIRES(mu) {}
  // Retention is deleting `seg`: sync() no longer has its records to sync.
  void forget_unsynced(const Segment& seg) SLUICE_REQUIRES(mu);

  WriteOptions wopt_ SLUICE_GUARDED_BY(mu);

 private:
  // Seals the last segment and starts one at `base`.
  Status roll_to(std::uint64_t base, std::uint32_t flags) SLUICE_REQUIRES(mu);
  void flush_loop() SLUICE_EXCLUDES(mu);

  // The append time of the next batch: the wall clock in microseconds, but
  // never below the last record's, so that times never decrease along the
  // log (a clock stepped back repeats the last time until it catches up)
  // and a search by time can bisect.
  TimeUs append_time() SLUICE_REQUIRES(mu);

  std::string buf_ SLUICE_GUARDED_BY(mu);       // the pwrite path's buffer
  TimeUs last_time_ SLUICE_GUARDED_BY(mu) = 0;  // of the last record written or recovered
  // When the last segment was made (or this writer opened it).
  std::chrono::steady_clock::time_point active_since_ SLUICE_GUARDED_BY(mu){};
  std::uint64_t synced_seq_ SLUICE_GUARDED_BY(mu) = 0;  // records below are durable
  bool syncing_ SLUICE_GUARDED_BY(mu) = false;          // a leader is in fdatasync
  // Followers sleep on `sync_epoch_`, bumped after every sync attempt (and
  // every other change of synced_seq_), and read `synced_` without the lock.
  std::atomic<std::uint64_t> synced_{0};
  std::atomic<std::uint32_t> sync_epoch_{0};
  // Modes none and interval: each finished writeback_bytes start to the disk.
  void start_writeback(Segment& seg) SLUICE_REQUIRES(mu);
  // Records below seq are durable: tell followers.
  void mark_synced(std::uint64_t seq) SLUICE_REQUIRES(mu);
  void bump_epoch();
  // Group commit: appends waiting for a sync, how many the last sync
  // covered, and how long syncs take (a moving average). A new leader waits
  // for the appenders the last sync released (at most half a sync), so one
  // sync covers them all rather than one sync for the first back and another
  // for the rest.
  std::uint64_t unsynced_appends_ SLUICE_GUARDED_BY(mu) = 0;
  std::uint64_t last_group_ SLUICE_GUARDED_BY(mu) = 0;
  std::chrono::nanoseconds sync_time_ SLUICE_GUARDED_BY(mu){0};
  bool gathering_ SLUICE_GUARDED_BY(mu) = false;
  CondVar arrive_cv_;
  bool dirty_ SLUICE_GUARDED_BY(mu) = false;  // written since the last sync
  // Set by a segment sync that failed: Linux marks the pages whose write-back
  // failed clean, so a later fdatasync returns 0 without writing them, and a
  // record covered by a successful-looking sync may still be lost. Every
  // later append, sync and wait for durability fails with it: reopen the
  // topic (what recovery then finds is what is there).
  Status sync_failed_ SLUICE_GUARDED_BY(mu);
  std::atomic<bool> sync_failed_seen_{false};  // sync_failed_ is set (it never clears)
  // Records `s` (a failed sync of `seg`) in sync_failed_; returns s.
  Status failed_sync(const Status& s, const Segment& seg) SLUICE_REQUIRES(mu);
  // kNone: sealed segments whose records are not synced yet (their headers
  // and directory entries were, at the roll).
  std::vector<std::shared_ptr<Segment>> unsynced_ SLUICE_GUARDED_BY(mu);
  std::uint64_t appended_ SLUICE_GUARDED_BY(mu) = 0;  // records, since open
  std::uint64_t syncs_ SLUICE_GUARDED_BY(mu) = 0;     // segment fdatasyncs, since open
  std::thread flusher_;                               // kInterval
  bool stopping_ SLUICE_GUARDED_BY(mu) = false;
  bool closed_ SLUICE_GUARDED_BY(mu) = false;
  CondVar stop_cv_;
};

}  // namespace sluice::log
