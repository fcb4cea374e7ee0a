#pragma once
#include <atomic_queue/atomic_queue.h>

#include "peers/common.h"

namespace bench {
// Busy-waiting by design; driven with try_* and spin-then-yield.
template <class T>
struct AtomicQueue {
  static constexpr const char* kName = "atomic_queue AtomicQueueB2 (spin)";
  static constexpr bool kSpscOnly = false;
  explicit AtomicQueue(std::size_t cap) : q(static_cast<unsigned>(cap)) {}
  void push(T v) {
    spin_until([&] { return q.try_push(T(v)); });
  }
  void pop(T& v) {
    spin_until([&] { return q.try_pop(v); });
  }
  atomic_queue::AtomicQueueB2<T> q;
};
}  // namespace bench
