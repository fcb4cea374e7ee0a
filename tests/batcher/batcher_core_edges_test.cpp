// The batcher against its specification (../shared/seeds/batcher.md) at edges
// found by a second review of the in-process parts.
#include <gtest/gtest.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "sluice/batcher.h"
#include "testutil/threads.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testutil::eventually;
using testutil::parked_for_good;

std::set<pid_t> task_ids() {
  std::set<pid_t> ids;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') ids.insert(static_cast<pid_t>(std::stol(e->d_name)));
    }
    closedir(d);
  }
  return ids;
}

std::uint64_t reason(const BatcherStats& s, FlushReason r) {
  return s.flushes_by_reason[static_cast<std::size_t>(r)];
}

// The time trigger counts from the add of a batch's first item (section 3).
// add_batch with no items found the run loop parked and recorded its add
// time as a start time for the loop, and, accepted, left it behind: the next
// batch, however much later its first item came, started its clock at that
// empty add and was flushed at once, reason "time", with none of the delay
// passed. (After shutdown the empty add also said kOk, where every add says
// kClosed, E1.)
TEST(BatcherCoreEdgesTest, AnEmptyAddBatchLeavesNoStartTimeForTheNextBatch) {
  (void)testutil::thread_baseline();         // runtime helper threads exist before we look
  ManualClock clock(Clock::time_point(1h));  // not 0: the batcher stores a 0 add time as 1
  std::atomic<int> calls{0};
  BatcherOptions<int> o;
  o.max_batch_size = 100;
  o.max_batch_delay = 10ms;
  o.clock = &clock;
  o.sink = [&](std::vector<int>&&, const Context&) {
    calls++;
    return Status::Ok();
  };
  const std::set<pid_t> before = task_ids();
  auto b = std::move(Batcher<int>::create(std::move(o))).value();
  pid_t loop = 0;
  ASSERT_TRUE(eventually([&] {  // the run loop, parked on the empty input
    for (pid_t t : task_ids()) {
      if (before.count(t) == 0 && parked_for_good(t)) {
        loop = t;
        return true;
      }
    }
    return false;
  }));
  std::vector<int> none;
  EXPECT_TRUE(b->add_batch(std::span<int>(none)).ok());
  clock.advance(10ms);  // a whole delay passes with nothing in the batcher
  ASSERT_TRUE(b->add(2).ok());
  // The loop takes item 2, checks its triggers and parks again.
  ASSERT_TRUE(eventually([&] {
    const BatcherStats s = b->stats();
    return s.queued == 0 && s.enqueued == 1 && parked_for_good(loop);
  }));
  BatcherStats s = b->stats();
  EXPECT_EQ(reason(s, FlushReason::kTime), 0u) << "flushed with none of its delay passed";
  EXPECT_EQ(s.buffered, 1u);
  EXPECT_EQ(calls.load(), 0);
  clock.advance(10ms);  // now the delay has passed since item 2's add
  ASSERT_TRUE(eventually([&] { return b->stats().flushed_ok == 1; }));
  EXPECT_EQ(reason(b->stats(), FlushReason::kTime), 1u);

  ASSERT_TRUE(b->shutdown().ok());
  EXPECT_EQ(b->add_batch(std::span<int>(none)).code(), StatusCode::kClosed);
}

// max_batch_size has no upper bound (C1 asks only > 0), and a batcher that
// should flush on time, bytes or flush() alone sets it out of reach. The run
// loop reserved max_batch_size items for every batch (and for its staging
// vector): std::length_error (or bad_alloc) on the batcher's own thread,
// std::terminate, the process gone with the items in it.
TEST(BatcherCoreEdgesTest, AnOutOfReachMaxBatchSizeIsNotReservedUpFront) {
  std::atomic<std::uint64_t> written{0};
  BatcherOptions<int> o;
  o.max_batch_size = std::numeric_limits<std::size_t>::max();
  o.max_batch_delay = 1h;
  o.queue_depth = 8;
  o.sink = [&](std::vector<int>&& batch, const Context&) {
    written += batch.size();
    return Status::Ok();
  };
  auto b = std::move(Batcher<int>::create(std::move(o))).value();
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(b->add(int{i}).ok());
  ASSERT_TRUE(b->flush().ok());
  EXPECT_EQ(written.load(), 20u);
  ASSERT_TRUE(b->add(20).ok());
  ASSERT_TRUE(b->shutdown().ok());
  EXPECT_EQ(written.load(), 21u);
  EXPECT_EQ(b->stats().flushes_by_reason[static_cast<std::size_t>(FlushReason::kShutdown)], 1u);
}

