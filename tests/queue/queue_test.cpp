// One test per invariant and edge case of the push-pull seed
// (../shared/seeds/push-pull-queue.md), in C++ terms. Typed tests run against
// Queue<T> and SpscQueue<T> (queue_families.h); TEST()s need several
// producers or consumers, or Producer handles, which only Queue has.
#include "sluice/queue.h"

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "queue/queue_families.h"
#include "sluice/spsc_queue.h"
#include "testutil/threads.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testing_families::kMaxSides;
using testing_families::QueueOf;
using testutil::eventually;

template <class Family>
class QueueTest : public ::testing::Test {};
TYPED_TEST_SUITE(QueueTest, testing_families::QueueFamilies, testing_families::FamilyName);

// --- Invariant 1: capacity bound ---
TYPED_TEST(QueueTest, Inv1_CapacityBoundRefusesTheItemBeyondCapacity) {
  QueueOf<TypeParam, int> q(3);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(q.try_push(int{i}).ok());
  EXPECT_EQ(q.try_push(3).code(), StatusCode::kWouldBlock);
  EXPECT_EQ(q.stats().depth, 3u);
  EXPECT_EQ(q.stats().high_watermark, 3u);
  ASSERT_TRUE(q.try_pull().ok());
  EXPECT_TRUE(q.try_push(3).ok());
  EXPECT_EQ(q.try_push(4).code(), StatusCode::kWouldBlock);
}

// --- Invariant 2 and 3: no loss under Block; each item to exactly one consumer ---
TYPED_TEST(QueueTest, Inv2_3_EveryPushedItemIsPulledExactlyOnce) {
  constexpr int kProducers = kMaxSides<TypeParam>, kConsumers = kMaxSides<TypeParam>;
  constexpr int kEach = 20000;
  QueueOf<TypeParam, int> q(8);
  std::vector<std::atomic<int>> seen(kProducers * kEach);
  {
    std::vector<std::jthread> threads;
    std::atomic<int> producing{kProducers};  // the last producer out closes
    for (int p = 0; p < kProducers; ++p) {
      threads.emplace_back([&, p] {
        for (int i = 0; i < kEach; ++i) ASSERT_TRUE(q.push(p * kEach + i).ok());
        if (producing.fetch_sub(1) == 1) q.close();
      });
    }
    for (int c = 0; c < kConsumers; ++c) {
      threads.emplace_back([&] {
        for (int& v : q) seen[v].fetch_add(1, std::memory_order_relaxed);
      });
    }
  }
  for (auto& s : seen) ASSERT_EQ(s.load(), 1);
  const QueueStats st = q.stats();
  EXPECT_EQ(st.pushed, static_cast<std::uint64_t>(kProducers * kEach));
  EXPECT_EQ(st.pulled, st.pushed);
  EXPECT_EQ(st.depth, 0u);
}

// --- Invariant 4: backpressure ---
TYPED_TEST(QueueTest, Inv4_PushOnFullWaitsUntilAPullFreesASlot) {
  QueueOf<TypeParam, int> q(1);
  ASSERT_TRUE(q.push(1).ok());
  // It does wait: a bounded wait on a full queue ends by its deadline.
  EXPECT_EQ(q.push(2, with_timeout(20ms)).code(), StatusCode::kDeadlineExceeded);
  std::atomic<bool> pushed{false};
  std::jthread producer([&] {
    ASSERT_TRUE(q.push(2).ok());
    pushed = true;
  });
  ASSERT_TRUE(eventually([&] { return q.stats().waiting_pushers == 1; }));
  EXPECT_FALSE(pushed.load());
  EXPECT_EQ(*q.pull(), 1);  // frees the slot: the producer completes
  producer.join();
  EXPECT_TRUE(pushed.load());
  EXPECT_EQ(*q.pull(), 2);
}

// --- Invariant 5: after close no push is accepted (and nothing crashes) ---
TYPED_TEST(QueueTest, Inv5_PushAfterCloseReturnsClosedAndKeepsTheItem) {
  QueueOf<TypeParam, std::unique_ptr<int>> q(4);
  EXPECT_TRUE(q.close());
  EXPECT_FALSE(q.close());  // idempotent
  auto item = std::make_unique<int>(5);
  EXPECT_EQ(q.push(std::move(item)).code(), StatusCode::kClosed);
  ASSERT_NE(item, nullptr);  // not moved from: the caller still owns it
  EXPECT_EQ(*item, 5);
  EXPECT_EQ(q.try_push(std::move(item)).code(), StatusCode::kClosed);
  std::vector<std::unique_ptr<int>> many(3);
  EXPECT_EQ(q.push_many(many).status, StatusCode::kClosed);
}

