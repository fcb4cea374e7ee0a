// Pressure queues, a second look at reliable gets, roles and recovery.
// Each test failed on the code before its fix.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "sluice/redis/pressure_queue.h"
#include "testutil/redis_server.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
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

// ack(consumer, n) acknowledges the n oldest in flight: it is not
// idempotent. When its reply is lost (the server hung after it got the
// request) it may have run, and a retry would acknowledge n more, messages
// the consumer has not processed: lost if it then dies. The failure must say
// that its effect is unknown, as put, get and purge do, not look like a
// refused call to retry.
TEST_F(PressureSecondLookTest, AnAckWhoseReplyIsLostSaysItsEffectIsUnknown) {
  RedisOptions o = server_.options();
  o.io_timeout = 200ms;
  PressureQueue q(o, "q");
  ASSERT_TRUE(q.create(0).ok());
  ASSERT_TRUE(q.put("a").ok());
  ASSERT_TRUE(q.put("b").ok());
  std::vector<std::string> got;
  ASSERT_TRUE(q.get_many_reliable("c", got, 2).ok());
  server_.pause();
  Status s = q.ack("c", 1);
  server_.resume();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("acknowledged is unknown"), std::string_view::npos) << s;
  // It did run once the server resumed: "a" is acknowledged, "b" is not.
  EXPECT_TRUE(testutil::eventually([&] {
    auto in = q.inflight("c");
    return in.ok() && *in == std::vector<std::string>{"b"};
  }));
}

}  // namespace
}  // namespace sluice
