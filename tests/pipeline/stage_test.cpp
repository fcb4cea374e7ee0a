// The fan-out seed's "Test Conformance" list (../shared/seeds/fan-out-stage.md)
// and the extras: ordering modes under random delays, error modes,
// throwing functions, cancellation, thread leaks, a bounded 3-stage pipeline.
#include "sluice/stage.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "sluice/batch_stage.h"
#include "testutil/threads.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testutil::eventually;

// Fills a queue from a thread, then closes it. Stops (and closes) when the
// jthread is destroyed, so a test that cancels its stage cannot hang here.
std::jthread feed(Queue<int>& q, int n) {
  return std::jthread([&q, n](std::stop_token stop) {
    for (int i = 0; i < n; ++i) {
      if (!q.push(int{i}, Context(stop)).ok()) break;
    }
    q.close();
  });
}

template <class Out>
std::vector<Result<Out>> drain(Queue<Result<Out>>& q) {
  std::vector<Result<Out>> out;
  for (auto& r : q) out.push_back(std::move(r));
  return out;
}

std::unique_ptr<Stage<int, int>> make(Queue<int>& in, Stage<int, int>::Fn fn, StageOptions<int> o) {
  auto r = Stage<int, int>::create(in, std::move(fn), std::move(o));
  EXPECT_TRUE(r.ok()) << r.status();
  return std::move(r).value();
}

StageOptions<int> opts(std::size_t width, Ordering ord = Ordering::kUnordered,
                       std::size_t window = 0) {
  StageOptions<int> o;
  o.width = width;
  o.ordering = ord;
  o.window = window;
  return o;
}

// Sleeps a random few microseconds: reorders completions between workers.
void jitter(int item) {
  thread_local std::mt19937 rng(
      static_cast<unsigned>(std::hash<std::thread::id>{}(std::this_thread::get_id())));
  std::this_thread::sleep_for(
      std::chrono::microseconds((rng() + static_cast<unsigned>(item)) % 300));
}

using testutil::thread_baseline;
using testutil::thread_count;

// Conformance 1: non-empty input, no errors: every item out exactly once.
TEST(StageTest, EveryItemIsProducedExactlyOnceInEveryMode) {
  for (Ordering ord :
       {Ordering::kUnordered, Ordering::kStrict, Ordering::kWindowed, Ordering::kPerKey}) {
    for (std::size_t width : {1, 4}) {
      Queue<int> in(16);
      StageOptions<int> o = opts(width, ord, 3);
      o.key = [](const int& v) { return static_cast<std::size_t>(v % 7); };
      auto st = make(
          in, [](int&& v, const Context&) -> Result<int> { return v * 2; }, o);
      auto src = feed(in, 2000);
      auto out = drain(st->output());
      ASSERT_TRUE(st->wait().ok());
      std::vector<int> got;
      for (auto& r : out) got.push_back(*r);
      std::sort(got.begin(), got.end());
      ASSERT_EQ(got.size(), 2000u);
      for (int i = 0; i < 2000; ++i) ASSERT_EQ(got[i], 2 * i);
      const StageStats s = st->stats();
      EXPECT_EQ(s.items_in, 2000u);
      EXPECT_EQ(s.items_out, 2000u);
    }
  }
}

// Conformance 2: empty input closes the output with no items.
TEST(StageTest, EmptyInputClosesTheOutput) {
  Queue<int> in(4);
  in.close();
  auto st = make(
      in, [](int&& v, const Context&) -> Result<int> { return v; }, opts(3));
  EXPECT_EQ(st->output().pull().code(), StatusCode::kClosed);
  EXPECT_TRUE(st->wait().ok());
}

// Conformance 3: N = 1 behaves as a single-worker stage: input order kept.
TEST(StageTest, WidthOneKeepsInputOrder) {
  Queue<int> in(4);
  auto st = make(
      in, [](int&& v, const Context&) -> Result<int> { return v; }, opts(1));
  auto src = feed(in, 500);
  auto out = drain(st->output());
  ASSERT_EQ(out.size(), 500u);
  for (int i = 0; i < 500; ++i) EXPECT_EQ(*out[i], i);
}