// --- Invariant 6: drain on close ---
TYPED_TEST(QueueTest, Inv6_PullsDrainInOrderAfterCloseThenReportClosed) {
  QueueOf<TypeParam, int> q(8);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(q.push(int{i}).ok());
  q.close();
  for (int i = 0; i < 5; ++i) {
    auto r = q.pull();
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, i);
  }
  EXPECT_EQ(q.pull().code(), StatusCode::kClosed);
  EXPECT_EQ(q.try_pull().code(), StatusCode::kClosed);
}

// --- Invariant 7: cancellation of blocked push and pull ---
TYPED_TEST(QueueTest, Inv7_StopWakesABlockedPull) {
  QueueOf<TypeParam, int> q(4);
  std::stop_source stop;
  std::jthread t(
      [&] { EXPECT_EQ(q.pull(Context(stop.get_token())).code(), StatusCode::kCancelled); });
  ASSERT_TRUE(eventually([&] { return q.stats().waiting_pullers == 1; }));
  stop.request_stop();
  t.join();
  EXPECT_EQ(q.stats().waiting_pullers, 0u);
}

TYPED_TEST(QueueTest, Inv7_StopWakesABlockedPushAndLeavesTheItemWithTheCaller) {
  QueueOf<TypeParam, std::unique_ptr<int>> q(1);
  ASSERT_TRUE(q.push(std::make_unique<int>(1)).ok());
  std::stop_source stop;
  std::jthread t([&] {
    auto item = std::make_unique<int>(2);
    EXPECT_EQ(q.push(std::move(item), Context(stop.get_token())).code(), StatusCode::kCancelled);
    ASSERT_NE(item, nullptr);
    EXPECT_EQ(*item, 2);
  });
  ASSERT_TRUE(eventually([&] { return q.stats().waiting_pushers == 1; }));
  stop.request_stop();
  t.join();
  EXPECT_EQ(q.stats().depth, 1u);
}

TYPED_TEST(QueueTest, Inv7_DeadlineEndsAWait) {
  QueueOf<TypeParam, int> q(1);
  const auto start = Context::Clock::now();
  EXPECT_EQ(q.pull(with_timeout(30ms)).code(), StatusCode::kDeadlineExceeded);
  EXPECT_GE(Context::Clock::now() - start, 30ms);
}

// A timeout too long for the clock (hours::max(), 1e300 s) once overflowed
// into a deadline in the past, so the wait failed at once. Now it parks
// (on the futex, with the latest deadline there is) until an item comes.
TYPED_TEST(QueueTest, Inv7_ATimeoutTooLongForTheClockWaitsForTheItem) {
  QueueOf<TypeParam, int> q(1);
  std::jthread t([&] {
    Result<int> a = q.pull(with_timeout(std::chrono::hours::max()));
    ASSERT_TRUE(a.ok()) << a.status().message();
    EXPECT_EQ(*a, 1);
    Result<int> b = q.pull(with_timeout(std::chrono::duration<double>(1e300)));
    ASSERT_TRUE(b.ok()) << b.status().message();
    EXPECT_EQ(*b, 2);
  });
  for (int i = 1; i <= 2; ++i) {
    ASSERT_TRUE(eventually([&] { return q.stats().waiting_pullers == 1; }));
    ASSERT_TRUE(q.push(int{i}).ok());
  }
  t.join();
}

TYPED_TEST(QueueTest, Inv7_StopRequestedBeforeTheCallDoesNotTouchTheQueue) {
  QueueOf<TypeParam, int> q(4);
  ASSERT_TRUE(q.push(1).ok());
  std::stop_source stop;
  stop.request_stop();
  EXPECT_EQ(q.push(2, Context(stop.get_token())).code(), StatusCode::kCancelled);
  EXPECT_EQ(q.pull(Context(stop.get_token())).code(), StatusCode::kCancelled);
  EXPECT_EQ(q.stats().depth, 1u);
}

