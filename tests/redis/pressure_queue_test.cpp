// PressureQueue against a real redis-server started for each test.
#include "sluice/redis/pressure_queue.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "testutil/prometheus.h"
#include "testutil/redis_server.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testutil::RawRedis;
using testutil::RedisServer;

class PressureQueueTest : public ::testing::Test {
 protected:
  PressureQueue queue(const std::string& name = "q") { return {server_.options(), name}; }
  // Queue "q" with its reads and server-side waits timed as given.
  PressureQueue timed_queue(std::chrono::milliseconds io_timeout,
                            std::chrono::milliseconds wait_slice) {
    RedisOptions o = server_.options();
    o.io_timeout = io_timeout;
    o.wait_slice = wait_slice;
    return {o, "q"};
  }
  std::string key(const std::string& suffix = "", const std::string& name = "q") {
    return "__pressure__:" + name + suffix;
  }

  RedisServer server_;
  RawRedis raw_{server_.port()};
};

TEST_F(PressureQueueTest, CreateThenExistsLengthClosed) {
  auto q = queue();
  EXPECT_EQ(*q.exists(), false);
  EXPECT_EQ(q.length().code(), StatusCode::kNotFound);  // the protocol's rule
  EXPECT_EQ(q.closed().code(), StatusCode::kNotFound);
  ASSERT_TRUE(q.create(5).ok());
  EXPECT_EQ(*q.exists(), true);
  EXPECT_EQ(*q.length(), 0U);
  EXPECT_EQ(*q.closed(), false);
  Status again = q.create(5);
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists);
}

// Misuse is an error, never a crash.
TEST_F(PressureQueueTest, AMovedFromHandleRefusesEveryCall) {
  auto q = queue();
  ASSERT_TRUE(q.create(0).ok());
  PressureQueue moved = std::move(q);
  EXPECT_EQ(q.try_put("x").code(),
            StatusCode::kInvalidArgument);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(q.put("x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(q.try_get().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(q.stats().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(q.length().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(q.close().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(q.destroy().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(q.repair().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(q.name(), "");
  EXPECT_TRUE(moved.try_put("y").ok()) << "the handle it moved to works";
}

TEST_F(PressureQueueTest, CreateWritesTheProtocolKeys) {
  ASSERT_TRUE(queue().create(5).ok());
  const std::vector<std::string> want = {":bound string 5", ":consumer_free list [0]",
                                         ":not_full list [0]", ":producer_free list [0]"};
  EXPECT_EQ(raw_.dump(key("*"), key()), want);
}

TEST_F(PressureQueueTest, CreateRefusesRemnantsOfAHalfDeletedQueue) {
  raw_.cmd({"LPUSH", key(":closed"), "0", "0"});  // what a dead deleter leaves
  Status s = queue().create(0);
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(s.message().find(":closed"), std::string_view::npos) << s;
}

TEST_F(PressureQueueTest, PutGetKeepsFifoBytesAndStats) {
  auto q = queue();
  ASSERT_TRUE(q.create(0).ok());
  std::vector<std::string> sent;
  std::uint64_t bytes = 0;
  for (int i = 0; i < 50; ++i) {
    std::string m = "m" + std::to_string(i);
    m.push_back('\0');  // binary payloads survive (hazard 11)
    m += std::string(static_cast<std::size_t>(i), 'x');
    bytes += m.size();
    ASSERT_TRUE(q.put(m).ok());
    sent.push_back(m);
  }
  // LPUSH: the newest is on the left.
  auto stored = raw_.lrange(key());
  ASSERT_EQ(stored.size(), 50U);
  EXPECT_EQ(stored.front(), sent.back());
  for (const auto& m : sent) {
    auto got = q.get();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, m);
  }
  auto st = q.stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->produced_messages, 50U);
  EXPECT_EQ(st->consumed_messages, 50U);
  EXPECT_EQ(st->produced_bytes, bytes);
  EXPECT_EQ(st->consumed_bytes, bytes);
  EXPECT_EQ(st->length, 0U);
  EXPECT_EQ(st->producer, q.client_id());
  EXPECT_EQ(st->consumer, q.client_id());
  EXPECT_TRUE(st->producer_free && st->consumer_free);
  EXPECT_EQ(raw_.get(key(":stats:produced_bytes")), std::to_string(bytes));
  const auto e = testutil::parse_prometheus(to_prometheus(*st, "jobs"));
  ASSERT_EQ(e.error, "");
  EXPECT_EQ(e.at("sluice_redis_produced_bytes_total{name=\"jobs\"}"), static_cast<double>(bytes));
  EXPECT_EQ(e.at("sluice_redis_consumed_messages_total{name=\"jobs\"}"), 50);
  EXPECT_EQ(e.at("sluice_redis_length{name=\"jobs\"}"), 0);
}

TEST_F(PressureQueueTest, OneRoundTripPerOperation) {
  auto q = queue();
  ASSERT_TRUE(q.create(100).ok());  // connects
  auto before = q.round_trips();
  ASSERT_TRUE(q.put("a").ok());
  EXPECT_EQ(q.round_trips() - before, 1U);
  std::vector<std::string> batch(64, "b");
  before = q.round_trips();
  ASSERT_TRUE(q.put_many(batch).ok());
  EXPECT_EQ(q.round_trips() - before, 1U);
  before = q.round_trips();
  ASSERT_TRUE(q.get().ok());
  EXPECT_EQ(q.round_trips() - before, 1U);
  std::vector<std::string> out;
  before = q.round_trips();
  ASSERT_TRUE(q.get_many(out, 64).ok());
  EXPECT_EQ(q.round_trips() - before, 1U);
  EXPECT_EQ(out.size(), 64U);
}

TEST_F(PressureQueueTest, TryPutOnFullAndTryGetOnEmpty) {
  auto q = queue();
  ASSERT_TRUE(q.create(2).ok());
  auto e = q.try_get();
  EXPECT_EQ(e.code(), StatusCode::kWouldBlock);
  ASSERT_TRUE(q.try_put("1").ok());
  ASSERT_TRUE(q.try_put("2").ok());
  EXPECT_EQ(raw_.integer({"EXISTS", key(":not_full")}), 0);  // full: no token
  auto full = q.try_put("3");
  EXPECT_EQ(full.code(), StatusCode::kWouldBlock);
  EXPECT_EQ(full.delivery(), Delivery::kNotEnqueued);
  EXPECT_EQ(*q.length(), 2U);
  EXPECT_EQ(*q.try_get(), "1");
  EXPECT_EQ(raw_.lrange(key(":not_full")), std::vector<std::string>{"0"});
  EXPECT_TRUE(q.try_put("3").ok());
}

