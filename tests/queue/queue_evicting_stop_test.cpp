// An evicting push (DropOldest, Sample) whose slot's item is being pulled
// while the pull is held in the item's move: the push honours its context
// (kCancelled, kDeadlineExceeded), try_push does not wait (kWouldBlock), and
// a push that may wait finishes once the pull does. Nothing is lost or
// counted twice. The pull is held by an item whose move blocks on a Gate.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>

#include "sluice/queue.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testutil::eventually;

// Holds the first thread that reaches hold_here() after arm() until release().
class Gate {
 public:
  void arm() { state_.store(kArmed); }
  void hold_here() {
    int armed = kArmed;
    if (!state_.compare_exchange_strong(armed, kHeld)) return;
    state_.notify_all();
    state_.wait(kHeld);
  }
  void wait_held() {
    while (state_.load() == kArmed) state_.wait(kArmed);
  }
  void release() {
    state_.store(kReleased);
    state_.notify_all();
  }

 private:
  static constexpr int kIdle = 0, kArmed = 1, kHeld = 2, kReleased = 3;
  std::atomic<int> state_{kIdle};
};

struct Item {
  int id = 0;
  Gate* gate = nullptr;
  explicit Item(int i, Gate* g = nullptr) : id(i), gate(g) {}
  Item(Item&& o) noexcept : id(o.id), gate(o.gate) {
    if (gate != nullptr) gate->hold_here();
  }
  Item& operator=(Item&& o) noexcept {
    id = o.id;
    gate = o.gate;
    return *this;
  }
};

// A full queue of capacity 1 whose only item is being pulled by `puller`,
// held in the item's move.
struct HeldPull {
  explicit HeldPull(OverflowPolicy policy) : q(make(policy)) {
    EXPECT_TRUE(q.push(Item(1, &gate)).ok());
    gate.arm();
    puller = std::jthread([this] { pulled = q.pull(); });
    gate.wait_held();
  }
  ~HeldPull() { gate.release(); }
  static QueueOptions<Item> make(OverflowPolicy policy) {
    QueueOptions<Item> o;
    o.capacity = 1;
    o.policy = policy;
    o.sample_every = 1;
    return o;
  }
  Gate gate;
  Queue<Item> q;
  std::optional<Result<Item>> pulled;
  std::jthread puller;
};

void expect_pull_ends_clean(HeldPull& h, std::uint64_t pushed) {
  h.gate.release();
  h.puller.join();
  ASSERT_TRUE(h.pulled.has_value());
  ASSERT_TRUE(h.pulled->ok());
  EXPECT_EQ((*h.pulled)->id, 1);
  const QueueStats s = h.q.stats();
  EXPECT_EQ(s.pushed, pushed);
  EXPECT_EQ(s.evicted, 0u);
  EXPECT_EQ(s.pushed, s.pulled + s.evicted + s.depth);
}

TEST(QueueEvictingStopTest, AStopEndsAnEvictingPushWhileItsSlotIsBeingPulled) {
  for (const OverflowPolicy policy : {OverflowPolicy::kDropOldest, OverflowPolicy::kSample}) {
    SCOPED_TRACE(std::string(overflow_policy_name(policy)));
    HeldPull h(policy);
    std::stop_source stop;
    std::atomic<bool> done{false};
    StatusCode code = StatusCode::kInternal;
    std::jthread pusher([&] {
      code = h.q.push(Item(2), Context(stop.get_token())).code();
      done.store(true);
    });
    // Stopped only once the push is under way: parked, or (spinning) holding its place.
    ASSERT_TRUE(eventually([&] {
      const QueueStats s = h.q.stats();
      return s.waiting_pushers == 1 || s.pushed == 2;
    }));
    stop.request_stop();
    const bool returned = eventually([&] { return done.load(); }, 5s);
    EXPECT_TRUE(returned) << "the push ignored its stop while the pull was held";
    h.gate.release();  // lets a spinning push finish (old code)
    pusher.join();
    EXPECT_EQ(code, StatusCode::kCancelled);
    expect_pull_ends_clean(h, 1);
    EXPECT_EQ(h.q.try_pull().code(), StatusCode::kWouldBlock);  // item 2 did not go in
  }
}

TEST(QueueEvictingStopTest, ADeadlineEndsAnEvictingPushWhileItsSlotIsBeingPulled) {
  HeldPull h(OverflowPolicy::kDropOldest);
  std::atomic<bool> done{false};
  StatusCode code = StatusCode::kInternal;
  std::jthread pusher([&] {
    code = h.q.push(Item(2), with_timeout(50ms)).code();
    done.store(true);
  });
  EXPECT_TRUE(eventually([&] { return done.load(); }, 5s))
      << "the push ran past its deadline while the pull was held";
  h.gate.release();
  pusher.join();
  EXPECT_EQ(code, StatusCode::kDeadlineExceeded);
  expect_pull_ends_clean(h, 1);
  EXPECT_EQ(h.q.try_pull().code(), StatusCode::kWouldBlock);
}

TEST(QueueEvictingStopTest, TryPushDoesNotWaitForTheHeldPull) {
  HeldPull h(OverflowPolicy::kDropOldest);
  std::atomic<bool> done{false};
  StatusCode code = StatusCode::kInternal;
  std::jthread pusher([&] {
    code = h.q.try_push(Item(2)).code();
    done.store(true);
  });
  EXPECT_TRUE(eventually([&] { return done.load(); }, 5s));
  h.gate.release();
  pusher.join();
  EXPECT_EQ(code, StatusCode::kWouldBlock);
  expect_pull_ends_clean(h, 1);
}

// A push that may wait is woken when the pull finishes, and goes in.
TEST(QueueEvictingStopTest, AWaitingEvictingPushGoesInOnceThePullFinishes) {
  HeldPull h(OverflowPolicy::kDropOldest);
  std::atomic<bool> done{false};
  StatusCode code = StatusCode::kInternal;
  std::jthread pusher([&] {
    code = h.q.push(Item(2)).code();
    done.store(true);
  });
  h.gate.release();
  h.puller.join();
  ASSERT_TRUE(h.pulled.has_value() && h.pulled->ok());
  EXPECT_EQ((*h.pulled)->id, 1);
  ASSERT_TRUE(eventually([&] { return done.load(); }, 10s));
  pusher.join();
  EXPECT_EQ(code, StatusCode::kOk);
  Result<Item> r = h.q.try_pull();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->id, 2);
  const QueueStats s = h.q.stats();
  EXPECT_EQ(s.pushed, 2u);
  EXPECT_EQ(s.pulled, 2u);
  EXPECT_EQ(s.evicted, 0u);
}

}  // namespace
}  // namespace sluice
