// Typed stress test over every policy and several capacities (cf. atomic_queue's
// "all pushes are ever popped once"): N producers and M consumers mix blocking,
// non-blocking, bulk and cancellable calls; afterwards every accepted item was
// delivered exactly once or counted as evicted, and the counters conserve.
// Runs against Queue<T> (3 producers, 2 consumers) and SpscQueue<T> (one of
// each, and no evicting policy), for three item types.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <stop_token>
#include <thread>
#include <vector>

#include "queue/queue_families.h"
#include "sluice/queue.h"
#include "testutil/memory_spill_store.h"

namespace sluice {
namespace {

int scale() {
  const char* s = std::getenv("SLUICE_STRESS_SCALE");
  return s != nullptr ? std::max(1, std::atoi(s)) : 1;
}

// Item types: a plain word, a move-only pointer, a 64-byte payload.
struct Fat {
  std::uint64_t id = 0;
  std::uint64_t pad[7] = {};
  Fat() = default;
  explicit Fat(std::uint64_t i) : id(i) { pad[6] = ~i; }
};
std::uint64_t id_of(std::uint64_t v) { return v; }
std::uint64_t id_of(const std::unique_ptr<std::uint64_t>& v) { return *v; }
std::uint64_t id_of(const Fat& v) {
  EXPECT_EQ(v.pad[6], ~v.id);  // payload intact
  return v.id;
}
template <class T>
T make(std::uint64_t id) {
  if constexpr (std::is_same_v<T, std::unique_ptr<std::uint64_t>>) {
    return std::make_unique<std::uint64_t>(id);
  } else {
    return T(id);
  }
}

// A queue family and an item type.
template <class F, class T>
struct Case {
  using Family = F;
  using Item = T;
};
using testing_families::Mpmc;
using testing_families::Spsc;
using Cases =
    ::testing::Types<Case<Mpmc, std::uint64_t>, Case<Mpmc, std::unique_ptr<std::uint64_t>>,
                     Case<Mpmc, Fat>, Case<Spsc, std::uint64_t>,
                     Case<Spsc, std::unique_ptr<std::uint64_t>>, Case<Spsc, Fat>>;
template <class C>
class QueueStressTest : public ::testing::Test {};
TYPED_TEST_SUITE(QueueStressTest, Cases);

template <class Family, class T>
void run(std::size_t capacity, OverflowPolicy policy) {
  constexpr int kProducers = Family::kSpsc ? 1 : 3, kConsumers = Family::kSpsc ? 1 : 2;
  const int each = 4000 * scale();
  QueueOptions<T> o;
  o.capacity = capacity;
  o.policy = policy;
  o.sample_every = 3;
  if (policy == OverflowPolicy::kSpill)
    o.spill_store = std::make_shared<testutil::MemorySpillStore<T>>(64);
  testing_families::QueueOf<Family, T> q(o);
  const std::uint64_t total = std::uint64_t{kProducers} * static_cast<std::uint64_t>(each);
  std::vector<std::atomic<std::uint8_t>> accepted(total), delivered(total);
  std::atomic<std::uint64_t> refused{0};  // by the policy (not: would block, timed out)
  auto count_refusal = [&](StatusCode c) {
    if (c == StatusCode::kDropped || c == StatusCode::kRejected || c == StatusCode::kSampledOut) {
      refused += 1;
    } else {
      ASSERT_TRUE(c == StatusCode::kWouldBlock || c == StatusCode::kDeadlineExceeded) << c;
    }
  };
  auto handles = testing_families::producers(q, kProducers);
  {
    std::vector<std::jthread> threads;
    for (int p = 0; p < kProducers; ++p) {
      threads.emplace_back([&, p, h = std::move(handles[p])]() mutable {
        std::mt19937 rng(static_cast<unsigned>(p + 1));
        for (int i = 0; i < each;) {
          const std::uint64_t id = static_cast<std::uint64_t>(p) * each + i;
          const unsigned op = rng() % 8;
          if (op == 0) {  // bulk
            std::vector<T> batch;
            const int n = std::min(each - i, 1 + static_cast<int>(rng() % 5));
            for (int k = 0; k < n; ++k) batch.push_back(make<T>(id + k));
            BulkResult r = h.push_many(batch);
            for (std::size_t k = 0; k < r.count; ++k) accepted[id + k] = 1;
            if (r.count < batch.size()) count_refusal(r.status);  // the stopping item
            i += static_cast<int>(
                std::max<std::size_t>(r.count + (r.count < batch.size() ? 1 : 0), 1));
            continue;
          }
          T item = make<T>(id);
          Status s = op == 1 ? h.try_push(std::move(item))
                     : op == 2
                         ? h.push(std::move(item), with_timeout(std::chrono::microseconds(50)))
                         : h.push(std::move(item));
          if (s.ok()) {
            accepted[id] = 1;
          } else {
            ASSERT_NE(s.code(), StatusCode::kClosed);
            count_refusal(s.code());
          }
          ++i;
        }
      });
    }
    for (int c = 0; c < kConsumers; ++c) {
      threads.emplace_back([&, c] {
        std::mt19937 rng(static_cast<unsigned>(100 + c));
        std::vector<T> batch;
        for (;;) {
          if (rng() % 3 == 0) {
            batch.clear();
            BulkResult r = q.pull_many(std::back_inserter(batch), 1 + rng() % 6);
            if (r.status == StatusCode::kClosed) return;
            for (auto& v : batch) ASSERT_EQ(delivered[id_of(v)].fetch_add(1), 0);
          } else {
            Result<T> r = q.pull();
            if (r.code() == StatusCode::kClosed) return;
            ASSERT_TRUE(r.ok());
            ASSERT_EQ(delivered[id_of(*r)].fetch_add(1), 0);
          }
        }
      });
    }
  }
  const QueueStats s = q.stats();
  std::uint64_t n_accepted = 0, n_delivered = 0;
  for (std::uint64_t id = 0; id < total; ++id) {
    n_accepted += accepted[id];
    n_delivered += delivered[id];
    ASSERT_LE(delivered[id], accepted[id]) << "delivered an item never accepted: " << id;
  }
  EXPECT_EQ(s.pushed, n_accepted);
  EXPECT_EQ(s.pulled, n_delivered);
  EXPECT_EQ(s.depth, 0u);
  EXPECT_EQ(s.pushed, s.pulled + s.evicted);  // conservation
  EXPECT_EQ(s.dropped + s.rejected + s.sampled_out, refused.load());
  if (policy == OverflowPolicy::kBlock) {
    EXPECT_EQ(s.evicted + s.dropped + s.rejected + s.sampled_out, 0u);
  }
  if (policy == OverflowPolicy::kDropOldest || policy == OverflowPolicy::kSample) {
    EXPECT_EQ(n_accepted - n_delivered, s.evicted);  // the undelivered are exactly the evicted
  } else {
    EXPECT_EQ(n_accepted, n_delivered);  // nothing accepted is lost
  }
  EXPECT_LE(s.high_watermark, capacity);
}

TYPED_TEST(QueueStressTest, EveryPolicyAndCapacityConservesItems) {
  using Family = typename TypeParam::Family;
  for (OverflowPolicy policy :
       {OverflowPolicy::kBlock, OverflowPolicy::kDropNewest, OverflowPolicy::kDropOldest,
        OverflowPolicy::kReject, OverflowPolicy::kSample, OverflowPolicy::kSpill}) {
    const bool evicts = policy == OverflowPolicy::kDropOldest || policy == OverflowPolicy::kSample;
    if (Family::kSpsc && evicts) continue;  // SpscQueue refuses them
    for (std::size_t cap : {0, 1, 7, 64}) {
      if (cap == 0 && (evicts || policy == OverflowPolicy::kSpill)) continue;
      SCOPED_TRACE(std::string(overflow_policy_name(policy)) + " capacity " + std::to_string(cap));
      run<Family, typename TypeParam::Item>(cap, policy);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

// close() from a third thread at a random moment while the producers mix
// every kind of push and the consumers every kind of pull: each push that
// returned kOk (or counted in a bulk result) is delivered exactly once, each
// refused item is still the caller's, and nothing else is delivered. On an
// SpscQueue, close lands in the middle of push attempts (it waits them out).
template <class Family, class T>
void close_at_random(std::size_t capacity, OverflowPolicy policy, unsigned seed) {
  constexpr int kProducers = Family::kSpsc ? 1 : 2, kConsumers = Family::kSpsc ? 1 : 2;
  constexpr std::uint64_t kEach = 1 << 20;  // more than any run gets through before close
  QueueOptions<T> o;
  o.capacity = capacity;
  o.policy = policy;
  if (policy == OverflowPolicy::kSpill)
    o.spill_store = std::make_shared<testutil::MemorySpillStore<T>>(16);
  testing_families::QueueOf<Family, T> q(o);
  std::vector<std::vector<std::uint64_t>> accepted(kProducers), delivered(kConsumers);
  std::atomic<std::uint64_t> progress{0};  // push calls made: the closer waits for a few
  {
    std::vector<std::jthread> threads;
    for (int p = 0; p < kProducers; ++p) {
      threads.emplace_back([&, p] {
        std::mt19937 rng(seed + static_cast<unsigned>(p));
        auto& mine = accepted[static_cast<std::size_t>(p)];
        for (std::uint64_t i = 0; i < kEach;) {
          progress.fetch_add(1, std::memory_order_relaxed);
          const std::uint64_t id = static_cast<std::uint64_t>(p) * kEach + i;
          const auto op = rng() % 6;
          if (op <= 1) {  // bulk, stopping at the first refusal / all or none
            std::vector<T> batch;
            const std::uint64_t n = std::min<std::uint64_t>(kEach - i, 1 + rng() % 4);
            for (std::uint64_t k = 0; k < n; ++k) batch.push_back(make<T>(id + k));
            std::size_t moved = 0;
            StatusCode code = StatusCode::kOk;
            if (op == 0) {
              const BulkResult r = q.push_many(batch);
              moved = r.count;
              code = r.status;
            } else if (batch.size() <= capacity) {
              code = q.push_all(batch).code();
              moved = code == StatusCode::kOk ? batch.size() : 0;
            }
            for (std::size_t k = 0; k < moved; ++k) mine.push_back(id + k);
            for (std::size_t k = moved; k < batch.size(); ++k) {
              ASSERT_EQ(id_of(batch[k]), id + k);  // refused items untouched
            }
            if (code == StatusCode::kClosed) return;
            i += moved > 0 ? moved : 1;
            continue;
          }
          T item = make<T>(id);
          const Status st =
              op == 2   ? q.try_push(std::move(item))
              : op == 3 ? q.push(std::move(item), with_timeout(std::chrono::microseconds(20)))
                        : q.push(std::move(item));
          if (st.ok()) {
            mine.push_back(id);
          } else {
            ASSERT_EQ(id_of(item), id);  // refused: still ours
            if (st.code() == StatusCode::kClosed) return;
          }
          ++i;
        }
      });
    }
    for (int c = 0; c < kConsumers; ++c) {
      threads.emplace_back([&, c] {
        std::mt19937 rng(seed + 100 + static_cast<unsigned>(c));
        auto& mine = delivered[static_cast<std::size_t>(c)];
        std::vector<T> batch;
        for (;;) {
          const auto op = rng() % 3;
          if (op == 0) {
            batch.clear();
            const BulkResult r = q.pull_many(std::back_inserter(batch), 1 + rng() % 5);
            for (auto& v : batch) mine.push_back(id_of(v));
            if (r.status == StatusCode::kClosed) return;
          } else {
            Result<T> r = op == 1 ? q.pull() : q.try_pull();
            if (r.ok()) mine.push_back(id_of(*r));
            if (r.code() == StatusCode::kClosed) return;
          }
        }
      });
    }
    threads.emplace_back([&] {
      std::mt19937 rng(seed + 1000);
      const auto calls = rng() % 3000;  // 0: before the first push
      while (progress.load(std::memory_order_relaxed) < calls) std::this_thread::yield();
      q.close();
    });
  }
  std::vector<std::uint64_t> all_accepted, all_delivered;
  for (auto& v : accepted) all_accepted.insert(all_accepted.end(), v.begin(), v.end());
  for (auto& v : delivered) all_delivered.insert(all_delivered.end(), v.begin(), v.end());
  std::sort(all_accepted.begin(), all_accepted.end());
  std::sort(all_delivered.begin(), all_delivered.end());
  ASSERT_EQ(all_delivered, all_accepted);  // exactly once, and nothing else
  // Any one consumer sees each producer's items in push order.
  for (const auto& got : delivered) {
    for (int p = 0; p < kProducers; ++p) {
      std::uint64_t last = 0;
      bool first = true;
      for (std::uint64_t id : got) {
        if (id / kEach != static_cast<std::uint64_t>(p)) continue;
        ASSERT_TRUE(first || id > last) << id << " after " << last;
        last = id;
        first = false;
      }
    }
  }
  const QueueStats s = q.stats();
  EXPECT_EQ(s.pushed, all_accepted.size());
  EXPECT_EQ(s.pulled, all_delivered.size());
}

TYPED_TEST(QueueStressTest, CloseAtARandomMomentLosesNothingAccepted) {
  using Family = typename TypeParam::Family;
  const int rounds = 20 * scale();
  for (OverflowPolicy policy :
       {OverflowPolicy::kBlock, OverflowPolicy::kReject, OverflowPolicy::kSpill}) {
    for (std::size_t cap : {1, 7, 64}) {
      for (int r = 0; r < rounds; ++r) {
        SCOPED_TRACE(std::string(overflow_policy_name(policy)) + " capacity " +
                     std::to_string(cap) + " round " + std::to_string(r));
        close_at_random<Family, typename TypeParam::Item>(cap, policy, static_cast<unsigned>(r));
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

// The evicting policies under a close() at a random moment, no consumer:
// producers keep a full queue full (each accepted push evicts one item), so
// whatever the moment of the close, the drain after it holds exactly
// `capacity` items, each accepted once, and the rest of the accepted are the
// evicted. An evicting push that threw an item away and then met the close
// would leave the drain one short.
template <class T>
void evict_while_closing(std::size_t capacity, OverflowPolicy policy, unsigned seed) {
  constexpr int kProducers = 3;
  constexpr std::uint64_t kEach = 1 << 20;
  QueueOptions<T> o;
  o.capacity = capacity;
  o.policy = policy;
  o.sample_every = 2;
  Queue<T> q(o);
  std::vector<std::vector<std::uint64_t>> accepted(kProducers);
  std::atomic<std::uint64_t> progress{0};
  {
    std::vector<std::jthread> threads;
    for (int p = 0; p < kProducers; ++p) {
      threads.emplace_back([&, p] {
        auto& mine = accepted[static_cast<std::size_t>(p)];
        for (std::uint64_t i = 0; i < kEach; ++i) {
          progress.fetch_add(1, std::memory_order_relaxed);
          const std::uint64_t id = static_cast<std::uint64_t>(p) * kEach + i;
          T item = make<T>(id);
          const Status st = q.push(std::move(item));
          if (st.ok()) {
            mine.push_back(id);
            continue;
          }
          ASSERT_EQ(id_of(item), id);  // refused: still ours
          if (st.code() == StatusCode::kClosed) return;
          ASSERT_EQ(st.code(), StatusCode::kSampledOut);
        }
      });
    }
    threads.emplace_back([&] {
      std::mt19937 rng(seed);
      const auto calls = capacity * kProducers + rng() % 2000;
      while (progress.load(std::memory_order_relaxed) < calls) std::this_thread::yield();
      q.close();
    });
  }
  std::vector<std::uint64_t> all_accepted;
  for (auto& v : accepted) all_accepted.insert(all_accepted.end(), v.begin(), v.end());
  std::sort(all_accepted.begin(), all_accepted.end());
  std::vector<std::uint64_t> drained;
  for (;;) {
    Result<T> r = q.try_pull();
    if (!r.ok()) {
      ASSERT_EQ(r.code(), StatusCode::kClosed);
      break;
    }
    drained.push_back(id_of(*r));
  }
  ASSERT_EQ(drained.size(), std::min<std::size_t>(capacity, all_accepted.size()));
  std::sort(drained.begin(), drained.end());
  EXPECT_TRUE(
      std::includes(all_accepted.begin(), all_accepted.end(), drained.begin(), drained.end()));
  EXPECT_EQ(std::adjacent_find(drained.begin(), drained.end()), drained.end());
  const QueueStats s = q.stats();
  EXPECT_EQ(s.pushed, all_accepted.size());
  EXPECT_EQ(s.evicted, all_accepted.size() - drained.size());
  EXPECT_LE(s.high_watermark, capacity);
}

template <class T>
void evict_while_closing_rounds() {
  const int rounds = 10 * scale();
  for (OverflowPolicy policy : {OverflowPolicy::kDropOldest, OverflowPolicy::kSample}) {
    for (std::size_t cap : {1, 2, 7}) {
      for (int r = 0; r < rounds; ++r) {
        SCOPED_TRACE(std::string(overflow_policy_name(policy)) + " capacity " +
                     std::to_string(cap) + " round " + std::to_string(r));
        evict_while_closing<T>(cap, policy, static_cast<unsigned>(r));
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

// Queue's alone: SpscQueue refuses the evicting policies.
TEST(EvictingQueueStressTest, AnEvictingPushRacingCloseNeverLeavesTheDrainShort) {
  evict_while_closing_rounds<std::uint64_t>();
  if (HasFatalFailure()) return;
  evict_while_closing_rounds<std::unique_ptr<std::uint64_t>>();
  if (HasFatalFailure()) return;
  evict_while_closing_rounds<Fat>();
}

}  // namespace
}  // namespace sluice
