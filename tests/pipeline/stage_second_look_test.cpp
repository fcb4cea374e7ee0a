// A second look at Stage (../shared/seeds/fan-out-stage.md): guarantees that
// earlier tests left unchecked, each with the case that broke it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "sluice/stage.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using testutil::eventually;

// True once thread `tid` has exited (its /proc entry is gone).
bool exited(pid_t tid) {
  struct stat st {};
  return stat(("/proc/self/task/" + std::to_string(tid)).c_str(), &st) != 0;
}

// First-success: the first success waits for room in a full output while
// another worker's item fails. That worker must not stop the stage under
// the waiting success: it was lost and wait() still said kOk ("kOk if a
// success was written").
TEST(StageSecondLook, FirstSuccessWaitingForRoomIsNotStoppedByAnotherWorker) {
  Queue<int> in(8);
  std::atomic<Stage<int, int>*> stage{nullptr};
  std::atomic<pid_t> failing_tid{0};
  StageOptions<int> o;
  o.width = 2;
  o.errors = ErrorMode::kFirstSuccess;
  o.output_capacity = 1;
  auto fn = [&](int&& x, const Context&) -> Result<int> {
    if (x == 1) return 1;  // the success
    failing_tid.store(gettid());
    // The failure: returns once the success waits for room in the output.
    EXPECT_TRUE(eventually([&] {
      Stage<int, int>* s = stage.load();
      return s != nullptr && s->stats().blocked_on_output_s > 0;
    }));
    return Status(StatusCode::kInternal, "replica down");
  };
  auto r = Stage<int, int>::create(in, fn, o);
  ASSERT_TRUE(r.ok()) << r.status();
  auto st = std::move(r).value();
  ASSERT_TRUE(st->output().push(Result<int>(0)).ok());  // fills the output
  stage.store(st.get());
  ASSERT_TRUE(in.push(1).ok());
  ASSERT_TRUE(in.push(2).ok());
  in.close();
  // Let the failing worker finish (the input is drained: it exits) before
  // making room.
  ASSERT_TRUE(eventually([&] { return failing_tid.load() != 0 && exited(failing_tid.load()); }));
  std::vector<int> got;
  for (auto& res : st->output()) {
    ASSERT_TRUE(res.ok()) << res.status();
    got.push_back(*res);
  }
  EXPECT_EQ(st->wait(), Status::Ok());
  EXPECT_EQ(got, (std::vector<int>{0, 1}));
}

// First-success: a cancel from outside while the success waits for room:
// it is never written, so wait() says kCancelled, not kOk.
TEST(StageSecondLook, FirstSuccessCancelledBeforeItsWriteReportsCancelled) {
  Queue<int> in(8);
  StageOptions<int> o;
  o.width = 1;
  o.errors = ErrorMode::kFirstSuccess;
  o.output_capacity = 1;
  auto r = Stage<int, int>::create(
      in, [](int&& x, const Context&) -> Result<int> { return x; }, o);
  ASSERT_TRUE(r.ok()) << r.status();
  auto st = std::move(r).value();
  ASSERT_TRUE(st->output().push(Result<int>(0)).ok());  // fills the output
  ASSERT_TRUE(in.push(1).ok());
  in.close();
  ASSERT_TRUE(eventually([&] { return st->stats().blocked_on_output_s > 0; }));
  st->cancel();
  EXPECT_EQ(st->wait().code(), StatusCode::kCancelled);
  std::vector<int> got;
  for (auto& res : st->output()) got.push_back(*res);
  EXPECT_EQ(got, (std::vector<int>{0}));
}

// Adaptive: a failed call's latency is not the service's pace. A burst of
// instant failures (connection refused) made the baseline microseconds, so
// every later window of real calls was "slow": the limit fell to its floor
// and stayed there for hundreds of calls (the baseline follows a slower
// pace only at the floor, by 5% a window).
TEST(StageSecondLook, AimdLimitIgnoresFastFailures) {
  AdaptiveConcurrency a;
  a.enabled = true;
  a.initial = 8;
  detail::AimdLimit limit(a, 8);
  for (int i = 0; i < 64; ++i) limit.observe(1e-6, /*ok=*/false);
  for (int i = 0; i < 64; ++i) limit.observe(1e-3);
  EXPECT_EQ(limit.limit(), 8u);
  EXPECT_EQ(limit.decreases(), 0u);
  EXPECT_DOUBLE_EQ(limit.baseline(), 1e-3);
  // A failure slower than the baseline (a timeout) still counts: overload.
  for (int i = 0; i < 64; ++i) limit.observe(10e-3, /*ok=*/false);
  EXPECT_LT(limit.limit(), 8u);
}

