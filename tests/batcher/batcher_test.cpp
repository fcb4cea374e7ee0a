// The batcher seed's test vectors T1-T10 (../shared/seeds/batcher.md, section
// 13), then the extras: throwing and randomly failing sinks, races
// with shutdown, acks, all-or-none batches, bytes, manual flush, flushers.
#include "sluice/batcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <latch>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "testutil/threads.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testutil::eventually;

// Records every batch the batcher writes; optionally fails or blocks.
struct RecordingSink {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<int>> batches;
  std::function<Status(const std::vector<int>&, const Context&)> behaviour;

  BatchSink<int> sink() {
    return [this](std::vector<int>&& batch, const Context& ctx) -> Status {
      Status s = behaviour ? behaviour(batch, ctx) : Status::Ok();
      std::lock_guard lock(mu);
      batches.push_back(std::move(batch));
      cv.notify_all();
      return s;
    };
  }
  std::size_t count() {
    std::lock_guard lock(mu);
    return batches.size();
  }
  std::size_t items() {
    std::lock_guard lock(mu);
    std::size_t n = 0;
    for (auto& b : batches) n += b.size();
    return n;
  }
  ::testing::AssertionResult wait_batches(std::size_t n) {
    std::unique_lock lock(mu);
    if (cv.wait_for(lock, 30s, [&] { return batches.size() >= n; }))
      return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "only " << batches.size() << " batches";
  }
};

std::unique_ptr<Batcher<int>> make(BatcherOptions<int> o) {
  auto r = Batcher<int>::create(std::move(o));
  EXPECT_TRUE(r.ok()) << r.status();
  return std::move(r).value();
}

BatcherOptions<int> opts(RecordingSink& sink, std::size_t size, Clock* clock = nullptr) {
  BatcherOptions<int> o;
  o.max_batch_size = size;
  o.max_batch_delay = 1h;  // effectively off unless a test changes it
  o.sink = sink.sink();
  o.clock = clock;
  return o;
}

std::uint64_t reason(const BatcherStats& s, FlushReason r) {
  return s.flushes_by_reason[static_cast<std::size_t>(r)];
}

void expect_conserved(const BatcherStats& s) {
  EXPECT_EQ(s.enqueued, s.flushed_ok + s.flushed_fail + s.dropped_on_shutdown + s.in_flight);
  EXPECT_EQ(s.in_flight, s.queued + s.buffered + s.flushing);
}

// T1
TEST(BatcherTest, T1_SizeTrigger) {
  RecordingSink sink;
  auto b = make(opts(sink, 10));
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(b->add(int{i}).ok());
  ASSERT_TRUE(sink.wait_batches(2));
  const BatcherStats s = b->stats();
  EXPECT_EQ(reason(s, FlushReason::kSize), 2u);
  for (int k = 0; k < 2; ++k) {
    ASSERT_EQ(sink.batches[k].size(), 10u);
    for (int i = 0; i < 10; ++i) EXPECT_EQ(sink.batches[k][i], k * 10 + i);  // O1, O2
  }
}

// T2 with a manual clock: deterministic.
TEST(BatcherTest, T2_TimeTrigger) {
  RecordingSink sink;
  ManualClock clock;
  auto o = opts(sink, 100, &clock);
  o.max_batch_delay = 50ms;
  auto b = make(o);
  ASSERT_TRUE(b->add(1).ok());
  ASSERT_TRUE(eventually([&] { return b->stats().buffered == 1; }));
  clock.advance(100ms);  // 2 * MaxBatchDelay
  ASSERT_TRUE(sink.wait_batches(1));
  EXPECT_EQ(reason(b->stats(), FlushReason::kTime), 1u);
  EXPECT_EQ(sink.batches[0], std::vector<int>{1});
}

TEST(BatcherTest, T2_TimeTriggerOnTheRealClock) {
  RecordingSink sink;
  auto o = opts(sink, 100);
  o.max_batch_delay = 20ms;
  auto b = make(o);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(b->add(1).ok());
  ASSERT_TRUE(sink.wait_batches(1));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 20ms);
  EXPECT_EQ(reason(b->stats(), FlushReason::kTime), 1u);
}

