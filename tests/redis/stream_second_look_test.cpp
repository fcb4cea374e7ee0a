// Redis Streams topics, a second look: each test failed on the code before
// its fix.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <span>
#include <string>
#include <vector>

#include "redis/stream_helpers.h"
#include "sluice/redis/stream_topic.h"
#include "testutil/redis_server.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testutil::RawRedis;
using testutil::RedisServer;

using StreamSecondLookTest = testutil::StreamServerTest;

// A message nacked with a delay is no longer held by its consumer (its
// keep-alive lets it go). give_back() "gives back everything it holds", but
// the script's all-ids branch took every pending entry of the consumer,
// the delayed one included, and set it claimable at once: the delay was
// lost (and its failed delivery uncounted: give_back lowers the count).
TEST_F(StreamSecondLookTest, GiveBackAllKeepsTheDelayOfAnEarlierNack) {
  StreamTopicOptions o;
  o.visibility_timeout = 10s;
  auto t = topic(o);
  auto a = joined("work", o);
  auto b = joined("work", o);
  ASSERT_EQ(t.append("job").status(), StatusCode::kOk);
  auto m = a.next(with_timeout(5s));
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(a.nack(*m, 3s), StatusCode::kOk);
  ASSERT_EQ(a.give_back(), StatusCode::kOk);  // holds nothing else
  // Not before the delay: b's first read claims whatever is claimable.
  auto early = b.next(with_timeout(1s));
  EXPECT_EQ(early.status().code(), StatusCode::kDeadlineExceeded)
      << "the nacked message came back before its delay, deliveries "
      << (early.ok() ? early->deliveries : 0);
  // After it: delivered again, the nack counted.
  auto later = a.next(with_timeout(8s));
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_EQ(later->payload, "job");
  EXPECT_EQ(later->deliveries, 2U);
}

// The same through nack() (everything it holds, counted).
TEST_F(StreamSecondLookTest, NackAllKeepsTheDelayOfAnEarlierNack) {
  StreamTopicOptions o;
  o.visibility_timeout = 10s;
  auto t = topic(o);
  auto a = joined("work", o);
  auto b = joined("work", o);
  ASSERT_EQ(t.append("job").status(), StatusCode::kOk);
  auto m = a.next(with_timeout(5s));
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(a.nack(*m, 3s), StatusCode::kOk);
  ASSERT_EQ(a.nack(), StatusCode::kOk);
  auto early = b.next(with_timeout(1s));
  EXPECT_EQ(early.status().code(), StatusCode::kDeadlineExceeded)
      << "the nacked message came back before its delay";
}

// An entry deleted from the stream by hand (XDEL) while a consumer holds
// it: claim and the keep-alive's touch count it as dropped for the channel
// (XCLAIM and XAUTOCLAIM drop it from the pending list). nack and give_back
// give back with XCLAIM too, which dropped it silently: the channel's
// unacknowledged count kept it for ever (stats did not add up: 1
// unacknowledged, nothing pending, nothing to read; at a bound of 1 every
// append waited).
TEST_F(StreamSecondLookTest, ANackOfAnEntryDeletedByHandCountsItAsDropped) {
  for (const bool counted : {true, false}) {
    SCOPED_TRACE(counted ? "nack" : "give_back");
    StreamTopicOptions o;
    o.visibility_timeout = 10s;
    auto t = topic(o);
    ASSERT_EQ(t.destroy(), StatusCode::kOk);
    auto c = joined("work", o);
    ASSERT_EQ(t.append("job").status(), StatusCode::kOk);
    auto m = c.next(with_timeout(5s));
    ASSERT_TRUE(m.ok()) << m.status();
    RawRedis raw(server_.port());
    ASSERT_EQ(raw.integer({"XDEL", testutil::stream_key("t"), m->id}), 1);
    ASSERT_EQ(counted ? c.nack(*m) : c.give_back(std::span<const std::string>(&m->id, 1)),
              StatusCode::kOk);
    auto st = t.stats();
    ASSERT_TRUE(st.ok()) << st.status();
    ASSERT_EQ(st->channels.size(), 1U);
    EXPECT_EQ(st->channels[0].pending, 0U);
    EXPECT_EQ(st->channels[0].unacknowledged, 0U) << "a message no one can ever read";
    EXPECT_EQ(st->channels[0].skipped_retention, 1U);
  }
}