TYPED_TEST(QueueTest, Inv7_AnExpiredDeadlineOnlyBoundsWaiting) {
  QueueOf<TypeParam, int> q(4);
  Context past = with_deadline(Context::Clock::now() - 1ms);
  EXPECT_TRUE(q.push(1, past).ok());  // room: completes at once
  EXPECT_EQ(*q.pull(past), 1);
  EXPECT_EQ(q.pull(past).code(), StatusCode::kDeadlineExceeded);
}

// --- Invariant 8: ownership transfer (moved in, moved out, never copied) ---
TYPED_TEST(QueueTest, Inv8_MoveOnlyItemsAreMovedInAndOut) {
  QueueOf<TypeParam, std::unique_ptr<int>> q(2);
  auto item = std::make_unique<int>(42);
  int* raw = item.get();
  ASSERT_TRUE(q.push(std::move(item)).ok());
  EXPECT_EQ(item, nullptr);
  auto r = q.pull();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->get(), raw);  // the very object the producer made
}

struct CopyCounter {
  static inline std::atomic<int> copies{0};
  int v = 0;
  CopyCounter() = default;
  explicit CopyCounter(int x) : v(x) {}
  CopyCounter(const CopyCounter& o) : v(o.v) { copies++; }
  CopyCounter(CopyCounter&& o) noexcept : v(o.v) {}
  CopyCounter& operator=(const CopyCounter& o) {
    v = o.v;
    copies++;
    return *this;
  }
  CopyCounter& operator=(CopyCounter&&) noexcept = default;
};

TYPED_TEST(QueueTest, Inv8_NoCopyBehindTheUsersBack) {
  CopyCounter::copies = 0;
  QueueOf<TypeParam, CopyCounter> q(4);
  ASSERT_TRUE(q.push(CopyCounter(1)).ok());
  std::vector<CopyCounter> batch;
  batch.emplace_back(2);
  batch.emplace_back(3);
  ASSERT_EQ(q.push_many(batch).count, 2u);
  std::vector<CopyCounter> out;
  EXPECT_EQ(q.pull_many(std::back_inserter(out), 8).count, 3u);
  EXPECT_EQ(CopyCounter::copies.load(), 0);
}

// --- Edge: capacity 0 is a rendezvous ---
TYPED_TEST(QueueTest, Edge_Capacity0PushCompletesOnlyWhenAPullTakesIt) {
  QueueOf<TypeParam, int> q(0);
  EXPECT_EQ(q.try_push(1).code(), StatusCode::kWouldBlock);  // nobody pulling
  EXPECT_EQ(q.push(1, with_timeout(10ms)).code(), StatusCode::kDeadlineExceeded);
  std::atomic<bool> done{false};
  std::jthread producer([&] {
    ASSERT_TRUE(q.push(7).ok());
    done = true;
  });
  ASSERT_TRUE(eventually([&] { return q.stats().waiting_pushers == 1; }));
  EXPECT_FALSE(done.load());
  EXPECT_EQ(*q.pull(), 7);
  producer.join();
  EXPECT_TRUE(done.load());
  EXPECT_EQ(q.stats().depth, 0u);
}

TYPED_TEST(QueueTest, Edge_Capacity0TryPushSucceedsWhenAPullerWaits) {
  QueueOf<TypeParam, int> q(0);
  std::jthread consumer([&] { EXPECT_EQ(*q.pull(), 9); });
  ASSERT_TRUE(eventually([&] { return q.stats().waiting_pullers == 1; }));
  EXPECT_TRUE(q.try_push(9).ok());
}

TYPED_TEST(QueueTest, Edge_Capacity0CloseReleasesWaitersAndDrainsNothing) {
  QueueOf<TypeParam, int> q(0);
  std::jthread producer([&] { EXPECT_EQ(q.push(1).code(), StatusCode::kClosed); });
  ASSERT_TRUE(eventually([&] { return q.stats().waiting_pushers == 1; }));
  q.close();
  producer.join();
  EXPECT_EQ(q.pull().code(), StatusCode::kClosed);
}