TEST_F(PressureQueueTest, BatchPutStopsAtTheBoundAndKeepsOrder) {
  auto q = queue();
  ASSERT_TRUE(q.create(5).ok());
  std::vector<std::string> batch;
  for (int i = 0; i < 8; ++i) batch.push_back(std::to_string(i));
  auto r = q.try_put_many(batch);
  EXPECT_EQ(r.code(), StatusCode::kWouldBlock);
  EXPECT_EQ(r.enqueued, 5U);
  EXPECT_EQ(r.delivery(4), Delivery::kEnqueued);
  EXPECT_EQ(r.delivery(5), Delivery::kNotEnqueued);
  std::vector<std::string> out;
  ASSERT_TRUE(q.get_many(out, 100).ok());
  EXPECT_EQ(out, std::vector<std::string>(batch.begin(), batch.begin() + 5));
}

TEST_F(PressureQueueTest, BlockingBatchPutLargerThanTheBoundCompletesAsAConsumerDrains) {
  auto p = queue();
  ASSERT_TRUE(p.create(4).ok());
  std::vector<std::string> batch;
  for (int i = 0; i < 40; ++i) batch.push_back(std::to_string(i));
  std::atomic<std::uint64_t> max_len{0};
  std::jthread consumer([&] {
    auto c = queue();
    RawRedis watch(server_.port());
    std::vector<std::string> got;
    while (got.size() < batch.size()) {
      auto len = static_cast<std::uint64_t>(watch.integer({"LLEN", key()}));
      if (len > max_len) max_len = len;
      ASSERT_TRUE(c.get_many(got, 3).ok());
    }
    EXPECT_EQ(got, batch);
  });
  auto r = p.put_many(batch);
  EXPECT_TRUE(r.ok()) << r.status;
  EXPECT_EQ(r.enqueued, batch.size());
  consumer.join();
  EXPECT_LE(max_len.load(), 4U);
}

TEST_F(PressureQueueTest, BlockingPutIsReleasedByAGet) {
  auto q = queue();
  ASSERT_TRUE(q.create(1).ok());
  ASSERT_TRUE(q.put("first").ok());
  auto blocked = std::async(std::launch::async, [&] { return queue().put("second"); });
  ASSERT_TRUE(testutil::eventually([&] { return raw_.blocked_clients() == 1; }));
  EXPECT_EQ(*q.length(), 1U);  // the waiting put did not pass the bound
  EXPECT_EQ(*q.get(), "first");
  EXPECT_TRUE(blocked.get().ok());
  EXPECT_EQ(*q.get(), "second");
}

TEST_F(PressureQueueTest, BlockingGetIsReleasedByAPut) {
  auto q = queue();
  ASSERT_TRUE(q.create(0).ok());
  auto blocked = std::async(std::launch::async, [&] { return queue().get(); });
  ASSERT_TRUE(testutil::eventually([&] { return raw_.blocked_clients() == 1; }));
  ASSERT_TRUE(q.put("hello").ok());
  auto got = blocked.get();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "hello");
}

TEST_F(PressureQueueTest, BlockingGetIsReleasedByAClose) {
  auto q = queue();
  ASSERT_TRUE(q.create(0).ok());
  auto blocked = std::async(std::launch::async, [&] { return queue().get(); });
  ASSERT_TRUE(testutil::eventually([&] { return raw_.blocked_clients() == 1; }));
  ASSERT_TRUE(q.close().ok());
  EXPECT_EQ(blocked.get().code(), StatusCode::kClosed);
}

TEST_F(PressureQueueTest, CloseThenDrain) {
  auto q = queue();
  ASSERT_TRUE(q.create(0).ok());
  for (const char* m : {"a", "b", "c"}) ASSERT_TRUE(q.put(m).ok());
  ASSERT_TRUE(q.close().ok());
  EXPECT_EQ(raw_.lrange(key(":closed")), (std::vector<std::string>{"0", "0"}));
  EXPECT_EQ(*q.closed(), true);
  auto late = q.put("d");
  EXPECT_EQ(late.code(), StatusCode::kClosed);
  EXPECT_EQ(late.delivery(), Delivery::kNotEnqueued);
  EXPECT_EQ(q.close().code(), StatusCode::kClosed);
  EXPECT_EQ(*q.get(), "a");
  EXPECT_EQ(*q.get(), "b");
  EXPECT_EQ(*q.get(), "c");
  EXPECT_EQ(q.get().code(), StatusCode::kClosed);
  EXPECT_EQ(*q.closed(), true);  // draining never consumes the close (hazard 6)
  auto st = q.stats();
  EXPECT_EQ(st->consumed_messages, 3U);  // counted while draining (hazard 5)
}

TEST_F(PressureQueueTest, CancelledGetReturnsPromptly) {
  auto q = queue();
  ASSERT_TRUE(q.create(0).ok());
  std::stop_source stop;
  auto blocked =
      std::async(std::launch::async, [&] { return queue().get(Context(stop.get_token())); });
  ASSERT_TRUE(testutil::eventually([&] { return raw_.blocked_clients() == 1; }));
  stop.request_stop();
  EXPECT_EQ(blocked.get().code(), StatusCode::kCancelled);
  EXPECT_EQ(*q.length(), 0U);
  auto st = q.stats();
  EXPECT_TRUE(st->consumer_free);
}

TEST_F(PressureQueueTest, CancelledPutEnqueuesNothing) {
  auto q = queue();
  ASSERT_TRUE(q.create(1).ok());
  ASSERT_TRUE(q.put("x").ok());
  std::stop_source stop;
  auto blocked =
      std::async(std::launch::async, [&] { return queue().put("y", Context(stop.get_token())); });
  ASSERT_TRUE(testutil::eventually([&] { return raw_.blocked_clients() == 1; }));
  stop.request_stop();
  auto r = blocked.get();
  EXPECT_EQ(r.code(), StatusCode::kCancelled);
  EXPECT_EQ(r.delivery(), Delivery::kNotEnqueued);
  EXPECT_EQ(raw_.lrange(key()), std::vector<std::string>{"x"});
  EXPECT_TRUE(q.stats()->producer_free);
}