// consume() on a keep_alive handle whose ack of a batch fails: it returned
// the error before giving back the batch's failures (and left what it could
// not acknowledge kept claimed), so the handle's keep-alive went on renewing
// them for as long as the handle lived: never delivered again to anyone,
// though the header promises they come again after the visibility timeout.
// The ack is made to fail by taking XACK from the user (ACL), which the
// keep-alive's touch does not use.
TEST_F(StreamSecondLookTest, AConsumeWhoseAckFailedLetsItsBatchGoWithKeepAlive) {
  StreamTopicOptions o;
  o.visibility_timeout = 1s;
  o.keep_alive = true;
  auto t = topic(o);
  auto a = joined("work", o);
  auto b = joined("work", o);
  ASSERT_EQ(testutil::append(t, {"ok", "fails"}), StatusCode::kOk);
  RawRedis raw(server_.port());
  Status s = a.consume(
      [&](const StreamMessage& m) {
        if (m.payload == "ok") {
          raw.cmd({"ACL", "SETUSER", "default", "-xack"});
          return Status::Ok();
        }
        return Status{StatusCode::kInternal, "handler failed"};
      },
      with_timeout(10s), 2);
  raw.cmd({"ACL", "SETUSER", "default", "+xack"});
  ASSERT_FALSE(s.ok());
  ASSERT_NE(s.code(), StatusCode::kDeadlineExceeded) << s;
  // a lives on (its keep-alive runs); b gets both again: "fails" at once
  // (given back), "ok" once a's claim on it ran out (not acknowledged).
  std::vector<std::string> got;
  const Context ctx = with_timeout(8s);
  while (got.size() < 2) {
    auto m = b.next(ctx);
    ASSERT_TRUE(m.ok()) << "came again: " << got.size() << " of 2: " << m.status();
    got.push_back(m->payload);
    ASSERT_EQ(b.ack(*m), StatusCode::kOk);
  }
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::string>{"fails", "ok"}));
}

// nack(m) then give_back() (everything it holds, e.g. a worker that nacks a
// failure and gives back the rest as it stops): the nacked message is still
// in this consumer's pending list until claimed, and give_back lowered its
// delivery count, so the nack's failed delivery was not counted: a message
// that always fails, nacked and given back in turn, never reached the dead
// letters.
TEST_F(StreamSecondLookTest, GiveBackAllDoesNotUncountAnEarlierNack) {
  StreamTopicOptions o;
  o.visibility_timeout = 10s;
  o.max_deliveries = 2;
  auto t = topic(o);
  auto c = joined("work", o);
  ASSERT_EQ(t.append("poison").status(), StatusCode::kOk);
  auto m = c.next(with_timeout(5s));
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->deliveries, 1U);
  ASSERT_EQ(c.nack(*m), StatusCode::kOk);
  ASSERT_EQ(c.give_back(), StatusCode::kOk);
  auto again = c.next(with_timeout(5s));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->deliveries, 2U) << "the nack's failed delivery was not counted";
  ASSERT_EQ(c.nack(*again), StatusCode::kOk);
  ASSERT_EQ(c.give_back(), StatusCode::kOk);
  // A third delivery is past max_deliveries: dead-lettered, not delivered.
  auto third = c.next(with_timeout(1s));
  EXPECT_EQ(third.status().code(), StatusCode::kDeadlineExceeded);
  auto st = t.stats();
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->dead_letters, 1U);
}

}  // namespace
}  // namespace sluice