// Conformance 4: parallel-safe work runs on N workers at once (the
// throughput figures are in bench/stage_compare).
TEST(StageTest, WorkRunsOnAllWorkersAtOnce) {
  Queue<int> in(16);
  std::mutex mu;
  std::condition_variable cv;
  int active = 0, peak = 0;
  auto st = make(
      in,
      [&](int&& v, const Context&) -> Result<int> {
        std::unique_lock lock(mu);
        peak = std::max(peak, ++active);
        cv.notify_all();
        cv.wait_for(lock, 10s, [&] { return peak >= 4; });
        --active;
        return v;
      },
      opts(4));
  auto src = feed(in, 40);
  auto out = drain(st->output());
  EXPECT_EQ(out.size(), 40u);
  EXPECT_EQ(peak, 4);
}

// Conformance 5: cancellation: every worker exits promptly, the output closes.
TEST(StageTest, CancellationStopsEveryWorkerPromptlyAndClosesTheOutput) {
  Queue<int> in(64);
  std::atomic<int> started{0};
  auto st = make(
      in,
      [&](int&& v, const Context& ctx) -> Result<int> {
        started++;
        std::mutex m;
        std::condition_variable_any cv;
        std::unique_lock lock(m);
        cv.wait(lock, ctx.token(), [] { return false; });  // honours the token
        return v;
      },
      opts(4));
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(in.push(int{i}).ok());
  ASSERT_TRUE(eventually([&] { return started.load() == 4; }));
  const auto t0 = std::chrono::steady_clock::now();
  st->cancel();
  EXPECT_EQ(st->wait().code(), StatusCode::kCancelled);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, 2s);  // generous here; bench/stage_compare reports the real figure
  EXPECT_EQ(st->output().pull().code(), StatusCode::kClosed);
}

// The seed's cancel promise, with a worker blocked in every place a worker
// can block at once: on a full output, inside fn (a cancellable wait), on
// the input, and per mode on the reorder lag (strict) or the dispatcher on a
// full per-key queue. Cancel mid-stream: every thread exits and the output is
// closed, holding only what was written before. The time this takes is
// measured in bench/stage_compare (cancel latency); here a generous bound
// turns a regression into a failure instead of a hang.
TEST(StageTest, CancelMidStreamWakesWorkersBlockedEverywhereAndClosesTheOutputOnce) {
  constexpr int kSlow = 100;  // items >= kSlow wait in fn until cancelled
  for (const Ordering ord : {Ordering::kUnordered, Ordering::kStrict, Ordering::kPerKey}) {
    SCOPED_TRACE("ordering " + std::to_string(static_cast<int>(ord)));
    Queue<int> in(64);
    std::atomic<int> in_fn{0}, fn_cancelled{0};
    StageOptions<int> o = opts(ord == Ordering::kStrict ? 4 : 3, ord);
    o.output_capacity = 1;
    o.window = 2;  // strict: a worker 2 items ahead of the oldest unwritten result waits
    o.key = [](const int& v) { return static_cast<std::size_t>(v % 3); };
    auto st = make(
        in,
        [&](int&& v, const Context& ctx) -> Result<int> {
          if (v < kSlow) return v;
          in_fn++;
          std::mutex m;
          std::condition_variable_any cv;
          std::unique_lock lock(m);
          cv.wait(lock, ctx.token(), [] { return false; });
          fn_cancelled++;
          return v;
        },
        o);
    Queue<Result<int>>& out = st->output();
    // A result fills the output; the next one's writer waits for room.
    ASSERT_TRUE(in.push(0).ok());
    ASSERT_TRUE(eventually([&] { return out.approx_size() == 1; }));
    ASSERT_TRUE(in.push(3).ok());  // per-key: the same worker as 0
    ASSERT_TRUE(eventually([&] { return out.stats().waiting_pushers == 1; }));
    // One worker inside fn.
    ASSERT_TRUE(in.push(kSlow + 1).ok());  // key 2
    ASSERT_TRUE(eventually([&] { return in_fn.load() == 1; }));
    if (ord == Ordering::kStrict) {
      // seq 3 is 2 past the oldest unwritten (seq 1): its worker waits on the lag.
      ASSERT_TRUE(in.push(4).ok());
      ASSERT_TRUE(eventually([&] { return st->stats().items_in == 4; }));
    }
    if (ord == Ordering::kPerKey) {
      // Key 2's queue (4 items) fills behind the busy worker; the dispatcher
      // then waits to hand it a fifth.
      for (int i = 1; i <= 5; ++i) ASSERT_TRUE(in.push(kSlow + 1 + 3 * i).ok());
      ASSERT_TRUE(eventually([&] { return in.stats().pulled == 8; }));
    } else {
      // The last worker waits on the empty input.
      ASSERT_TRUE(eventually([&] { return in.stats().waiting_pullers == 1; }));
    }
    EXPECT_EQ(st->stats().busy_workers, 1u);

    st->cancel();
    EXPECT_EQ(st->wait(with_timeout(30s)).code(), StatusCode::kCancelled);
    in.close();  // after a failed wait: lets a worker stuck on the input go
    EXPECT_EQ(fn_cancelled.load(), 1);
    EXPECT_EQ(st->stats().busy_workers, 0u);
    // Closed by the stage: only the result written before the cancel, then kClosed.
    std::vector<int> got;
    for (Result<Result<int>> r = out.pull(with_timeout(10s)); r.ok();
         r = out.pull(with_timeout(10s))) {
      got.push_back(**r);
    }
    EXPECT_EQ(got, std::vector<int>{0});
    EXPECT_EQ(out.pull(with_timeout(10s)).code(), StatusCode::kClosed);
    EXPECT_FALSE(out.close());  // already closed, by the stage
    EXPECT_EQ(st->stats().items_out, 1u);
  }
}