TEST(BatcherTest, TimeCountsFromTheFirstItemOfTheBatchNotATicker) {
  RecordingSink sink;
  ManualClock clock;
  auto o = opts(sink, 100, &clock);
  o.max_batch_delay = 10ms;
  auto b = make(o);
  clock.advance(7ms);  // a fixed ticker started at creation would fire 3 ms after the add
  ASSERT_TRUE(b->add(1).ok());
  ASSERT_TRUE(eventually([&] { return b->stats().buffered == 1; }));
  clock.advance(9ms);  // 9 ms after the first item: not yet
  ASSERT_TRUE(b->add(2).ok());
  ASSERT_TRUE(eventually([&] { return b->stats().buffered == 2; }));
  EXPECT_EQ(sink.count(), 0u);
  clock.advance(1ms);  // 10 ms after the first item
  ASSERT_TRUE(sink.wait_batches(1));
  EXPECT_EQ(sink.batches[0], (std::vector<int>{1, 2}));
  // A new batch starts its own delay.
  ASSERT_TRUE(b->add(3).ok());
  ASSERT_TRUE(eventually([&] { return b->stats().buffered == 1; }));
  clock.advance(9ms);
  ASSERT_TRUE(b->flush().ok());  // still waiting for time, so the flush is manual
  const BatcherStats s = b->stats();
  EXPECT_EQ(reason(s, FlushReason::kTime), 1u);
  EXPECT_EQ(reason(s, FlushReason::kManual), 1u);
}

// T3
TEST(BatcherTest, T3_ShutdownDrain) {
  RecordingSink sink;
  auto b = make(opts(sink, 10));
  for (int i = 0; i < 9; ++i) ASSERT_TRUE(b->add(int{i}).ok());
  ASSERT_TRUE(b->shutdown().ok());
  ASSERT_EQ(sink.count(), 1u);
  EXPECT_EQ(sink.batches[0].size(), 9u);
  EXPECT_EQ(reason(b->stats(), FlushReason::kShutdown), 1u);
}

// T4: the sink honours its stop token; shutdown returns at its deadline.
TEST(BatcherTest, T4_ShutdownTimeout) {
  RecordingSink sink;
  std::atomic<bool> cancelled{false};
  sink.behaviour = [&](const std::vector<int>&, const Context& ctx) {
    std::mutex m;
    std::condition_variable_any cv;
    std::unique_lock lock(m);
    cv.wait(lock, ctx.token(), [] { return false; });  // until the batcher aborts
    cancelled = true;
    return Status(StatusCode::kCancelled);
  };
  auto o = opts(sink, 2);
  auto b = make(o);
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(b->add(int{i}).ok());
  ASSERT_TRUE(eventually([&] { return b->stats().flushing == 2; }));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(b->shutdown(with_timeout(50ms)).code(), StatusCode::kDeadlineExceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);  // returned; did not wait for the sink
  const BatcherStats s = b->stats();
  EXPECT_GT(s.dropped_on_shutdown, 0u);
  EXPECT_EQ(s.dropped_on_shutdown + s.flushing + s.flushed_fail, 7u);
  expect_conserved(s);
  // The sink honours its token: it returns soon after the deadline.
  ASSERT_TRUE(eventually([&] { return b->stats().flushing == 0; }));
  EXPECT_TRUE(cancelled.load());
  const BatcherStats after = b->stats();
  EXPECT_EQ(after.flushed_fail, 2u);  // the sink's own answer, kCancelled
  EXPECT_EQ(after.dropped_on_shutdown, 5u);
  expect_conserved(after);
}

// T5
TEST(BatcherTest, T5_IdempotentShutdown) {
  RecordingSink sink;
  auto b = make(opts(sink, 10));
  ASSERT_TRUE(b->add(1).ok());
  EXPECT_TRUE(b->shutdown().ok());
  EXPECT_TRUE(b->shutdown().ok());
  EXPECT_EQ(sink.count(), 1u);
}

