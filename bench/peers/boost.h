#pragma once
#include <boost/fiber/buffered_channel.hpp>
#include <boost/lockfree/queue.hpp>
#include <boost/lockfree/spsc_queue.hpp>

#include "peers/common.h"

namespace bench {
template <class T>
struct BoostLockfreeQueue {
  static constexpr const char* kName = "boost::lockfree::queue (spin)";
  static constexpr bool kSpscOnly = false;
  explicit BoostLockfreeQueue(std::size_t cap) : q(cap) {}
  void push(T v) {
    spin_until([&] { return q.bounded_push(v); });
  }
  void pop(T& v) {
    spin_until([&] { return q.pop(v); });
  }
  boost::lockfree::queue<T, boost::lockfree::fixed_sized<true>> q;
};
template <class T>
struct BoostSpscQueue {
  static constexpr const char* kName = "boost::lockfree::spsc_queue (spin)";
  static constexpr bool kSpscOnly = true;
  explicit BoostSpscQueue(std::size_t cap) : q(cap) {}
  void push(T v) {
    spin_until([&] { return q.push(v); });
  }
  void pop(T& v) {
    spin_until([&] { return q.pop(v); });
  }
  boost::lockfree::spsc_queue<T> q;
};
// Blocks through Boost.Fiber's scheduler (works across threads). Capacity
// must be a power of two; it holds capacity - 1 items.
template <class T>
struct BoostFiberChannel {
  static constexpr const char* kName = "Boost.Fiber buffered_channel";
  static constexpr bool kSpscOnly = false;
  explicit BoostFiberChannel(std::size_t cap) : q(cap < 2 ? 2 : cap) {}
  void push(T v) { q.push(v); }
  void pop(T& v) { q.pop(v); }
  boost::fibers::buffered_channel<T> q;
};
}  // namespace bench
