// Wake-ups, stops and thread starts at the edges of select.h, queue.h,
// admission.h, stage.h, run_pipeline.h and batch_stage.h. Each test failed
// on the code before its fix.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "sluice/admission.h"
#include "sluice/batch_stage.h"
#include "sluice/limiter.h"
#include "sluice/run_pipeline.h"
#include "sluice/select.h"
#include "sluice/stage.h"
#include "testutil/threads.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testutil::eventually;

pid_t this_tid() { return static_cast<pid_t>(::syscall(SYS_gettid)); }

using testutil::parked_for_good;

// Voluntary context switches of thread tid (each park that sleeps is one).
long voluntary_switches(pid_t tid) {
  std::FILE* f = std::fopen(("/proc/self/task/" + std::to_string(tid) + "/status").c_str(), "r");
  if (f == nullptr) return -1;
  char line[256];
  long v = -1;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1) break;
  }
  std::fclose(f);
  return v;
}

// Runs f when the scope ends: declared after the threads' vector, so that a
// test leaving early (a failed ASSERT) lets its threads go before the joins.
struct OnExit {
  std::function<void()> f;
  ~OnExit() { f(); }
};

// ---- Selector ----

// Two threads parked in Selector::pull on {a, b}, s1 first (the head of
// a's wait list). A push on `a` wakes s1; another thread takes the item
// first. s1 finds nothing, and await_any's leave(false) passes the wake-up it
// could not use on to `a`'s next waiter, s2, which finds nothing either and
// passes it back to s1: the two bounce one wake-up between them (thousands
// of futex wake-ups, while both queues stay empty) until the hand-on happens
// to land while the other is between lists. "parked on every queue's wait
// list at once (no polling, no CPU)". Queue::pull's await() does not pass on
// a wake-up it found nothing for; await_any should not either (only one
// received on a list whose condition it did not consume while it *did*
// take something, or when cancelled).
// Deterministic part: s2 was never owed a wake-up, so it must not wake at all.
TEST(SelectorWakeUpTest, AWakeUpAnotherThreadUsedIsNotBouncedBetweenParkedSelectors) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    Queue<int> a(4), b(4);
    Selector<int> sel({&a, &b});
    std::atomic<pid_t> t1{0}, t2{0};
    std::atomic<int> got_item{0};
    std::vector<std::jthread> threads;
    OnExit cleanup{[&] {
      a.close();
      b.close();
    }};
    auto body = [&](std::atomic<pid_t>& tid) {
      tid = this_tid();
      auto r = sel.pull();
      if (r.ok()) got_item++;
    };
    threads.emplace_back([&] { body(t1); });
    ASSERT_TRUE(eventually([&] { return t1 != 0 && parked_for_good(t1); }));
    threads.emplace_back([&] { body(t2); });
    ASSERT_TRUE(eventually([&] {
      return t2 != 0 && parked_for_good(t2) && a.waiting_pullers() == 2 && b.waiting_pullers() == 2;
    }));
    const long s1_before = voluntary_switches(t1);
    const long s2_before = voluntary_switches(t2);
    ASSERT_TRUE(a.push(1).ok());        // wakes s1, the head of a's list
    Result<int> stolen = a.try_pull();  // races s1: retry if s1 won
    if (!stolen.ok()) continue;
    // s1 wakes, finds `a` empty, and should park again for good.
    ASSERT_TRUE(eventually([&] { return voluntary_switches(t1) > s1_before; }));
    const long total_before = voluntary_switches(t1) + voluntary_switches(t2);
    std::this_thread::sleep_for(100ms);  // a measuring window, not a synchronisation
    const long total_after = voluntary_switches(t1) + voluntary_switches(t2);
    ASSERT_TRUE(eventually([&] { return parked_for_good(t1) && parked_for_good(t2); }));
    EXPECT_EQ(voluntary_switches(t2), s2_before)
        << "s2 was woken although no item arrived for it; the two idle selectors then slept "
        << (total_after - total_before) << " times in 100 ms with both queues empty";
    EXPECT_EQ(got_item.load(), 0);
    return;
  }
  GTEST_SKIP() << "the woken selector always took the item first";
}

// ---- A wake-up spent on a push still mid-way ----