TEST(StageTest, ExternalStopTokenCancelsAndWaitSaysSo) {
  Queue<int> in(4);
  std::stop_source stop;
  StageOptions<int> o = opts(2);
  o.stop = stop.get_token();
  auto st = make(
      in, [](int&& v, const Context&) -> Result<int> { return v; }, o);
  stop.request_stop();
  EXPECT_EQ(st->wait().code(), StatusCode::kCancelled);
  EXPECT_EQ(st->output().pull().code(), StatusCode::kClosed);
}

// Conformance 7: no thread leaks after repeated runs.
TEST(StageTest, RepeatedRunsLeakNoThreads) {
  const std::size_t before = thread_baseline();
  for (int run = 0; run < 30; ++run) {
    Queue<int> in(8);
    StageOptions<int> o = opts(3, run % 2 ? Ordering::kStrict : Ordering::kPerKey);
    o.key = [](const int& v) { return static_cast<std::size_t>(v); };
    auto st = make(
        in, [](int&& v, const Context&) -> Result<int> { return v; }, o);
    auto src = feed(in, 100);
    if (run % 3 == 0) {
      st->cancel();  // some runs end by cancellation
    } else {
      (void)drain(st->output());
    }
  }
  EXPECT_TRUE(eventually([&] { return thread_count() == before; }));
}

TEST(StageTest, StrictOrderHoldsUnderRandomDelays) {
  Queue<int> in(16);
  auto st = make(
      in,
      [](int&& v, const Context&) -> Result<int> {
        jitter(v);
        return v;
      },
      opts(4, Ordering::kStrict));
  auto src = feed(in, 400);
  auto out = drain(st->output());
  ASSERT_EQ(out.size(), 400u);
  for (int i = 0; i < 400; ++i) ASSERT_EQ(*out[i], i);
}

// The output's default capacity is max(2 x width, 16) (stage.h): an
// undrained stage of width 2 holds 16 results, width 10 holds 20.
TEST(StageTest, TheOutputHoldsMaxOfTwiceTheWidthAndSixtyFourByDefault) {
  for (const std::size_t width : {std::size_t{2}, std::size_t{40}}) {
    Queue<int> in(64);
    auto st = make(
        in, [](int&& v, const Context&) -> Result<int> { return v; }, opts(width));
    auto src = feed(in, 1000);
    const std::uint64_t want = std::max<std::size_t>(2 * width, 64);
    ASSERT_TRUE(eventually([&] { return st->stats().output_depth == want; }))
        << "width " << width << ": " << st->stats().output_depth;
    st->cancel();
  }
}

