// QueueStats: a snapshot of a queue's counters.
//
// Each counter is exact: every accepted, pulled or refused item is counted
// once under exactly one name. A snapshot taken while operations run reads
// the counters one by one, so it is not atomic across counters. When the
// queue is quiescent:  pushed == pulled + evicted + depth.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice {

struct QueueStats {
  std::size_t capacity = 0;
  std::uint64_t depth = 0;            // items held now (memory + spill store)
  std::uint64_t high_watermark = 0;   // largest in-memory depth seen by a push (<= capacity)
  std::uint64_t pushed = 0;           // pushes accepted (into memory or spill store)
  std::uint64_t pulled = 0;           // items handed to pullers
  std::uint64_t dropped = 0;          // refused by DropNewest
  std::uint64_t evicted = 0;          // oldest items destroyed by DropOldest / Sample
  std::uint64_t rejected = 0;         // refused by Reject, or by a full spill store
  std::uint64_t sampled_out = 0;      // refused by Sample
  std::uint64_t spilled = 0;          // accepted pushes that went to the spill store
  std::uint64_t spill_depth = 0;      // items in the spill store now
  std::uint64_t waiting_pushers = 0;  // threads parked in push now
  std::uint64_t waiting_pullers = 0;  // threads parked in pull now
};

// The snapshot in the Prometheus text format (metrics.h), labelled
// name="<name>": counters sluice_queue_*_total, gauges for the rest.
std::string to_prometheus(const QueueStats& stats, std::string_view name);

}  // namespace sluice