TEST(BatcherTest, T5_ConcurrentShutdownsAllWaitForTheDrain) {
  RecordingSink sink;
  auto b = make(opts(sink, 1000));
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(b->add(int{i}).ok());
  std::vector<std::jthread> ts;
  for (int i = 0; i < 3; ++i) {
    ts.emplace_back([&] {
      EXPECT_TRUE(b->shutdown().ok());
      EXPECT_EQ(sink.items(), 100u);  // every caller returns after the drain
    });
  }
}

// T6
TEST(BatcherTest, T6_AddAfterShutdown) {
  RecordingSink sink;
  BatcherOptions<std::unique_ptr<int>> o;
  o.sink = [](std::vector<std::unique_ptr<int>>&&, const Context&) { return Status::Ok(); };
  auto b = std::move(Batcher<std::unique_ptr<int>>::create(std::move(o))).value();
  ASSERT_TRUE(b->shutdown().ok());
  auto item = std::make_unique<int>(1);
  EXPECT_EQ(b->add(std::move(item)).code(), StatusCode::kClosed);
  ASSERT_NE(item, nullptr);  // not enqueued, still the caller's
  EXPECT_EQ(b->try_add(std::move(item)).code(), StatusCode::kClosed);
  EXPECT_EQ(b->flush().code(), StatusCode::kClosed);
  EXPECT_EQ(b->stats().enqueued, 0u);
}

// T7 and T9
TEST(BatcherTest, T7_T9_NoLossWithConcurrentAdders) {
  RecordingSink sink;
  auto o = opts(sink, 64);
  o.max_batch_delay = 1ms;
  o.queue_depth = 32;
  auto b = make(o);
  constexpr int kThreads = 4, kEach = 5000;
  {
    std::vector<std::jthread> ts;
    for (int t = 0; t < kThreads; ++t) {
      ts.emplace_back([&, t] {
        for (int i = 0; i < kEach; ++i) ASSERT_TRUE(b->add(t * kEach + i).ok());
      });
    }
  }
  ASSERT_TRUE(b->shutdown().ok());
  std::vector<int> all;
  std::vector<int> last(kThreads, -1);
  for (auto& batch : sink.batches) {
    for (int v : batch) {
      all.push_back(v);
      EXPECT_GT(v, last[v / kEach]);  // each adder's order is kept (O2, single flusher)
      last[v / kEach] = v;
    }
  }
  ASSERT_EQ(all.size(), static_cast<std::size_t>(kThreads * kEach));
  std::sort(all.begin(), all.end());
  for (int i = 0; i < kThreads * kEach; ++i) ASSERT_EQ(all[i], i);
}