// A width-1 stage over n items already waiting in a closed input, each fn
// call running `work`: the results, and the input's depth at each call.
struct DepthRun {
  std::vector<int> got;
  std::vector<std::uint64_t> depth;  // one worker: written by one thread
};
DepthRun run_prefilled(Ordering ord, int n, const std::function<void()>& work) {
  Queue<int> in(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) EXPECT_TRUE(in.push(int{i}).ok());
  in.close();
  DepthRun run;
  auto st = make(
      in,
      [&](int&& v, const Context&) -> Result<int> {
        run.depth.push_back(in.approx_size());
        work();
        return v;
      },
      opts(1, ord));
  for (auto& r : st->output()) run.got.push_back(*r);
  EXPECT_TRUE(st->wait().ok());
  return run;
}

// Batches (stage.h): with a cheap fn a worker takes the items waiting in the
// input several at a time; results keep their order. Seen from inside fn:
// the input's depth at consecutive calls drops by more than one.
TEST(StageTest, ACheapFnTakesTheWaitingItemsSeveralAtATime) {
  for (Ordering ord : {Ordering::kUnordered, Ordering::kStrict}) {
    constexpr int kItems = 200;
    const DepthRun run = run_prefilled(ord, kItems, [] {});
    ASSERT_EQ(run.got.size(), static_cast<std::size_t>(kItems));
    for (int i = 0; i < kItems; ++i) EXPECT_EQ(run.got[i], i);
    std::uint64_t largest_take = 0;
    for (std::size_t i = 1; i < run.depth.size(); ++i) {
      largest_take = std::max(largest_take, run.depth[i - 1] - run.depth[i]);
    }
    EXPECT_GE(largest_take, 2u) << "ordering " << static_cast<int>(ord);
  }
}

// ... but never waits for a batch to fill: once batches have grown, an item
// that comes alone (the input still open) is processed and written alone.
TEST(StageTest, AnItemThatComesAloneIsNotHeldForABatch) {
  for (Ordering ord : {Ordering::kUnordered, Ordering::kStrict}) {
    Queue<int> in(256);
    auto st = make(
        in, [](int&& v, const Context&) -> Result<int> { return v; }, opts(1, ord));
    for (int i = 0; i < 200; ++i) ASSERT_TRUE(in.push(int{i}).ok());  // batches grow
    for (int i = 0; i < 200; ++i) {
      auto r = st->output().pull(with_timeout(10s));
      ASSERT_TRUE(r.ok()) << r.status();
    }
    for (int i = 200; i < 205; ++i) {
      ASSERT_TRUE(in.push(int{i}).ok());
      auto r = st->output().pull(with_timeout(10s));  // the input stays open
      ASSERT_TRUE(r.ok()) << "ordering " << static_cast<int>(ord) << ": " << r.status();
      EXPECT_EQ(**r, i);
    }
    in.close();
    ASSERT_TRUE(st->wait().ok());
  }
}

// ... and a fn of 200 us or more goes one item at a time, so that a few
// slow items spread over the workers: the depth drops by exactly one per call.
TEST(StageTest, ASlowFnTakesOneItemAtATime) {
  for (Ordering ord : {Ordering::kUnordered, Ordering::kStrict}) {
    constexpr int kItems = 12;
    // The work: 300 us an item.
    const DepthRun run = run_prefilled(ord, kItems, [] { std::this_thread::sleep_for(300us); });
    ASSERT_EQ(run.got.size(), static_cast<std::size_t>(kItems));
    ASSERT_EQ(run.depth.size(), static_cast<std::size_t>(kItems));
    for (int i = 0; i < kItems; ++i) {
      EXPECT_EQ(run.depth[i], static_cast<std::uint64_t>(kItems - 1 - i));
    }
  }
}

