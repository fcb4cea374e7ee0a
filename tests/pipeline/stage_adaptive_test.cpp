// Adaptive concurrency of a Stage (fan-out-stage.md recommends it): the AIMD
// limit against a modelled service (deterministic), then a real stage with a
// real clock against a simulated service (loose bounds).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "sluice/stage.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;

// A service with `knee` parallel capacity: flat latency up to the knee,
// then slower than linear (contention): throughput falls past the knee.
double modelled_latency(std::size_t concurrency, std::size_t knee) {
  if (concurrency <= knee) return 1.0;
  return std::pow(static_cast<double>(concurrency) / static_cast<double>(knee), 1.5);
}

TEST(AimdLimitTest, FindsTheKneeOfAModelledServiceAndStaysNearIt) {
  for (std::size_t knee : {2u, 5u, 8u, 20u}) {
    AdaptiveConcurrency a;
    a.enabled = true;
    detail::AimdLimit limit(a, 64);
    EXPECT_EQ(limit.limit(), 1u);  // starts at the floor
    double throughput = 0;
    int rounds = 0;
    for (int w = 0; w < 4000; ++w) {
      const std::size_t c = limit.limit();
      const double lat = modelled_latency(c, knee);
      for (std::size_t i = 0; i < std::max<std::size_t>(c, 8); ++i) limit.observe(lat);
      if (w >= 2000) {  // settled: measure
        throughput += static_cast<double>(c) / lat;
        ++rounds;
      }
    }
    const double best = static_cast<double>(knee);  // c / latency is highest at the knee
    EXPECT_GE(throughput / rounds, 0.9 * best) << "knee " << knee;
    EXPECT_LE(limit.limit(), knee * 13 / 10 + 1) << "knee " << knee;
    EXPECT_GT(limit.decreases(), 0u);
  }
}

// Settled at a knee, probes past it are rare (each failed one waits twice
// as long, up to max_probe_wait windows): throughput within 3% of the knee's;
// without the wait (max_probe_wait 0) every other window or so probes.
TEST(AimdLimitTest, AFailedProbeWaitsBeforeTheNextSoTheKneeHoldsItsThroughput) {
  for (const std::size_t wait : {std::size_t{32}, std::size_t{0}}) {
    for (std::size_t knee : {2u, 5u, 8u, 20u}) {
      AdaptiveConcurrency a;
      a.enabled = true;
      a.max_probe_wait = wait;
      detail::AimdLimit limit(a, 64);
      double throughput = 0;
      int rounds = 0;
      for (int w = 0; w < 4000; ++w) {
        const std::size_t c = limit.limit();
        const double lat = modelled_latency(c, knee);
        for (std::size_t i = 0; i < std::max<std::size_t>(c, 8); ++i) limit.observe(lat);
        if (w >= 2000) {
          throughput += static_cast<double>(c) / lat;
          ++rounds;
        }
      }
      const double ratio = throughput / rounds / static_cast<double>(knee);
      if (wait > 0) {
        EXPECT_GE(ratio, 0.97) << "knee " << knee;
      } else {
        EXPECT_LT(ratio, 0.97) << "knee " << knee << ": the wait is what holds it";
      }
    }
  }
}

// A knee that moves up after a failed probe is found again: a probe that
// holds climbs on at once.
TEST(AimdLimitTest, AKneeThatMovesUpIsFoundAgain) {
  AdaptiveConcurrency a;
  a.enabled = true;
  detail::AimdLimit limit(a, 64);
  auto run = [&](std::size_t knee, int windows) {
    for (int w = 0; w < windows; ++w) {
      const std::size_t c = limit.limit();
      const double lat = modelled_latency(c, knee);
      for (std::size_t i = 0; i < std::max<std::size_t>(c, 8); ++i) limit.observe(lat);
    }
  };
  run(8, 2000);
  EXPECT_LE(limit.limit(), 9u);
  run(20, 2000);
  EXPECT_GE(limit.limit(), 18u);
}

TEST(AimdLimitTest, AFlatServiceGrowsTheLimitToTheCeilingAndNoFurther) {
  AdaptiveConcurrency a;
  a.enabled = true;
  a.min_width = 2;
  detail::AimdLimit limit(a, 16);
  EXPECT_EQ(limit.limit(), 2u);
  for (int i = 0; i < 10000; ++i) limit.observe(0.001);
  EXPECT_EQ(limit.limit(), 16u);
  EXPECT_EQ(limit.decreases(), 0u);
}

