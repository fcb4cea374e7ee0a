// Redis Streams topics: who holds a message. An ack or a give-back acts on
// this consumer's own delivery only. Each test failed on the code before
// its fix.
#include <gtest/gtest.h>

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

class StreamHolderEdgesTest : public testutil::StreamServerTest {
 protected:
  StreamChannelStats channel_stats(StreamTopic& t, const std::string& name) {
    auto st = t.stats();
    EXPECT_TRUE(st.ok()) << st.status();
    if (st.ok()) {
      for (const auto& c : st->channels) {
        if (c.name == name) return c;
      }
    }
    ADD_FAILURE() << "no channel " << name;
    return {};
  }
};

// A consumer that held a message past the visibility timeout, while
// another claimed it: its late ack removed the new holder's pending entry
// (XACK does not look at the owner), so the new holder's delivery was
// acknowledged behind its back (its nack ignored, its ack counting
// nothing). The stale ack is now refused with kInUse, the new holder keeps
// the message, and its own ack or nack decides it.
TEST_F(StreamHolderEdgesTest, AStaleAckLeavesTheNewHoldersDeliveryAlone) {
  StreamTopicOptions o;
  o.visibility_timeout = 200ms;
  auto t = topic(o);
  auto a = joined("work", o);
  auto b = joined("work", o);
  ASSERT_EQ(t.append("job").status(), StatusCode::kOk);
  auto m = a.next(with_timeout(5s));
  ASSERT_TRUE(m.ok()) << m.status();
  auto claimed = b.next(with_timeout(5s));  // once a held it for the timeout
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  ASSERT_EQ(claimed->id, m->id);
  ASSERT_EQ(claimed->deliveries, 2U);
  // From now on nothing times out by itself (every handle's claims go by it).
  ASSERT_EQ(b.set_visibility_timeout(30s), StatusCode::kOk);

  Status stale = a.ack(*m);
  EXPECT_EQ(stale.code(), StatusCode::kInUse) << stale;
  EXPECT_NE(stale.message().find(b.consumer()), std::string_view::npos) << stale;
  EXPECT_EQ(pending_list("work"), (std::vector<std::string>{m->id + " " + b.consumer() + " 2"}));
  EXPECT_EQ(channel_stats(t, "work").unacknowledged, 1U);
  EXPECT_EQ(a.ack(*m).code(), StatusCode::kInUse);  // a retry says the same

  // The new holder's nack gives it back: nothing lost.
  ASSERT_EQ(b.nack(*claimed), StatusCode::kOk);
  auto again = b.next(with_timeout(5s));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->id, m->id);
  EXPECT_EQ(again->deliveries, 3U);
  // A mixed batch: what a holds is acknowledged, the rest refused.
  ASSERT_EQ(t.append("next").status(), StatusCode::kOk);
  auto mine = a.next(with_timeout(5s));
  ASSERT_TRUE(mine.ok()) << mine.status();
  const std::vector<std::string> both = {m->id, mine->id};
  EXPECT_EQ(a.ack(both).code(), StatusCode::kInUse);
  EXPECT_EQ(pending_list("work"), (std::vector<std::string>{m->id + " " + b.consumer() + " 3"}));
  ASSERT_EQ(b.ack(*again), StatusCode::kOk);
  EXPECT_EQ(channel_stats(t, "work").unacknowledged, 0U);
  EXPECT_TRUE(pending_list("work").empty());
  // Acknowledged: acknowledging again is harmless, from either.
  EXPECT_EQ(a.ack(both), StatusCode::kOk);
  EXPECT_EQ(b.ack(*again), StatusCode::kOk);
  EXPECT_EQ(channel_stats(t, "work").unacknowledged, 0U);
}

// give_back() "gives back everything it holds" without counting a delivery:
// the script lowers each count by one, so the next claim's raise leaves it
// as it was. A second give_back() (a retry after a lost reply, or a reader
// giving back on release and again when it goes) found the same entries
// still in this consumer's pending list and lowered them again: a message
// delivered twice came back saying 1 (and further from the dead letters).
// Also after nack() (everything, counted): the give_back undid the nack's
// count. A message given back already (claimable: idle past the timeout)
// is now left as it is.
TEST_F(StreamHolderEdgesTest, TwoGiveBacksInARowLowerADeliveryCountOnce) {
  StreamTopicOptions o;
  o.visibility_timeout = 10s;
  auto t = topic(o);
  auto a = joined("work", o);
  ASSERT_EQ(t.append("job").status(), StatusCode::kOk);
  auto m = a.next(with_timeout(5s));
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(a.nack(*m), StatusCode::kOk);  // a failed delivery
  auto second = a.next(with_timeout(5s));
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(second->deliveries, 2U);

  ASSERT_EQ(a.give_back(), StatusCode::kOk);
  ASSERT_EQ(a.give_back(), StatusCode::kOk);
  auto third = a.next(with_timeout(5s));
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->deliveries, 2U) << "given back twice, lowered twice";

  // By id, twice: the same.
  ASSERT_EQ(a.give_back(std::span<const std::string>(&third->id, 1)), StatusCode::kOk);
  ASSERT_EQ(a.give_back(std::span<const std::string>(&third->id, 1)), StatusCode::kOk);
  auto fourth = a.next(with_timeout(5s));
  ASSERT_TRUE(fourth.ok()) << fourth.status();
  EXPECT_EQ(fourth->deliveries, 2U) << "given back by id twice, lowered twice";

  // nack() then give_back(): the nack's failed delivery stays counted.
  ASSERT_EQ(a.nack(), StatusCode::kOk);
  ASSERT_EQ(a.give_back(), StatusCode::kOk);
  auto fifth = a.next(with_timeout(5s));
  ASSERT_TRUE(fifth.ok()) << fifth.status();
  EXPECT_EQ(fifth->deliveries, 3U) << "the give_back undid the nack";
  ASSERT_EQ(a.ack(*fifth), StatusCode::kOk);
  EXPECT_EQ(channel_stats(t, "work").unacknowledged, 0U);
}

}  // namespace
}  // namespace sluice