// The same orders with a consumer slower than the workers, so writers keep
// waiting for room while results arrive out of order behind them.
TEST(StageTest, OrderedModesHoldWithASlowConsumer) {
  for (Ordering ord : {Ordering::kStrict, Ordering::kWindowed}) {
    Queue<int> in(16);
    StageOptions<int> o = opts(4, ord, ord == Ordering::kWindowed ? 3 : 0);
    o.output_capacity = 1;
    auto st = make(
        in,
        [](int&& v, const Context&) -> Result<int> {
          jitter(v);
          return v;
        },
        std::move(o));
    auto src = feed(in, 300);
    std::vector<int> got;
    for (auto& r : st->output()) {
      got.push_back(*r);
      if (got.size() % 3 == 0) jitter(static_cast<int>(got.size()));
    }
    ASSERT_EQ(got.size(), 300u);
    if (ord == Ordering::kStrict) {
      for (int i = 0; i < 300; ++i) ASSERT_EQ(got[i], i);
    } else {
      std::vector<bool> seen(300, false);
      int oldest = 0;
      for (int v : got) {
        ASSERT_LT(v - oldest, 3) << v << " written while " << oldest << " was pending";
        ASSERT_FALSE(seen[v]) << v;
        seen[v] = true;
        while (oldest < 300 && seen[oldest]) ++oldest;
      }
    }
  }
}

// Window 3: one item at a time (lag 7 < 2 x width). Window 24 with a cheap
// fn: workers take batches of up to 3 (lag 28 / (2 x width)).
TEST(StageTest, WindowedOrderNeverWritesAnItemWindowOrMorePlacesEarly) {
  for (const int window : {3, 24}) {
    Queue<int> in(16);
    auto st = make(
        in,
        [window](int&& v, const Context&) -> Result<int> {
          if (window == 3) {
            jitter(v);
          } else {
            std::this_thread::sleep_for(std::chrono::microseconds(v % 7 == 0 ? 150 : 1));
          }
          return v;
        },
        opts(4, Ordering::kWindowed, static_cast<std::size_t>(window)));
    auto src = feed(in, 400);
    auto out = drain(st->output());
    ASSERT_EQ(out.size(), 400u);
    std::vector<bool> written(400, false);
    int oldest = 0;
    bool reordered = false;
    for (auto& r : out) {
      const int s = *r;
      ASSERT_LT(s - oldest, window)
          << "item " << s << " written while " << oldest << " was pending";
      reordered |= s != oldest;
      written[s] = true;
      while (oldest < 400 && written[oldest]) ++oldest;
    }
    EXPECT_TRUE(reordered) << "window " << window << " was never used: not exercised";
  }
}

TEST(StageTest, PerKeyOrderHoldsWhileKeysRunInParallel) {
  Queue<int> in(16);
  StageOptions<int> o = opts(4, Ordering::kPerKey);
  o.key = [](const int& v) { return static_cast<std::size_t>(v % 5); };
  auto st = make(
      in,
      [](int&& v, const Context&) -> Result<int> {
        jitter(v);
        return v;
      },
      o);
  auto src = feed(in, 500);
  auto out = drain(st->output());
  ASSERT_EQ(out.size(), 500u);
  std::map<int, int> last;
  bool interleaved = false;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int v = *out[i];
    auto it = last.find(v % 5);
    if (it != last.end()) {
      ASSERT_GT(v, it->second) << "key " << v % 5;
    }
    last[v % 5] = v;
    if (i > 0 && *out[i - 1] > v) interleaved = true;
  }
  EXPECT_TRUE(interleaved) << "keys never ran in parallel";
}

TEST(StageTest, ContinueOnErrorReportsEveryErrorAsAResult) {
  Queue<int> in(8);
  auto st = make(
      in,
      [](int&& v, const Context&) -> Result<int> {
        if (v % 10 == 0) return Status(StatusCode::kIOError, "bad item");
        return v;
      },
      opts(3));
  auto src = feed(in, 100);
  auto out = drain(st->output());
  ASSERT_EQ(out.size(), 100u);  // nothing skipped silently
  int errors = 0;
  for (auto& r : out) errors += r.ok() ? 0 : 1;
  EXPECT_EQ(errors, 10);
  EXPECT_EQ(st->stats().errors, 10u);
  EXPECT_TRUE(st->wait().ok());
}

