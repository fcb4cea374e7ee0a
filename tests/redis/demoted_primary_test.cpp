// A plain (non-Cluster) Redis primary demoted to a replica under a handle:
// Redis 7's FAILOVER on the primary, or REPLICAOF NO ONE on the replica and
// REPLICAOF on the old primary (what Sentinel does). The handle gets
// READONLY from its old server; it must ask ROLE and follow to the primary
// named there, with nothing lost or duplicated (a clean failover loses
// nothing), and say plainly whose replica the server is when it cannot
// follow. Two real redis-servers per test.
#include <gtest/gtest.h>

#include <future>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "sluice/redis/pressure_queue.h"
#include "sluice/redis/stream_topic.h"
#include "testutil/redis_server.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testutil::RawRedis;
using testutil::RedisServer;

std::string role(RawRedis& raw) {
  auto r = raw.cmd({"ROLE"});
  return std::string(r->element[0]->str, r->element[0]->len);
}

bool link_up(RawRedis& raw) {
  auto r = raw.cmd({"INFO", "replication"});
  return std::string_view(r->str, r->len).find("master_link_status:up") != std::string_view::npos;
}

// A primary and its replica, in sync. No diskless-sync delay (5 s by
// default) before each full sync.
struct Pair {
  RedisServer a{false, {"repl-diskless-sync-delay 0"}};
  RedisServer b{false,
                {"repl-diskless-sync-delay 0", "replicaof 127.0.0.1 " + std::to_string(a.port())}};
  RawRedis raw_a{a.port()};
  RawRedis raw_b{b.port()};
  Pair() {
    EXPECT_TRUE(testutil::eventually([&] { return link_up(raw_b); }));
  }

  // B is the primary now, A its replica, in sync.
  void fail_over(bool coordinated) {
    if (coordinated) {
      auto r = raw_a.cmd({"FAILOVER"});
      ASSERT_EQ(r->type, REDIS_REPLY_STATUS) << r->str;
    } else {
      // By hand, B must have everything first (FAILOVER waits for that).
      // WAIT counts up to this client's last write: make one.
      raw_a.cmd({"SET", "synced", "1"});
      ASSERT_EQ(raw_a.integer({"WAIT", "1", "5000"}), 1);
      raw_b.cmd({"REPLICAOF", "NO", "ONE"});
      raw_a.cmd({"REPLICAOF", "127.0.0.1", std::to_string(b.port())});
    }
    ASSERT_TRUE(testutil::eventually(
        [&] { return role(raw_b) == "master" && role(raw_a) == "slave" && link_up(raw_a); }));
  }
};

std::vector<std::string> numbered(int from, int to) {
  std::vector<std::string> out;
  for (int i = from; i < to; ++i) out.push_back("m" + std::to_string(i));
  return out;
}

TEST(DemotedPrimaryTest, PressureQueueHandleFollowsToTheNewPrimary) {
  for (const bool coordinated : {true, false}) {
    SCOPED_TRACE(coordinated ? "FAILOVER" : "REPLICAOF NO ONE, then REPLICAOF");
    Pair p;
    PressureQueue q(p.a.options(), "q");
    ASSERT_TRUE(q.create(100).ok());
    const std::vector<std::string> first = numbered(0, 5);
    ASSERT_TRUE(q.put_many(first, with_timeout(5s)).ok());
    std::vector<std::string> got;
    ASSERT_TRUE(q.get_many(got, 2, with_timeout(5s)).ok());
    ASSERT_EQ(got, numbered(0, 2));

    p.fail_over(coordinated);

    const std::vector<std::string> second = numbered(5, 10);
    const PutResult put = q.put_many(second, with_timeout(5s));
    ASSERT_TRUE(put.ok()) << put.status;
    EXPECT_EQ(put.enqueued, 5U);
    EXPECT_EQ(put.in_doubt, 0U);
    std::vector<std::string> rest;
    while (rest.size() < 8) {
      const Status s = q.get_many(rest, 8 - rest.size(), with_timeout(5s));
      ASSERT_TRUE(s.ok()) << s;
    }
    EXPECT_EQ(rest, numbered(2, 10));
    EXPECT_EQ(q.try_get().status().code(), StatusCode::kWouldBlock);
    // On the new primary, as another client sees it.
    EXPECT_EQ(p.raw_b.integer({"LLEN", "__pressure__:q"}), 0);
  }
}

// A get waiting on A when FAILOVER demotes it goes on waiting on B and gets
// what the producer (given A too) puts there. Its wait is slices of
// wait_slice: a slice Redis ends (UNBLOCKED) fails the get with
// kUnavailable, nothing taken, and it is made again, as --reconnect does.
TEST(DemotedPrimaryTest, AWaitingGetGoesOnOnTheNewPrimary) {
  Pair p;
  PressureQueue producer(p.a.options(), "q");
  ASSERT_TRUE(producer.create(100).ok());
  PressureQueue consumer(p.a.options(), "q");
  auto got = std::async(std::launch::async, [&]() -> Result<std::string> {
    const auto give_up = std::chrono::steady_clock::now() + 20s;
    for (;;) {
      Result<std::string> r = consumer.get(with_timeout(10s));
      if (r.status().code() != StatusCode::kUnavailable ||
          std::chrono::steady_clock::now() > give_up) {
        return r;
      }
      std::this_thread::sleep_for(10ms);  // a retry's backoff, as --reconnect's
    }
  });
  ASSERT_TRUE(testutil::eventually([&] { return p.raw_a.blocked_clients() == 1; }));
  p.fail_over(true);
  const PutResult put = producer.put("after", with_timeout(5s));
  ASSERT_TRUE(put.ok()) << put.status;
  Result<std::string> r = got.get();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "after");
  EXPECT_EQ(p.raw_b.integer({"LLEN", "__pressure__:q"}), 0);
}

