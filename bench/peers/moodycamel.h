#pragma once
#include <concurrentqueue/blockingconcurrentqueue.h>
#include <concurrentqueue/concurrentqueue.h>
#include <readerwriterqueue/readerwritercircularbuffer.h>

#include "peers/common.h"

namespace bench {
// Never sleeps: try_enqueue/try_dequeue with spin-then-yield. Bounded by its
// preallocation (try_enqueue never allocates).
template <class T>
struct MoodyConcurrentQueue {
  static constexpr const char* kName = "moodycamel ConcurrentQueue (spin)";
  static constexpr bool kSpscOnly = false;
  explicit MoodyConcurrentQueue(std::size_t cap) : q(cap) {}
  void push(T v) {
    spin_until([&] { return q.try_enqueue(v); });
  }
  void pop(T& v) {
    spin_until([&] { return q.try_dequeue(v); });
  }
  moodycamel::ConcurrentQueue<T> q;
};
// Consumers block on a semaphore; producers spin on try_enqueue (bounded).
template <class T>
struct MoodyBlockingConcurrentQueue {
  static constexpr const char* kName = "moodycamel BlockingConcurrentQueue";
  static constexpr bool kSpscOnly = false;
  explicit MoodyBlockingConcurrentQueue(std::size_t cap) : q(cap) {}
  void push(T v) {
    spin_until([&] { return q.try_enqueue(v); });
  }
  void pop(T& v) { q.wait_dequeue(v); }
  moodycamel::BlockingConcurrentQueue<T> q;
};
template <class T>
struct MoodyBlockingRWCircularBuffer {
  static constexpr const char* kName = "moodycamel BlockingReaderWriterCircularBuffer";
  static constexpr bool kSpscOnly = true;
  explicit MoodyBlockingRWCircularBuffer(std::size_t cap) : q(cap) {}
  void push(T v) { q.wait_enqueue(v); }
  void pop(T& v) { q.wait_dequeue(v); }
  moodycamel::BlockingReaderWriterCircularBuffer<T> q;
};
}  // namespace bench