TEST(StageTest, ThrowingFunctionIsAnErrorResult) {
  Queue<int> in(8);
  auto st = make(
      in,
      [](int&& v, const Context&) -> Result<int> {
        if (v == 3) throw std::runtime_error("kaboom");
        return v;
      },
      opts(2));
  auto src = feed(in, 6);
  auto out = drain(st->output());
  ASSERT_EQ(out.size(), 6u);
  int thrown = 0;
  for (auto& r : out) {
    if (!r.ok()) {
      ++thrown;
      EXPECT_EQ(r.code(), StatusCode::kInternal);
      EXPECT_NE(r.status().message().find("kaboom"), std::string_view::npos);
    }
  }
  EXPECT_EQ(thrown, 1);
}

TEST(StageTest, FailFastStopsOnTheFirstErrorAndReturnsIt) {
  Queue<int> in(8);
  StageOptions<int> o = opts(3);
  o.errors = ErrorMode::kFailFast;
  auto st = make(
      in,
      [](int&& v, const Context&) -> Result<int> {
        if (v >= 50) return Status(StatusCode::kIOError, "item " + std::to_string(v));
        return v;
      },
      o);
  std::jthread src([&] {
    for (int i = 0; i < 1000; ++i) {
      if (!in.push(int{i}, with_timeout(5s)).ok()) break;
    }
    in.close();
  });
  auto out = drain(st->output());
  const Status s = st->wait();
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  for (auto& r : out) ASSERT_TRUE(r.ok());  // errors are not written; the first is returned
  EXPECT_LT(st->stats().items_in, 1000u);   // it stopped early
  in.close();                               // release the source (it would wait for room)
}

TEST(StageTest, FirstSuccessWritesOneResultAndStopsTheRest) {
  Queue<int> in(8);
  StageOptions<int> o = opts(3);
  o.errors = ErrorMode::kFirstSuccess;
  auto st = make(
      in,
      [](int&& v, const Context&) -> Result<int> {
        if (v != 5) return Status(StatusCode::kUnavailable, "replica down");
        return v * 100;
      },
      o);
  auto src = feed(in, 8);
  auto out = drain(st->output());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(*out[0], 500);
  EXPECT_TRUE(st->wait().ok());
}

TEST(StageTest, FirstSuccessWithNoSuccessReturnsTheFirstError) {
  Queue<int> in(8);
  StageOptions<int> o = opts(2);
  o.errors = ErrorMode::kFirstSuccess;
  auto st = make(
      in,
      [](int&&, const Context&) -> Result<int> { return Status(StatusCode::kUnavailable, "down"); },
      o);
  auto src = feed(in, 4);
  EXPECT_TRUE(drain(st->output()).empty());
  EXPECT_EQ(st->wait().code(), StatusCode::kUnavailable);
}

// A gate a test opens once: fn waits on it (with its stop token).
struct Gate {
  std::mutex mu;
  std::condition_variable_any cv;
  bool open = false;
  void release() {
    {
      std::lock_guard l(mu);
      open = true;
    }
    cv.notify_all();
  }
  void pass(const Context& ctx) {
    std::unique_lock l(mu);
    cv.wait(l, ctx.token(), [&] { return open; });
  }
};

// Strict order, fail-fast: results after the failing item (in input order)
// were parked behind it and written when its place was freed.
TEST(StageTest, StrictFailFastWritesNothingAfterTheFailingItem) {
  Queue<int> in(16);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(in.push(int{i}).ok());
  in.close();
  StageOptions<int> o = opts(2, Ordering::kStrict);
  o.errors = ErrorMode::kFailFast;
  std::atomic<int> others{0};
  Gate gate;
  auto st = make(
      in,
      [&](int&& v, const Context& ctx) -> Result<int> {
        if (v != 0) {
          if (++others == 9) gate.release();
          return v;
        }
        gate.pass(ctx);  // item 0 fails once 1..9 are done (and 1..8 parked behind it)
        return Status(StatusCode::kIOError, "item 0 failed");
      },
      o);
  auto out = drain(st->output());
  EXPECT_EQ(st->wait().code(), StatusCode::kIOError);
  std::string written;
  for (auto& r : out) written += r.ok() ? std::to_string(*r) + " " : "error ";
  EXPECT_TRUE(out.empty()) << "written after the failing item 0: " << written;
}

