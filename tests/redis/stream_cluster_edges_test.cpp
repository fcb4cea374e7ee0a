// StreamTopic/StreamChannel at the edges of Redis Cluster: a planned
// failover (CLUSTER FAILOVER, run on a replica as an operator would) while
// a handle waits on the server. Three primaries with a replica each, made
// by the test binary (shared by its tests; each picks its topic's primary
// and replica from the cluster as it is then).
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "redis/stream_helpers.h"
#include "sluice/redis/stream_topic.h"
#include "testutil/redis_cluster.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testutil::append;
using testutil::numbered;
using testutil::RawRedis;
using testutil::RedisCluster;
using testutil::stream_key;
using testutil::take;

RedisCluster& cluster() {
  static RedisCluster c(3, 1);
  return c;
}

// Repeats `op` while it fails with kUnavailable (the cluster failing over),
// for at most 15 s; its last status.
template <class Op>
Status through_failover(Op op) {
  const auto give_up = std::chrono::steady_clock::now() + 15s;
  for (;;) {
    Status s = op();
    if (s.code() != StatusCode::kUnavailable || std::chrono::steady_clock::now() > give_up) {
      return s;
    }
    std::this_thread::yield();
  }
}

// Whether node `node` has a client blocked (flags b) in `command`.
bool blocked_in(std::size_t node, std::string_view command) {
  return RawRedis(cluster().port(node)).blocked_in(command);
}

// Whether node `node` is a replica now (ROLE).
bool is_replica(std::size_t node) {
  auto r = RawRedis(cluster().port(node)).cmd({"ROLE"});
  return r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
         std::string_view(r->element[0]->str, r->element[0]->len) == "slave";
}

// A topic whose primary is not the seed (node 0), and that primary.
std::pair<std::string, std::size_t> topic_off_the_seed(const std::string& prefix) {
  for (int i = 0;; ++i) {
    const std::string n = prefix + "." + std::to_string(i);
    const std::size_t node = cluster().node_of(stream_key(n));
    if (node != 0) return {n, node};
  }
}

// Options whose blocking calls wait on the server longer than the test's
// failover takes, so the handle is certainly blocked when it happens.
RedisOptions long_waits() {
  RedisOptions o = cluster().options();
  o.wait_slice = 20s;
  o.io_timeout = 40s;
  return o;
}

// Fails `primary` over to its replica, the way an operator does, once the
// replica streams; returns when the old primary is a replica.
void manual_failover(std::size_t primary, const std::string& tag) {
  ASSERT_TRUE(testutil::eventually(
      [&] { return cluster().replica_acknowledges(primary, "probe:{" + tag + "}"); }));
  const std::size_t replica = cluster().replica_of(primary);
  // A manual failover that finds no votes (the primaries vote for a replica
  // of one shard once per 2 node timeouts: an earlier test's failover) ends
  // after 5 s having done nothing: ask again then.
  const auto give_up = std::chrono::steady_clock::now() + 20s;
  for (;;) {
    auto r = RawRedis(cluster().port(replica)).cmd({"CLUSTER", "FAILOVER"});
    ASSERT_EQ(r->type, REDIS_REPLY_STATUS) << std::string(r->str, r->len);
    if (testutil::eventually([&] { return is_replica(primary); }, 6s)) return;
    ASSERT_LT(std::chrono::steady_clock::now(), give_up) << "no failover of node " << primary;
  }
}

// A read blocked on the primary (XREADGROUP ... BLOCK) when it becomes a
// replica: Redis ends it with "UNBLOCKED force unblock from blocking
// operation, instance state changed" and closes the connection. That is a
// failover (kUnavailable: retry), not an internal error; the retried read
// then goes on through the promoted replica, nothing lost.
TEST(StreamClusterEdgesTest, AReadWaitingThroughAPlannedFailoverIsUnavailableThenCarriesOn) {
  const auto [name, primary] = topic_off_the_seed("planned.read");
  StreamTopic t(cluster().options(), name);
  const std::string chans[] = {"c"};
  ASSERT_EQ(t.create(chans), StatusCode::kOk);
  StreamChannel ch(long_waits(), name, "c");
  ASSERT_EQ(ch.join(), StatusCode::kOk);

  auto reading = std::async(std::launch::async, [&] {
    std::vector<StreamMessage> got;
    return ch.next_batch(got, 1, with_timeout(15s));
  });
  ASSERT_TRUE(testutil::eventually([&] { return blocked_in(primary, "xreadgroup"); }));
  manual_failover(primary, name);
  const Status s = reading.get();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;

  ASSERT_EQ(through_failover([&] { return append(t, numbered("after", 3)); }), StatusCode::kOk);
  std::vector<std::string> got;
  while (got.size() < 3) {
    std::vector<StreamMessage> batch;
    const Status r = through_failover([&] { return ch.next_batch(batch, 3, with_timeout(10s)); });
    ASSERT_EQ(r, StatusCode::kOk) << r;
    std::vector<std::string> ids;
    for (auto& m : batch) {
      ids.push_back(m.id);
      got.push_back(std::move(m.payload));
    }
    ASSERT_EQ(through_failover([&] { return ch.ack(ids); }), StatusCode::kOk);
  }
  EXPECT_EQ(got, numbered("after", 3));
  EXPECT_NE(cluster().node_of(stream_key(name)), primary);
}

