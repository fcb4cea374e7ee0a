// The Redis transport's script registry (src/redis/transport/connection.cpp): each
// client's connections load the scripts that client declared, and only
// those, and a server that lost its script cache (SCRIPT FLUSH) is recovered
// from for every client's script. Against a fresh redis-server per test.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "redis/pressure/pressure_script.h"
#include "redis/stream_helpers.h"
#include "redis/streams/stream_script.h"
#include "sluice/redis/pressure_queue.h"
#include "sluice/redis/stream_topic.h"
#include "testutil/redis_server.h"

namespace sluice {
namespace {

using testutil::RawRedis;
using testutil::RedisServer;

class RedisScriptsTest : public ::testing::Test {
 protected:
  // SCRIPT EXISTS of the pressure script and the Streams script: whether
  // the server holds each.
  std::vector<long long> cached() {
    auto r = raw_.cmd({"SCRIPT", "EXISTS", std::string(redis::pressure_script().sha),
                       std::string(redis::stream_script().sha)});
    std::vector<long long> out;
    for (std::size_t i = 0; i < r->elements; ++i) out.push_back(r->element[i]->integer);
    return out;
  }

  RedisServer server_;
  RawRedis raw_{server_.port()};
};

TEST_F(RedisScriptsTest, TheBuiltInShaIsTheServersShaOfEachScript) {
  for (const redis::Script* s : {&redis::pressure_script(), &redis::stream_script()}) {
    auto r = raw_.cmd({"SCRIPT", "LOAD", std::string(s->source)});
    ASSERT_EQ(r->type, REDIS_REPLY_STRING) << s->name;
    EXPECT_EQ(std::string(r->str, r->len), s->sha) << s->name;
  }
}

TEST_F(RedisScriptsTest, AStreamsConnectionLoadsOnlyTheStreamsScript) {
  ASSERT_EQ(cached(), (std::vector<long long>{0, 0}));
  StreamTopic t(server_.options(), "t");
  ASSERT_EQ(t.create(), StatusCode::kOk);
  auto c = t.channel("c");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(testutil::append(t, testutil::numbered("m", 3)), StatusCode::kOk);
  EXPECT_EQ(testutil::take(*c, 3), testutil::numbered("m", 3));
  EXPECT_EQ(cached(), (std::vector<long long>{0, 1}));  // no pressure script

  PressureQueue q(server_.options(), "q");
  ASSERT_EQ(q.create(0), StatusCode::kOk);
  EXPECT_EQ(cached(), (std::vector<long long>{1, 1}));
}

TEST_F(RedisScriptsTest, APressureConnectionLoadsOnlyThePressureScript) {
  PressureQueue q(server_.options(), "q");
  ASSERT_EQ(q.create(0), StatusCode::kOk);
  ASSERT_TRUE(q.put("x").ok());
  EXPECT_EQ(cached(), (std::vector<long long>{1, 0}));  // no Streams script
}

TEST_F(RedisScriptsTest, AFlushedScriptCacheIsRecoveredForBothClients) {
  PressureQueue q(server_.options(), "q");
  ASSERT_EQ(q.create(0), StatusCode::kOk);
  StreamTopic t(server_.options(), "t");
  ASSERT_EQ(t.create(), StatusCode::kOk);
  auto c = t.channel("c");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(testutil::append(t, testutil::numbered("a", 2)), StatusCode::kOk);
  ASSERT_EQ(cached(), (std::vector<long long>{1, 1}));

  raw_.cmd({"SCRIPT", "FLUSH"});
  ASSERT_EQ(cached(), (std::vector<long long>{0, 0}));
  // Each call's EVALSHA meets NOSCRIPT; the transport runs the script with
  // EVAL, which caches it again: the call succeeds once.
  ASSERT_TRUE(q.put("x").ok());
  EXPECT_EQ(*q.length(), 1U);
  ASSERT_EQ(testutil::append(t, testutil::numbered("b", 1)), StatusCode::kOk);
  EXPECT_EQ(cached(), (std::vector<long long>{1, 1}));

  // And the Streams paths that pipeline behind the script: a peek after an
  // id (MULTI/EVALSHA/XRANGE/EXEC), and the channel's reads and acks.
  raw_.cmd({"SCRIPT", "FLUSH"});
  auto first = t.peek("c", "", 1);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->size(), 1U);
  raw_.cmd({"SCRIPT", "FLUSH"});
  auto rest = t.peek("c", (*first)[0].id, 10);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(rest->size(), 2U);
  raw_.cmd({"SCRIPT", "FLUSH"});
  EXPECT_EQ(testutil::take(*c, 3), (std::vector<std::string>{"a0", "a1", "b0"}));
  EXPECT_EQ(*q.length(), 1U);
  raw_.cmd({"SCRIPT", "FLUSH"});
  auto got = q.try_get();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "x");
}

}  // namespace
}  // namespace sluice
