// Retention and the topic bound: what channels' acknowledged positions allow
// the writer to delete, and how far it may run ahead of them. Private.
//
// A sealed segment is deleted once every channel (open here, elsewhere, or
// closed) has durably acknowledged past it, or when a cap
// (max_retained_bytes/age) says so. Before deleting, retention makes the
// positions it relies on durable (and, in kNone/kInterval, the log they
// point into), so a power cut never leaves a channel behind what was
// deleted. The bound (max_unconsumed) holds appends back to the slowest
// channel; acks in any process wake the waiting appender through NOTIFY.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "log/commit.h"

namespace sluice::log {

class Retention : public Commit {
 public:
  Retention(FileSystem& file_system, std::string directory, TopicOptions options, bool read_only);
  ~Retention() override;

  // Deletes what retention allows. Called on each roll, when an ack
  // crosses a segment, and when a channel is deleted.
  Status trim() SLUICE_EXCLUDES(mu);
  Status trim_locked() SLUICE_REQUIRES(mu);
  // Topic bound: waits (or refuses, per on_bound) until n more records fit.
  // The lock is let go while it sleeps.
  Status wait_for_room(std::size_t n, const Context& ctx) SLUICE_REQUIRES(mu);
  // Topic::stats and Topic::retention, without the topic lock: a
  // per-append fdatasync, a roll or a sync holds it across the disk, and a
  // scrape must not wait for the disk. The counters are as of the last time
  // the lock was let go or a sync let group-commit followers return
  // (published then: publish_stats), so what holds it now (an append in its
  // sync) is not in them yet, and everything that returned before the call
  // is.
  TopicStats stats() const;
  RetentionStats retention_stats() const;
  // A channel open here moved back to `seq` (Channel::seek): the bound's
  // cached slowest position follows it, so appends count the records it
  // will read again.
  void position_moved_back(std::uint64_t seq) SLUICE_REQUIRES(mu) {
    floor_ = std::min(floor_, seq);
  }
  // Every channel's acknowledged position: open ones here from memory, the
  // others from their files (unset or unreadable: 0, it passed nothing).
  Result<std::map<std::string, std::uint64_t>> channel_positions() SLUICE_REQUIRES(mu);

 private:
  // Syncs every position file that may hold a write not yet synced (open
  // channels here in kNone/kInterval; channels elsewhere, whose owner may
  // not have synced yet), so a power cut cannot take a position back behind
  // what is deleted on its strength.
  Status sync_positions() SLUICE_REQUIRES(mu);

  // A retention cap (size or age) wants the oldest segment gone, with
  // `retained` bytes in the topic.
  bool over_cap(Segment& oldest, std::uint64_t retained) SLUICE_REQUIRES(mu);

  RetentionStats stats_ SLUICE_GUARDED_BY(mu);

  // The counters stats() reads, a seqlock: written by the lock's holder
  // only (publish_stats, run by mu just before each release and by
  // mark_synced), read by anyone; `version` is odd while a publish is under
  // way.
  struct Published {
    std::atomic<std::uint32_t> version{0};
    std::atomic<std::uint64_t> first_seq{0}, next_seq{0}, visible_seq{0}, segments{0},
        disk_bytes{0}, appended{0}, syncs{0}, bound_waits{0}, bound_wait_ns{0}, bound_waiting{0},
        bound_waiting_since_ns{0}, segments_deleted{0}, segments_capped{0}, records_dropped{0};
  };
  Published pub_;
  void publish_stats() override SLUICE_REQUIRES(mu);
  static void publish_hook(void* self) SLUICE_NO_TSA;
  // The channels open here and their positions, under channels_mu alone
  // (entries are added and erased under mu and channels_mu both).
  void open_positions(std::vector<TopicStats::Position>& out) const SLUICE_NO_TSA;
  // A consistent copy of pub_ (retried while a publish is under way).
  template <class F>
  void read_published(F f) const;
  std::uint64_t floor_ SLUICE_GUARDED_BY(mu) = 0;          // slowest position when last looked
  std::uint32_t channels_seen_ SLUICE_GUARDED_BY(mu) = 0;  // notify.channels_made() then

 public:
  std::uint64_t bound_waits SLUICE_GUARDED_BY(mu) = 0;    // appends that slept for room
  std::uint64_t bound_wait_ns SLUICE_GUARDED_BY(mu) = 0;  // and how long, in total
  // Appends waiting for room now, and the sum of their starts (steady ns).
  std::uint64_t bound_waiting SLUICE_GUARDED_BY(mu) = 0;
  std::uint64_t bound_waiting_since_ns SLUICE_GUARDED_BY(mu) = 0;
};

}  // namespace sluice::log