TEST(AimdLimitTest, ASlowdownBacksOffButNeverBelowTheFloor) {
  AdaptiveConcurrency a;
  a.enabled = true;
  a.min_width = 3;
  a.initial = 10;
  detail::AimdLimit limit(a, 16);
  for (int i = 0; i < 100; ++i) limit.observe(0.001);  // baseline 1 ms
  EXPECT_GE(limit.limit(), 10u);
  std::size_t lowest = limit.limit();
  for (int i = 0; i < 200; ++i) {  // ten times slower
    limit.observe(0.010);
    lowest = std::min(lowest, limit.limit());
  }
  EXPECT_EQ(lowest, 3u);  // backed off to the floor, not below
  EXPECT_GT(limit.decreases(), 0u);
  // If that is the service's new pace, the baseline follows it at the floor
  // and the limit grows again.
  for (int i = 0; i < 3000; ++i) limit.observe(0.010);
  EXPECT_GT(limit.limit(), 3u);
}

TEST(StageAdaptiveTest, BadSettingsAreRejected) {
  Queue<int> in(4);
  auto fn = [](int&& v, const Context&) -> Result<int> { return v; };
  StageOptions<int> o;
  o.width = 4;
  o.adaptive.enabled = true;
  o.adaptive.min_width = 0;
  EXPECT_EQ((Stage<int, int>::create(in, fn, o).code()), StatusCode::kInvalidArgument);
  o.adaptive.min_width = 5;  // above the width
  EXPECT_EQ((Stage<int, int>::create(in, fn, o).code()), StatusCode::kInvalidArgument);
  o.adaptive.min_width = 1;
  o.adaptive.tolerance = 1.0;
  EXPECT_EQ((Stage<int, int>::create(in, fn, o).code()), StatusCode::kInvalidArgument);
  o.adaptive.tolerance = 1.25;
  o.adaptive.backoff = 1.0;
  EXPECT_EQ((Stage<int, int>::create(in, fn, o).code()), StatusCode::kInvalidArgument);
  o.adaptive.backoff = 0.9;
  o.ordering = Ordering::kPerKey;
  o.key = [](const int& v) { return static_cast<std::size_t>(v); };
  EXPECT_EQ((Stage<int, int>::create(in, fn, o).code()), StatusCode::kInvalidArgument);
}

// A simulated remote service on the real clock: `knee` requests at once take
// 1 ms, more take longer (the wait is the service's latency, not a sync).
struct Service {
  std::atomic<int> in_flight{0};
  std::atomic<int> worst{0};
  int knee;
  explicit Service(int k) : knee(k) {}
  void call() {
    const int c = ++in_flight;
    int w = worst.load();
    while (c > w && !worst.compare_exchange_weak(w, c)) {
    }
    const double factor = c <= knee ? 1.0 : std::pow(static_cast<double>(c) / knee, 1.5);
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(factor));
    --in_flight;
  }
};

TEST(StageAdaptiveTest, ARealStageStaysUnderItsLimitAndBacksOffAnOverloadedService) {
  Service service(3);
  Queue<int> in(64);
  StageOptions<int> o;
  o.width = 24;
  o.output_capacity = 64;
  o.adaptive.enabled = true;
  auto stage = Stage<int, int>::create(
      in,
      [&](int&& v, const Context&) -> Result<int> {
        service.call();
        return v;
      },
      o);
  ASSERT_TRUE(stage.ok());
  std::jthread feeder([&] {
    for (int i = 0; i < 3000; ++i) ASSERT_TRUE(in.push(int{i}).ok());
    in.close();
  });
  std::size_t n = 0;
  std::size_t worst_limit = 0;
  for (auto& r : (*stage)->output()) {
    ASSERT_TRUE(r.ok());
    ++n;
    worst_limit = std::max<std::size_t>(worst_limit, (*stage)->stats().concurrency_limit);
  }
  EXPECT_EQ(n, 3000u);
  const StageStats s = (*stage)->stats();
  EXPECT_LE(worst_limit, 24u);
  EXPECT_LE(service.worst.load(), 24);
  EXPECT_GT(s.limit_increases, 0u);  // it did move off the floor
  EXPECT_GT(s.limit_decreases, 0u);  // and backed off past the knee
  // Far from the ceiling: 24 workers would make each call ~22 times slower.
  EXPECT_LT(s.concurrency_limit, 12u);
}

TEST(StageAdaptiveTest, CancellationWakesWorkersWaitingForAPlace) {
  Queue<int> in(64);
  StageOptions<int> o;
  o.width = 8;
  o.adaptive.enabled = true;  // limit 1: seven workers wait for a place
  std::atomic<bool> entered{false};
  auto stage = Stage<int, int>::create(
      in,
      [&](int&& v, const Context& ctx) -> Result<int> {
        entered = true;
        std::mutex m;
        std::condition_variable_any cv;
        std::unique_lock lock(m);
        cv.wait(lock, ctx.token(), [] { return false; });  // until cancelled
        return v;
      },
      o);
  ASSERT_TRUE(stage.ok());
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(in.push(int{i}).ok());
  ASSERT_TRUE(testutil::eventually([&] { return entered.load(); }));
  EXPECT_EQ((*stage)->stats().busy_workers, 1u);  // the limit, not the width
  (*stage)->cancel();
  EXPECT_EQ((*stage)->wait().code(), StatusCode::kCancelled);
}

}  // namespace
}  // namespace sluice