TEST(StageSecondLook, AdaptiveStageKeepsItsLimitAfterABurstOfThrowingCalls) {
  Queue<int> in(64);
  StageOptions<int> o;
  o.width = 4;
  o.adaptive.enabled = true;
  o.adaptive.initial = 4;
  auto r = Stage<int, int>::create(
      in,
      [](int&& x, const Context&) -> Result<int> {
        if (x < 32) throw std::runtime_error("connection refused");
        std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the service's work
        return x;
      },
      o);
  ASSERT_TRUE(r.ok()) << r.status();
  auto st = std::move(r).value();
  for (int i = 0; i < 64; ++i) ASSERT_TRUE(in.push(int{i}).ok());
  in.close();
  std::size_t ok = 0;
  for (auto& res : st->output()) ok += res.ok() ? 1 : 0;
  EXPECT_EQ(st->wait(), Status::Ok());
  EXPECT_EQ(ok, 32u);
  // Before: 4 -> 3 -> 2 -> 1 over the windows of real calls (all "slow"
  // against a baseline of microseconds). Now the baseline is theirs; at
  // most scheduling noise moves it.
  EXPECT_GE(st->stats().concurrency_limit, 2u);
}

// Per-key: items_in is "items taken from the input". The dispatcher takes
// them and parks them in its workers' queues; they were counted only when a
// worker took one, so items the stage held (and a cancel dropped) were in
// no counter at all: not in the input's depth, not in items_in.
TEST(StageSecondLook, PerKeyCountsItemsWhenTakenFromTheInput) {
  Queue<int> in(16);
  StageOptions<int> o;
  o.width = 1;
  o.ordering = Ordering::kPerKey;
  o.key = [](const int& x) { return static_cast<std::size_t>(x); };
  std::mutex mu;
  std::condition_variable_any cv;
  auto r = Stage<int, int>::create(
      in,
      [&](int&& x, const Context& ctx) -> Result<int> {
        std::unique_lock lock(mu);
        cv.wait(lock, ctx.token(), [] { return false; });  // until the stage stops
        return x;
      },
      o);
  ASSERT_TRUE(r.ok()) << r.status();
  auto st = std::move(r).value();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(in.push(int{i}).ok());
  ASSERT_TRUE(eventually([&] { return in.stats().pulled == 5 && st->stats().busy_workers == 1; }));
  const StageStats s = st->stats();
  EXPECT_EQ(s.input_depth, 0u);
  EXPECT_EQ(s.items_in, 5u);
  st->cancel();
  EXPECT_EQ(st->wait().code(), StatusCode::kCancelled);
  EXPECT_EQ(st->stats().items_in, 5u);  // all dropped by the cancel
  EXPECT_EQ(st->stats().items_out, 0u);
}

// Per-key: the dispatcher writes a key error's result itself. It kept its
// wait for room in worker 0's counters, so when worker 0 waited for room
// too, whichever finished first cleared the wait still in progress of the
// other (one start time for two waits): stats() stopped showing that stall.
TEST(StageSecondLook, PerKeyDispatcherAndWorkerWaitingForRoomAreBothShown) {
  Queue<int> in(16);
  StageOptions<int> o;
  o.width = 1;
  o.ordering = Ordering::kPerKey;
  o.output_capacity = 1;
  o.key = [](const int& x) -> std::size_t {
    if (x < 0) throw std::runtime_error("no key");
    return static_cast<std::size_t>(x);
  };
  auto r = Stage<int, int>::create(
      in, [](int&& x, const Context&) -> Result<int> { return x; }, o);
  ASSERT_TRUE(r.ok()) << r.status();
  auto st = std::move(r).value();
  Queue<Result<int>>& out = st->output();
  ASSERT_TRUE(out.push(Result<int>(0)).ok());  // fills the output
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(in.push(1).ok());  // worker 0 waits for room
  ASSERT_TRUE(eventually([&] { return out.stats().waiting_pushers == 1; }));
  ASSERT_TRUE(in.push(-1).ok());  // its key throws: the dispatcher waits for room
  ASSERT_TRUE(eventually([&] { return out.stats().waiting_pushers == 2; }));
  ASSERT_TRUE(out.pull().ok());  // room for one of them
  ASSERT_TRUE(eventually([&] { return out.stats().waiting_pushers == 1; }));
  // The first one's wait, at most this long, may still be on its way into
  // the total; the other's wait goes on, so the total grows past it.
  const double first_wait =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double s1 = st->stats().blocked_on_output_s;
  EXPECT_TRUE(eventually([&] { return st->stats().blocked_on_output_s > s1 + first_wait + 0.05; },
                         std::chrono::seconds(5)));
  st->cancel();
  EXPECT_EQ(st->wait().code(), StatusCode::kCancelled);
}

}  // namespace
}  // namespace sluice
