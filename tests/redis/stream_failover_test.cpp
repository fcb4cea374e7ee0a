// StreamTopic/StreamChannel through a Redis Cluster failover: three
// primaries, each with a replica (node timeout 1 s), made by the test
// binary with `redis-cli --cluster create --cluster-replicas 1`. One thread
// drives both handles (label single_thread: ThreadSanitizer skips it).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <ostream>
#include <set>
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

// Failover: a cluster of three primaries, each with a replica. The primary
// serving a topic dies (SIGKILL) while a producer and a consumer use it;
// the cluster promotes its replica. Both handles fail with kUnavailable
// until then and carry on after it, with nothing lost that was replicated
// before the kill (Redis replicates asynchronously: the test waits for the
// replica to catch up first, as WAIT would). At least once: a call cut
// off by the kill may run twice.
struct Failure {
  bool seed;   // the victim is the one node the handles were given
  bool hangs;  // SIGSTOP (alive, silent, later back) rather than SIGKILL
};
void PrintTo(const Failure& f, std::ostream* os) {
  *os << (f.seed ? "the seed" : "another shard") << (f.hangs ? " hangs" : " dies");
}

class StreamFailoverTest : public ::testing::TestWithParam<Failure> {
 protected:
  static RedisCluster& cluster() {
    static RedisCluster c(3, 1);
    return c;
  }
};

// Repeats `op` while it fails with kUnavailable (the cluster failing over),
// for at most a minute; its last status.
template <class Op>
Status through_failover(Op op, int* unavailable = nullptr) {
  const auto give_up = std::chrono::steady_clock::now() + 60s;
  for (;;) {
    Status s = op();
    if (s.code() != StatusCode::kUnavailable || std::chrono::steady_clock::now() > give_up) {
      return s;
    }
    if (unavailable != nullptr) ++*unavailable;
    std::this_thread::sleep_for(50ms);  // the cluster's state, polled: no event to wait on
  }
}

TEST_P(StreamFailoverTest, AHandleCarriesOnOnThePromotedReplica) {
  const bool kill_seed = GetParam().seed;
  RedisCluster& c = cluster();
  RedisOptions seed = c.options();
  // A silent node costs a call io_timeout: keep it short.
  seed.io_timeout = std::chrono::milliseconds(1000);
  // A topic on the seed's shard, or on another one (reached through MOVED).
  std::string name;
  std::size_t victim = 0;
  for (int i = 0; name.empty(); ++i) {
    ASSERT_LT(i, 10000);
    const std::string n = "failover." + std::to_string(i);
    const std::size_t node = c.node_of(stream_key(n));
    if ((node == 0) == kill_seed) {
      name = n;
      victim = node;
    }
  }
  StreamTopic t(seed, name);
  const std::string chans[] = {"c"};
  ASSERT_EQ(t.create(chans), StatusCode::kOk);
  StreamChannel ch(seed, name, "c");
  const auto before = numbered("before", 100);
  ASSERT_EQ(append(t, before), StatusCode::kOk);
  ASSERT_EQ(take(ch, 50), std::vector<std::string>(before.begin(), before.begin() + 50));
  ASSERT_TRUE(testutil::eventually([&] { return c.replicas_caught_up(victim); }));

  if (GetParam().hangs) {
    c.pause(victim);
  } else {
    c.kill(victim);
  }
  int unavailable = 0;
  const auto after = numbered("after", 100);
  const Status put = through_failover([&] { return append(t, after); }, &unavailable);
  ASSERT_EQ(put, StatusCode::kOk) << put;
  EXPECT_GT(unavailable, 0);  // the first call after the kill cannot succeed
  EXPECT_NE(c.node_of(stream_key(name)), victim);

  // Everything not acknowledged before the kill comes, at least once;
  // nothing acknowledged before it comes again.
  std::set<std::string> want(before.begin() + 50, before.end());
  want.insert(after.begin(), after.end());
  std::set<std::string> seen;
  while (seen.size() < want.size()) {
    std::vector<StreamMessage> got;
    const Status s = through_failover([&] { return ch.next_batch(got, 64, with_timeout(10s)); });
    ASSERT_EQ(s, StatusCode::kOk) << s;
    std::vector<std::string> ids;
    for (auto& m : got) {
      ASSERT_TRUE(want.count(m.payload)) << m.payload;
      ids.push_back(m.id);
      seen.insert(std::move(m.payload));
    }
    ASSERT_EQ(through_failover([&] { return ch.ack(ids); }), StatusCode::kOk);
  }
  auto st = t.stats();
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->channels[0].unacknowledged, 0U);
  if (GetParam().hangs) {
    // Back, it learns it was replaced and follows the new primary: what it
    // may still have run from its socket is gone, and nothing comes twice.
    c.resume(victim);
    ASSERT_TRUE(testutil::eventually([&] {
      auto r = RawRedis(c.port(victim)).cmd({"ROLE"});
      return r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
             std::string_view(r->element[0]->str, r->element[0]->len) == "slave";
    }));
    ASSERT_EQ(append(t, numbered("last", 1)), StatusCode::kOk);
    std::vector<StreamMessage> got;
    ASSERT_EQ(ch.next_batch(got, 64, with_timeout(10s)), StatusCode::kOk);
    ASSERT_EQ(got.size(), 1U);
    EXPECT_EQ(got[0].payload, "last0");
  }
}