// T8
TEST(BatcherTest, T8_ContextCancellationWhileTheInputIsFull) {
  RecordingSink sink;
  std::promise<void> gate;
  std::shared_future<void> open = gate.get_future().share();
  sink.behaviour = [open](const std::vector<int>&, const Context&) {
    open.wait();
    return Status::Ok();
  };
  auto o = opts(sink, 1);
  o.queue_depth = 4;
  auto b = make(o);
  ASSERT_TRUE(b->add(0).ok());  // taken into the (blocked) sink
  ASSERT_TRUE(eventually([&] { return b->stats().flushing == 1; }));
  for (int i = 1; i <= 4; ++i) ASSERT_TRUE(b->add(int{i}).ok());  // fills the input
  EXPECT_EQ(b->add(5, with_timeout(20ms)).code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(b->try_add(5).code(), StatusCode::kWouldBlock);
  EXPECT_EQ(b->stats().try_add_refused, 1u);
  gate.set_value();
  ASSERT_TRUE(b->shutdown().ok());
  EXPECT_EQ(sink.items(), 5u);  // the refused item was never enqueued
}

// T10
TEST(BatcherTest, T10_StatsConservation) {
  RecordingSink sink;
  std::atomic<int> n{0};
  sink.behaviour = [&](const std::vector<int>&, const Context&) {
    return n++ % 3 == 0 ? Status(StatusCode::kIOError, "boom") : Status::Ok();
  };
  auto b = make(opts(sink, 7));
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(b->add(int{i}).ok());
  ASSERT_TRUE(b->shutdown().ok());
  const BatcherStats s = b->stats();
  EXPECT_EQ(s.enqueued, 100u);
  EXPECT_EQ(s.enqueued, s.flushed_ok + s.flushed_fail + s.dropped_on_shutdown);
  EXPECT_GT(s.flushed_fail, 0u);
  EXPECT_EQ(s.in_flight, 0u);
  std::uint64_t reasons = 0;
  for (auto r : s.flushes_by_reason) reasons += r;
  EXPECT_EQ(reasons, s.flushes_ok + s.flushes_failed);  // one reason per flush
}

// ---- beyond T1-T10 ----

TEST(BatcherTest, ThrowingSinkIsAFailedFlushNotACrash) {
  RecordingSink sink;
  std::atomic<int> n{0};
  sink.behaviour = [&](const std::vector<int>&, const Context&) -> Status {
    if (n++ == 1) throw std::runtime_error("sink exploded");
    return Status::Ok();
  };
  auto b = make(opts(sink, 5));
  for (int i = 0; i < 15; ++i) ASSERT_TRUE(b->add(int{i}).ok());
  ASSERT_TRUE(b->shutdown().ok());
  const BatcherStats s = b->stats();
  EXPECT_EQ(s.sink_exceptions, 1u);
  EXPECT_EQ(s.flushes_failed, 1u);
  EXPECT_EQ(s.flushed_fail, 5u);
  EXPECT_EQ(s.flushed_ok, 10u);
}

TEST(BatcherTest, RandomlyFailingSinkConservesAtEveryObservation) {
  std::mt19937 rng(7);
  std::mutex rng_mu;
  BatcherOptions<int> o;
  o.max_batch_size = 13;
  o.max_batch_delay = 200us;
  o.queue_depth = 16;
  o.sink = [&](std::vector<int>&&, const Context&) -> Status {
    std::lock_guard lock(rng_mu);
    const auto r = rng() % 4;
    if (r == 0) throw std::runtime_error("random throw");
    return r == 1 ? Status(StatusCode::kIOError, "random failure") : Status::Ok();
  };
  auto b = make(o);
  std::atomic<bool> stop{false};
  std::jthread observer([&] {
    while (!stop) {
      const BatcherStats s = b->stats();
      ASSERT_EQ(s.enqueued, s.flushed_ok + s.flushed_fail + s.dropped_on_shutdown + s.in_flight);
      ASSERT_EQ(s.in_flight, s.queued + s.buffered + s.flushing);
    }
  });
  std::uint64_t accepted = 0;
  for (int i = 0; i < 3000; ++i) {
    if (b->add(int{i}).ok()) ++accepted;
    const BatcherStats s = b->stats();
    ASSERT_EQ(s.enqueued, s.flushed_ok + s.flushed_fail + s.dropped_on_shutdown + s.in_flight);
    ASSERT_EQ(s.enqueued, accepted);
  }
  ASSERT_TRUE(b->shutdown().ok());
  stop = true;
  observer.join();
  const BatcherStats s = b->stats();
  EXPECT_EQ(s.flushed_ok + s.flushed_fail, accepted);
  EXPECT_GT(s.flushed_fail, 0u);
  EXPECT_GT(s.sink_exceptions, 0u);
}

TEST(BatcherTest, ShutdownRacingWithAddsLosesNothingAccepted) {
  for (int iter = 0; iter < 50; ++iter) {
    RecordingSink sink;
    auto o = opts(sink, 8);
    o.queue_depth = 8;
    auto b = make(o);
    std::atomic<std::uint64_t> accepted{0};
    {
      std::vector<std::jthread> adders;
      for (int t = 0; t < 3; ++t) {
        adders.emplace_back([&] {
          for (int i = 0; i < 500; ++i) {
            const Status s = b->add(int{i});
            if (s.ok()) {
              accepted++;
            } else {
              ASSERT_EQ(s.code(), StatusCode::kClosed);
              return;
            }
          }
        });
      }
      std::jthread closer([&] {
        for (int i = 0; i < iter * 10; ++i) std::this_thread::yield();
        EXPECT_TRUE(b->shutdown().ok());
      });
    }
    ASSERT_EQ(sink.items(), accepted.load());
    const BatcherStats s = b->stats();
    ASSERT_EQ(s.enqueued, accepted.load());
    ASSERT_EQ(s.flushed_ok, accepted.load());
  }
}

TEST(BatcherTest, EveryAckResolvesWhateverTheOutcome) {
  RecordingSink sink;
  std::atomic<int> n{0};
  std::promise<void> gate;
  std::shared_future<void> open = gate.get_future().share();
  sink.behaviour = [&](const std::vector<int>&, const Context& ctx) -> Status {
    const int k = n++;
    if (k == 0) return Status::Ok();
    if (k == 1) return Status(StatusCode::kIOError, "write failed");
    // Third batch: blocks until the shutdown deadline cancels it.
    std::mutex m;
    std::condition_variable_any cv;
    std::unique_lock lock(m);
    cv.wait(lock, ctx.token(), [] { return false; });
    return Status(StatusCode::kCancelled);
  };
  auto o = opts(sink, 2);
  o.queue_depth = 64;
  auto b = make(o);
  std::vector<std::future<Status>> acks;
  for (int i = 0; i < 10; ++i) {
    auto r = b->add_with_ack(int{i});
    ASSERT_TRUE(r.ok());
    acks.push_back(std::move(r).value());
  }
  ASSERT_TRUE(eventually([&] { return b->stats().flushing == 2; }));  // third batch stuck
  EXPECT_EQ(b->shutdown(with_timeout(30ms)).code(), StatusCode::kDeadlineExceeded);
  // Let the cancelled sink give its own answer before the batcher goes (the
  // destructor would abandon a sink call still running: see below).
  ASSERT_TRUE(eventually([&] { return b->stats().flushing == 0; }));
  b.reset();
  std::vector<StatusCode> codes;
  for (auto& f : acks) {
    ASSERT_EQ(f.wait_for(0s), std::future_status::ready);  // none left pending
    codes.push_back(f.get().code());
  }
  EXPECT_EQ(codes[0], StatusCode::kOk);
  EXPECT_EQ(codes[1], StatusCode::kOk);
  EXPECT_EQ(codes[2], StatusCode::kIOError);
  EXPECT_EQ(codes[3], StatusCode::kIOError);
  EXPECT_EQ(codes[4], StatusCode::kCancelled);  // the sink's own answer to cancellation
  EXPECT_EQ(codes[5], StatusCode::kCancelled);
  for (int i = 6; i < 10; ++i) EXPECT_EQ(codes[i], StatusCode::kDropped) << i;
}

// A sink that ignores cancellation (here: waits on a latch the test releases
// at the end). After a shutdown whose deadline passed, the destructor must
// return at once instead of waiting for it, count the items it holds as lost,
// resolve every ack, and leave the still-running sink nothing dangling: the
// abandoned threads own the batcher's state (run under ASan and TSan).
TEST(BatcherTest, DestructorAfterAShutdownDeadlineAbandonsASinkThatIgnoresCancellation) {
  const std::size_t threads_before = testutil::thread_baseline();
  for (const std::size_t flushers : {1, 2}) {
    for (const bool manual_clock : {false, true}) {
      SCOPED_TRACE("flushers " + std::to_string(flushers) + (manual_clock ? ", manual clock" : ""));
      struct SinkState {
        std::latch gate{1};
        std::atomic<int> entered{0};
        std::atomic<int> returned{0};
      };
      auto state = std::make_shared<SinkState>();
      const std::weak_ptr<SinkState> sink_state = state;
      auto clock = manual_clock ? std::make_unique<ManualClock>() : nullptr;
      BatcherOptions<int> o;
      o.max_batch_size = 2;
      o.max_batch_delay = 1h;
      o.flushers = flushers;
      o.clock = clock.get();
      // Owns what it uses (a copy of `state`): it outlives the Batcher object.
      o.sink = [state](std::vector<int>&&, const Context&) {
        state->entered++;
        state->gate.wait();  // ignores ctx
        state->returned++;
        return Status::Ok();
      };
      auto b = make(std::move(o));  // the batcher holds the only copy of the sink
      std::vector<std::future<Status>> acks;
      for (int i = 0; i < 7; ++i) {
        auto r = b->add_with_ack(int{i});
        ASSERT_TRUE(r.ok());
        acks.push_back(std::move(r).value());
      }
      // One batch per flusher in the sink; with 2 flushers the loop's next
      // batch waits for a free one, and is dropped at the deadline.
      const std::uint64_t in_sink = 2 * flushers;
      ASSERT_TRUE(eventually([&] {
        return state->entered.load() == static_cast<int>(flushers) &&
               b->stats().flushing == in_sink + (flushers > 1 ? 2 : 0);
      }));
      const auto deadline = 50ms;
      const auto t0 = std::chrono::steady_clock::now();
      EXPECT_EQ(b->shutdown(with_timeout(deadline)).code(), StatusCode::kDeadlineExceeded);
      ASSERT_TRUE(eventually([&] { return b->stats().flushing == in_sink; }));
      const BatcherStats s = b->stats();
      EXPECT_EQ(s.enqueued, 7u);
      EXPECT_EQ(s.dropped_on_shutdown, 7u - in_sink);
      expect_conserved(s);

      // Destroy on another thread, so that the old behaviour (waiting for
      // the sink) fails here instead of hanging.
      std::promise<void> destroyed;
      std::future<void> destroyed_f = destroyed.get_future();
      std::thread destroyer([&] {
        b.reset();
        destroyed.set_value();
      });
      const bool returned = destroyed_f.wait_until(t0 + deadline + 1s) == std::future_status::ready;
      if (!returned) state->gate.count_down();  // let the blocked destructor finish
      destroyer.join();
      ASSERT_TRUE(returned) << "the destructor waited for a sink that ignores cancellation";
      EXPECT_EQ(state->returned.load(), 0);  // it really did not wait

      // Every ack resolved, and says which items were lost where.
      std::uint64_t abandoned = 0, never_handed = 0;
      for (auto& f : acks) {
        ASSERT_EQ(f.wait_for(0s), std::future_status::ready);
        const Status st = f.get();
        ASSERT_EQ(st.code(), StatusCode::kDropped) << st;
        (st.message().find("may yet write") != std::string_view::npos ? abandoned : never_handed)++;
      }
      EXPECT_EQ(abandoned, s.flushing);
      EXPECT_EQ(never_handed, s.dropped_on_shutdown);

      // The user's clock may go now; then the sink returns into a batcher
      // whose handle is gone. Its threads finish and free the state.
      clock.reset();
      state->gate.count_down();
      state.reset();
      ASSERT_TRUE(eventually([&] { return sink_state.expired(); }));
      ASSERT_TRUE(eventually([&] { return testutil::thread_count() == threads_before; }));
    }
  }
}

TEST(BatcherTest, AddBatchIsAllOrNoneAgainstAConcurrentShutdown) {
  for (int iter = 0; iter < 100; ++iter) {
    RecordingSink sink;
    auto o = opts(sink, 5);
    o.queue_depth = 16;
    auto b = make(o);
    std::atomic<int> groups{0};
    {
      std::jthread adder([&] {
        for (int g = 0; g < 50; ++g) {
          std::vector<int> group{g, g, g};
          const Status s = b->add_batch(group);
          if (!s.ok()) {
            ASSERT_EQ(s.code(), StatusCode::kClosed);
            return;
          }
          groups++;
        }
      });
      std::jthread closer([&] { EXPECT_TRUE(b->shutdown().ok()); });
    }
    std::map<int, int> seen;
    for (auto& batch : sink.batches) {
      for (int v : batch) seen[v]++;
    }
    ASSERT_EQ(static_cast<int>(seen.size()), groups.load());
    for (auto& [g, c] : seen) ASSERT_EQ(c, 3) << "group " << g << " was split";
  }
}

TEST(BatcherTest, AddBatchBeyondQueueDepthIsAClearError) {
  RecordingSink sink;
  auto o = opts(sink, 5);
  o.queue_depth = 4;
  auto b = make(o);
  std::vector<int> group(5, 1);
  EXPECT_EQ(b->add_batch(group).code(), StatusCode::kInvalidArgument);
}

TEST(BatcherTest, AddBatchIsCheaperButEquivalent) {
  RecordingSink sink;
  auto b = make(opts(sink, 4));
  std::vector<int> group{0, 1, 2, 3, 4, 5};
  ASSERT_TRUE(b->add_batch(group).ok());
  ASSERT_TRUE(b->shutdown().ok());
  ASSERT_EQ(sink.batches.size(), 2u);
  EXPECT_EQ(sink.batches[0], (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(sink.batches[1], (std::vector<int>{4, 5}));
}

TEST(BatcherTest, ByteTriggerNeverExceedsTheLimitExceptForOneOversizeItem) {
  RecordingSink sink;
  auto o = opts(sink, 100);
  o.max_batch_bytes = 10;
  o.item_bytes = [](const int& v) { return static_cast<std::size_t>(v); };
  auto b = make(o);
  for (int v : {4, 4, 4, 6, 15, 1}) ASSERT_TRUE(b->add(int{v}).ok());
  ASSERT_TRUE(b->shutdown().ok());
  ASSERT_EQ(sink.batches.size(), 4u);
  EXPECT_EQ(sink.batches[0], (std::vector<int>{4, 4}));  // 4 more would make 12 > 10
  EXPECT_EQ(sink.batches[1], (std::vector<int>{4, 6}));  // reached 10: flushed at once
  EXPECT_EQ(sink.batches[2], (std::vector<int>{15}));    // larger than the limit: alone
  EXPECT_EQ(sink.batches[3], (std::vector<int>{1}));
  const BatcherStats s = b->stats();
  EXPECT_EQ(reason(s, FlushReason::kBytes), 3u);
  EXPECT_EQ(reason(s, FlushReason::kShutdown), 1u);
}

TEST(BatcherTest, ManualFlushWritesEverythingAddedBeforeItAndReportsErrors) {
  RecordingSink sink;
  std::atomic<bool> fail{false};
  sink.behaviour = [&](const std::vector<int>&, const Context&) {
    return fail ? Status(StatusCode::kIOError, "down") : Status::Ok();
  };
  auto b = make(opts(sink, 100));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(b->add(int{i}).ok());
  ASSERT_TRUE(b->flush().ok());
  ASSERT_EQ(sink.items(), 3u);  // flush returned after the sink had them
  EXPECT_EQ(reason(b->stats(), FlushReason::kManual), 1u);
  EXPECT_TRUE(b->flush().ok());  // nothing to flush: no sink call
  EXPECT_EQ(sink.count(), 1u);
  fail = true;
  ASSERT_TRUE(b->add(9).ok());
  EXPECT_EQ(b->flush().code(), StatusCode::kIOError);
  ASSERT_TRUE(b->add(10).ok());  // the batcher keeps working (Appendix D, F2)
  ASSERT_TRUE(b->shutdown().ok());
}

TEST(BatcherTest, ConcurrentFlushersRunSeveralSinkCallsAtOnce) {
  std::mutex mu;
  std::condition_variable cv;
  int active = 0, peak = 0;
  bool release = false;
  std::atomic<std::uint64_t> total{0};
  BatcherOptions<int> o;
  o.max_batch_size = 2;
  o.max_batch_delay = 1h;
  o.flushers = 3;
  o.sink = [&](std::vector<int>&& batch, const Context&) {
    std::unique_lock lock(mu);
    peak = std::max(peak, ++active);
    cv.notify_all();
    cv.wait(lock, [&] { return release || peak == 3; });
    --active;
    total += batch.size();
    return Status::Ok();
  };
  auto b = make(o);
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(b->add(int{i}).ok());
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 30s, [&] { return peak == 3; }));
    release = true;
    cv.notify_all();
  }
  ASSERT_TRUE(b->shutdown().ok());
  EXPECT_EQ(peak, 3);
  EXPECT_EQ(total.load(), 40u);
  EXPECT_EQ(b->stats().flushed_ok, 40u);
}