// The role a waiting put holds is given back on every return, including a
// broken connection: the give-back goes over a new one.
TEST_F(PressureQueueTest, AWaitingPutWhoseConnectionIsKilledGivesTheRoleBack) {
  auto q = queue();
  ASSERT_TRUE(q.create(1).ok());
  ASSERT_TRUE(q.put("first").ok());
  std::promise<std::string> id;
  auto waiting = std::async(std::launch::async, [&] {
    auto p = queue();
    id.set_value(p.client_id());
    return p.put("second", with_timeout(20s));
  });
  const std::string holder = id.get_future().get();
  ASSERT_TRUE(testutil::eventually(
      [&] {
        return raw_.integer({"LLEN", key(":producer_free")}) == 0 &&
               raw_.get(key(":producer")) == holder + "+w";  // kept across a wait
      },
      5s));
  raw_.cmd({"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"});
  auto r = waiting.get();
  EXPECT_EQ(r.code(), StatusCode::kUnavailable) << r.status;
  EXPECT_EQ(r.enqueued, 0U);
  EXPECT_EQ(raw_.lrange(key(":producer_free")), std::vector<std::string>{"0"});
  EXPECT_EQ(raw_.lrange(key()), std::vector<std::string>{"first"});
}

TEST_F(PressureQueueTest, DeadlineBoundsTheWait) {
  auto q = queue();
  ASSERT_TRUE(q.create(0).ok());
  EXPECT_EQ(q.get(with_timeout(30ms)).code(), StatusCode::kDeadlineExceeded);
  // A call that can complete at once does, whatever the deadline.
  ASSERT_TRUE(q.put("now").ok());
  EXPECT_EQ(*q.get(with_timeout(0ms)), "now");
}

// Redis ends a blocked command only at its first tick after the command's
// timeout. With hz 1 that is up to a second late: the client ends the wait at
// its own deadline (CLIENT UNBLOCK from a second connection) instead.
TEST_F(PressureQueueTest, ADeadlineEndsTheWaitNotTheServersTick) {
  raw_.cmd({"CONFIG", "SET", "hz", "1"});
  auto q = timed_queue(30s, 10s);  // 10 s: the server-side timeout, were it the only one
  ASSERT_TRUE(q.create(0).ok());
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(q.get(with_timeout(50ms)).code(), StatusCode::kDeadlineExceeded);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 900ms) << "attempt " << i;
  }
  EXPECT_EQ(raw_.blocked_clients(), 0);  // ended, not left waiting on the server
  // The connection goes on: nothing half-read is left on it.
  ASSERT_TRUE(q.put("after").ok());
  EXPECT_EQ(*q.get(with_timeout(1s)), "after");
  raw_.cmd({"CONFIG", "SET", "hz", "10"});  // a shutdown waits for a tick
}

// A stop ends a wait at once, not at the end of the server-side slice.
TEST_F(PressureQueueTest, AStopEndsABlockedGetBeforeItsServerSideSlice) {
  auto q = timed_queue(30s, 10s);
  ASSERT_TRUE(q.create(0).ok());
  std::stop_source stop;
  auto blocked = std::async(std::launch::async, [&] { return q.get(Context(stop.get_token())); });
  ASSERT_TRUE(testutil::eventually([&] { return raw_.blocked_clients() == 1; }));
  const auto t0 = std::chrono::steady_clock::now();
  stop.request_stop();
  ASSERT_EQ(blocked.wait_for(5s), std::future_status::ready) << "still waiting on the server";
  EXPECT_EQ(blocked.get().code(), StatusCode::kCancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_EQ(raw_.blocked_clients(), 0);
  ASSERT_TRUE(q.put("x").ok());
  EXPECT_EQ(*q.get(with_timeout(1s)), "x");
}

// The options of ACL user bob (password pw) on `server`.
RedisOptions as_bob(const RedisServer& server) {
  RedisOptions o = server.options();
  o.user = "bob";
  o.password = "pw";
  return o;
}

// The second connection that sends CLIENT UNBLOCK authenticates as the
// first does: an ACL user's deadline still ends the wait on the client's time
// (with hz 1 the server's own timeout would end it up to a second late).
TEST(PressureAuthTest, AnAclUsersDeadlineEndsTheWaitNotTheServersTick) {
  RedisServer server(false, {"user default off", "user bob on >pw ~* &* +@all", "hz 1"});
  PressureQueue q(as_bob(server), "q");
  ASSERT_TRUE(q.create(0).ok());
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(q.get(with_timeout(50ms)).code(), StatusCode::kDeadlineExceeded) << i;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 900ms) << "attempt " << i;
  }
}

// Where CLIENT UNBLOCK is refused, the server's own timeout ends the wait:
// later, but the same answer.
TEST(PressureAuthTest, WithoutClientUnblockTheServersTimeoutEndsTheWait) {
  RedisServer server(false, {"user default off", "user bob on >pw ~* &* +@all -client|unblock"});
  PressureQueue q(as_bob(server), "q");
  ASSERT_TRUE(q.create(0).ok());
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(q.get(with_timeout(30ms)).code(), StatusCode::kDeadlineExceeded) << i;
  }
  ASSERT_TRUE(q.put("x").ok());
  EXPECT_EQ(*q.get(with_timeout(1s)), "x");
}

TEST_F(PressureQueueTest, StopBeforeTheCallTouchesNothing) {
  auto q = queue();
  ASSERT_TRUE(q.create(0).ok());
  std::stop_source stop;
  stop.request_stop();
  const auto before = q.round_trips();
  EXPECT_EQ(q.put("x", Context(stop.get_token())).code(), StatusCode::kCancelled);
  EXPECT_EQ(q.get(Context(stop.get_token())).code(), StatusCode::kCancelled);
  EXPECT_EQ(q.round_trips(), before);
}