// --- Edge: capacity 1 ---
TYPED_TEST(QueueTest, Edge_Capacity1HoldsOneItem) {
  QueueOf<TypeParam, int> q(1);
  ASSERT_TRUE(q.push(1).ok());
  EXPECT_EQ(q.try_push(2).code(), StatusCode::kWouldBlock);
  EXPECT_EQ(*q.pull(), 1);
  ASSERT_TRUE(q.push(2).ok());
  EXPECT_EQ(*q.pull(), 2);
  EXPECT_EQ(q.try_pull().code(), StatusCode::kWouldBlock);
}

// --- Edge: close with buffered items; close from any thread wakes everyone ---
TYPED_TEST(QueueTest, Edge_CloseWakesAllBlockedPushersAndPullers) {
  QueueOf<TypeParam, int> empty(2);
  QueueOf<TypeParam, int> full(1);
  ASSERT_TRUE(full.push(0).ok());
  std::vector<std::jthread> threads;
  constexpr std::uint32_t kEach = kMaxSides<TypeParam>;
  for (std::uint32_t i = 0; i < kEach; ++i) {
    threads.emplace_back([&] { EXPECT_EQ(empty.pull().code(), StatusCode::kClosed); });
    threads.emplace_back([&] { EXPECT_EQ(full.push(1).code(), StatusCode::kClosed); });
  }
  ASSERT_TRUE(eventually([&] {
    return empty.stats().waiting_pullers == kEach && full.stats().waiting_pushers == kEach;
  }));
  empty.close();
  full.close();
  threads.clear();             // joins: every waiter returned
  EXPECT_EQ(*full.pull(), 0);  // the buffered item still drains
  EXPECT_EQ(full.pull().code(), StatusCode::kClosed);
}

TEST(QueueTest, Edge_CancellingOneWaiterWakesOnlyThatOne) {
  Queue<int> q(2);
  std::stop_source a, b;
  std::jthread ta(
      [&] { EXPECT_EQ(q.pull(Context(a.get_token())).code(), StatusCode::kCancelled); });
  std::jthread tb([&] { EXPECT_EQ(*q.pull(Context(b.get_token())), 5); });
  ASSERT_TRUE(eventually([&] { return q.stats().waiting_pullers == 2; }));
  a.request_stop();
  ta.join();
  EXPECT_EQ(q.stats().waiting_pullers, 1u);  // b still parked
  ASSERT_TRUE(q.push(5).ok());
  tb.join();
}

// --- Edge: multiple producers + close: the last producer handle closes ---
TEST(QueueTest, Edge_LastProducerHandleClosesTheQueue) {
  Queue<int> q(4);
  Producer<int> a = q.producer();
  Producer<int> b = a.clone();
  ASSERT_TRUE(a.push(1).ok());
  a.done();
  a.done();  // idempotent
  EXPECT_FALSE(q.closed());
  ASSERT_TRUE(b.push(2).ok());
  { Producer<int> moved = std::move(b); }
  EXPECT_TRUE(q.closed());
  EXPECT_EQ(*q.pull(), 1);
  EXPECT_EQ(*q.pull(), 2);
  EXPECT_EQ(q.pull().code(), StatusCode::kClosed);
}

// Misuse is an error, never a crash: a released, moved-from or empty handle
// refuses with kClosed (it used to dereference a null queue pointer).
TEST(QueueTest, Edge_ReleasedMovedFromOrEmptyProducerRefusesWithClosed) {
  Queue<std::unique_ptr<int>> q(4);
  Producer<std::unique_ptr<int>> a = q.producer();
  Producer<std::unique_ptr<int>> b = std::move(a);  // a is moved from
  Producer<std::unique_ptr<int>> empty;
  Producer<std::unique_ptr<int>> released = b.clone();
  released.done();
  for (Producer<std::unique_ptr<int>>* h : {&a, &empty, &released}) {
    EXPECT_FALSE(h->live());
    auto item = std::make_unique<int>(1);
    const Status s = h->push(std::move(item));
    EXPECT_EQ(s.code(), StatusCode::kClosed);
    EXPECT_NE(s.message().find("released"), std::string_view::npos) << s;
    EXPECT_NE(item, nullptr);  // still the caller's
    EXPECT_EQ(h->push(std::move(item), with_timeout(1s)).code(), StatusCode::kClosed);
    EXPECT_EQ(h->try_push(std::move(item)).code(), StatusCode::kClosed);
    EXPECT_NE(item, nullptr);
    std::vector<std::unique_ptr<int>> items;
    items.push_back(std::make_unique<int>(2));
    const BulkResult r = h->push_many(std::span(items));
    EXPECT_EQ(r.count, 0u);
    EXPECT_EQ(r.status, StatusCode::kClosed);
    EXPECT_NE(items[0], nullptr);
    EXPECT_FALSE(h->clone().live());
    h->done();  // still idempotent
  }
  // None of that touched the queue, which b still holds open.
  EXPECT_FALSE(q.closed());
  EXPECT_EQ(q.stats().pushed, 0u);
  ASSERT_TRUE(b.push(std::make_unique<int>(3)).ok());
  b.done();
  EXPECT_TRUE(q.closed());
  EXPECT_EQ(b.push(std::make_unique<int>(4)).code(), StatusCode::kClosed);
  // A default-constructed iterator is an end iterator, even when advanced.
  Queue<std::unique_ptr<int>>::Iterator it;
  EXPECT_TRUE(it == std::default_sentinel);
  ++it;
  EXPECT_TRUE(it == std::default_sentinel);
}

