// Each overflow policy's behaviour and exact counters. Typed tests run
// against Queue<T> and SpscQueue<T>; the evicting policies (DropOldest,
// Sample) are Queue's alone.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "queue/queue_families.h"
#include "sluice/queue.h"
#include "testutil/memory_spill_store.h"

namespace sluice {
namespace {

using testing_families::QueueOf;

template <class Family>
class QueuePolicyTest : public ::testing::Test {};
TYPED_TEST_SUITE(QueuePolicyTest, testing_families::QueueFamilies, testing_families::FamilyName);

template <class Q>
std::vector<int> drain(Q& q) {
  std::vector<int> out;
  while (true) {
    auto r = q.try_pull();
    if (!r.ok()) break;
    out.push_back(*r);
  }
  return out;
}

void expect_conserved(const QueueStats& s) { EXPECT_EQ(s.pushed, s.pulled + s.evicted + s.depth); }

TYPED_TEST(QueuePolicyTest, BlockNeverRefusesButTryPushSaysWouldBlock) {
  QueueOf<TypeParam, int> q(2, OverflowPolicy::kBlock);
  ASSERT_TRUE(q.push(1).ok());
  ASSERT_TRUE(q.push(2).ok());
  EXPECT_EQ(q.try_push(3).code(), StatusCode::kWouldBlock);
  const QueueStats s = q.stats();
  EXPECT_EQ(s.dropped + s.rejected + s.evicted + s.sampled_out, 0u);
}

TYPED_TEST(QueuePolicyTest, DropNewestRefusesIncomingAndCountsIt) {
  QueueOf<TypeParam, int> q(4, OverflowPolicy::kDropNewest);
  int dropped = 0;
  for (int i = 0; i < 10; ++i) {
    Status s = q.push(int{i});
    if (s.code() == StatusCode::kDropped) ++dropped;
  }
  EXPECT_EQ(dropped, 6);
  const QueueStats s = q.stats();
  EXPECT_EQ(s.dropped, 6u);
  EXPECT_EQ(s.pushed, 4u);
  expect_conserved(s);
  EXPECT_EQ(drain(q), (std::vector<int>{0, 1, 2, 3}));
}

TEST(QueuePolicyTest, DropOldestEvictsTheOldestAndAcceptsTheNew) {
  Queue<int> q(4, OverflowPolicy::kDropOldest);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(q.push(int{i}).ok());
  const QueueStats s = q.stats();
  EXPECT_EQ(s.evicted, 6u);
  EXPECT_EQ(s.pushed, 10u);
  expect_conserved(s);
  EXPECT_EQ(drain(q), (std::vector<int>{6, 7, 8, 9}));
}

// An item whose destructor, for id 0, says so through `gate` (1) and waits
// until told to go on (2): it holds an evicting push between its eviction
// and its own placement.
struct HeldOnDestroy {
  int id = -1;
  std::atomic<int>* gate = nullptr;
  HeldOnDestroy(int i, std::atomic<int>* g) : id(i), gate(g) {}
  HeldOnDestroy(HeldOnDestroy&& o) noexcept : id(std::exchange(o.id, -1)), gate(o.gate) {}
  HeldOnDestroy& operator=(HeldOnDestroy&& o) noexcept {
    id = std::exchange(o.id, -1);
    gate = o.gate;
    return *this;
  }
  ~HeldOnDestroy() {
    if (id != 0 || gate == nullptr) return;
    gate->store(1);
    gate->notify_all();
    gate->wait(1);
  }
};

// A close() that lands while an evicting push throws the oldest item away:
// the push, already placed in the order, goes in, and the drain has both
// items. Before, the push evicted first and then found the queue closed: it
// failed with kClosed, and the evicted item, accepted before the close and
// owed to the drain, was gone.
TEST(QueuePolicyTest, ACloseDuringAnEvictionNeverCostsTheDrainAnItem) {
  for (const OverflowPolicy policy : {OverflowPolicy::kDropOldest, OverflowPolicy::kSample}) {
    SCOPED_TRACE(overflow_policy_name(policy));
    std::atomic<int> gate{0};
    QueueOptions<HeldOnDestroy> o;
    o.capacity = 2;
    o.policy = policy;
    o.sample_every = 1;
    Queue<HeldOnDestroy> q(o);
    ASSERT_TRUE(q.push(HeldOnDestroy(0, &gate)).ok());
    ASSERT_TRUE(q.push(HeldOnDestroy(1, &gate)).ok());
    Status pushed = StatusCode::kInternal;
    std::thread pusher([&] { pushed = q.push(HeldOnDestroy(2, &gate)); });
    gate.wait(0);  // the pusher is destroying item 0, the one it evicts
    q.close();
    gate.store(2);
    gate.notify_all();
    pusher.join();
    EXPECT_TRUE(pushed.ok()) << pushed.to_string();
    std::vector<int> drained;
    for (;;) {
      auto r = q.try_pull();
      if (!r.ok()) {
        EXPECT_EQ(r.status().code(), StatusCode::kClosed);
        break;
      }
      drained.push_back(r->id);
    }
    EXPECT_EQ(drained, (std::vector<int>{1, 2}));
    const QueueStats s = q.stats();
    EXPECT_EQ(s.evicted, 1u);
    EXPECT_EQ(s.pushed, 3u);
    expect_conserved(s);
  }
}

TYPED_TEST(QueuePolicyTest, RejectRefusesWithRejectedAndKeepsTheItem) {
  QueueOf<TypeParam, std::unique_ptr<int>> q(2, OverflowPolicy::kReject);
  ASSERT_TRUE(q.push(std::make_unique<int>(0)).ok());
  ASSERT_TRUE(q.push(std::make_unique<int>(1)).ok());
  auto item = std::make_unique<int>(2);
  EXPECT_EQ(q.push(std::move(item)).code(), StatusCode::kRejected);
  ASSERT_NE(item, nullptr);
  EXPECT_EQ(q.stats().rejected, 1u);
}

TEST(QueuePolicyTest, SampleAdmitsOneInKFullArrivalsEvictingTheOldest) {
  QueueOptions<int> o;
  o.capacity = 4;
  o.policy = OverflowPolicy::kSample;
  o.sample_every = 3;
  Queue<int> q(o);
  std::vector<StatusCode> codes;
  for (int i = 0; i < 13; ++i) codes.push_back(q.push(int{i}).code());
  // 0-3 fill; full arrivals 4..12 are numbered 0..8; numbers 0, 3, 6 (items 4, 7, 10) get in.
  for (int i = 0; i < 13; ++i) {
    const bool admitted = i < 4 || i == 4 || i == 7 || i == 10;
    EXPECT_EQ(codes[i], admitted ? StatusCode::kOk : StatusCode::kSampledOut) << "item " << i;
  }
  const QueueStats s = q.stats();
  EXPECT_EQ(s.sampled_out, 6u);
  EXPECT_EQ(s.evicted, 3u);
  EXPECT_EQ(s.pushed, 7u);
  expect_conserved(s);
  EXPECT_EQ(drain(q), (std::vector<int>{3, 4, 7, 10}));
}

TEST(QueuePolicyTest, SampleEveryOneBehavesLikeDropOldest) {
  QueueOptions<int> o;
  o.capacity = 2;
  o.policy = OverflowPolicy::kSample;
  o.sample_every = 1;
  Queue<int> q(o);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(q.push(int{i}).ok());
  EXPECT_EQ(drain(q), (std::vector<int>{3, 4}));
  EXPECT_EQ(q.stats().evicted, 3u);
}

TYPED_TEST(QueuePolicyTest, SpillKeepsFifoAcrossMemoryAndStoreAndCountsExactly) {
  auto store = std::make_shared<testutil::MemorySpillStore<int>>(3);
  QueueOptions<int> o;
  o.capacity = 2;
  o.policy = OverflowPolicy::kSpill;
  o.spill_store = store;
  QueueOf<TypeParam, int> q(o);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(q.push(int{i}).ok()) << i;  // 0,1 memory; 2,3,4 store
  EXPECT_EQ(q.push(5).code(), StatusCode::kRejected);                 // store budget spent
  QueueStats s = q.stats();
  EXPECT_EQ(s.spilled, 3u);
  EXPECT_EQ(s.spill_depth, 3u);
  EXPECT_EQ(s.rejected, 1u);
  EXPECT_EQ(s.depth, 5u);
  EXPECT_EQ(*q.pull(), 0);
  // Memory has room now, but 6 must queue behind the store, which is full.
  EXPECT_EQ(q.push(6).code(), StatusCode::kRejected);
  EXPECT_EQ(*q.pull(), 1);
  EXPECT_EQ(*q.pull(), 2);  // from the store
  ASSERT_TRUE(q.push(6).ok());
  EXPECT_EQ(q.stats().spilled, 4u);
  EXPECT_EQ(drain(q), (std::vector<int>{3, 4, 6}));
  ASSERT_TRUE(q.push(7).ok());  // store empty again: back to memory
  s = q.stats();
  EXPECT_EQ(s.spilled, 4u);
  EXPECT_EQ(s.spill_depth, 0u);
  EXPECT_EQ(s.rejected, 2u);
  EXPECT_EQ(s.pushed, 7u);
  EXPECT_EQ(s.pulled, 6u);
  expect_conserved(s);
}

TYPED_TEST(QueuePolicyTest, SpillDrainsTheStoreAfterClose) {
  auto store = std::make_shared<testutil::MemorySpillStore<int>>(10);
  QueueOptions<int> o;
  o.capacity = 1;
  o.policy = OverflowPolicy::kSpill;
  o.spill_store = store;
  QueueOf<TypeParam, int> q(o);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(q.push(int{i}).ok());
  q.close();
  EXPECT_EQ(q.push(9).code(), StatusCode::kClosed);
  std::vector<int> got;
  for (int& v : q) got.push_back(v);
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2, 3}));
}

