#pragma once
#include <tbb/concurrent_queue.h>

#include "peers/common.h"

namespace bench {
template <class T>
struct TbbBoundedQueue {
  static constexpr const char* kName = "oneTBB concurrent_bounded_queue";
  static constexpr bool kSpscOnly = false;
  explicit TbbBoundedQueue(std::size_t cap) { q.set_capacity(static_cast<std::ptrdiff_t>(cap)); }
  void push(T v) { q.push(v); }
  void pop(T& v) { q.pop(v); }
  tbb::concurrent_bounded_queue<T> q;
};
}  // namespace bench
