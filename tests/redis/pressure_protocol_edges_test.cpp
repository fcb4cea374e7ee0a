// Edges of sluice's pressure queues against other clients of the protocol
// (tests/redis/reference_client.h) on a real redis-server: the :deleting
// mark of a sluice delete (pressure.lua) must never make a queue that was
// deleted and made again, or only closed, look deleted.
#include <gtest/gtest.h>

#include <future>
#include <string>

#include "redis/reference_client.h"
#include "sluice/redis/pressure_queue.h"
#include "testutil/redis_server.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testutil::RawRedis;
using testutil::RedisServer;
using testutil::ReferenceClient;

class PressureProtocolEdgesTest : public ::testing::Test {
 protected:
  PressureQueue queue() { return {server_.options(), "q"}; }
  std::string key(const std::string& suffix = "") { return "__pressure__:q" + suffix; }
  long long blocked() { return raw_.blocked_clients(); }
  bool exists(const std::string& suffix) { return raw_.integer({"EXISTS", key(suffix)}) == 1; }

  RedisServer server_;
  RawRedis raw_{server_.port()};
};

// A sluice delete waits for a consumer role held by another client; while
// it waits, another client deletes the queue (the protocol's Delete). The
// sluice delete then finds no queue. Its mark must go with it: the other
// client makes the queue again and closes it, and a sluice get must see a
// closed queue (kClosed), not one "being deleted" (kNotFound).
TEST_F(PressureProtocolEdgesTest, AMarkOfADeleteThatFoundTheQueueGoneDoesNotOutliveIt) {
  ReferenceClient other(server_.port(), "q");
  ASSERT_TRUE(queue().create(0).ok());
  // Another client's get, inside its wait: the consumer role taken.
  raw_.cmd({"RPOP", key(":consumer_free")});
  raw_.cmd({"SET", key(":consumer"), "another-client"});

  auto gone = std::async(std::launch::async, [&] { return queue().destroy(with_timeout(30s)); });
  ASSERT_TRUE(testutil::eventually([&] { return exists(":deleting") && blocked() == 1; }));
  // The protocol's Delete: drops :bound, then waits for the consumer role.
  auto del = std::async(std::launch::async, [&] { other.del(); });
  ASSERT_TRUE(testutil::eventually([&] { return !exists(":bound") && blocked() == 2; }));
  raw_.cmd({"LPUSH", key(":consumer_free"), "0"});  // the holder leaves
  del.get();
  auto g = gone.get();
  EXPECT_EQ(g.status().code(), StatusCode::kNotFound) << g.status();

  other.create(0);
  other.put("x");
  other.close();
  auto q = queue();
  auto first = q.get(with_timeout(10s));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*first, "x");
  auto end = q.get(with_timeout(10s));
  EXPECT_EQ(end.status().code(), StatusCode::kClosed) << end.status();
  EXPECT_EQ(queue().put("late").code(), StatusCode::kClosed);
}

}  // namespace
}  // namespace sluice