// An append waiting at the topic's bound (BLPOP on its wake key) when the
// primary becomes a replica: likewise kUnavailable, with nothing in doubt
// (the wait appended nothing), and the retried append goes in once the
// consumer makes room.
TEST(StreamClusterEdgesTest, AnAppendWaitingAtTheBoundThroughAPlannedFailoverIsUnavailable) {
  const auto [name, primary] = topic_off_the_seed("planned.bound");
  StreamTopicOptions o;
  o.max_unconsumed = 1;
  StreamTopic maker(cluster().options(), name, o);
  const std::string chans[] = {"c"};
  ASSERT_EQ(maker.create(chans), StatusCode::kOk);
  ASSERT_EQ(append(maker, numbered("first", 1)), StatusCode::kOk);

  StreamTopic writer(long_waits(), name);  // the recorded bound applies
  auto appending = std::async(
      std::launch::async, [&] { return append(writer, numbered("second", 1), with_timeout(15s)); });
  ASSERT_TRUE(testutil::eventually([&] { return blocked_in(primary, "blpop"); }));
  manual_failover(primary, name);
  const Status s = appending.get();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_EQ(writer.in_doubt(), 0U);

  StreamChannel ch(cluster().options(), name, "c");
  EXPECT_EQ(take(ch, 1), numbered("first", 1));
  // The server closed the connection after its UNBLOCKED: the retried
  // append is not sent down it (it would look sent and unanswered: in doubt).
  std::size_t doubted = 0;
  ASSERT_EQ(through_failover([&] {
              Status a = append(writer, numbered("second", 1), with_timeout(10s));
              doubted += writer.in_doubt();
              return a;
            }),
            StatusCode::kOk);
  EXPECT_EQ(doubted, 0U);
  EXPECT_EQ(take(ch, 1), numbered("second", 1));
  auto st = maker.stats();
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->appended, 2U);
}

// Whether node `node` is a primary now (ROLE).
bool is_primary(std::size_t node) {
  auto r = RawRedis(cluster().port(node)).cmd({"ROLE"});
  return r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
         std::string_view(r->element[0]->str, r->element[0]->len) == "master";
}

// Whether node `by` has learnt that `node` is a primary (CLUSTER NODES):
// after a failover, gossip reaches the other nodes some time after ROLE
// says so on the promoted node, and SETSLOT MIGRATING refuses a target it
// still takes for a replica ("Target node is not a master").
bool sees_as_primary(std::size_t by, std::size_t node) {
  auto r = RawRedis(cluster().port(by)).cmd({"CLUSTER", "NODES"});
  const std::string nodes(r->str, r->len);
  const std::string id = cluster().id(node);
  for (std::size_t at = 0; at < nodes.size();) {
    const std::size_t end = std::min(nodes.find('\n', at), nodes.size());
    const std::string_view line(nodes.data() + at, end - at);
    if (line.starts_with(id + " ")) return line.find("master") != std::string_view::npos;
    at = end + 1;
  }
  return false;
}

// A primary other than `from` to move a slot to, known as one by both.
std::size_t move_target(std::size_t from) {
  std::size_t to = 0;
  while (to == from || !is_primary(to)) ++to;
  EXPECT_TRUE(
      testutil::eventually([&] { return sees_as_primary(from, to) && sees_as_primary(to, from); }));
  return to;
}

// A key served by node `node`, for replica_acknowledges().
std::string probe_on(std::size_t node) {
  for (int i = 0;; ++i) {
    const std::string k = "probe:{" + std::to_string(i) + "}";
    if (cluster().node_of(k) == node) return k;
  }
}

// RedisCluster::end_move on the primaries only (a replica refuses SETSLOT).
void end_move(long long slot, std::size_t to) {
  for (std::size_t i = 0; i < cluster().size(); ++i) {
    if (!is_primary(i)) continue;
    auto r = RawRedis(cluster().port(i))
                 .cmd({"CLUSTER", "SETSLOT", std::to_string(slot), "NODE", cluster().id(to)});
    ASSERT_EQ(r->type, REDIS_REPLY_STATUS) << std::string(r->str, r->len);
  }
}