// The consumer closes the output mid-run: every thread leaves (none waits
// for ever on the lag, a per-key queue or the input) and wait() says so.
TEST(StageTest, AConsumerClosingTheOutputStopsTheStageInEveryOrdering) {
  for (const Ordering ord : {Ordering::kUnordered, Ordering::kStrict, Ordering::kPerKey}) {
    SCOPED_TRACE(static_cast<int>(ord));
    Queue<int> in(256);
    for (int i = 0; i < 200; ++i) ASSERT_TRUE(in.push(int{i}).ok());
    in.close();
    StageOptions<int> o = opts(2, ord);
    o.key = [](const int& v) { return static_cast<std::size_t>(v); };
    Gate gate;
    std::atomic<int> calls{0};
    auto st = make(
        in,
        [&](int&& v, const Context& ctx) -> Result<int> {
          ++calls;
          // Strict: item 0 holds the oldest place while the other worker fills
          // the lag. (Per key, it would hold back its key's queue, not fill the output.)
          if (v == 0 && ord != Ordering::kPerKey) gate.pass(ctx);
          return v;
        },
        o);
    // Strict: the other worker is past the lag (16 x 2 places ahead of item 0);
    // unordered and per-key: the output (64) is full and a worker waits on it.
    if (ord == Ordering::kStrict) {
      ASSERT_TRUE(eventually([&] { return st->stats().items_in >= 33; }));
    } else {
      ASSERT_TRUE(eventually([&] { return st->output().stats().waiting_pushers >= 1; }));
    }
    st->output().close();
    gate.release();
    const Status s = st->wait(with_timeout(30s));
    EXPECT_EQ(s.code(), StatusCode::kClosed) << s;
    EXPECT_LT(calls.load(), 200);  // it stopped: no fn for results nobody reads
  }
}

TEST(StageTest, FirstSuccessStoppedFromOutsideAfterAnErrorReturnsCancelled) {
  Queue<int> in(8);
  ASSERT_TRUE(in.push(0).ok());
  ASSERT_TRUE(in.push(1).ok());
  StageOptions<int> o = opts(2);
  o.errors = ErrorMode::kFirstSuccess;
  Gate never;
  auto st = make(
      in,
      [&](int&& v, const Context& ctx) -> Result<int> {
        if (v == 0) return Status(StatusCode::kUnavailable, "replica down");
        never.pass(ctx);  // until cancelled
        return v;
      },
      o);
  ASSERT_TRUE(eventually([&] {
    const StageStats s = st->stats();
    return s.errors == 1 && s.busy_workers == 1;
  }));
  st->cancel();
  EXPECT_EQ(st->wait().code(), StatusCode::kCancelled);  // not every item failed
  in.close();
}

TEST(StageTest, APerKeyKeyThatThrowsYieldsAnErrorForItsItem) {
  Queue<int> in(16);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(in.push(int{i}).ok());
  in.close();
  StageOptions<int> o = opts(2, Ordering::kPerKey);
  o.key = [](const int& v) -> std::size_t {
    if (v == 3) throw std::runtime_error("no key for 3");
    return static_cast<std::size_t>(v);
  };
  auto st = make(
      in, [](int&& v, const Context&) -> Result<int> { return v * 10; }, o);
  const auto out = drain(st->output());
  EXPECT_TRUE(st->wait().ok());
  ASSERT_EQ(out.size(), 6u);
  int errors = 0;
  for (const auto& r : out) {
    if (r.ok()) continue;
    ++errors;
    EXPECT_EQ(r.code(), StatusCode::kInternal);
    EXPECT_NE(r.status().message().find("no key for 3"), std::string_view::npos) << r.status();
  }
  EXPECT_EQ(errors, 1);
  const StageStats stats = st->stats();
  EXPECT_EQ(stats.items_in, 6u);
  EXPECT_EQ(stats.items_out, 6u);
  EXPECT_EQ(stats.errors, 1u);
}