TYPED_TEST(QueuePolicyTest, Capacity0WithDropNewestOrRejectHandsOffOnlyToAWaitingPuller) {
  QueueOf<TypeParam, int> drop(0, OverflowPolicy::kDropNewest);
  EXPECT_EQ(drop.push(1).code(), StatusCode::kDropped);
  EXPECT_EQ(drop.stats().dropped, 1u);
  QueueOf<TypeParam, int> reject(0, OverflowPolicy::kReject);
  EXPECT_EQ(reject.push(1).code(), StatusCode::kRejected);
  EXPECT_EQ(reject.stats().rejected, 1u);
}

TYPED_TEST(QueuePolicyTest, NonBlockPoliciesNeverWait) {
  for (OverflowPolicy p : {OverflowPolicy::kDropNewest, OverflowPolicy::kDropOldest,
                           OverflowPolicy::kReject, OverflowPolicy::kSample}) {
    const bool evicts = p == OverflowPolicy::kDropOldest || p == OverflowPolicy::kSample;
    if (TypeParam::kSpsc && evicts) continue;  // SpscQueue refuses them (a second consumer)
    QueueOf<TypeParam, int> q(1, p);
    for (int i = 0; i < 100; ++i) {
      // A default context can never end a wait: returning proves no wait.
      (void)q.push(int{i});
    }
    EXPECT_EQ(q.stats().depth, 1u) << overflow_policy_name(p);
    expect_conserved(q.stats());
  }
}

}  // namespace
}  // namespace sluice