// An item whose move into the ring can be held: the push has claimed its
// slot (tail advanced) but not yet published it.
std::atomic<bool> g_hold_armed{false};
std::atomic<bool> g_in_held_move{false};
std::atomic<bool> g_release_held_move{false};
struct Holdable {
  int v = 0;
  bool hold = false;
  Holdable() = default;
  Holdable(int value, bool h) : v(value), hold(h) {}
  Holdable(Holdable&& o) noexcept : v(o.v), hold(o.hold) {
    if (o.hold && g_hold_armed.exchange(false)) {
      g_in_held_move = true;
      while (!g_release_held_move.load()) std::this_thread::yield();
    }
  }
  Holdable& operator=(Holdable&& o) noexcept {
    v = o.v;
    hold = o.hold;
    return *this;
  }
};

// Pullers c1 (first: the head of the wait list) and c2 are parked. Producer
// p1 claims slot k and is held in the item's move; producer p2 pushes into
// k + 1 and its one notify_one wakes c1. c1's try_pop looks at the head,
// slot k, which is "empty, or a push is mid-way (it will wake us)": it finds
// nothing and parks again (await() passes nothing on), at the tail of the
// list. p1 then publishes k, and its one notify_one wakes the head, c2,
// which takes k. Two items, two wake-ups, but one was spent on a slot that
// could not be taken: item k + 1 stays in the queue with c1 parked beside it
// for good (until some later push). Queue::pull and Selector::pull both
// wait this way.
TEST(QueueWakeUpTest, AWakeUpSpentOnAPushStillMidWayIsNotLost) {
  g_hold_armed = false;
  g_in_held_move = false;
  g_release_held_move = false;
  Queue<Holdable> q(8);
  std::vector<std::jthread> threads;
  OnExit cleanup{[&] {
    g_release_held_move = true;
    q.close();
  }};
  std::atomic<pid_t> t1{0}, t2{0};
  std::atomic<int> taken{0};
  auto consumer = [&](std::atomic<pid_t>& tid) {
    tid = this_tid();
    if (q.pull().ok()) taken++;
  };
  threads.emplace_back([&] { consumer(t1); });
  ASSERT_TRUE(eventually([&] { return t1 != 0 && parked_for_good(t1); }));
  threads.emplace_back([&] { consumer(t2); });
  ASSERT_TRUE(eventually([&] { return t2 != 0 && parked_for_good(t2); }));
  ASSERT_EQ(q.waiting_pullers(), 2u);
  const long c1_switches = voluntary_switches(t1);

  g_hold_armed = true;
  std::atomic<bool> p1_done{false};
  threads.emplace_back([&] {
    EXPECT_TRUE(q.push(Holdable(1, true)).ok());
    p1_done = true;
  });
  ASSERT_TRUE(eventually([&] { return g_in_held_move.load(); }));  // slot k claimed
  ASSERT_TRUE(q.push(Holdable(2, false)).ok());                    // slot k + 1, wakes c1
  // c1 woke, found the head slot mid-way, and parked again for good.
  ASSERT_TRUE(eventually([&] { return voluntary_switches(t1) > c1_switches; }));
  ASSERT_TRUE(eventually([&] { return parked_for_good(t1) && parked_for_good(t2); }));
  g_release_held_move = true;  // p1 publishes k and wakes one puller
  ASSERT_TRUE(eventually([&] { return p1_done.load(); }));
  EXPECT_TRUE(eventually([&] { return taken.load() == 2; }, 3s))
      << "taken " << taken.load() << " of 2; items left in the queue: " << q.approx_size()
      << ", pullers parked: " << q.waiting_pullers();
  q.close();
}

