// A Streams read waiting on the server while its topic's slot migrates (as
// redis-cli --cluster reshard/rebalance move it): each move ends the wait
// with "UNBLOCKED the stream key no longer exists" (MIGRATE deletes the key
// from the old node). That is not a deleted topic however many times it
// happens under one read. And a slot's move ends with CLUSTER SETSLOT NODE
// sent to every node in turn (redis-cli --cluster in its own order): until
// the last one, two nodes may each answer MOVED naming the other. A call
// caught between them waits for them to agree. A 3-primary Redis Cluster of
// real redis-servers.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <string_view>
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
  static RedisCluster c(3, 0);
  return c;
}

// Whether node `node` has a client blocked (flags b) in `command`.
bool blocked_in(std::size_t node, std::string_view command) {
  return RawRedis(cluster().port(node)).blocked_in(command);
}

// How many MOVED replies node `node` has sent (INFO errorstats).
long long moved_replies(std::size_t node) {
  auto r = RawRedis(cluster().port(node)).cmd({"INFO", "errorstats"});
  const std::string_view info(r->str, r->len);
  const std::string_view field = "errorstat_MOVED:count=";
  const auto at = info.find(field);
  if (at == std::string_view::npos) return 0;
  return std::stoll(std::string(info.substr(at + field.size(), 20)));
}

// Blocking calls that wait on the server longer than the test takes, so
// the read is certainly blocked when its slot moves.
RedisOptions long_waits() {
  RedisOptions o = cluster().options();
  o.wait_slice = 20s;
  o.io_timeout = 40s;
  return o;
}

// The read waits on `from`; its slot moves to `to`; the read, waiting again
// there, sees its slot move back. Both moves must leave it waiting, and it
// gets the message appended after them.
TEST(StreamSlotMigrationEdgesTest, AReadWaitingWhileItsSlotMovesTwiceIsNotToldTheTopicWasDeleted) {
  RedisCluster& c = cluster();
  const std::string name = "migrating.twice";
  const std::size_t from = c.node_of(stream_key(name));
  const std::size_t to = (from + 1) % c.size();
  StreamTopic t(c.options(), name);
  const std::string chans[] = {"c"};
  ASSERT_EQ(t.create(chans), StatusCode::kOk);
  StreamChannel ch(long_waits(), name, "c");
  ASSERT_EQ(ch.join(), StatusCode::kOk);
  ASSERT_EQ(append(t, numbered("before", 1)), StatusCode::kOk);
  EXPECT_EQ(take(ch, 1), numbered("before", 1));  // the stream exists: MIGRATE moves it

  auto reading = std::async(std::launch::async, [&] {
    std::vector<StreamMessage> got;
    Status s = ch.next_batch(got, 1, with_timeout(30s));
    return std::make_pair(s, got);
  });
  const long long slot = c.slot_of(stream_key(name));
  ASSERT_TRUE(testutil::eventually([&] { return blocked_in(from, "xreadgroup"); }));
  c.begin_move(slot, from, to);
  c.end_move(slot, to);
  ASSERT_TRUE(testutil::eventually([&] { return blocked_in(to, "xreadgroup"); }));
  c.begin_move(slot, to, from);
  c.end_move(slot, from);
  ASSERT_EQ(append(t, numbered("after", 1)), StatusCode::kOk);
  auto [s, got] = reading.get();
  ASSERT_EQ(s, StatusCode::kOk) << s;
  ASSERT_EQ(got.size(), 1U);
  EXPECT_EQ(got[0].payload, "after0");
  EXPECT_EQ(ch.ack(std::vector<std::string>{got[0].id}), StatusCode::kOk);
}

// The topic's slot belongs to `a`, then `a` is told it belongs to `b`
// while `b` still thinks it is `a`'s: each sends the call to the other. The
// call goes round between them (more often than any fixed number of
// redirections) until every node is told `b` owns the slot; then it runs.
TEST(StreamSlotMigrationEdgesTest, ACallSentRoundByTwoNodesThatDisagreeWaitsForThemToAgree) {
  RedisCluster& c = cluster();
  const std::string name = "disagreed.over";  // no keys yet: its slot can be given away
  const std::size_t a = c.node_of(stream_key(name));
  const std::size_t b = (a + 1) % c.size();
  const long long slot = c.slot_of(stream_key(name));
  RawRedis(c.port(a)).cmd({"CLUSTER", "SETSLOT", std::to_string(slot), "NODE", c.id(b)});
  const long long before = moved_replies(a) + moved_replies(b);

  StreamTopic t(c.options(), name);
  auto creating = std::async(std::launch::async, [&] {
    const std::string chans[] = {"c"};
    return t.create(chans);
  });
  // Sent round at least 20 times (past any fixed limit of redirections),
  // unless the call gave up first.
  const auto gone_round = [&] { return moved_replies(a) + moved_replies(b) >= before + 20; };
  ASSERT_TRUE(testutil::eventually(
      [&] { return gone_round() || creating.wait_for(0s) == std::future_status::ready; }));
  ASSERT_TRUE(gone_round()) << "the call stopped going round: " << creating.get();
  c.end_move(slot, b);
  ASSERT_EQ(creating.get(), StatusCode::kOk);
  EXPECT_EQ(c.node_of(stream_key(name)), b);
  ASSERT_EQ(append(t, numbered("m", 1)), StatusCode::kOk);
  StreamChannel ch(c.options(), name, "c");
  ASSERT_EQ(ch.join(), StatusCode::kOk);
  EXPECT_EQ(take(ch, 1), numbered("m", 1));
}

}  // namespace
}  // namespace sluice