TEST(DemotedPrimaryTest, StreamTopicHandlesFollowToTheNewPrimary) {
  for (const bool coordinated : {true, false}) {
    SCOPED_TRACE(coordinated ? "FAILOVER" : "REPLICAOF NO ONE, then REPLICAOF");
    Pair p;
    StreamTopic topic(p.a.options(), "t");
    const std::vector<std::string> channels = {"c"};
    ASSERT_TRUE(topic.create(channels).ok());
    Result<StreamChannel> ch = topic.channel("c");
    ASSERT_TRUE(ch.ok()) << ch.status();
    for (const auto& m : numbered(0, 5)) ASSERT_TRUE(topic.append(m, with_timeout(5s)).ok());
    std::vector<StreamMessage> got;
    ASSERT_TRUE(ch->next_batch(got, 2, with_timeout(5s)).ok());
    ASSERT_EQ(got.size(), 2U);
    ASSERT_TRUE(ch->ack(std::vector<std::string>{got[0].id, got[1].id}).ok());

    p.fail_over(coordinated);

    for (const auto& m : numbered(5, 10)) {
      const Result<std::string> id = topic.append(m, with_timeout(5s));
      ASSERT_TRUE(id.ok()) << id.status();
    }
    EXPECT_EQ(topic.in_doubt(), 0U);
    std::vector<std::string> rest;
    while (rest.size() < 8) {
      std::vector<StreamMessage> batch;
      const Status s = ch->next_batch(batch, 8 - rest.size(), with_timeout(5s));
      ASSERT_TRUE(s.ok()) << s;
      std::vector<std::string> ids;
      for (const auto& m : batch) {
        rest.push_back(m.payload);
        ids.push_back(m.id);
      }
      ASSERT_TRUE(ch->ack(ids).ok());
    }
    EXPECT_EQ(rest, numbered(2, 10));
    std::vector<StreamMessage> none;
    EXPECT_EQ(ch->next_batch(none, 1, with_timeout(200ms)).code(), StatusCode::kDeadlineExceeded);
    const Result<StreamTopicStats> st = topic.stats();
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_EQ(st->appended, 10U);
    ASSERT_EQ(st->channels.size(), 1U);
    EXPECT_EQ(st->channels[0].unacknowledged, 0U);
  }
}

// The primary ROLE names cannot be reached: the error says the server is a
// replica and of whom, and the put did not run (nothing in doubt).
TEST(DemotedPrimaryTest, UnreachablePrimaryIsNamedInTheError) {
  RedisServer a;
  int gone = 0;
  {
    RedisServer c;
    gone = c.port();
  }  // stopped: nothing listens there now
  PressureQueue q(a.options(), "q");
  ASSERT_TRUE(q.create(100).ok());
  ASSERT_TRUE(q.put("before", with_timeout(5s)).ok());
  RawRedis raw(a.port());
  raw.cmd({"REPLICAOF", "127.0.0.1", std::to_string(gone)});

  const PutResult put = q.put("after", with_timeout(5s));
  EXPECT_EQ(put.status.code(), StatusCode::kUnavailable) << put.status;
  EXPECT_EQ(put.in_doubt, 0U);
  const std::string where = "127.0.0.1:" + std::to_string(gone);
  EXPECT_NE(put.status.message().find("is a replica of " + where), std::string_view::npos)
      << put.status;
  EXPECT_NE(put.status.message().find("127.0.0.1:" + std::to_string(a.port())),
            std::string_view::npos)
      << put.status;
  // Nothing was written (a replica takes no writes): the queue still holds one.
  EXPECT_EQ(raw.lrange("__pressure__:q"), std::vector<std::string>{"before"});
}

// An ACL user that may not run ROLE: the plain READONLY, kUnavailable, as
// before (not followed, not kInternal).
TEST(DemotedPrimaryTest, WithoutRoleTheReadonlyErrorStays) {
  RedisServer a(false, {"user alice on >pw ~* &* +@all -role"});
  int gone = 0;
  {
    RedisServer c;
    gone = c.port();
  }
  RedisOptions o = a.options();
  o.user = "alice";
  o.password = "pw";
  PressureQueue q(o, "q");
  ASSERT_TRUE(q.create(100).ok());
  RawRedis raw(a.port());
  raw.cmd({"REPLICAOF", "127.0.0.1", std::to_string(gone)});
  const PutResult put = q.put("after", with_timeout(5s));
  EXPECT_EQ(put.status.code(), StatusCode::kUnavailable) << put.status;
  EXPECT_EQ(put.in_doubt, 0U);
  EXPECT_NE(put.status.message().find("READONLY"), std::string_view::npos) << put.status;
  EXPECT_EQ(put.status.message().find("is a replica of"), std::string_view::npos) << put.status;
}

}  // namespace
}  // namespace sluice
