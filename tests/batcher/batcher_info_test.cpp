// Per-flush metadata (FlushInfo), sink retries (max_attempts) and the logger
// hook: batcher.md's optional Logger and its v1.2 "per-flush metadata".
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sluice/batcher.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testutil::eventually;

struct Call {
  std::vector<int> items;
  FlushInfo info;
};

// Records every sink call with its FlushInfo; `fail_until` attempts of each
// batch fail (attempt <= fail_until), or throw when `throw_instead`.
struct InfoSink {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Call> calls;
  std::uint32_t fail_until = 0;
  bool throw_instead = false;

  BatchSinkWithInfo<int> sink() {
    return [this](std::vector<int>&& batch, const FlushInfo& info, const Context&) -> Status {
      {
        std::lock_guard lock(mu);
        calls.push_back({batch, info});
        cv.notify_all();
      }
      if (info.attempt <= fail_until) {
        if (throw_instead) throw std::runtime_error("disk on fire");
        return {StatusCode::kIOError, "write failed"};
      }
      return Status::Ok();
    };
  }
  std::vector<Call> snapshot() {
    std::lock_guard lock(mu);
    return calls;
  }
};

struct Events {
  std::mutex mu;
  std::vector<BatcherEvent> events;
  std::vector<std::string> names;  // e.name outlives nothing: copy it
  std::vector<std::thread::id> threads;

  BatcherLogger logger() {
    return [this](const BatcherEvent& e) {
      std::lock_guard lock(mu);
      events.push_back(e);
      names.emplace_back(e.name);
      threads.push_back(std::this_thread::get_id());
    };
  }
  std::vector<BatcherEvent> of(BatcherEvent::Kind kind) {
    std::lock_guard lock(mu);
    std::vector<BatcherEvent> out;
    for (const auto& e : events) {
      if (e.kind == kind) out.push_back(e);
    }
    return out;
  }
};

std::unique_ptr<Batcher<int>> make(BatcherOptions<int> o) {
  auto r = Batcher<int>::create(std::move(o));
  EXPECT_TRUE(r.ok()) << r.status();
  return std::move(r).value();
}

TEST(BatcherInfoTest, EachFlushSaysWhyItsSequenceAndHowLongTheOldestItemWaited) {
  InfoSink sink;
  ManualClock clock;
  BatcherOptions<int> o;
  o.max_batch_size = 3;
  o.max_batch_delay = 50ms;
  o.sink_with_info = sink.sink();
  o.clock = &clock;
  auto b = make(o);

  ASSERT_TRUE(b->add(1).ok());
  ASSERT_TRUE(eventually([&] { return b->stats().buffered == 1; }));
  clock.advance(20ms);
  ASSERT_TRUE(b->add(2).ok());
  ASSERT_TRUE(b->add(3).ok());  // size trigger
  ASSERT_TRUE(eventually([&] { return sink.snapshot().size() == 1; }));

  ASSERT_TRUE(b->add(4).ok());
  ASSERT_TRUE(eventually([&] { return b->stats().buffered == 1; }));
  clock.advance(60ms);  // time trigger
  ASSERT_TRUE(eventually([&] { return sink.snapshot().size() == 2; }));

  ASSERT_TRUE(b->add(5).ok());
  ASSERT_TRUE(b->flush().ok());  // manual
  ASSERT_TRUE(b->add(6).ok());
  ASSERT_TRUE(b->shutdown().ok());  // shutdown

  const auto calls = sink.snapshot();
  ASSERT_EQ(calls.size(), 4u);
  const FlushReason want[] = {FlushReason::kSize, FlushReason::kTime, FlushReason::kManual,
                              FlushReason::kShutdown};
  for (std::size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].info.reason, want[i]) << i;
    EXPECT_EQ(calls[i].info.seq, i + 1);
    EXPECT_EQ(calls[i].info.attempt, 1u);
    EXPECT_EQ(calls[i].info.items, calls[i].items.size());
    EXPECT_EQ(calls[i].info.bytes, 0u);  // no item_bytes
  }
  EXPECT_EQ(calls[0].items, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(calls[0].info.oldest_wait, 20ms);  // the manual clock: exact
  EXPECT_EQ(calls[1].info.oldest_wait, 60ms);
  EXPECT_EQ(calls[2].info.oldest_wait, 0ms);  // the clock did not move
}

