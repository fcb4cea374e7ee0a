// Admission: one bound on the items in flight across a pipeline
// (push-pull-queue.md: "bound the aggregate ... if total memory must be
// capped"), for hand-built Stage pipelines and run_pipeline.
#include "sluice/admission.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "sluice/queue.h"
#include "sluice/run_pipeline.h"
#include "sluice/stage.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testutil::eventually;

// A value that counts how many are alive (not moved from): what the
// pipeline holds, observed from outside the Admission.
struct Tracked {
  static inline std::atomic<int> live{0};
  static inline std::atomic<int> peak{0};
  int v = 0;
  bool owns = false;
  explicit Tracked(int x) : v(x), owns(true) { note(++live); }
  Tracked(Tracked&& o) noexcept : v(o.v), owns(std::exchange(o.owns, false)) {}
  Tracked& operator=(Tracked&& o) noexcept {
    if (owns) --live;
    v = o.v;
    owns = std::exchange(o.owns, false);
    return *this;
  }
  Tracked(const Tracked&) = delete;
  ~Tracked() {
    if (owns) --live;
  }
  static void note(int n) {
    int p = peak.load();
    while (n > p && !peak.compare_exchange_weak(p, n)) {
    }
  }
  static void reset() {
    live = 0;
    peak = 0;
  }
};

void spin(std::chrono::microseconds d) {  // work of a given length (not a wait for anything)
  const auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
  }
}

TEST(AdmissionTest, PermitsNeverExceedTheBoundUnderContention) {
  Admission admit(3);
  std::atomic<int> holding{0};
  std::atomic<int> worst{0};
  std::vector<std::jthread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        auto p = admit.acquire();
        ASSERT_TRUE(p.ok());
        const int h = ++holding;
        int w = worst.load();
        while (h > w && !worst.compare_exchange_weak(w, h)) {
        }
        if (i % 64 == 0) std::this_thread::yield();  // let others in while holding
        --holding;
      }  // the permit goes here
    });
  }
  threads.clear();
  const AdmissionStats s = admit.stats();
  EXPECT_LE(worst.load(), 3);
  EXPECT_LE(s.peak, 3u);
  EXPECT_EQ(s.in_flight, 0u);
  EXPECT_EQ(s.admitted, 16000u);
  // And the bound is a bound: three out, the fourth is refused.
  std::vector<Permit> three;
  for (int i = 0; i < 3; ++i) three.push_back(std::move(*admit.try_acquire()));
  EXPECT_EQ(admit.try_acquire().code(), StatusCode::kWouldBlock);
  EXPECT_EQ(admit.stats().peak, 3u);
}

TEST(AdmissionTest, AWaiterIsWokenByARelease) {
  Admission admit(1);
  auto held = admit.acquire();
  ASSERT_TRUE(held.ok());
  std::atomic<bool> got{false};
  std::jthread waiter([&] {
    auto p = admit.acquire();
    EXPECT_TRUE(p.ok());
    got = true;
  });
  ASSERT_TRUE(eventually([&] { return admit.stats().waits == 1; }));
  EXPECT_FALSE(got.load());
  held->release();
  EXPECT_FALSE(held->held());
  waiter.join();
  EXPECT_TRUE(got.load());
  EXPECT_EQ(admit.stats().in_flight, 0u);
  EXPECT_GT(admit.stats().waited_s, 0.0);
}

TEST(AdmissionTest, CancelAndDeadlineEndAWaitHoldingNothing) {
  Admission admit(1);
  auto held = admit.acquire();
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(admit.try_acquire().code(), StatusCode::kWouldBlock);
  EXPECT_EQ(admit.acquire(with_timeout(20ms)).code(), StatusCode::kDeadlineExceeded);
  std::stop_source stop;
  std::jthread waiter(
      [&] { EXPECT_EQ(admit.acquire(Context(stop.get_token())).code(), StatusCode::kCancelled); });
  ASSERT_TRUE(eventually([&] { return admit.stats().waits == 2; }));
  stop.request_stop();
  waiter.join();
  EXPECT_EQ(admit.stats().in_flight, 1u);  // only `held`
  EXPECT_EQ(admit.stats().refused, 3u);
  Permit moved = std::move(*held);
  EXPECT_EQ(admit.stats().in_flight, 1u);  // a move is not a release
  moved = Permit();
  EXPECT_EQ(admit.stats().in_flight, 0u);
  EXPECT_EQ(Admission::create(0).code(), StatusCode::kInvalidArgument);
}