// --- Range-for pulls until closed and drained; items(ctx) stops on cancel ---
TYPED_TEST(QueueTest, RangeForPullsUntilClosedAndDrained) {
  QueueOf<TypeParam, int> q(8);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(q.push(int{i}).ok());
  q.close();
  std::vector<int> got;
  for (int& v : q) got.push_back(v);
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2, 3, 4}));
}

TYPED_TEST(QueueTest, ItemsRangeEndsOnDeadlineAndSaysWhy) {
  QueueOf<TypeParam, int> q(8);
  ASSERT_TRUE(q.push(1).ok());
  auto range = q.items(with_timeout(20ms));
  int n = 0;
  for (int& v : range) n += v;
  EXPECT_EQ(n, 1);
  EXPECT_EQ(range.status(), StatusCode::kDeadlineExceeded);
}

// --- Bulk operations ---
TYPED_TEST(QueueTest, PushManyAndPullManyMoveSeveralItemsAcrossTheWrap) {
  QueueOf<TypeParam, int> q(5);
  std::vector<int> out;
  for (int round = 0; round < 7; ++round) {
    std::vector<int> in{round * 3, round * 3 + 1, round * 3 + 2};
    BulkResult r = q.push_many(in);
    ASSERT_EQ(r.count, 3u);
    ASSERT_EQ(r.status, StatusCode::kOk);
    ASSERT_EQ(q.pull_many(std::back_inserter(out), 3).count, 3u);
  }
  for (int i = 0; i < 21; ++i) EXPECT_EQ(out[i], i);
}

// Positions number items in pull order: single and bulk pulls interleaved,
// across the ring's wrap, each bulk pull at its first item's place.
TYPED_TEST(QueueTest, PositionedPullsNumberItemsInPullOrderAcrossTheWrap) {
  QueueOf<TypeParam, int> q(5);
  std::uint64_t next = 0;
  for (int round = 0; round < 9; ++round) {
    std::vector<int> in{round * 4, round * 4 + 1, round * 4 + 2, round * 4 + 3};
    ASSERT_EQ(q.push_many(in).count, 4u);
    std::uint64_t pos = 99;
    Result<int> one = q.try_pull_positioned(&pos);
    ASSERT_TRUE(one.ok());
    EXPECT_EQ(pos, next);
    EXPECT_EQ(static_cast<std::uint64_t>(*one), next);
    ++next;
    std::vector<int> out;
    pos = 99;
    const BulkResult r = round % 2 == 0
                             ? q.try_pull_many_positioned(std::back_inserter(out), 8, &pos)
                             : q.pull_many_positioned(std::back_inserter(out), 8, &pos);
    ASSERT_EQ(r.count, 3u);
    EXPECT_EQ(pos, next);
    for (int v : out) EXPECT_EQ(static_cast<std::uint64_t>(v), next++);
  }
  std::vector<int> out;
  std::uint64_t pos = 0;
  EXPECT_EQ(q.try_pull_many_positioned(std::back_inserter(out), 8, &pos).status,
            StatusCode::kWouldBlock);
  // A rendezvous queue (capacity 0) has no pull order to number.
  QueueOf<TypeParam, int> rendezvous(0);
  EXPECT_EQ(rendezvous.try_pull_many_positioned(std::back_inserter(out), 8, &pos).status,
            StatusCode::kInvalidArgument);
  EXPECT_EQ(rendezvous.try_pull_positioned(&pos).code(), StatusCode::kInvalidArgument);
}