TEST(BatcherTest, SinkGetsADeadlineOfFlushTimeout) {
  RecordingSink sink;
  Context::Clock::time_point seen{};
  sink.behaviour = [&](const std::vector<int>&, const Context& ctx) {
    seen = *ctx.deadline();
    return Status::Ok();
  };
  auto o = opts(sink, 1);
  o.flush_timeout = 3s;
  auto b = make(o);
  const auto t0 = Context::Clock::now();
  ASSERT_TRUE(b->add(1).ok());
  ASSERT_TRUE(b->shutdown().ok());
  EXPECT_GE(seen, t0 + 3s);
  EXPECT_LT(seen, Context::Clock::now() + 3s + 1s);
}

TEST(BatcherTest, InvalidOptionsAreRejected) {
  auto sink = [](std::vector<int>&&, const Context&) { return Status::Ok(); };
  BatcherOptions<int> o;
  o.sink = sink;
  o.max_batch_size = 0;  // C1
  EXPECT_EQ(Batcher<int>::create(o).code(), StatusCode::kInvalidArgument);
  o.max_batch_size = 1;
  o.max_batch_delay = 0ms;  // C2
  EXPECT_EQ(Batcher<int>::create(o).code(), StatusCode::kInvalidArgument);
  o.max_batch_delay = 1ms;
  o.sink = nullptr;  // C5
  EXPECT_EQ(Batcher<int>::create(o).code(), StatusCode::kInvalidArgument);
  o.sink = sink;
  o.max_batch_bytes = 10;  // without item_bytes
  EXPECT_EQ(Batcher<int>::create(o).code(), StatusCode::kInvalidArgument);
  o.max_batch_bytes = 0;
  o.queue_depth = 0;                      // C3: defaulted
  o.flush_timeout = Clock::duration(-1);  // C4: defaulted
  auto r = Batcher<int>::create(o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->options().queue_depth, 1024u);
  EXPECT_EQ((*r)->options().flush_timeout, std::chrono::seconds(5));
}

TEST(BatcherTest, PrometheusTextHasTheM1Metrics) {
  RecordingSink sink;
  auto o = opts(sink, 2);
  o.name = "orders";
  auto b = make(o);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(b->add(int{i}).ok());
  ASSERT_TRUE(b->shutdown().ok());
  const std::string text = b->prometheus();
  for (const char* want :
       {"batcher_enqueued_total{name=\"orders\"} 4", "batcher_flushed_ok_total{name=\"orders\"} 4",
        "batcher_flushed_fail_total{name=\"orders\"} 0",
        "batcher_dropped_on_shutdown_total{name=\"orders\"} 0",
        "batcher_flush_total{name=\"orders\",reason=\"size\"} 2",
        "batcher_batch_size_items_bucket{name=\"orders\",le=\"2\"} 2",
        "batcher_batch_size_items_count{name=\"orders\"} 2",
        "batcher_flush_duration_seconds_count{name=\"orders\",result=\"ok\"} 2",
        "batcher_queue_depth{name=\"orders\"} 0", "# TYPE batcher_batch_size_items histogram"}) {
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  }
}

}  // namespace
}  // namespace sluice