TEST_F(PressureQueueTest, OperationsOnAMissingQueueAreNotFound) {
  auto q = queue("missing");
  EXPECT_EQ(q.put("x").code(), StatusCode::kNotFound);
  EXPECT_EQ(q.get().code(), StatusCode::kNotFound);
  EXPECT_EQ(q.close().code(), StatusCode::kNotFound);
  EXPECT_EQ(q.destroy().code(), StatusCode::kNotFound);
  EXPECT_EQ(q.stats().code(), StatusCode::kNotFound);
  EXPECT_TRUE(raw_.dump(key("*", "missing"), "").empty());  // and created nothing
}

TEST_F(PressureQueueTest, DestroyRemovesEveryKeyAndCountsWhatItDiscards) {
  auto q = queue();
  ASSERT_TRUE(q.create(3).ok());
  ASSERT_TRUE(q.put("a").ok());
  ASSERT_TRUE(q.put("b").ok());
  ASSERT_TRUE(q.get().ok());
  auto gone = q.destroy();
  ASSERT_TRUE(gone.ok()) << gone.status();
  EXPECT_EQ(*gone, 1U);
  EXPECT_TRUE(raw_.dump(key("*"), "").empty());
  EXPECT_EQ(*q.exists(), false);
}

TEST_F(PressureQueueTest, DestroyWithABlockedProducerLosesNothingSilently) {
  auto q = queue();
  ASSERT_TRUE(q.create(1).ok());
  ASSERT_TRUE(q.put("in").ok());
  auto producer = std::async(std::launch::async, [&] { return queue().put("waiting"); });
  ASSERT_TRUE(testutil::eventually([&] { return raw_.blocked_clients() == 1; }));
  auto gone = q.destroy();
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(*gone, 1U);  // "in" was discarded, and said so
  auto r = producer.get();
  // The waiting producer holds the role, so destroy closes the queue and
  // waits for it: the producer wakes, finds the queue closed by a delete
  // (kNotFound, not a close's kClosed) and gives the role back. "waiting"
  // was never enqueued.
  EXPECT_EQ(r.code(), StatusCode::kNotFound) << r.status;
  EXPECT_EQ(r.delivery(), Delivery::kNotEnqueued);
  EXPECT_TRUE(raw_.dump(key("*"), "").empty());
}

TEST_F(PressureQueueTest, DestroyWithABlockedConsumer) {
  auto q = queue();
  ASSERT_TRUE(q.create(1).ok());
  auto consumer = std::async(std::launch::async, [&] { return queue().get(); });
  ASSERT_TRUE(testutil::eventually([&] { return raw_.blocked_clients() == 1; }));
  ASSERT_TRUE(q.destroy().ok());
  EXPECT_EQ(consumer.get().status().code(), StatusCode::kNotFound);
}

TEST_F(PressureQueueTest, BoundNeverExceededUnderAFastProducerAndConsumer) {
  constexpr int kBound = 8;
  constexpr int kMessages = 4000;
  auto q = queue();
  ASSERT_TRUE(q.create(kBound).ok());
  std::atomic<bool> done{false};
  std::atomic<long long> max_seen{0};
  std::atomic<long long> samples{0};
  std::jthread sampler([&] {
    RawRedis watch(server_.port());
    while (!done) {
      const long long len = watch.integer({"LLEN", key()});
      if (len > max_seen) max_seen = len;
      ++samples;
    }
  });
  std::jthread producer([&] {
    auto p = queue();
    for (int i = 0; i < kMessages; ++i) ASSERT_TRUE(p.put(std::to_string(i)).ok());
  });
  auto c = queue();
  for (int i = 0; i < kMessages; ++i) {
    auto m = c.get();
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_EQ(*m, std::to_string(i));
  }
  producer.join();
  done = true;
  sampler.join();
  EXPECT_LE(max_seen.load(), kBound);
  EXPECT_GT(samples.load(), 100);
  auto st = q.stats();
  EXPECT_EQ(st->produced_messages, static_cast<std::uint64_t>(kMessages));
  EXPECT_EQ(st->consumed_messages, static_cast<std::uint64_t>(kMessages));
}

TEST_F(PressureQueueTest, RedisNotRunningIsAClearErrorAndNothingIsEnqueued) {
  RedisOptions o = server_.options();
  server_.stop();
  o.connect_timeout = 500ms;
  PressureQueue q(o, "q");
  auto r = q.put("x");
  EXPECT_EQ(r.code(), StatusCode::kUnavailable);
  EXPECT_EQ(r.delivery(), Delivery::kNotEnqueued);
  const std::string want = "connection refused at 127.0.0.1:" + std::to_string(o.port);
  EXPECT_NE(r.status.message().find(want), std::string_view::npos) << r.status;
  EXPECT_EQ(q.get().code(), StatusCode::kUnavailable);
  EXPECT_EQ(q.create(0).code(), StatusCode::kUnavailable);
  EXPECT_EQ(q.length().code(), StatusCode::kUnavailable);
}

TEST_F(PressureQueueTest, ReconnectsAfterTheServerRestarts) {
  RedisServer durable(/*persistent=*/true);
  PressureQueue q(durable.options(), "q");
  ASSERT_TRUE(q.create(0).ok());
  ASSERT_TRUE(q.put("before").ok());
  durable.restart();
  // The first call finds the old connection dead: it fails clearly, saying
  // whether the message went in; a later call reconnects.
  std::vector<std::string> maybe;
  std::vector<std::string> sure = {"before"};
  for (int i = 0; i < 3; ++i) {
    const std::string m = "after" + std::to_string(i);
    auto r = q.put(m);
    if (r.ok()) {
      sure.push_back(m);
    } else {
      EXPECT_EQ(r.code(), StatusCode::kUnavailable);
      if (r.delivery() == Delivery::kUnknown) maybe.push_back(m);
    }
  }
  ASSERT_GE(sure.size(), 3U);  // it reconnected
  std::vector<std::string> got;
  for (;;) {
    auto m = q.try_get();
    if (!m.ok()) {
      ASSERT_EQ(m.code(), StatusCode::kWouldBlock) << m.status();
      break;
    }
    got.push_back(*m);
  }
  // Every sure message once, in order; in-doubt ones at most once.
  std::vector<std::string> filtered;
  for (const auto& m : got) {
    if (std::find(maybe.begin(), maybe.end(), m) == maybe.end()) filtered.push_back(m);
  }
  EXPECT_EQ(filtered, sure);
}