// The same on the push side: the queue is full with [a, b]. Pushers w1 (the
// head) and w2 are parked. Consumer c1 claims a and is held in its move out
// (slot k not yet released); the main thread pulls b, and its one
// notify_one wakes w1, whose try_push finds slot k "full, or a pop is
// mid-way (it will wake us)" and parks again at the tail. c1 then releases
// slot k and wakes the head, w2, which fills it. w1 stays parked for good
// beside the free slot k + 1.
TEST(QueueWakeUpTest, AWakeUpSpentOnAPopStillMidWayIsNotLost) {
  g_hold_armed = false;
  g_in_held_move = false;
  g_release_held_move = false;
  Queue<Holdable> q(2);
  std::vector<std::jthread> threads;
  OnExit cleanup{[&] {
    g_release_held_move = true;
    q.close();
  }};
  ASSERT_TRUE(q.push(Holdable(1, true)).ok());   // a: held on its way out
  ASSERT_TRUE(q.push(Holdable(2, false)).ok());  // b
  std::atomic<pid_t> t1{0}, t2{0};
  std::atomic<int> pushed{0};
  auto producer = [&](std::atomic<pid_t>& tid, int v) {
    tid = this_tid();
    if (q.push(Holdable(v, false)).ok()) pushed++;
  };
  threads.emplace_back([&] { producer(t1, 3); });
  ASSERT_TRUE(eventually([&] { return t1 != 0 && parked_for_good(t1); }));
  threads.emplace_back([&] { producer(t2, 4); });
  ASSERT_TRUE(eventually([&] { return t2 != 0 && parked_for_good(t2); }));
  ASSERT_EQ(q.stats().waiting_pushers, 2u);
  const long w1_switches = voluntary_switches(t1);

  g_hold_armed = true;
  std::atomic<bool> c1_done{false};
  threads.emplace_back([&] {
    EXPECT_EQ(q.pull()->v, 1);
    c1_done = true;
  });
  ASSERT_TRUE(eventually([&] { return g_in_held_move.load(); }));  // slot k claimed
  ASSERT_EQ(q.pull()->v, 2);                                       // frees k + 1, wakes w1
  ASSERT_TRUE(eventually([&] { return voluntary_switches(t1) > w1_switches; }));
  ASSERT_TRUE(eventually([&] { return parked_for_good(t1) && parked_for_good(t2); }));
  g_release_held_move = true;  // c1 releases slot k and wakes one pusher
  ASSERT_TRUE(eventually([&] { return c1_done.load(); }));
  EXPECT_TRUE(eventually([&] { return pushed.load() == 2; }, 3s))
      << "pushed " << pushed.load() << " of 2; free slots: " << 2 - q.approx_size()
      << ", pushers parked: " << q.stats().waiting_pushers;
  q.close();
}

// ---- Admission ----

// "Cancellation: acquire returns kCancelled / kDeadlineExceeded and holds
// nothing when its Context ends first." A waiter whose stop is requested
// before a place is freed still returns a Permit: the stop only wakes it,
// and condition_variable_any::wait(lock, token, pred) then returns pred(),
// whose try_take() takes the place freed meanwhile.
TEST(AdmissionStopTest, AnAcquireStoppedBeforeAPlaceIsFreedHoldsNothing) {
  int permits_after_stop = 0;
  for (int i = 0; i < 200; ++i) {
    Admission admit(1);
    auto held = admit.acquire();
    ASSERT_TRUE(held.ok());
    std::stop_source stop;
    std::atomic<pid_t> tid{0};
    Result<Permit> got = StatusCode::kInternal;
    std::jthread waiter([&] {
      tid = this_tid();
      got = admit.acquire(Context(stop.get_token()));
    });
    ASSERT_TRUE(eventually([&] { return tid != 0 && parked_for_good(tid); }));
    stop.request_stop();  // the Context ends first ...
    held->release();      // ... then a place is freed
    waiter.join();
    if (got.ok()) ++permits_after_stop;
  }
  EXPECT_EQ(permits_after_stop, 0) << "of 200 acquires whose stop came before the free place, "
                                   << permits_after_stop << " returned a Permit";
}

// ---- Stage: fail-fast (and the adaptive gate) keep reading after the stop ----

// kFailFast: "the first error stops the stage ... The stage then stops
// reading" (docs/pipeline.md). The worker whose fn failed requests the stop
// in apply_error_mode(), but `stopped` was computed before that, so it loops
// back to take(), whose try_pull_many() does not look at the token: it takes
// the next item from the input and runs fn on it (with a stopped Context),
// then drops the result. One item is consumed and lost after the stop, and
// fn runs once more. The adaptive gate has the same hole: enter()'s
// condition_variable_any::wait(lock, token, pred) returns pred() once the
// token has fired, so a free place lets the worker in after the stop.
void FailFastStopsReading(bool adaptive) {
  Queue<int> in(8);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(in.push(int{i}).ok());  // 0 fails
  in.close();
  StageOptions<int> o;
  o.width = 1;
  o.errors = ErrorMode::kFailFast;
  o.adaptive.enabled = adaptive;
  std::atomic<int> calls{0};
  auto st = Stage<int, int>::create(
      in,
      [&](int&& v, const Context&) -> Result<int> {
        calls++;
        if (v == 0) return Status(StatusCode::kIOError, "item 0");
        return v;
      },
      o);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ((*st)->wait().code(), StatusCode::kIOError);
  EXPECT_EQ(calls.load(), 1) << "fn ran on an item taken after the fail-fast stop";
  EXPECT_EQ((*st)->stats().items_in, 1u);
  EXPECT_EQ(in.approx_size(), 2u) << "items 1 and 2 should be left unread in the input";
}
TEST(StageStopTest, FailFastTakesNoItemAfterItsStop) { FailFastStopsReading(false); }
TEST(StageStopTest, AdaptiveFailFastTakesNoItemAfterItsStop) { FailFastStopsReading(true); }