TEST(BatcherInfoTest, BytesAreReportedWhenTheByteTriggerIsOn) {
  InfoSink sink;
  BatcherOptions<int> o;
  o.max_batch_size = 100;
  o.max_batch_delay = 1h;
  o.max_batch_bytes = 30;
  o.item_bytes = [](const int& v) { return static_cast<std::size_t>(v); };
  o.sink_with_info = sink.sink();
  auto b = make(o);
  for (int v : {10, 10, 10, 5}) ASSERT_TRUE(b->add(int{v}).ok());
  ASSERT_TRUE(b->shutdown().ok());
  const auto calls = sink.snapshot();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].info.reason, FlushReason::kBytes);
  EXPECT_EQ(calls[0].info.bytes, 30u);
  EXPECT_EQ(calls[1].info.bytes, 5u);
}

TEST(BatcherInfoTest, AFailedAttemptIsRetriedWithTheWholeBatchUnderItsSequence) {
  InfoSink sink;
  sink.fail_until = 2;  // attempts 1 and 2 fail, 3 succeeds
  Events log;
  BatcherOptions<int> o;
  o.max_batch_size = 4;
  o.max_batch_delay = 1h;
  o.max_attempts = 3;
  o.sink_with_info = sink.sink();
  o.logger = log.logger();
  o.name = "rows";
  auto b = make(o);
  auto ack = b->add_with_ack(7);
  ASSERT_TRUE(ack.ok());
  for (int i = 8; i < 11; ++i) ASSERT_TRUE(b->add(int{i}).ok());
  EXPECT_TRUE(ack->get().ok());  // the final attempt's answer
  ASSERT_TRUE(b->shutdown().ok());

  const auto calls = sink.snapshot();
  ASSERT_EQ(calls.size(), 3u);
  for (std::uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(calls[i].info.attempt, i + 1);
    EXPECT_EQ(calls[i].info.seq, 1u);
    EXPECT_EQ(calls[i].items, (std::vector<int>{7, 8, 9, 10}));  // each attempt has it whole
  }
  const BatcherStats s = b->stats();
  EXPECT_EQ(s.retries, 2u);
  EXPECT_EQ(s.flushes_ok, 1u);
  EXPECT_EQ(s.flushes_failed, 0u);
  EXPECT_EQ(s.flushed_ok, 4u);
  EXPECT_EQ(s.flushed_fail, 0u);
  EXPECT_EQ(s.enqueued, s.flushed_ok + s.flushed_fail + s.dropped_on_shutdown + s.in_flight);

  const auto errors = log.of(BatcherEvent::Kind::kSinkError);
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0].flush.attempt, 1u);
  EXPECT_EQ(errors[1].flush.attempt, 2u);
  EXPECT_EQ(errors[0].status.code(), StatusCode::kIOError);
  EXPECT_EQ(log.names[0], "rows");
  EXPECT_NE(b->prometheus().find("batcher_sink_retries_total{name=\"rows\"} 2"), std::string::npos);
}

TEST(BatcherInfoTest, WhenAttemptsRunOutTheFlushFailsWithTheLastError) {
  InfoSink sink;
  sink.fail_until = 100;
  sink.throw_instead = true;
  BatcherOptions<int> o;
  o.max_batch_size = 2;
  o.max_batch_delay = 1h;
  o.max_attempts = 2;
  o.sink_with_info = sink.sink();
  auto b = make(o);
  auto ack = b->add_with_ack(1);
  ASSERT_TRUE(ack.ok());
  ASSERT_TRUE(b->add(2).ok());
  const Status got = ack->get();
  EXPECT_EQ(got.code(), StatusCode::kInternal);
  EXPECT_NE(std::string(got.message()).find("disk on fire"), std::string::npos);
  ASSERT_TRUE(b->shutdown().ok());
  const BatcherStats s = b->stats();
  EXPECT_EQ(sink.snapshot().size(), 2u);
  EXPECT_EQ(s.retries, 1u);
  EXPECT_EQ(s.sink_exceptions, 2u);  // per attempt
  EXPECT_EQ(s.flushes_failed, 1u);
  EXPECT_EQ(s.flushed_fail, 2u);
}

TEST(BatcherInfoTest, NoRetryOnceTheFlushDeadlineHasPassed) {
  std::atomic<int> calls{0};
  BatcherOptions<int> o;
  o.max_batch_size = 1;
  o.max_batch_delay = 1h;
  o.max_attempts = 5;
  o.flush_timeout = 20ms;
  o.sink = [&](std::vector<int>&&, const Context& ctx) -> Status {
    ++calls;
    // Work that outlasts the flush deadline: wait for it (no stop arrives).
    std::mutex m;
    std::condition_variable_any cv;
    std::unique_lock lock(m);
    cv.wait_until(lock, ctx.token(), *ctx.deadline(), [] { return false; });
    return StatusCode::kDeadlineExceeded;
  };
  auto b = make(o);
  ASSERT_TRUE(b->add(1).ok());
  ASSERT_TRUE(b->shutdown().ok());
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(b->stats().retries, 0u);
  EXPECT_EQ(b->stats().flushes_failed, 1u);
}