TEST_F(PressureQueueTest, AServerDyingUnderABlockedGetFailsItCleanly) {
  auto q = queue();
  ASSERT_TRUE(q.create(0).ok());
  auto blocked = std::async(std::launch::async, [&] { return queue().get(); });
  ASSERT_TRUE(testutil::eventually([&] { return raw_.blocked_clients() == 1; }));
  server_.kill();
  auto r = blocked.get();
  EXPECT_EQ(r.code(), StatusCode::kUnavailable) << r.status();
}

// A server that hangs under a blocked get (no reply, no closed socket) fails
// the get after about io_timeout, not at its far deadline: the client-side
// wait for a blocked command's reply gives up as a plain read would.
TEST_F(PressureQueueTest, AServerHangingUnderABlockedGetFailsItWithinTheIoTimeout) {
  auto q = timed_queue(400ms, 100ms);
  ASSERT_TRUE(q.create(0).ok());
  std::stop_source stop;  // a stop that is possible but never comes, as the command's
  auto blocked = std::async(std::launch::async, [&] {
    return q.get(Context(stop.get_token(), Context::deadline_in(std::chrono::hours(1))));
  });
  ASSERT_TRUE(testutil::eventually([&] { return raw_.blocked_clients() == 1; }));
  server_.pause();
  const bool ended = blocked.wait_for(30s) == std::future_status::ready;
  server_.resume();
  ASSERT_TRUE(ended) << "still waiting for a hung server";
  auto r = blocked.get();
  EXPECT_EQ(r.code(), StatusCode::kUnavailable) << r.status();
  EXPECT_NE(r.status().message().find("timed out after 400 ms"), std::string_view::npos)
      << r.status();
}

// A hung server: the reply never comes within io_timeout, so the put cannot
// know whether it ran: it says kUnknown. Once the server resumes, the script
// it had received runs, which is why "not enqueued" would have been a lie.
TEST_F(PressureQueueTest, AHungServerMakesThePutsFateUnknown) {
  RedisOptions o = server_.options();
  o.io_timeout = 200ms;
  PressureQueue q(o, "q");
  ASSERT_TRUE(q.create(0).ok());
  server_.pause();
  auto r = q.put("in doubt");
  server_.resume();
  EXPECT_EQ(r.code(), StatusCode::kUnavailable);
  EXPECT_EQ(r.delivery(), Delivery::kUnknown);
  EXPECT_EQ(r.in_doubt, 1U);
  const std::string want = "timed out after 200 ms talking to 127.0.0.1:" + std::to_string(o.port);
  EXPECT_NE(r.status.message().find(want), std::string_view::npos) << r.status;
  ASSERT_TRUE(testutil::eventually([&] { return raw_.integer({"LLEN", key()}) == 1; }));
  EXPECT_TRUE(q.put("next").ok());  // reconnected
}

TEST_F(PressureQueueTest, ScriptCacheFlushIsRecovered) {
  auto q = queue();
  ASSERT_TRUE(q.create(0).ok());
  raw_.cmd({"SCRIPT", "FLUSH"});
  const auto before = q.round_trips();
  ASSERT_TRUE(q.put("x").ok());  // NOSCRIPT, then EVAL: the script runs once
  EXPECT_EQ(q.round_trips() - before, 2U);
  EXPECT_EQ(*q.length(), 1U);
}

// A call in 'wait' mode that took a role (to wait for data or room) and
// whose reply was never read (the server went away after the script ran:
// seen as a `sluice get` that never got another message after a restart)
// leaves the role with this client, which does not know it. Its next call
// must find the role its own, not wait for ever for itself (the holder is
// alive, so repair never gives it back).
TEST_F(PressureQueueTest, ARoleThisClientTookWithAReplyItNeverReadIsStillItsOwn) {
  auto q = queue();
  ASSERT_TRUE(q.create(10).ok());
  ASSERT_TRUE(q.put("a").ok());
  raw_.cmd({"RPOP", key(":consumer_free")});                  // what the lost reply had said
  raw_.cmd({"SET", key(":consumer"), q.client_id() + "+w"});  // a role kept to wait
  auto got = q.get(with_timeout(5s));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "a");
  EXPECT_EQ(raw_.lrange(key(":consumer_free")), std::vector<std::string>{"0"});  // given back

  raw_.cmd({"RPOP", key(":producer_free")});
  raw_.cmd({"SET", key(":producer"), q.client_id() + "+w"});
  ASSERT_TRUE(q.put("b", with_timeout(5s)).ok());
  EXPECT_EQ(raw_.lrange(key(":producer_free")), std::vector<std::string>{"0"});
  EXPECT_EQ(*q.length(), 1U);
}

TEST_F(PressureQueueTest, RepairRestoresATokenOfADeadHolderOnly) {
  auto q = queue();
  ASSERT_TRUE(q.create(0).ok());
  // A holder on this host whose process is gone.
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  int st = 0;
  waitpid(dead, &st, 0);
  std::array<char, 256> host{};
  gethostname(host.data(), host.size() - 1);
  const std::string dead_id = std::string(host.data()) + "_pid" + std::to_string(dead);
  raw_.cmd({"RPOP", key(":producer_free")});
  raw_.cmd({"SET", key(":producer"), dead_id});
  // An alive holder (this process) for the consumer role.
  const std::string live_id = std::string(host.data()) + "_pid" + std::to_string(getpid());
  raw_.cmd({"RPOP", key(":consumer_free")});
  raw_.cmd({"SET", key(":consumer"), live_id});

  EXPECT_EQ(q.try_put("x").code(), StatusCode::kInUse);
  auto report = q.repair();
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->repaired.size(), 1U);
  EXPECT_NE(report->repaired[0].find(dead_id), std::string::npos);
  ASSERT_EQ(report->left_alone.size(), 1U);
  EXPECT_NE(report->left_alone[0].find("alive"), std::string::npos);
  EXPECT_EQ(raw_.lrange(key(":producer_free")), std::vector<std::string>{"0"});
  EXPECT_TRUE(raw_.lrange(key(":consumer_free")).empty());
  EXPECT_TRUE(q.try_put("x").ok());
}

