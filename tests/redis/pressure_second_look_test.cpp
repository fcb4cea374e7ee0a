// Pressure queues, a second look at reliable gets, roles and recovery.
// Each test failed on the code before its fix.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sluice/redis/pressure_queue.h"
#include "testutil/redis_server.h"

namespace sluice {
namespace {

using testutil::RawRedis;
using testutil::RedisServer;

class PressureSecondLookTest : public ::testing::Test {
 protected:
  PressureQueue sluice_q(const std::string& name = "q") { return {server_.options(), name}; }

  RedisServer server_;
  RawRedis raw_{server_.port()};
};

// requeue_orphans(tag) recovers consumers named tag + a client id whose
// process is gone. A live consumer of another tag that starts with `tag`
// ("ingest" and "ingest-retry") is not one of them: "-retry<host>_pid<N>"
// is no client id, and reading its "host" as "-retry<host>" (another host,
// no connection of that name) took it for gone and put its in-flight
// messages back: delivered twice, once to it and once to the next reader.
TEST_F(PressureSecondLookTest, RequeueOrphansLeavesALiveConsumerOfALongerTagAlone) {
  auto live = sluice_q();
  ASSERT_TRUE(live.create(0).ok());
  ASSERT_TRUE(live.put("m").ok());
  const std::string consumer = "ingest-retry" + live.client_id();  // this process: alive
  auto got = live.get_reliable(consumer);
  ASSERT_TRUE(got.ok()) << got.status();

  auto other = sluice_q();
  auto back = other.requeue_orphans("ingest");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, 0U) << "a live consumer's in-flight message was put back";
  EXPECT_EQ(*other.length(), 0U);
  EXPECT_EQ(*live.inflight(consumer), std::vector<std::string>{"m"});
}

}  // namespace
}  // namespace sluice
