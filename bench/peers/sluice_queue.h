#pragma once
#include "peers/common.h"
#include "sluice/queue.h"
#include "sluice/spsc_queue.h"

namespace bench {
template <class T>
struct SluiceQueue {
  static constexpr const char* kName = "sluice::Queue (Block)";
  static constexpr bool kSpscOnly = false;
  explicit SluiceQueue(std::size_t cap) : q(cap) {}
  void push(T v) { (void)q.push(std::move(v)); }
  void pop(T& v) { v = *q.pull(); }
  sluice::Queue<T> q;
};
// The single-producer/single-consumer form: the same blocking calls.
template <class T>
struct SluiceSpscQueue {
  static constexpr const char* kName = "sluice::SpscQueue (Block)";
  static constexpr bool kSpscOnly = true;
  explicit SluiceSpscQueue(std::size_t cap) : q(cap) {}
  void push(T v) { (void)q.push(std::move(v)); }
  void pop(T& v) { v = *q.pull(); }
  sluice::SpscQueue<T> q;
};
}  // namespace bench