TEST_F(PressureQueueTest, RepairLeavesAnUncheckableHolderUnlessForced) {
  auto q = queue();
  ASSERT_TRUE(q.create(0).ok());
  raw_.cmd({"RPOP", key(":producer_free")});
  raw_.cmd({"SET", key(":producer"), "elsewhere.example_pid42"});
  auto report = q.repair();
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->repaired.empty());
  ASSERT_EQ(report->left_alone.size(), 1U);
  EXPECT_NE(report->left_alone[0].find("force"), std::string::npos);
  report = q.repair(/*force=*/true);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->repaired.size(), 1U);
  EXPECT_TRUE(q.try_put("x").ok());
}

TEST_F(PressureQueueTest, RepairTrimsDuplicatedTokensAndRestoresNotFull) {
  auto q = queue();
  ASSERT_TRUE(q.create(3).ok());
  raw_.cmd({"LPUSH", key(":consumer_free"), "0"});  // two consumers could enter
  raw_.cmd({"DEL", key(":not_full")});              // a consumer died between pop and refill
  auto report = q.repair();
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->repaired.size(), 2U);
  EXPECT_EQ(raw_.lrange(key(":consumer_free")), std::vector<std::string>{"0"});
  EXPECT_EQ(raw_.lrange(key(":not_full")), std::vector<std::string>{"0"});
}

TEST_F(PressureQueueTest, ReliableGetKeepsMessagesInFlightUntilAcked) {
  auto q = queue();
  ASSERT_TRUE(q.create(2).ok());
  ASSERT_TRUE(q.put("a").ok());
  ASSERT_TRUE(q.put("b").ok());
  EXPECT_EQ(*q.get_reliable("worker-1"), "a");
  EXPECT_EQ(*q.get_reliable("worker-1"), "b");
  EXPECT_EQ(*q.length(), 0U);
  EXPECT_TRUE(q.try_put("c").ok());  // in-flight messages do not hold the bound
  EXPECT_EQ(*q.inflight("worker-1"), (std::vector<std::string>{"a", "b"}));
  auto st = q.stats();
  EXPECT_EQ(st->consumed_messages, 0U);  // counted when acked
  EXPECT_EQ(st->in_flight, 2U);
  ASSERT_TRUE(q.ack("worker-1").ok());
  EXPECT_EQ(*q.inflight("worker-1"), std::vector<std::string>{"b"});
  st = q.stats();
  EXPECT_EQ(st->consumed_messages, 1U);
  EXPECT_EQ(st->consumed_bytes, 1U);
  EXPECT_EQ(q.ack("worker-2").code(), StatusCode::kNotFound);
}

TEST_F(PressureQueueTest, ARestartedReliableConsumerRequeuesWhatItHadTaken) {
  auto q = queue();
  ASSERT_TRUE(q.create(0).ok());
  for (const char* m : {"1", "2", "3", "4"}) ASSERT_TRUE(q.put(m).ok());
  {
    auto crashed = queue();
    std::vector<std::string> got;
    ASSERT_TRUE(crashed.get_many_reliable("w", got, 3).ok());
    EXPECT_EQ(got, (std::vector<std::string>{"1", "2", "3"}));
    ASSERT_TRUE(crashed.ack("w").ok());  // "1" done; dies holding "2" and "3"
  }
  auto restarted = queue();
  EXPECT_EQ(*restarted.inflight("w"), (std::vector<std::string>{"2", "3"}));
  EXPECT_EQ(*restarted.requeue_inflight("w"), 2U);
  std::vector<std::string> rest;
  ASSERT_TRUE(restarted.get_many(rest, 10).ok());
  EXPECT_EQ(rest, (std::vector<std::string>{"2", "3", "4"}));
  auto st = restarted.stats();
  EXPECT_EQ(st->consumed_messages, st->produced_messages);
}

TEST_F(PressureQueueTest, DestroyAlsoRemovesInFlightListsButNotAQueueNamedLikeOne) {
  auto q = queue();
  ASSERT_TRUE(q.create(0).ok());
  ASSERT_TRUE(q.put("x").ok());
  ASSERT_TRUE(q.put("y").ok());
  ASSERT_TRUE(q.get_reliable("w").ok());
  auto lookalike = queue("q:inflight:z");
  ASSERT_TRUE(lookalike.create(0).ok());
  ASSERT_TRUE(lookalike.put("keep me").ok());
  auto gone = q.destroy();
  ASSERT_TRUE(gone.ok()) << gone.status();
  EXPECT_EQ(*gone, 2U);  // "y" queued and "x" in flight
  EXPECT_EQ(raw_.integer({"EXISTS", key(":inflight:w")}), 0);
  EXPECT_EQ(*lookalike.get(), "keep me");
}

// A loopback port whose listener the kernel completes connections for, but
// that nobody ever reads from or answers (a hung proxy, the wrong service).
class SilentListener {
 public:
  explicit SilentListener(int backlog) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        listen(fd_, backlog) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      throw std::runtime_error("cannot listen on loopback");
    }
    port_ = ntohs(addr.sin_port);
  }
  ~SilentListener() { ::close(fd_); }
  SilentListener(const SilentListener&) = delete;
  SilentListener& operator=(const SilentListener&) = delete;
  int port() const { return port_; }

 private:
  int fd_;
  int port_ = 0;
};

bool says(const Status& s, const std::string& what) {
  return s.message().find(what) != std::string_view::npos;
}

TEST(PressureErrorsTest, ASilentListenerTimesOutNamingTheServer) {
  SilentListener silent(16);
  RedisOptions o;
  o.port = silent.port();
  o.io_timeout = 300ms;
  PressureQueue q(o, "q");
  auto r = q.put("x");
  EXPECT_EQ(r.code(), StatusCode::kUnavailable);
  EXPECT_EQ(r.delivery(), Delivery::kNotEnqueued);  // the set-up failed: the put was never sent
  EXPECT_TRUE(
      says(r.status, "timed out after 300 ms talking to 127.0.0.1:" + std::to_string(o.port)))
      << r.status;
  EXPECT_FALSE(says(r.status, "Resource temporarily unavailable")) << r.status;
  auto g = q.get();
  EXPECT_TRUE(says(g.status(), "timed out after 300 ms talking to 127.0.0.1:")) << g.status();
}

