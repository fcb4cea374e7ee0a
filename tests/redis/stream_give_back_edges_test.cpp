// Redis Streams topics: a give-back by id of what this handle gave back
// already. give_back() of everything leaves such messages be (the handle
// keeps a list of them); give_back(ids) did not: after a nack with a delay
// it lowered the count the nack counted and made the message claimable at
// once. Each test failed on the code before its fix.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "redis/stream_helpers.h"
#include "sluice/redis/stream_topic.h"
#include "testutil/redis_server.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testutil::RawRedis;

class StreamGiveBackEdgesTest : public testutil::StreamServerTest {
 protected:
  // The channel's pending entries: "<id> <consumer> <deliveries>".
  std::vector<std::string> pending_list(const std::string& channel) {
    RawRedis raw(server_.port());
    auto r = raw.cmd({"XPENDING", testutil::stream_key("t"), channel, "-", "+", "1000"});
    std::vector<std::string> out;
    for (std::size_t i = 0; i < r->elements; ++i) {
      const redisReply* e = r->element[i];
      out.push_back(std::string(e->element[0]->str) + " " + e->element[1]->str + " " +
                    std::to_string(e->element[3]->integer));
    }
    return out;
  }
};

// nack(ids, delay) then give_back(ids) (a reader that nacks a failure, then
// gives back what it holds by id as it stops): the give-back found the
// entry idle for less than the timeout (the delay holds it back), lowered
// its count (the nack's failed delivery undone) and set it claimable at
// once (the delay gone).
TEST_F(StreamGiveBackEdgesTest, AGiveBackByIdAfterADelayedNackKeepsTheCountAndTheDelay) {
  StreamTopicOptions o;
  o.visibility_timeout = 10s;
  auto t = topic(o);
  auto a = joined("work", o);
  ASSERT_EQ(t.append("job").status(), StatusCode::kOk);
  auto m = a.next(with_timeout(5s));
  ASSERT_TRUE(m.ok()) << m.status();
  const std::vector<std::string> ids = {m->id};
  ASSERT_EQ(a.nack(ids, 5s), StatusCode::kOk);
  const std::vector<std::string> nacked = {m->id + " " + a.consumer() + " 1"};
  ASSERT_EQ(pending_list("work"), nacked);  // the next claim raises it to 2

  ASSERT_EQ(a.give_back(ids), StatusCode::kOk);
  EXPECT_EQ(pending_list("work"), nacked) << "the give-back undid the nack's count";
  auto early = a.next(with_timeout(300ms));
  EXPECT_EQ(early.status().code(), StatusCode::kDeadlineExceeded)
      << "the nack's 5 s delay was dropped: " << (early.ok() ? early->id : "");
}

}  // namespace
}  // namespace sluice
