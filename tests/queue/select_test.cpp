// Selector: pull from whichever of several queues has an item, push to
// whichever has room; fairness, close, cancellation racing a delivery.
#include "sluice/select.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <stop_token>
#include <thread>
#include <vector>

#include "testutil/wait_for.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testutil::eventually;

TEST(SelectorTest, PullsFromWhicheverQueueHasAnItemAndSaysWhich) {
  Queue<int> a(4), b(4), c(4);
  auto sel = Selector<int>::create({&a, &b, &c});
  ASSERT_TRUE(sel.ok());
  ASSERT_TRUE(c.push(7).ok());
  auto r = sel->pull();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->index, 2u);
  EXPECT_EQ(r->value, 7);
  EXPECT_EQ(c.approx_size(), 0u);
}

TEST(SelectorTest, AParkedPullIsWokenByAPushOnAnyOfItsQueues) {
  for (std::size_t which = 0; which < 3; ++which) {
    Queue<int> a(4), b(4), c(4);
    Queue<int>* qs[] = {&a, &b, &c};
    auto sel = Selector<int>::create({&a, &b, &c});
    ASSERT_TRUE(sel.ok());
    Result<Selected<int>> got = StatusCode::kInternal;
    std::jthread puller([&] { got = sel->pull(); });
    // Parked on all three at once (so it costs no CPU while it waits).
    ASSERT_TRUE(eventually([&] {
      return a.waiting_pullers() == 1 && b.waiting_pullers() == 1 && c.waiting_pullers() == 1;
    }));
    ASSERT_TRUE(qs[which]->push(static_cast<int>(which) + 10).ok());
    puller.join();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->index, which);
    EXPECT_EQ(got->value, static_cast<int>(which) + 10);
    // It left every wait list.
    EXPECT_EQ(a.waiting_pullers() + b.waiting_pullers() + c.waiting_pullers(), 0u);
  }
}

TEST(SelectorTest, BusyQueuesAreServedInTurn) {
  Queue<int> a(512), b(512), c(512);
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(a.push(int{i}).ok());
    ASSERT_TRUE(b.push(int{i}).ok());
    ASSERT_TRUE(c.push(int{i}).ok());
  }
  auto sel = Selector<int>::create({&a, &b, &c});
  ASSERT_TRUE(sel.ok());
  std::size_t served[3] = {0, 0, 0};
  for (int i = 0; i < 300; ++i) {
    auto r = sel->pull();
    ASSERT_TRUE(r.ok());
    ++served[r->index];
  }
  // Round robin: a queue that always has items never takes another's turn.
  EXPECT_EQ(served[0], 100u);
  EXPECT_EQ(served[1], 100u);
  EXPECT_EQ(served[2], 100u);
}

// Turns are shared by every thread using one Selector: three consumers at
// once still take exactly a third each from queues that all have items.
TEST(SelectorTest, ConcurrentConsumersShareTheTurns) {
  Queue<int> a(4096), b(4096), c(4096);
  for (Queue<int>* q : {&a, &b, &c}) {
    for (int i = 0; i < 3000; ++i) ASSERT_TRUE(q->push(int{i}).ok());
  }
  auto sel = Selector<int>::create({&a, &b, &c});
  ASSERT_TRUE(sel.ok());
  std::atomic<std::size_t> served[3] = {0, 0, 0};
  {
    std::vector<std::jthread> consumers;
    for (int t = 0; t < 3; ++t) {
      consumers.emplace_back([&] {
        for (int i = 0; i < 2000; ++i) {
          auto r = sel->pull();
          ASSERT_TRUE(r.ok());
          ++served[r->index];
        }
      });
    }
  }
  EXPECT_EQ(served[0].load(), 2000u);
  EXPECT_EQ(served[1].load(), 2000u);
  EXPECT_EQ(served[2].load(), 2000u);
}

TEST(SelectorTest, ClosedQueuesAreSkippedAndAllClosedEndsThePull) {
  Queue<int> a(4), b(4);
  auto sel = Selector<int>::create({&a, &b});
  ASSERT_TRUE(sel.ok());
  ASSERT_TRUE(a.push(1).ok());
  a.close();
  auto r = sel->pull();  // a is closed but not drained
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->index, 0u);
  ASSERT_TRUE(b.push(2).ok());
  r = sel->pull();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->index, 1u);
  // A parked pull is woken when the last open queue closes.
  Result<Selected<int>> got = StatusCode::kInternal;
  std::jthread puller([&] { got = sel->pull(); });
  ASSERT_TRUE(eventually([&] { return b.waiting_pullers() == 1; }));
  b.close();
  puller.join();
  EXPECT_EQ(got.code(), StatusCode::kClosed);
}

