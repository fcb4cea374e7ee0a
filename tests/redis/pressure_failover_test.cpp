// A pressure queue's server turned into a replica (a failover, by Sentinel
// or by hand with REPLICAOF) under a call waiting on it: Redis ends the wait
// with "UNBLOCKED force unblock from blocking operation, instance state
// changed (master -> replica?)". That is "not now" (kUnavailable, which
// `sluice get/put --reconnect` retry), as the Streams client has it, not
// kInternal. Real redis-servers.
#include <gtest/gtest.h>

#include <future>
#include <string>
#include <string_view>

#include "sluice/redis/pressure_queue.h"
#include "testutil/redis_server.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testutil::RawRedis;
using testutil::RedisServer;

TEST(PressureFailoverTest, ACallWaitingWhenItsServerBecomesAReplicaIsUnavailable) {
  for (const bool get : {true, false}) {
    SCOPED_TRACE(get ? "a get waiting for data" : "a put waiting at the bound");
    RedisServer primary;
    RedisServer other;
    RawRedis raw(primary.port());
    PressureQueue q(primary.options(), "q");
    ASSERT_TRUE(q.create(1).ok());
    if (!get) {
      ASSERT_TRUE(q.put("fill", with_timeout(5s)).ok());
    }
    auto call = std::async(std::launch::async, [&]() -> Status {
      PressureQueue mine(primary.options(), "q");
      if (get) return mine.get(with_timeout(30s)).status();
      return mine.put("waits", with_timeout(30s)).status;
    });
    ASSERT_TRUE(testutil::eventually([&] { return raw.blocked_clients() == 1; }));
    raw.cmd({"REPLICAOF", "127.0.0.1", std::to_string(other.port())});
    const Status s = call.get();
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
    EXPECT_NE(s.message().find("UNBLOCKED"), std::string_view::npos) << s;
  }
}

}  // namespace
}  // namespace sluice
