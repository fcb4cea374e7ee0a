// Redis Streams topics: messages given back with a delay on a closed topic,
// trim after seek_time, consume() stopped mid-batch. Each test failed on the
// code before its fix.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <vector>

#include "redis/stream_helpers.h"
#include "sluice/redis/stream_topic.h"
#include "testutil/redis_server.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testutil::RawRedis;
using testutil::RedisServer;

using StreamRedeliveryTest = testutil::StreamServerTest;

// A message given back with a delay (nack(ids, retry_after)) on a closed
// topic: the header promises it comes again after the delay, but the
// consumer's next read ends with kClosed first (drained ignores what this
// consumer itself holds), and the message is never delivered again.
TEST_F(StreamRedeliveryTest, ANackWithADelayOnAClosedTopicComesBackBeforeKClosed) {
  StreamTopicOptions o;
  o.visibility_timeout = 10s;
  auto t = topic(o);
  auto c = joined("work", o);
  ASSERT_EQ(t.append("job").status(), StatusCode::kOk);
  ASSERT_EQ(t.close(), StatusCode::kOk);
  auto m = c.next(with_timeout(5s));
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(c.nack(*m, 300ms), StatusCode::kOk);
  auto again = c.next(with_timeout(5s));
  ASSERT_TRUE(again.ok()) << "the nacked message never came back: " << again.status();
  EXPECT_EQ(again->payload, "job");
  EXPECT_EQ(again->deliveries, 2U);
}

// seek_time puts the channel at "<ms-1>-18446744073709551615" (the last id
// of the millisecond before). trim's "the entry after the last delivered
// one" is then string.format('%d-%d', ms, seq + 1) on a Lua double: 2^64
// formats as -9223372036854775808, XTRIM MINID gets an invalid id, and
// trim() fails (appends' periodic trim too), so nothing is ever trimmed
// while the channel stays there.
TEST_F(StreamRedeliveryTest, TrimWorksAfterSeekTime) {
  auto t = topic();
  auto c = joined("default");
  auto first = t.append("old");
  ASSERT_TRUE(first.ok()) << first.status();
  std::string later;
  do {  // an entry in a later millisecond
    auto id = t.append("new");
    ASSERT_TRUE(id.ok()) << id.status();
    later = *id;
  } while (stream_id_time(later) == stream_id_time(*first));
  // Skip to the first message of `later`'s millisecond: "old" counts as
  // acknowledged, so trim may remove it.
  StreamSeekResult where;
  ASSERT_EQ(t.seek_time("default", stream_id_time(later), &where), StatusCode::kOk);
  auto n = t.trim();
  ASSERT_TRUE(n.ok()) << "position " << where.position << ": " << n.status();
  EXPECT_GE(*n, 1U);
}

// consume() stopped mid-batch: the header says "the rest of the batch
// given back", and give_back is for "messages this consumer never handed
// on". consume nacks them instead (a failed delivery each), so messages the
// handler never saw move toward the dead letters: with max_deliveries = 1
// they are dead-lettered at their next delivery, never handled at all.
TEST_F(StreamRedeliveryTest, ConsumeStoppedMidBatchDoesNotCountADeliveryForWhatItNeverHandled) {
  StreamTopicOptions o;
  o.max_deliveries = 1;
  auto t = topic(o);
  auto c = joined("work", o);
  ASSERT_EQ(testutil::append(t, {"m0", "m1", "m2"}), StatusCode::kOk);
  std::stop_source stop;
  int handled = 0;
  Status s = c.consume(
      [&](const StreamMessage&) {
        ++handled;
        stop.request_stop();  // stop after the first message
        return Status::Ok();
      },
      Context(stop.get_token()), /*batch=*/10);
  ASSERT_EQ(s.code(), StatusCode::kCancelled) << s;
  ASSERT_EQ(handled, 1);
  StreamChannel other{server_.options(), "t", "work", o};
  std::vector<StreamMessage> got;
  Status r = other.next_batch(got, 10, with_timeout(2s));
  EXPECT_TRUE(r.ok()) << r;
  ASSERT_EQ(got.size(), 2U) << "dead-lettered by the reader: " << other.dead_lettered()
                            << ", dead letters: " << t.stats()->dead_letters;
  for (const auto& m : got) EXPECT_EQ(m.deliveries, 1U) << m.payload;
}

// Two delays: the handle keeps one due time (the earliest); once it has
// passed, the later one is forgotten, so that message comes back only at
// the next periodic claim (visibility / 2 later), or never on a closed topic.
TEST_F(StreamRedeliveryTest, TwoNacksWithDifferentDelaysBothComeBackOnAClosedTopic) {
  StreamTopicOptions o;
  o.visibility_timeout = 10s;
  auto t = topic(o);
  auto c = joined("work", o);
  ASSERT_EQ(testutil::append(t, {"soon", "later"}), StatusCode::kOk);
  ASSERT_EQ(t.close(), StatusCode::kOk);
  std::vector<StreamMessage> got;
  ASSERT_EQ(c.next_batch(got, 2, with_timeout(5s)), StatusCode::kOk);
  ASSERT_EQ(got.size(), 2U);
  ASSERT_EQ(c.nack(got[0], 100ms), StatusCode::kOk);
  ASSERT_EQ(c.nack(got[1], 400ms), StatusCode::kOk);
  std::vector<std::string> back;
  for (int i = 0; i < 2; ++i) {
    auto m = c.next(with_timeout(3s));
    ASSERT_TRUE(m.ok()) << "came back: " << back.size() << "; then " << m.status();
    back.push_back(m->payload);
    ASSERT_EQ(c.ack(*m), StatusCode::kOk);
  }
  EXPECT_EQ(back, (std::vector<std::string>{"soon", "later"}));
}

}  // namespace
}  // namespace sluice