TEST(SelectorTest, CancelRacingADeliveryHasExactlyOneOutcome) {
  Queue<int> a(4), b(4);
  auto sel = Selector<int>::create({&a, &b});
  ASSERT_TRUE(sel.ok());
  int pulled = 0;
  int cancelled = 0;
  for (int round = 0; round < 300; ++round) {
    std::stop_source stop;
    Result<Selected<int>> got = StatusCode::kInternal;
    std::jthread puller([&] { got = sel->pull(Context(stop.get_token())); });
    std::jthread racer([&] { stop.request_stop(); });
    ASSERT_TRUE((round % 2 == 0 ? a : b).push(int{round}).ok());
    puller.join();
    racer.join();
    if (got.ok()) {
      ++pulled;
      EXPECT_EQ(got->value, round);
      EXPECT_EQ(a.approx_size() + b.approx_size(), 0u);  // taken: not also left behind
    } else {
      ++cancelled;
      EXPECT_EQ(got.code(), StatusCode::kCancelled);
      // Not taken: still there for the next consumer.
      auto left = (round % 2 == 0 ? a : b).try_pull();
      ASSERT_TRUE(left.ok());
      EXPECT_EQ(*left, round);
    }
  }
  EXPECT_EQ(pulled + cancelled, 300);
}

TEST(SelectorTest, DeadlineEndsAPullThatFindsNothing) {
  Queue<int> a(4), b(4);
  auto sel = Selector<int>::create({&a, &b});
  ASSERT_TRUE(sel.ok());
  EXPECT_EQ(sel->pull(with_timeout(20ms)).code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(a.waiting_pullers() + b.waiting_pullers(), 0u);
}

TEST(SelectorTest, PushGoesToWhicheverQueueHasRoomFirst) {
  Queue<int> a(1), b(1);
  ASSERT_TRUE(a.push(0).ok());
  ASSERT_TRUE(b.push(0).ok());
  auto sel = Selector<int>::create({&a, &b});
  ASSERT_TRUE(sel.ok());
  Result<std::size_t> where = StatusCode::kInternal;
  std::jthread pusher([&] { where = sel->push(42); });
  ASSERT_TRUE(eventually([&] { return a.stats().waiting_pushers == 1; }));
  ASSERT_TRUE(b.pull().ok());  // room in b
  pusher.join();
  ASSERT_TRUE(where.ok()) << where.status();
  EXPECT_EQ(*where, 1u);
  EXPECT_EQ(*b.pull(), 42);
  // All closed: kClosed, and the item is still the caller's.
  a.close();
  b.close();
  int item = 5;
  EXPECT_EQ(sel->push(std::move(item)).code(), StatusCode::kClosed);
  EXPECT_EQ(item, 5);
}

TEST(SelectorTest, BadQueueListsAreClearErrors) {
  Queue<int> a(4), rendezvous(0), dropping(4, OverflowPolicy::kDropNewest);
  EXPECT_EQ(Selector<int>::create({}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Selector<int>::create({&a, nullptr}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Selector<int>::create({&a, &rendezvous}).code(), StatusCode::kInvalidArgument);
  auto sel = Selector<int>::create({&a, &dropping});
  ASSERT_TRUE(sel.ok());  // pulling from a dropping queue is fine
  EXPECT_EQ(sel->push(1).code(),
            StatusCode::kInvalidArgument);  // pushing "when there is room" is not
}

// Many selecting consumers, many producers: every item exactly once, no
// wake-up lost (a lost one would hang a consumer until its 60 s deadline).
TEST(SelectorTest, ManyConsumersAndProducersLoseNothing) {
  constexpr int kPerProducer = 20000;
  Queue<int> a(16), b(16), c(16);
  Queue<int>* qs[] = {&a, &b, &c};
  std::atomic<long long> sum{0};
  std::atomic<int> count{0};
  std::vector<std::jthread> consumers;
  for (int t = 0; t < 4; ++t) {
    consumers.emplace_back([&] {
      auto sel = Selector<int>::create({&a, &b, &c});
      ASSERT_TRUE(sel.ok());
      for (;;) {
        auto r = sel->pull(with_timeout(60s));
        if (r.code() == StatusCode::kClosed) return;
        ASSERT_TRUE(r.ok()) << r.status();
        sum += r->value;
        ++count;
      }
    });
  }
  {
    std::vector<std::jthread> producers;
    for (Queue<int>* q : qs) {
      producers.emplace_back([q] {
        for (int i = 1; i <= kPerProducer; ++i) ASSERT_TRUE(q->push(int{i}).ok());
      });
    }
  }
  for (Queue<int>* q : qs) q->close();
  consumers.clear();
  EXPECT_EQ(count.load(), 3 * kPerProducer);
  EXPECT_EQ(sum.load(), 3LL * kPerProducer * (kPerProducer + 1) / 2);
}

}  // namespace
}  // namespace sluice