// item_bytes is the user's function: one that throws for an item (a size it
// cannot tell) left the run loop's thread with the exception and ended the
// process, with every accepted item in it. The item is taken as
// max_batch_bytes (flushed alone: no batch passes the limit on a size not
// known), and the logger hears why; nothing is lost.
TEST(BatcherCoreEdgesTest, AnItemBytesThatThrowsFlushesTheItemAloneAndSaysWhy) {
  std::mutex mu;
  std::vector<std::vector<int>> batches;
  std::vector<std::string> heard;
  BatcherOptions<int> o;
  o.max_batch_size = 100;
  o.max_batch_delay = 1h;
  o.max_batch_bytes = 10;
  o.item_bytes = [](const int& i) -> std::size_t {
    if (i == 2) throw std::runtime_error("no size for 2");
    return 1;
  };
  o.sink = [&](std::vector<int>&& batch, const Context&) {
    std::lock_guard l(mu);
    batches.push_back(std::move(batch));
    return Status::Ok();
  };
  o.logger = [&](const BatcherEvent& e) {
    if (e.kind != BatcherEvent::Kind::kItemBytesFailed) return;
    std::lock_guard l(mu);
    heard.emplace_back(e.status.message());
  };
  auto b = std::move(Batcher<int>::create(std::move(o))).value();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(b->add(int{i}).ok());
  ASSERT_TRUE(b->shutdown().ok());
  std::lock_guard l(mu);
  EXPECT_EQ(batches, (std::vector<std::vector<int>>{{0, 1}, {2}, {3, 4}}));
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_NE(heard[0].find("no size for 2"), std::string::npos) << heard[0];
  const BatcherStats st = b->stats();
  EXPECT_EQ(st.flushed_ok, 5u);
}

// flush() "waits until [the items added before it] and any batch in flight
// have been through the sink" and "returns the first sink error among
// them". A batch already in the sink when flush() was called, holding an
// item added before it, failed: flush() said kOk, because the run loop
// cleared the error of earlier batches when it took the request, after that
// batch had finished.
TEST(BatcherCoreEdgesTest, FlushReportsTheErrorOfTheBatchInFlightWhenItWasCalled) {
  std::mutex mu;
  std::condition_variable cv;
  bool in_sink = false, release = false;
  std::atomic<int> calls{0};
  BatcherOptions<int> o;
  o.max_batch_size = 1;  // item 1 goes to the sink at once
  o.max_batch_delay = 1h;
  o.sink = [&](std::vector<int>&&, const Context&) {
    if (calls++ > 0) return Status::Ok();
    std::unique_lock l(mu);
    in_sink = true;
    cv.notify_all();
    cv.wait(l, [&] { return release; });
    return Status(StatusCode::kIOError, "batch 1 failed");
  };
  auto b = std::move(Batcher<int>::create(std::move(o))).value();
  ASSERT_TRUE(b->add(1).ok());
  {
    std::unique_lock l(mu);
    cv.wait(l, [&] { return in_sink; });
  }
  std::atomic<pid_t> tid{0};
  Status flushed;
  std::thread flusher([&] {
    tid = gettid();
    flushed = b->flush();
  });
  // flush() has queued its request and sleeps until the loop answers it.
  ASSERT_TRUE(eventually([&] { return tid != 0 && parked_for_good(tid); }));
  {
    std::lock_guard l(mu);
    release = true;
  }
  cv.notify_all();
  flusher.join();
  EXPECT_EQ(flushed.code(), StatusCode::kIOError) << flushed;
  EXPECT_EQ(b->stats().flushes_failed, 1u);
  ASSERT_TRUE(b->add(2).ok());
  EXPECT_TRUE(b->flush().ok());  // that error was reported once; batch 2 went through
  ASSERT_TRUE(b->shutdown().ok());
}

}  // namespace
}  // namespace sluice
