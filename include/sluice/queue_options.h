// QueueOptions<T>: how to build a sluice::Queue.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "sluice/overflow_policy.h"
#include "sluice/spill_store.h"

namespace sluice {

template <class T>
struct QueueOptions {
  // Maximum items buffered. 0 makes a rendezvous: a push completes only when
  // a pull takes the item (Block, DropNewest and Reject only).
  std::size_t capacity = 1024;
  OverflowPolicy policy = OverflowPolicy::kBlock;
  // K for OverflowPolicy::kSample (>= 1).
  std::uint32_t sample_every = 10;
  // Required for OverflowPolicy::kSpill.
  std::shared_ptr<SpillStore<T>> spill_store;
};

}  // namespace sluice
