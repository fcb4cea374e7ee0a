// SpillStore<T>: the overflow store behind OverflowPolicy::kSpill.
//
// core declares it; the durable log (sluice::log) supplies a disk-backed
// implementation, so a user who never spills never links the log.
//
// Thread safety: none required. The queue serializes every call to its store
// under one mutex. Blocking: calls may do I/O; they run on the pushing or
// pulling thread. Ordering: FIFO (take returns items in put order).
// Ownership: put() moves from `item` only when it returns kOk; take() moves
// the oldest item into `out` and forgets it.
#pragma once

#include <cstdint>
#include <optional>

#include "sluice/status.h"

namespace sluice {

template <class T>
class SpillStore {
 public:
  virtual ~SpillStore() = default;
  // Appends. kRejected when the store's budget is spent (item untouched);
  // any other error also leaves the item untouched.
  virtual Status put(T& item) = 0;
  // Removes the oldest item into out. kWouldBlock when the store is empty.
  virtual Status take(std::optional<T>& out) = 0;
  // Items currently held.
  virtual std::uint64_t size() const = 0;
};

}  // namespace sluice