// Three stages of different speeds and widths, each with a roomy output
// (64): the admission bound of 8, not the queues, caps what is in flight.
TEST(AdmissionTest, StagePipelineHoldsAtMostTheBoundWhateverTheQueues) {
  Tracked::reset();
  constexpr int kItems = 600;
  constexpr std::uint64_t kBound = 8;
  Admission admit(kBound);
  Queue<Admitted<Tracked>> input(64);
  StageOptions<Admitted<Tracked>> o1;
  o1.width = 2;
  o1.output_capacity = 64;
  auto s1 = Stage<Admitted<Tracked>, Admitted<Tracked>>::create(
      input, carry_permit([](Tracked&& t, const Context&) -> Result<Tracked> {
        spin(20us);
        return Tracked(std::move(t));
      }),
      o1);
  ASSERT_TRUE(s1.ok());
  StageOptions<Result<Admitted<Tracked>>> o2;
  o2.width = 3;
  o2.output_capacity = 64;
  auto s2 = Stage<Result<Admitted<Tracked>>, Admitted<Tracked>>::create(
      (*s1)->output(), carry_permit([](Tracked&& t, const Context&) -> Result<Tracked> {
        spin(5us);
        if (t.v % 3 == 0) return Status(StatusCode::kInternal, "every third fails");
        return Tracked(std::move(t));
      }),
      o2);
  ASSERT_TRUE(s2.ok());

  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> worst_sampled{0};
  std::jthread sampler([&] {
    while (!done.load()) {
      const std::uint64_t n = admit.stats().in_flight;
      if (n > worst_sampled.load()) worst_sampled = n;
      std::this_thread::yield();
    }
  });
  std::jthread source([&] {
    for (int i = 0; i < kItems; ++i) {
      auto p = admit.acquire();
      ASSERT_TRUE(p.ok());
      ASSERT_TRUE(input.push(Admitted<Tracked>{std::move(*p), Tracked(i)}).ok());
    }
    input.close();
  });
  int ok = 0;
  int failed = 0;
  for (auto& r : (*s2)->output()) {  // the slow sink
    spin(50us);
    if (r.ok()) {
      ++ok;
    } else {
      ++failed;
    }
  }
  source.join();
  done = true;
  EXPECT_EQ(ok + failed, kItems);
  EXPECT_EQ(failed, kItems / 3);
  EXPECT_LE(admit.stats().peak, kBound);
  EXPECT_LE(worst_sampled.load(), kBound);
  EXPECT_LE(Tracked::peak.load(), static_cast<int>(kBound));  // the values themselves
  EXPECT_EQ(admit.stats().in_flight, 0u);
  EXPECT_EQ(Tracked::live.load(), 0);
  EXPECT_GT(admit.stats().waits, 0u);  // the bound did hold the source back
}

TEST(AdmissionTest, CancellingAStagePipelineGivesEveryPlaceBack) {
  Admission admit(4);
  std::stop_source stop;
  {
    Queue<Admitted<int>> input(16);
    StageOptions<Admitted<int>> o;
    o.width = 2;
    o.stop = stop.get_token();
    auto stage = Stage<Admitted<int>, Admitted<int>>::create(
        input, carry_permit([](int&& v, const Context&) -> Result<int> { return v; }), o);
    ASSERT_TRUE(stage.ok());
    std::jthread source([&] {
      for (int i = 0;; ++i) {  // until the stop
        auto p = admit.acquire(Context(stop.get_token()));
        if (!p.ok()) {
          EXPECT_EQ(p.code(), StatusCode::kCancelled);
          return;
        }
        if (!input.push(Admitted<int>{std::move(*p), i}, Context(stop.get_token())).ok()) return;
      }
    });
    // Nobody drains the output: the pipeline fills up to the bound.
    ASSERT_TRUE(
        eventually([&] { return admit.stats().in_flight == 4 && admit.stats().waits > 0; }));
    stop.request_stop();
    source.join();
    EXPECT_EQ((*stage)->wait().code(), StatusCode::kCancelled);
  }  // the stage, its output and the input go, with the items they held
  EXPECT_EQ(admit.stats().in_flight, 0u);
}

TEST(AdmissionTest, RunPipelineRunsAtMostTheBoundAtOnceInBothOrderings) {
  for (Ordering ordering : {Ordering::kUnordered, Ordering::kStrict}) {
    Admission admit(3);
    std::atomic<int> in_fn{0};
    std::atomic<int> worst{0};
    int next = 0;
    std::vector<int> seen;
    PipelineOptions o;
    o.width = 6;
    o.ordering = ordering;
    o.admission = &admit;
    auto r = run_pipeline(
        [&]() -> std::optional<int> {
          if (next == 3000) return std::nullopt;
          return next++;
        },
        [&](int&& v, const Context&) -> Result<int> {
          const int n = ++in_fn;
          int w = worst.load();
          while (n > w && !worst.compare_exchange_weak(w, n)) {
          }
          if (v % 7 == 0) spin(20us);
          --in_fn;
          if (v % 5 == 0) return Status(StatusCode::kInternal, "fails");
          return v;
        },
        [&](Result<int>&& x) {
          EXPECT_LE(admit.stats().in_flight, 3u);
          seen.push_back(x.ok() ? *x : -1);
          return Status::Ok();
        },
        o);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->sunk, 3000u);
    EXPECT_EQ(seen.size(), 3000u);
    EXPECT_LE(worst.load(), 3);
    EXPECT_LE(admit.stats().peak, 3u);
    EXPECT_EQ(admit.stats().in_flight, 0u);
    EXPECT_GE(admit.stats().admitted, 3000u);  // and one per thread that found the end
    if (ordering == Ordering::kStrict) {
      for (int i = 0; i < 3000; ++i) EXPECT_EQ(seen[i], i % 5 == 0 ? -1 : i);
    }
  }
}

TEST(AdmissionTest, RunPipelineCancelledWhileWaitingForAPlaceReturnsAndFreesAll) {
  Admission admit(2);
  auto outside = admit.acquire();  // someone else holds one place for good
  ASSERT_TRUE(outside.ok());
  std::stop_source stop;
  std::atomic<int> sunk{0};
  PipelineOptions o;
  o.width = 3;
  o.admission = &admit;
  std::jthread stopper([&] {
    EXPECT_TRUE(eventually([&] { return sunk.load() >= 10; }));
    stop.request_stop();
  });
  int next = 0;
  auto r = run_pipeline([&]() -> std::optional<int> { return next++; },
                        [](int&& v, const Context&) -> Result<int> { return v; },
                        [&](Result<int>&&) {
                          ++sunk;
                          return Status::Ok();
                        },
                        o, Context(stop.get_token()));
  EXPECT_EQ(r.code(), StatusCode::kCancelled);
  EXPECT_EQ(admit.stats().in_flight, 1u);  // only `outside`
}

}  // namespace
}  // namespace sluice
