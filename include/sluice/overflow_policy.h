// OverflowPolicy: what a push does when the queue is full.
#pragma once

#include <cstdint>
#include <string_view>

namespace sluice {

enum class OverflowPolicy : std::uint8_t {
  // Wait for a free slot (or the context's end). Nothing is ever lost.
  kBlock,
  // Refuse the incoming item: push returns kDropped, counted in `dropped`.
  kDropNewest,
  // Evict the oldest buffered item to make room; the push succeeds. Evicted
  // items are destroyed and counted in `evicted`.
  kDropOldest,
  // Refuse the incoming item: push returns kRejected, counted in `rejected`.
  // Same effect as kDropNewest; the status and counter tell overload apart
  // from deliberate shedding.
  kReject,
  // Admit one in `sample_every` (K) of the pushes that find the queue full,
  // evicting the oldest for it; refuse the others with kSampledOut (counted in
  // `sampled_out`). The full arrivals are numbered 0, 1, 2, ... over the
  // queue's life; arrival n is admitted iff n % K == 0. K = 1 is kDropOldest.
  kSample,
  // Move the item to the SpillStore (e.g. a disk log). While the store holds
  // items, every push goes there too, and pulls return them after what the
  // ring held, so order is FIFO across memory and store. A full store
  // refuses with kRejected.
  kSpill,
};

std::string_view overflow_policy_name(OverflowPolicy p) noexcept;

}  // namespace sluice