TYPED_TEST(QueueTest, TryPushManyPushesWhatFitsAndLeavesTheRest) {
  QueueOf<TypeParam, std::unique_ptr<int>> q(3);
  std::vector<std::unique_ptr<int>> in;
  for (int i = 0; i < 5; ++i) in.push_back(std::make_unique<int>(i));
  BulkResult r = q.try_push_many(in);
  EXPECT_EQ(r.count, 3u);
  EXPECT_EQ(r.status, StatusCode::kWouldBlock);
  EXPECT_EQ(in[2], nullptr);
  ASSERT_NE(in[3], nullptr);  // untouched
  EXPECT_EQ(*in[4], 4);
}

TYPED_TEST(QueueTest, BlockingPushManyWaitsForRoomForEveryItem) {
  QueueOf<TypeParam, int> q(2);
  std::vector<int> in{0, 1, 2, 3, 4, 5, 6};
  std::jthread producer([&] {
    BulkResult r = q.push_many(in);
    EXPECT_EQ(r.count, 7u);
    q.close();
  });
  std::vector<int> out;
  for (;;) {
    BulkResult r = q.pull_many(std::back_inserter(out), 4);
    if (r.status == StatusCode::kClosed) break;
    ASSERT_GT(r.count, 0u);
  }
  EXPECT_EQ(out, in);
}

TYPED_TEST(QueueTest, PullManyReturnsClosedOnlyWhenDrained) {
  QueueOf<TypeParam, int> q(4);
  ASSERT_TRUE(q.push(1).ok());
  q.close();
  std::vector<int> out;
  EXPECT_EQ(q.pull_many(std::back_inserter(out), 4).count, 1u);
  BulkResult r = q.pull_many(std::back_inserter(out), 4);
  EXPECT_EQ(r.count, 0u);
  EXPECT_EQ(r.status, StatusCode::kClosed);
}

// --- Stats ---
TYPED_TEST(QueueTest, StatsAreExactWhenQuiescent) {
  QueueOf<TypeParam, int> q(4);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(q.push(int{i}).ok());
  ASSERT_TRUE(q.pull().ok());
  const QueueStats s = q.stats();
  EXPECT_EQ(s.capacity, 4u);
  EXPECT_EQ(s.pushed, 3u);
  EXPECT_EQ(s.pulled, 1u);
  EXPECT_EQ(s.depth, 2u);
  EXPECT_EQ(s.high_watermark, 3u);
  EXPECT_EQ(s.pushed, s.pulled + s.evicted + s.depth);
}

TYPED_TEST(QueueTest, DestructorDestroysBufferedItems) {
  auto tracker = std::make_shared<int>(0);
  {
    QueueOf<TypeParam, std::shared_ptr<int>> q(4);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(q.push(std::shared_ptr<int>(tracker)).ok());
    EXPECT_EQ(tracker.use_count(), 4);
  }
  EXPECT_EQ(tracker.use_count(), 1);
}