// StreamTopicOptions::replicas = 1 while the topic's slot migrates: once
// every key of the topic has moved, its old node answers ASK and the append
// script runs on the new one (ASKING). Its WAIT must ask the node that ran
// it: the new node's replica is cut off, so the batch is not acknowledged
// (kUnavailable, in doubt), even though the old node's replica has all the
// old node ever had.
TEST(StreamClusterEdgesTest, AnAppendThroughAskWaitsForTheReplicasOfTheNodeThatRanIt) {
  RedisCluster& c = cluster();
  RedisOptions seed = c.options();
  seed.io_timeout = std::chrono::milliseconds(1000);  // WAIT waits 750 ms
  const auto [name, from] = topic_off_the_seed("asked");
  const std::size_t to = move_target(from);
  ASSERT_TRUE(testutil::eventually([&] { return c.replica_acknowledges(from, probe_on(from)); }));
  ASSERT_TRUE(testutil::eventually([&] { return c.replica_acknowledges(to, probe_on(to)); }));

  StreamTopicOptions o;
  o.replicas = 1;
  o.max_deliveries = 1;
  StreamTopic t(seed, name, o);
  const std::string chans[] = {"c"};
  ASSERT_EQ(t.create(chans), StatusCode::kOk);
  // Every key of the topic made, as in a topic long in use: 1024 appended
  // (a seek checkpoint), one message dead-lettered, the rest acknowledged
  // (the acked counts and the wake token). Otherwise the scripts get
  // TRYAGAIN until the move ends, and never run through ASK.
  ASSERT_EQ(append(t, numbered("fill", 1024)), StatusCode::kOk);
  StreamChannel ch(seed, name, "c", o);
  std::vector<StreamMessage> one;
  ASSERT_EQ(ch.next_batch(one, 1, with_timeout(10s)), StatusCode::kOk);
  ASSERT_EQ(ch.nack(std::vector<std::string>{one.at(0).id}), StatusCode::kOk);
  EXPECT_EQ(take(ch, 1023).size(), 1023U);
  ASSERT_EQ(t.stats()->dead_letters, 1U);
  const std::string base = "sluice:{" + name + "}:";
  ASSERT_EQ(RawRedis(c.port(from))
                .integer({"EXISTS", base + "stream", base + "meta", base + "acked", base + "wake",
                          base + "dead", base + "index"}),
            6);

  const long long slot = c.slot_of(stream_key(name));
  c.begin_move(slot, from, to);  // every key on `to`; `from` answers ASK
  const std::size_t cut_off = c.replica_of(to);
  c.pause(cut_off);
  ASSERT_GE(RawRedis(c.port(to)).integer({"CLIENT", "KILL", "TYPE", "replica"}), 1);
  const Status s = append(t, numbered("moving", 10));
  const std::size_t doubted = t.in_doubt();
  c.resume(cut_off);
  end_move(slot, to);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("only 0 of the 1 replicas"), std::string_view::npos) << s;
  EXPECT_EQ(doubted, 10U);
  EXPECT_EQ(c.node_of(stream_key(name)), to);
}

// A read blocked on the topic's node (XREADGROUP ... BLOCK) when its slot
// starts migrating: MIGRATE deletes the stream from the old node, and Redis
// ends the read with "UNBLOCKED the stream key no longer exists", as for a
// topic deleted. The topic was not deleted: the read goes on (on the new
// node, through ASK) and gets what is appended there.
TEST(StreamClusterEdgesTest, AReadWaitingWhileItsSlotMigratesIsNotToldTheTopicWasDeleted) {
  RedisCluster& c = cluster();
  const auto [name, from] = topic_off_the_seed("migrating.read");
  const std::size_t to = move_target(from);
  StreamTopic t(c.options(), name);
  const std::string chans[] = {"c"};
  ASSERT_EQ(t.create(chans), StatusCode::kOk);
  StreamChannel ch(long_waits(), name, "c");
  ASSERT_EQ(ch.join(), StatusCode::kOk);
  ASSERT_EQ(append(t, numbered("before", 1)), StatusCode::kOk);
  EXPECT_EQ(take(ch, 1), numbered("before", 1));  // the stream exists: MIGRATE moves it

  auto reading = std::async(std::launch::async, [&] {
    std::vector<StreamMessage> got;
    Status s = ch.next_batch(got, 1, with_timeout(15s));
    return std::make_pair(s, got);
  });
  ASSERT_TRUE(testutil::eventually([&] { return blocked_in(from, "xreadgroup"); }));
  const long long slot = c.slot_of(stream_key(name));
  c.begin_move(slot, from, to);
  end_move(slot, to);
  ASSERT_EQ(append(t, numbered("after", 1)), StatusCode::kOk);
  auto [s, got] = reading.get();
  ASSERT_EQ(s, StatusCode::kOk) << s;
  ASSERT_EQ(got.size(), 1U);
  EXPECT_EQ(got[0].payload, "after0");
  EXPECT_EQ(ch.ack(std::vector<std::string>{got[0].id}), StatusCode::kOk);
}

}  // namespace
}  // namespace sluice