// StreamTopicOptions::replicas = 1: an append is acknowledged only once the
// primary's replica has it, so no acknowledged message is lost when the
// primary dies right after acknowledging. The replica is first cut off
// (SIGSTOPped, and its link closed by the primary, so that nothing more
// reaches it, not even its socket buffer), then a batch is appended and the
// primary killed at once; the replica is resumed and promoted. What it
// shows: without the option, the primary acknowledges that batch and the
// failover loses it (every time: the replica never got it), as Redis
// replication is asynchronous. With it, WAIT finds no replica within its
// timeout, so the batch is reported in doubt (kUnavailable, in_doubt())
// instead of acknowledged, and every batch that was acknowledged is on the
// promoted replica.
TEST(StreamFailoverReplicasTest, NoAcknowledgedAppendIsLostWhenItsPrimaryDies) {
  RedisCluster c(3, 1);
  RedisOptions seed = c.options();
  seed.io_timeout = std::chrono::milliseconds(1000);  // WAIT waits 750 ms
  std::string name;
  std::size_t victim = 0;
  for (int i = 0; name.empty(); ++i) {  // a shard the seed is not on: the handles fall back on it
    ASSERT_LT(i, 10000);
    const std::string n = "replicated." + std::to_string(i);
    victim = c.node_of(stream_key(n));
    if (victim != 0) name = n;
  }
  // The replica streams (polled; see replica_acknowledges).
  ASSERT_TRUE(
      testutil::eventually([&] { return c.replica_acknowledges(victim, "probe:{" + name + "}"); }));
  StreamTopicOptions o;
  o.replicas = 1;
  StreamTopic t(seed, name, o);
  const std::string chans[] = {"c"};
  ASSERT_EQ(t.create(chans), StatusCode::kOk);
  std::vector<std::string> acknowledged;  // every message of every append that returned OK
  const auto put = [&](const std::vector<std::string>& batch) {
    const Status s = append(t, batch);
    if (s.ok()) acknowledged.insert(acknowledged.end(), batch.begin(), batch.end());
    return s;
  };
  ASSERT_EQ(put(numbered("first", 100)), StatusCode::kOk);

  const std::size_t replica = c.replica_of(victim);
  c.pause(replica);
  ASSERT_GE(RawRedis(c.port(victim)).integer({"CLIENT", "KILL", "TYPE", "replica"}), 1);
  const Status cut = put(numbered("cut", 100));
  c.kill(victim);
  c.resume(replica);
  EXPECT_EQ(cut, StatusCode::kUnavailable);
  EXPECT_NE(cut.message().find("only 0 of the 1 replicas"), std::string_view::npos) << cut;
  EXPECT_EQ(t.in_doubt(), 100U);

  // After the failover: every acknowledged message, read from the promoted replica.
  StreamChannel ch(seed, name, "c");
  std::set<std::string> seen;
  const std::set<std::string> want(acknowledged.begin(), acknowledged.end());
  while (!std::includes(seen.begin(), seen.end(), want.begin(), want.end())) {
    std::vector<StreamMessage> got;
    const Status s = through_failover([&] { return ch.next_batch(got, 256, with_timeout(10s)); });
    ASSERT_EQ(s, StatusCode::kOk) << s
                                  << "; acknowledged and missing: " << want.size() - seen.size();
    for (auto& m : got) seen.insert(std::move(m.payload));
  }
  EXPECT_NE(c.node_of(stream_key(name)), victim);
}

INSTANTIATE_TEST_SUITE_P(Victim, StreamFailoverTest,
                         ::testing::Values(Failure{false, false}, Failure{true, false},
                                           Failure{false, true}, Failure{true, true}),
                         [](const auto& p) {
                           return std::string(p.param.seed ? "TheSeed" : "AnotherShard") +
                                  (p.param.hangs ? "Hangs" : "Dies");
                         });

}  // namespace
}  // namespace sluice