// With backlog 0 and one connection waiting to be accepted, Linux drops the
// next SYN: the TCP handshake itself never completes.
TEST(PressureErrorsTest, AConnectThatNeverCompletesTimesOutNamingTheServer) {
  SilentListener full(0);
  RawRedis filler(full.port());  // completes, and fills the accept queue
  RedisOptions o;
  o.port = full.port();
  o.connect_timeout = 300ms;
  PressureQueue q(o, "q");
  auto r = q.put("x");
  EXPECT_EQ(r.code(), StatusCode::kUnavailable);
  EXPECT_EQ(r.delivery(), Delivery::kNotEnqueued);
  EXPECT_TRUE(
      says(r.status, "timed out after 300 ms connecting to 127.0.0.1:" + std::to_string(o.port)))
      << r.status;
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    setenv(name, value.c_str(), 1);  // NOLINT(concurrency-mt-unsafe): set before threads start
  }
  ~ScopedEnv() { unsetenv(name_); }  // NOLINT(concurrency-mt-unsafe)
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

std::string url(const std::string& cred, const RedisServer& s) {
  return "redis://" + cred + "@127.0.0.1:" + std::to_string(s.port());
}

// Each handle made from `o` can create, put and get (a fresh queue name each).
void works(const RedisOptions& o, const std::string& name) {
  PressureQueue q(o, name);
  ASSERT_TRUE(q.create(0).ok()) << name;
  ASSERT_TRUE(q.put("x").ok()) << name;
  auto got = q.get();
  ASSERT_TRUE(got.ok()) << name << ": " << got.status();
  EXPECT_EQ(*got, "x");
}

// A refused AUTH (or none) reads as an authentication failure at the server,
// whatever the command that met it, and is not retried into success.
void fails_to_authenticate(const RedisOptions& o, const std::string& reply) {
  PressureQueue q(o, "q");
  const std::string at = "authentication failed at 127.0.0.1:" + std::to_string(o.port) + ": ";
  auto r = q.put("x");
  EXPECT_EQ(r.code(), StatusCode::kInvalidArgument) << r.status;
  EXPECT_EQ(r.delivery(), Delivery::kNotEnqueued);
  EXPECT_TRUE(says(r.status, at + reply)) << r.status;
  EXPECT_FALSE(says(r.status, "CLIENT")) << r.status;
  EXPECT_TRUE(says(r.status, "REDIS_PASSWORD")) << r.status;  // says what to do
  Status c = q.create(0);
  EXPECT_EQ(c.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(says(c, at + reply)) << c;
}

TEST(PressureAuthTest, RequirepassTakesThePasswordFromTheUrlOrTheEnvironment) {
  RedisServer server(false, {"requirepass s3cret"});
  auto from_url = RedisOptions::from_url(url(":s3cret", server));
  ASSERT_TRUE(from_url.ok()) << from_url.status();
  works(*from_url, "by-url");
  ScopedEnv port("REDIS_PORT", std::to_string(server.port()));
  ScopedEnv pass("REDIS_PASSWORD", "s3cret");
  auto from_env = RedisOptions::from_env();
  ASSERT_TRUE(from_env.ok()) << from_env.status();
  EXPECT_EQ(from_env->password, "s3cret");
  works(*from_env, "by-env");
}

TEST(PressureAuthTest, RequirepassWithAWrongPasswordOrNoneFailsAsAuthentication) {
  RedisServer server(false, {"requirepass s3cret"});
  RedisOptions o = server.options();
  fails_to_authenticate(o, "NOAUTH");
  o.password = "wrong";
  fails_to_authenticate(o, "WRONGPASS");
}

TEST(PressureAuthTest, AclUserTakesItsNameAndPasswordFromTheUrlOrTheEnvironment) {
  RedisServer server(false, {"user default off", "user alice on >wonderland ~* &* +@all"});
  auto from_url = RedisOptions::from_url(url("alice:wonderland", server));
  ASSERT_TRUE(from_url.ok()) << from_url.status();
  works(*from_url, "by-url");
  ScopedEnv port("REDIS_PORT", std::to_string(server.port()));
  ScopedEnv user("REDIS_USERNAME", "alice");
  ScopedEnv pass("REDIS_PASSWORD", "wonderland");
  auto from_env = RedisOptions::from_env();
  ASSERT_TRUE(from_env.ok()) << from_env.status();
  EXPECT_EQ(from_env->user, "alice");
  works(*from_env, "by-env");
}

TEST(PressureAuthTest, AclUserWithAWrongPasswordOrNoneFailsAsAuthentication) {
  RedisServer server(false, {"user default off", "user alice on >wonderland ~* &* +@all"});
  RedisOptions o = server.options();
  fails_to_authenticate(o, "NOAUTH");
  o.user = "alice";
  o.password = "rabbit";
  fails_to_authenticate(o, "WRONGPASS");
}

TEST(PressureAuthTest, AnAclUserWithoutAPermissionIsToldWhichCommand) {
  RedisServer server(false, {"user default off", "user bob on >pw ~* &* +@all -evalsha"});
  const RedisOptions o = as_bob(server);
  PressureQueue q(o, "q");
  Status s = q.create(0);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(says(s, "permission denied at 127.0.0.1:" + std::to_string(o.port))) << s;
  EXPECT_TRUE(says(s, "evalsha")) << s;
}

TEST(RedisOptionsTest, ParsesUrls) {
  auto o = RedisOptions::from_url("redis://alice:s3cret@db.example:6380/2");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->host, "db.example");
  EXPECT_EQ(o->port, 6380);
  EXPECT_EQ(o->db, 2);
  EXPECT_EQ(o->user, "alice");
  EXPECT_EQ(o->password, "s3cret");
  auto p = RedisOptions::from_url("redis://:pw@h");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->user, "");
  EXPECT_EQ(p->password, "pw");
  EXPECT_EQ(p->port, 6379);
  EXPECT_EQ(RedisOptions::from_url("http://h").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RedisOptions::from_url("redis://h:99999").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RedisOptions::from_url("redis://h/x").code(), StatusCode::kInvalidArgument);
}