// --- Blocked threads sleep: an idle consumer uses ~0 CPU ---
TYPED_TEST(QueueTest, IdleConsumerSleepsInsteadOfSpinning) {
  QueueOf<TypeParam, int> q(4);
  double cpu_ms = -1;
  std::jthread t([&] {
    timespec a{}, b{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    EXPECT_EQ(q.pull(with_timeout(300ms)).code(), StatusCode::kDeadlineExceeded);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    cpu_ms = static_cast<double>(b.tv_sec - a.tv_sec) * 1e3 +
             static_cast<double>(b.tv_nsec - a.tv_nsec) / 1e6;
  });
  t.join();
  // 300 ms of waiting; a spinning waiter would burn ~300 ms of CPU.
  EXPECT_LT(cpu_ms, 30.0);
}

TYPED_TEST(QueueTest, ImpossibleOptionsAreRejectedAtConstruction) {
  using Q = QueueOf<TypeParam, int>;
  EXPECT_THROW(Q(0, OverflowPolicy::kDropOldest), std::invalid_argument);
  EXPECT_THROW(Q(0, OverflowPolicy::kSample), std::invalid_argument);
  EXPECT_THROW(Q(4, OverflowPolicy::kSpill), std::invalid_argument);  // no store
  QueueOptions<int> o;
  o.policy = OverflowPolicy::kSample;
  o.sample_every = 0;
  EXPECT_THROW(Q{o}, std::invalid_argument);
}

// The evicting policies pop from the producer's thread: a second consumer.
TEST(SpscQueueTest, EvictingPoliciesAreRejectedAtConstruction) {
  EXPECT_THROW(SpscQueue<int>(4, OverflowPolicy::kDropOldest), std::invalid_argument);
  EXPECT_THROW(SpscQueue<int>(4, OverflowPolicy::kSample), std::invalid_argument);
  for (OverflowPolicy p :
       {OverflowPolicy::kBlock, OverflowPolicy::kDropNewest, OverflowPolicy::kReject}) {
    EXPECT_NO_THROW(SpscQueue<int>(4, p));
    EXPECT_NO_THROW(SpscQueue<int>(0, p));
  }
}

// A push that is running when close() is called either lands before the
// close (and is drained) or returns kClosed with the item untouched: close
// waits out the attempt in progress. Repeated, so that close often lands
// mid-push.
TEST(SpscQueueTest, CloseDuringPushesKeepsExactlyTheAcceptedItems) {
  for (int iter = 0; iter < 300; ++iter) {
    SpscQueue<std::unique_ptr<int>> q(8);
    std::vector<int> accepted, refused, pulled;
    {
      std::jthread producer([&] {
        for (int i = 0;; ++i) {
          auto item = std::make_unique<int>(i);
          const Status s = q.push(std::move(item));
          if (!s.ok()) {
            ASSERT_EQ(s.code(), StatusCode::kClosed);
            ASSERT_NE(item, nullptr);
            refused.push_back(*item);
            return;
          }
          accepted.push_back(i);
        }
      });
      std::jthread closer([&] {
        for (int i = 0; i < iter; ++i) std::this_thread::yield();
        q.close();
      });
      for (auto& v : q) pulled.push_back(*v);
    }
    ASSERT_EQ(pulled, accepted);
    ASSERT_EQ(refused.size(), 1u);
    ASSERT_EQ(refused[0], static_cast<int>(accepted.size()));
  }
}

// A blocking pull that finds a few items ready may wait for a busy producer
// to get further ahead (detail::SpscRing::slip). With no producer running it
// must take what is there: this thread is the producer, so a pull that
// waited for more items would never return.
TEST(SpscQueueTest, APullThatFindsAFewItemsTakesThemWhenNoMoreCome) {
  SpscQueue<std::uint64_t> q(1024);
  for (std::uint64_t round = 0; round < 3; ++round) {
    for (std::uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(q.push(round * 3 + i).ok());
    for (std::uint64_t i = 0; i < 3; ++i) {
      Result<std::uint64_t> r = q.pull();
      ASSERT_TRUE(r.ok());
      EXPECT_EQ(*r, round * 3 + i);
    }
  }
  q.close();
  EXPECT_EQ(q.pull().code(), StatusCode::kClosed);
}

// Bursts shorter than the slip distance with pauses between them, and a
// close after the last one: every pull that slips ends when its burst ends,
// and order and count hold.
TEST(SpscQueueTest, BurstsThatEndMidSlipArriveInOrder) {
  constexpr std::uint64_t kBursts = 2000;
  SpscQueue<std::uint64_t> q(256);
  std::atomic<std::uint64_t> taken{0};
  std::jthread producer([&] {
    std::uint64_t next = 0;
    for (std::uint64_t b = 0; b < kBursts; ++b) {
      const std::uint64_t len = 1 + (b * 7) % 40;  // 1..40 items, below 64
      for (std::uint64_t i = 0; i < len; ++i) ASSERT_TRUE(q.push(next++).ok());
      // The pause: until the consumer has taken the burst.
      while (taken.load(std::memory_order_acquire) != next) std::this_thread::yield();
    }
    q.close();
  });
  std::uint64_t expect = 0;
  for (std::uint64_t v : q) {
    ASSERT_EQ(v, expect);
    ++expect;
    taken.store(expect, std::memory_order_release);
  }
  std::uint64_t total = 0;
  for (std::uint64_t b = 0; b < kBursts; ++b) total += 1 + (b * 7) % 40;
  EXPECT_EQ(expect, total);
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

TYPED_TEST(QueueTest, PushAllIsAllOrNone) {
  QueueOf<TypeParam, std::unique_ptr<int>> q(4);
  ASSERT_TRUE(q.push(std::make_unique<int>(0)).ok());
  std::vector<std::unique_ptr<int>> group;
  for (int i = 1; i <= 4; ++i) group.push_back(std::make_unique<int>(i));
  EXPECT_EQ(q.try_push_all(group).code(), StatusCode::kWouldBlock);  // 3 free, 4 needed
  for (auto& p : group) ASSERT_NE(p, nullptr);                       // none moved
  EXPECT_EQ(q.stats().depth, 1u);
  ASSERT_TRUE(q.pull().ok());
  EXPECT_TRUE(q.try_push_all(group).ok());
  for (auto& p : group) EXPECT_EQ(p, nullptr);
  for (int i = 1; i <= 4; ++i) EXPECT_EQ(**q.pull(), i);
  std::vector<std::unique_ptr<int>> too_big(5);
  EXPECT_EQ(q.push_all(too_big).code(), StatusCode::kInvalidArgument);
}

TYPED_TEST(QueueTest, BlockingPushAllWaitsForRoomForTheWholeGroup) {
  QueueOf<TypeParam, int> q(3);
  ASSERT_TRUE(q.push(0).ok());
  ASSERT_TRUE(q.push(1).ok());
  std::vector<int> group{2, 3};
  std::jthread t([&] { EXPECT_TRUE(q.push_all(group).ok()); });
  ASSERT_TRUE(eventually([&] { return q.stats().waiting_pushers == 1; }));
  EXPECT_EQ(*q.pull(), 0);  // now 2 free: the group fits
  t.join();
  for (int i = 1; i <= 3; ++i) EXPECT_EQ(*q.pull(), i);
}

// A group waiter woken for one free slot (it needs two) handed nothing on:
// the single push queued behind it waited beside a free slot until the next
// pull, for ever if none came. (Found by review.)
TEST(QueueTest, ASinglePushBehindAGroupWaiterGetsTheSlotAPullFrees) {
  using testutil::parked_for_good;
  Queue<int> q(2);
  ASSERT_TRUE(q.push(1).ok());
  ASSERT_TRUE(q.push(2).ok());
  std::vector<int> two{10, 11};
  std::atomic<pid_t> group_tid{0}, single_tid{0};
  std::jthread group([&] {
    group_tid = static_cast<pid_t>(::syscall(SYS_gettid));
    EXPECT_EQ(q.push_all(two).code(), StatusCode::kClosed);
  });
  ASSERT_TRUE(eventually([&] { return group_tid != 0 && parked_for_good(group_tid); }));
  std::atomic<bool> single_done{false};
  std::jthread single([&] {
    single_tid = static_cast<pid_t>(::syscall(SYS_gettid));
    EXPECT_TRUE(q.push(20).ok());
    single_done = true;
  });
  ASSERT_TRUE(eventually([&] { return single_tid != 0 && parked_for_good(single_tid); }));
  ASSERT_EQ(q.stats().waiting_pushers, 2u);
  EXPECT_EQ(*q.pull(), 1);  // one slot: the group cannot use it, the single push can
  EXPECT_TRUE(eventually([&] { return single_done.load(); }));
  q.close();  // the group still waits for two slots: close ends it
}

TYPED_TEST(QueueTest, PushAllRacingWithCloseIsNeverSplit) {
  for (int iter = 0; iter < 300; ++iter) {
    QueueOf<TypeParam, int> q(64);
    std::atomic<int> accepted_groups{0};
    {
      std::jthread producer([&] {
        for (int g = 0; g < 20; ++g) {
          std::vector<int> group{g, g, g};
          if (!q.push_all(group).ok()) return;
          accepted_groups++;
        }
      });
      std::jthread closer([&] { q.close(); });
    }
    std::vector<int> got;
    for (int& v : q) got.push_back(v);
    ASSERT_EQ(got.size(), static_cast<std::size_t>(accepted_groups.load()) * 3);
  }
}

}  // namespace
}  // namespace sluice
