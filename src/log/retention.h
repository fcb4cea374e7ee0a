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
#include <cstdint>
#include <map>
#include <string>

#include "log/commit.h"

namespace sluice::log {

class Retention : public Commit {
 public:
  using Commit::Commit;

  // Deletes what retention allows. Called on each roll, when an ack
  // crosses a segment, and when a channel is deleted.
  Status trim() SLUICE_EXCLUDES(mu);
  Status trim_locked() SLUICE_REQUIRES(mu);
  // Topic bound: waits (or refuses, per on_bound) until n more records fit.
  // The lock is let go while it sleeps.
  Status wait_for_room(std::size_t n, const Context& ctx) SLUICE_REQUIRES(mu);
  RetentionStats retention_stats() const SLUICE_EXCLUDES(mu);
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
  std::uint64_t floor_ SLUICE_GUARDED_BY(mu) = 0;          // slowest position when last looked
  std::uint32_t channels_seen_ SLUICE_GUARDED_BY(mu) = 0;  // notify.channels_made() then

 public:
  std::uint64_t bound_waits SLUICE_GUARDED_BY(mu) = 0;    // appends that slept for room
  std::uint64_t bound_wait_ns SLUICE_GUARDED_BY(mu) = 0;  // and how long, in total
};

}  // namespace sluice::log