TEST(RedisOptionsTest, ReadsTheProtocolsEnvironment) {
  setenv("REDIS_SERVER", "10.0.0.9", 1);  // NOLINT(concurrency-mt-unsafe): single-threaded test
  setenv("REDIS_PORT", "7000", 1);        // NOLINT(concurrency-mt-unsafe)
  setenv("REDIS_DB", "3", 1);             // NOLINT(concurrency-mt-unsafe)
  setenv("PRESSURE_PREFIX", "pp", 1);     // NOLINT(concurrency-mt-unsafe)
  auto o = RedisOptions::from_env();
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->host, "10.0.0.9");
  EXPECT_EQ(o->port, 7000);
  EXPECT_EQ(o->db, 3);
  EXPECT_EQ(o->prefix, "pp");
  setenv("REDIS_PORT", "seven", 1);  // NOLINT(concurrency-mt-unsafe)
  auto bad = RedisOptions::from_env();
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("REDIS_PORT"), std::string_view::npos);
}

TEST_F(PressureQueueTest, DatabaseAndPrefixAreHonoured) {
  RedisOptions o = server_.options();
  o.db = 4;
  o.prefix = "custom";
  PressureQueue q(o, "q");
  ASSERT_TRUE(q.create(0).ok());
  ASSERT_TRUE(q.put("x").ok());
  raw_.cmd({"SELECT", "4"});
  EXPECT_EQ(raw_.lrange("custom:q"), std::vector<std::string>{"x"});
}

// peek: the head of the queue, the next messages a get would take, in
// that order; nothing taken, no role, nothing changed (every key and value
// the same); not what reliable consumers hold in flight.
TEST_F(PressureQueueTest, PeekShowsTheHeadOfTheQueueWithoutTakingIt) {
  auto q = queue();
  ASSERT_TRUE(q.create(10).ok());
  EXPECT_TRUE(q.peek(5)->empty());
  for (const char* m : {"a", "b", "c", "d", "e"}) ASSERT_TRUE(q.put(m).ok());
  EXPECT_EQ(*q.get_reliable("w"), "a");
  const auto before = raw_.dump(key() + "*", key());
  EXPECT_EQ(*q.peek(2), (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(*q.peek(100), (std::vector<std::string>{"b", "c", "d", "e"}));
  EXPECT_EQ(raw_.dump(key() + "*", key()), before);
  EXPECT_EQ(*q.get(), "b");
  EXPECT_EQ(*q.peek(1), std::vector<std::string>{"c"});
  EXPECT_EQ(q.peek(0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(queue("none").peek(1).status().code(), StatusCode::kNotFound);
  PressureQueue moved = std::move(q);
  EXPECT_EQ(q.peek(1).status().code(),
            StatusCode::kInvalidArgument);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(q.purge().status().code(),
            StatusCode::kInvalidArgument);  // NOLINT(bugprone-use-after-move)
}

// purge: every waiting message goes, counted in sluice's own key, not in
// the protocol's consumed counters; what a reliable consumer holds stays
// its own (and can be acknowledged); the queue stays, open, usable.
TEST_F(PressureQueueTest, PurgeDropsTheWaitingMessagesAndCountsThemApart) {
  auto q = queue();
  ASSERT_TRUE(q.create(0).ok());
  for (const char* m : {"a", "b", "c", "d"}) ASSERT_TRUE(q.put(m).ok());
  EXPECT_EQ(*q.get_reliable("w"), "a");
  auto n = q.purge();
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 3U);
  EXPECT_EQ(*q.length(), 0U);
  EXPECT_EQ(raw_.get(key(":purged")), "3");
  EXPECT_EQ(raw_.get(key(":stats:consumed_messages")), "<nil>");
  auto st = q.stats();
  EXPECT_EQ(st->purged, 3U);
  EXPECT_EQ(st->consumed_messages, 0U);
  EXPECT_EQ(st->in_flight, 1U);
  EXPECT_EQ(st->produced_messages, st->consumed_messages + st->length + st->in_flight + st->purged);
  const auto e = testutil::parse_prometheus(to_prometheus(*st, "q"));
  EXPECT_EQ(e.at("sluice_redis_purged_messages_total{name=\"q\"}"), 3);
  EXPECT_EQ(*q.inflight("w"), std::vector<std::string>{"a"});
  ASSERT_TRUE(q.ack("w").ok());
  EXPECT_EQ(*q.purge(), 0U);
  ASSERT_TRUE(q.put("e").ok());
  EXPECT_EQ(*q.get(), "e");
  st = q.stats();
  EXPECT_EQ(st->purged, 3U);
  EXPECT_EQ(st->produced_messages, st->consumed_messages + st->length + st->in_flight + st->purged);
  EXPECT_EQ(queue("none").purge().status().code(), StatusCode::kNotFound);
  // delete takes the count with the queue, and create removes one left
  // behind (a delete by a client that knows only the protocol's keys).
  ASSERT_TRUE(q.destroy().ok());
  EXPECT_EQ(raw_.integer({"DBSIZE"}), 0);
  raw_.cmd({"SET", key(":purged"), "7"});
  ASSERT_TRUE(q.create(0).ok());
  EXPECT_EQ(q.stats()->purged, 0U);
}

// A put waiting for room at the bound (it holds the producer role and
// waits on :not_full) is woken by a purge, at once, not at the end of its
// (long) wait slice.
TEST_F(PressureQueueTest, APurgeWakesAPutWaitingForRoom) {
  RedisOptions slow_slices = server_.options();
  slow_slices.wait_slice = 5s;
  slow_slices.io_timeout = 20s;
  auto q = queue();
  ASSERT_TRUE(q.create(2).ok());
  ASSERT_TRUE(q.put("a").ok());
  ASSERT_TRUE(q.put("b").ok());
  auto blocked = std::async(std::launch::async, [&] {
    PressureQueue p(slow_slices, "q");
    return p.put("c", with_timeout(3s)).status.code();
  });
  ASSERT_TRUE(testutil::eventually([&] { return raw_.blocked_clients() == 1; }));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(*q.purge(), 2U);
  EXPECT_EQ(blocked.get(), StatusCode::kOk);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  EXPECT_EQ(*q.peek(10), std::vector<std::string>{"c"});
  EXPECT_EQ(raw_.lrange(key(":not_full")), std::vector<std::string>{"0"});
  EXPECT_EQ(raw_.lrange(key(":producer_free")), std::vector<std::string>{"0"});
}

}  // namespace
}  // namespace sluice
