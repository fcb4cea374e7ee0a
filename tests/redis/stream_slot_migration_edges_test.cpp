// A Streams read waiting on the server while its topic's slot migrates (as
// redis-cli --cluster reshard/rebalance move it): each move ends the wait
// with "UNBLOCKED the stream key no longer exists" (MIGRATE deletes the key
// from the old node). That is not a deleted topic however many times it
// happens under one read. A 3-primary Redis Cluster of real redis-servers.
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

}  // namespace
}  // namespace sluice