TEST(BatcherInfoTest, TheLoggerHearsSinkErrorsOffTheAddingThread) {
  Events log;
  BatcherOptions<int> o;
  o.max_batch_size = 1;
  o.max_batch_delay = 1h;
  o.sink = [](std::vector<int>&&, const Context&) { return Status(StatusCode::kIOError, "no"); };
  o.logger = log.logger();
  auto b = make(o);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(b->add(int{i}).ok());
  ASSERT_TRUE(b->shutdown().ok());
  ASSERT_EQ(log.of(BatcherEvent::Kind::kSinkError).size(), 3u);
  std::lock_guard lock(log.mu);
  for (const auto& id : log.threads) EXPECT_NE(id, std::this_thread::get_id());
}

TEST(BatcherInfoTest, TheLoggerHearsSlowFlushesOnly) {
  Events log;
  BatcherOptions<int> o;
  o.max_batch_size = 1;
  o.max_batch_delay = 1h;
  o.slow_flush = 5ms;
  o.sink = [](std::vector<int>&& batch, const Context&) {
    if (batch[0] == 1) std::this_thread::sleep_for(20ms);  // the slow write itself, not a sync
    return Status::Ok();
  };
  o.logger = log.logger();
  auto b = make(o);
  ASSERT_TRUE(b->add(0).ok());
  ASSERT_TRUE(b->add(1).ok());
  ASSERT_TRUE(b->shutdown().ok());
  const auto slow = log.of(BatcherEvent::Kind::kSlowFlush);
  ASSERT_EQ(slow.size(), 1u);
  EXPECT_EQ(slow[0].flush.seq, 2u);
  EXPECT_GE(slow[0].took, 20ms);
  EXPECT_TRUE(slow[0].status.ok());
  EXPECT_TRUE(log.of(BatcherEvent::Kind::kSinkError).empty());
}

TEST(BatcherInfoTest, TheLoggerHearsEveryItemDroppedOnShutdown) {
  Events log;
  BatcherOptions<int> o;
  o.max_batch_size = 2;
  o.max_batch_delay = 1h;
  std::atomic<int> in_sink{0};
  o.sink = [&](std::vector<int>&&, const Context& ctx) {
    ++in_sink;
    std::mutex m;
    std::condition_variable_any cv;
    std::unique_lock lock(m);
    cv.wait(lock, ctx.token(), [] { return false; });  // until the batcher aborts
    return Status(StatusCode::kCancelled);
  };
  o.logger = log.logger();
  auto b = make(o);
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(b->add(int{i}).ok());
  ASSERT_TRUE(eventually([&] { return in_sink.load() == 1; }));
  EXPECT_EQ(b->shutdown(with_timeout(30ms)).code(), StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(eventually([&] { return b->stats().flushing == 0; }));
  std::uint64_t heard = 0;
  for (const auto& e : log.of(BatcherEvent::Kind::kDropped)) heard += e.items;
  EXPECT_EQ(heard, b->stats().dropped_on_shutdown);
  EXPECT_EQ(heard, 5u);
}

TEST(BatcherInfoTest, BadRetryAndSinkOptionsAreRejected) {
  BatcherOptions<int> o;
  o.sink = [](std::vector<int>&&, const Context&) { return Status::Ok(); };
  o.sink_with_info = [](std::vector<int>&&, const FlushInfo&, const Context&) {
    return Status::Ok();
  };
  EXPECT_EQ(Batcher<int>::create(o).code(), StatusCode::kInvalidArgument);  // both sinks
  o.sink = nullptr;
  o.max_attempts = 0;
  EXPECT_EQ(Batcher<int>::create(o).code(), StatusCode::kInvalidArgument);

  BatcherOptions<std::unique_ptr<int>> u;
  u.sink = [](std::vector<std::unique_ptr<int>>&&, const Context&) { return Status::Ok(); };
  u.max_attempts = 2;  // a retry needs a copy
  const auto r = Batcher<std::unique_ptr<int>>::create(std::move(u));
  EXPECT_EQ(r.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(r.status().message()).find("copyable"), std::string::npos);
}

}  // namespace
}  // namespace sluice