TEST(StageTest, InvalidOptionsAreClearErrors) {
  Queue<int> in(4);
  auto fn = [](int&& v, const Context&) -> Result<int> { return v; };
  EXPECT_EQ((Stage<int, int>::create(in, fn, opts(0)).code()), StatusCode::kInvalidArgument);
  EXPECT_EQ((Stage<int, int>::create(in, fn, opts(2, Ordering::kWindowed, 0)).code()),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((Stage<int, int>::create(in, fn, opts(2, Ordering::kPerKey)).code()),
            StatusCode::kInvalidArgument);
}

// source -> 3 stages -> stalled sink: memory stays bounded by the queues.
TEST(StageTest, ThreeStagePipelineStaysBoundedWhileTheSinkIsStalled) {
  Queue<int> source(8);
  StageOptions<int> a = opts(2);
  a.output_capacity = 4;
  auto s1 = make(
      source, [](int&& v, const Context&) -> Result<int> { return v + 1; }, a);
  StageOptions<Result<int>> b;
  b.width = 2;
  b.output_capacity = 4;
  auto plus = [](int&& v, const Context&) -> Result<int> { return v * 2; };
  auto s2 = std::move(Stage<Result<int>, int>::create(s1->output(), pass_errors(plus), b)).value();
  StageOptions<Result<int>> c = b;
  c.ordering = Ordering::kStrict;
  auto s3 = std::move(Stage<Result<int>, int>::create(s2->output(), pass_errors(plus), c)).value();

  std::atomic<int> produced{0};
  std::jthread src([&] {
    for (int i = 0; i < 10000; ++i) {
      if (!source.push(int{i}).ok()) return;
      produced++;
    }
    source.close();
  });
  // The sink does not read: the pipeline fills up and the source comes to a
  // stop. Wait for that whole state, not a passing moment of it.
  ASSERT_TRUE(eventually([&] {
    return source.stats().waiting_pushers == 1 && s3->stats().output_depth == 4 &&
           s3->stats().blocked_on_output_s > 0;
  }));
  const int stalled_at = produced.load();
  // Bound: every queue full; in s1 and s2 each worker holds one batch (items
  // or their results), at most what its input holds; in s3 everything taken
  // and not yet written stays within its reorder lag (16 x width).
  const int bound = (8 + 3 * 4) + (2 * 8 + 2 * 4) + 16 * 2;
  EXPECT_LE(stalled_at, bound);
  // Unstall: everything arrives.
  int n = 0;
  for (auto& r : s3->output()) {
    ASSERT_TRUE(r.ok());
    ++n;
  }
  EXPECT_EQ(n, 10000);
  EXPECT_TRUE(s3->wait().ok());
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

TEST(StageTest, BatcherAsTheLastStageGetsEveryValueAndReportsEveryError) {
  Queue<int> source(8);
  StageOptions<int> o;
  o.width = 3;
  auto parse = std::move(Stage<int, int>::create(
                             source,
                             [](int&& v, const Context&) -> Result<int> {
                               if (v % 10 == 0) return Status(StatusCode::kInvalidArgument, "bad");
                               return v;
                             },
                             o))
                   .value();
  std::mutex mu;
  std::vector<int> written;
  BatcherOptions<int> bo;
  bo.max_batch_size = 16;
  bo.queue_depth = 8;
  bo.sink = [&](std::vector<int>&& batch, const Context&) {
    std::lock_guard lock(mu);
    written.insert(written.end(), batch.begin(), batch.end());
    return Status::Ok();
  };
  auto batcher = std::move(Batcher<int>::create(std::move(bo))).value();
  std::jthread src([&] {
    for (int i = 0; i < 1000; ++i) ASSERT_TRUE(source.push(int{i}).ok());
    source.close();
  });
  int errors = 0;
  ASSERT_TRUE(feed_batcher<int>(parse->output(), *batcher, [&](const Status&) { ++errors; }).ok());
  ASSERT_TRUE(batcher->shutdown().ok());
  EXPECT_EQ(errors, 100);
  EXPECT_EQ(written.size(), 900u);
  std::sort(written.begin(), written.end());
  EXPECT_EQ(std::adjacent_find(written.begin(), written.end()), written.end());  // no duplicates
}

}  // namespace
}  // namespace sluice
