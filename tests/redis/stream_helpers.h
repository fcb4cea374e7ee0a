// Helpers of the Streams tests (stream_topic_test.cpp, stream_cluster_test.cpp,
// stream_failover_test.cpp): key names, numbered messages, an append of a
// vector, reads that acknowledge or not, and a fixture with its own server.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/redis/stream_topic.h"
#include "testutil/redis_server.h"

namespace sluice::testutil {

// The stream key of a topic with the default prefix.
inline std::string stream_key(const std::string& topic) { return "sluice:{" + topic + "}:stream"; }

// A topic's pending entries of `channel`: "<id> <consumer> <deliveries>",
// every one (XPENDING with no count limit worth the name).
inline std::vector<std::string> pending_list(RawRedis& raw, const std::string& channel,
                                             const std::string& topic = "t") {
  auto r = raw.cmd({"XPENDING", stream_key(topic), channel, "-", "+", "100000"});
  std::vector<std::string> out;
  for (std::size_t i = 0; i < r->elements; ++i) {
    const redisReply* e = r->element[i];
    out.push_back(std::string(e->element[0]->str) + " " + e->element[1]->str + " " +
                  std::to_string(e->element[3]->integer));
  }
  return out;
}

inline std::vector<std::string> numbered(const std::string& tag, int n) {
  std::vector<std::string> v;
  for (int i = 0; i < n; ++i) v.push_back(tag + std::to_string(i));
  return v;
}

inline Status append(StreamTopic& t, const std::vector<std::string>& msgs,
                     const Context& ctx = {}) {
  std::vector<std::string_view> views(msgs.begin(), msgs.end());
  return t.append_batch(views, ctx);
}

// Exactly n messages from c (several reads if need be), acknowledged or
// not; fewer only after a failure the test reports.
inline std::vector<StreamMessage> read_messages(StreamChannel& c, std::size_t n, bool ack = true) {
  std::vector<StreamMessage> out;
  const Context ctx = with_timeout(std::chrono::seconds(20));
  while (out.size() < n) {
    std::vector<StreamMessage> got;
    Status s = c.next_batch(got, n - out.size(), ctx);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) break;
    std::vector<std::string> ids;
    for (auto& m : got) {
      ids.push_back(m.id);
      out.push_back(std::move(m));
    }
    if (ack) {
      EXPECT_EQ(c.ack(ids), StatusCode::kOk);
    }
  }
  return out;
}

// Exactly n payloads from c, acknowledged.
inline std::vector<std::string> take(StreamChannel& c, std::size_t n) {
  std::vector<std::string> out;
  for (StreamMessage& m : read_messages(c, n)) out.push_back(std::move(m.payload));
  return out;
}

// A test with its own redis-server and topic "t": topic() a handle,
// joined(name) a consumer of channel `name` that has joined.
class StreamServerTest : public ::testing::Test {
 protected:
  StreamTopic topic(StreamTopicOptions o = {}) { return {server_.options(), "t", std::move(o)}; }
  StreamChannel joined(const std::string& name, StreamTopicOptions o = {}) {
    StreamChannel c{server_.options(), "t", name, std::move(o)};
    EXPECT_EQ(c.join(), StatusCode::kOk);
    return c;
  }
  // Topic t's pending entries of `channel`: "<id> <consumer> <deliveries>".
  std::vector<std::string> pending_list(const std::string& channel) {
    RawRedis raw(server_.port());
    return testutil::pending_list(raw, channel);
  }
  RedisServer server_;
};

}  // namespace sluice::testutil
