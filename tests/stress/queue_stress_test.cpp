// Typed stress test over every policy and several capacities (cf. atomic_queue's
// "all pushes are ever popped once"): N producers and M consumers mix blocking,
// non-blocking, bulk and cancellable calls; afterwards every accepted item was
// delivered exactly once or counted as evicted, and the counters conserve.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <random>
#include <stop_token>
#include <thread>
#include <vector>

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

template <class T>
class QueueStressTest : public ::testing::Test {};
using ItemTypes = ::testing::Types<std::uint64_t, std::unique_ptr<std::uint64_t>, Fat>;
TYPED_TEST_SUITE(QueueStressTest, ItemTypes);

template <class T>
void run(std::size_t capacity, OverflowPolicy policy) {
  constexpr int kProducers = 3, kConsumers = 2;
  const int each = 4000 * scale();
  QueueOptions<T> o;
  o.capacity = capacity;
  o.policy = policy;
  o.sample_every = 3;
  if (policy == OverflowPolicy::kSpill)
    o.spill_store = std::make_shared<testutil::MemorySpillStore<T>>(64);
  Queue<T> q(o);
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
  std::vector<Producer<T>> handles;
  for (int p = 0; p < kProducers; ++p) handles.push_back(q.producer());
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
  for (OverflowPolicy policy :
       {OverflowPolicy::kBlock, OverflowPolicy::kDropNewest, OverflowPolicy::kDropOldest,
        OverflowPolicy::kReject, OverflowPolicy::kSample, OverflowPolicy::kSpill}) {
    for (std::size_t cap : {0, 1, 7, 64}) {
      if (cap == 0 && (policy == OverflowPolicy::kDropOldest || policy == OverflowPolicy::kSample ||
                       policy == OverflowPolicy::kSpill)) {
        continue;
      }
      SCOPED_TRACE(std::string(overflow_policy_name(policy)) + " capacity " + std::to_string(cap));
      run<TypeParam>(cap, policy);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

}  // namespace
}  // namespace sluice
