// The queue types every shared test runs against: Queue<T> and SpscQueue<T>
// (typed tests). A test written for both uses QueueOf<TypeParam, T> and, where
// it needs several producers or consumers, kMaxSides<TypeParam>.
#pragma once

#include <gtest/gtest.h>

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "sluice/queue.h"
#include "sluice/spsc_queue.h"

namespace sluice::testing_families {

struct Mpmc {
  template <class T>
  using Q = Queue<T>;
  static constexpr bool kSpsc = false;
};
struct Spsc {
  template <class T>
  using Q = SpscQueue<T>;
  static constexpr bool kSpsc = true;
};

template <class Family, class T>
using QueueOf = typename Family::template Q<T>;

// How many threads may push (or pull) at once: SpscQueue allows one.
template <class Family>
inline constexpr int kMaxSides = Family::kSpsc ? 1 : 3;

using QueueFamilies = ::testing::Types<Mpmc, Spsc>;

// SpscQueue's one producer, shaped like a Producer<T> handle: releasing it
// (destruction or done()) closes the queue.
template <class T>
class SoleProducer {
 public:
  explicit SoleProducer(SpscQueue<T>& q) : q_(&q) {}
  SoleProducer(SoleProducer&& o) noexcept : q_(std::exchange(o.q_, nullptr)) {}
  SoleProducer& operator=(SoleProducer&&) = delete;
  ~SoleProducer() { done(); }
  Status push(T&& item, const Context& ctx = {}) { return q_->push(std::move(item), ctx); }
  Status try_push(T&& item) { return q_->try_push(std::move(item)); }
  BulkResult push_many(std::span<T> items, const Context& ctx = {}) {
    return q_->push_many(items, ctx);
  }
  void done() {
    if (q_ != nullptr) std::exchange(q_, nullptr)->close();
  }

 private:
  SpscQueue<T>* q_;
};

// n producer handles whose last release closes q: Producer<T> handles on a
// Queue, the SoleProducer (n must be 1) on an SpscQueue.
template <class T>
std::vector<Producer<T>> producers(Queue<T>& q, int n) {
  std::vector<Producer<T>> out;
  for (int i = 0; i < n; ++i) out.push_back(q.producer());
  return out;
}
template <class T>
std::vector<SoleProducer<T>> producers(SpscQueue<T>& q, int n) {
  EXPECT_EQ(n, 1) << "SpscQueue has one producer";
  std::vector<SoleProducer<T>> out;
  out.emplace_back(q);
  return out;
}

struct FamilyName {
  template <class Family>
  static std::string GetName(int) {
    return Family::kSpsc ? "SpscQueue" : "Queue";
  }
};

}  // namespace sluice::testing_families