// ---- feed_batcher ----

// "Blocking: until `in` is closed and drained, ctx ends, or the batcher shuts
// down. Returns ... kClosed (the batcher shut down first ...)". A
// feed_batcher waiting in in.pull() for the next result never learns of the
// shutdown: it waits on until some item arrives (for ever on an idle stage).
TEST(FeedBatcherTest, ReturnsWhenTheBatcherShutsDownWhileItWaitsForInput) {
  Queue<Result<int>> in(4);
  BatcherOptions<int> bo;
  bo.sink = [](std::vector<int>&&, const Context&) { return Status::Ok(); };
  auto b = Batcher<int>::create(std::move(bo));
  ASSERT_TRUE(b.ok()) << b.status();
  std::atomic<bool> done{false};
  Status ret;
  std::jthread feeder([&] {
    ret = feed_batcher<int>(in, **b, nullptr);
    done = true;
  });
  ASSERT_TRUE(eventually([&] { return in.waiting_pullers() == 1; }));
  ASSERT_TRUE((*b)->shutdown({}).ok());
  EXPECT_TRUE(eventually([&] { return done.load(); }, 3s))
      << "feed_batcher still waits on its input after the batcher shut down";
  in.close();  // let it go
  feeder.join();
  EXPECT_EQ(ret.code(), StatusCode::kClosed);
}

// ---- A helper thread that cannot start ----

// run_pipeline starts width - 1 helpers with std::thread; when one cannot
// start (EAGAIN: a pids cgroup, RLIMIT_NPROC, threads-max), emplace_back
// throws std::system_error while the helpers already started are joinable
// and running on `run`: the unwinding destroys a joinable std::thread, and
// std::terminate aborts the process. The contract: "run_pipeline returns ...
// always with every helper joined"; errors are Status values. Stage::create
// has the same hole (its constructor starts the workers one by one).
// The child drops to an unprivileged uid (root ignores RLIMIT_NPROC) and
// allows itself one more thread; any orderly return (an error status or a
// caught exception after the helpers were joined) exits 0, an abort does not.
void limit_threads_to_one_more() {
  if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
  const rlimit rl{2, 2};  // this process counts one: one more thread may start
  if (setrlimit(RLIMIT_NPROC, &rl) != 0) _exit(4);
}
void run_pipeline_child() {
  limit_threads_to_one_more();
  int n = 0;
  PipelineOptions o;
  o.width = 4;
  try {
    auto r = run_pipeline(
        [&]() -> std::optional<int> {
          if (n < 1000) return n++;
          return std::nullopt;
        },
        [](int&& v, const Context&) -> Result<int> { return v; },
        [](Result<int>&&) { return Status::Ok(); }, o);
    std::fprintf(stderr, "returned %s\n", r.status().to_string().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "threw %s\n", e.what());
  }
  _exit(0);
}
void stage_child() {
  Queue<int> in(4);
  in.close();
  limit_threads_to_one_more();
  StageOptions<int> o;
  o.width = 4;
  try {
    auto st = Stage<int, int>::create(
        in, [](int&& v, const Context&) -> Result<int> { return v; }, o);
    std::fprintf(stderr, "returned %s\n", st.status().to_string().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "threw %s\n", e.what());
  }
  _exit(0);
}
// Root only (it drops to uid 65534, whose RLIMIT_NPROC the kernel enforces);
// not under the sanitizers, whose runtimes start threads of their own.
void skip_unless_root_and_plain() {
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "not under a sanitizer: its runtime has threads of its own";
#endif
  if (geteuid() != 0) GTEST_SKIP() << "needs root to drop to an unprivileged uid";
}
TEST(RunPipelineThreadStartDeathTest, AHelperThatCannotStartDoesNotTerminateTheProcess) {
  skip_unless_root_and_plain();
  if (::testing::Test::IsSkipped()) return;
  GTEST_FLAG_SET(death_test_style, "fast");
  EXPECT_EXIT(run_pipeline_child(), ::testing::ExitedWithCode(0), "");
}
TEST(StageThreadStartDeathTest, AWorkerThatCannotStartDoesNotTerminateTheProcess) {
  skip_unless_root_and_plain();
  if (::testing::Test::IsSkipped()) return;
  GTEST_FLAG_SET(death_test_style, "fast");
  EXPECT_EXIT(stage_child(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace sluice
