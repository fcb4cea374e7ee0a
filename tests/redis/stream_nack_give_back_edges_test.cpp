// Redis Streams topics: a nack and a give-back of the same message, in
// either order, from one handle or two. A failed delivery is counted once
// (the claim that delivers the message again raises its count), and a
// give-back never takes that back. The handle kept its own list of what it
// had given back: a nack after a give-back was not counted, and a
// give-back after a nack the handle did not know had run (its reply lost)
// lowered the count and dropped the delay. The first two tests failed on
// the code before the fix; the third (another handle) and the fourth (an
// ack of what was given back) passed before it too: a handle gives back
// only what its own consumer holds. The last (an id named twice) failed
// before its own fix.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "redis/stream_helpers.h"
#include "sluice/redis/stream_topic.h"
#include "testutil/redis_server.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;

class StreamNackGiveBackEdgesTest : public testutil::StreamServerTest {
 protected:
  // Appends "job" and delivers it to `to`: its id (none if it did not come).
  static std::vector<std::string> deliver_job(StreamTopic& t, StreamChannel& to) {
    EXPECT_EQ(t.append("job").status(), StatusCode::kOk);
    auto m = to.next(with_timeout(5s));
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) return {};
    return {m->id};
  }
  // The pending entry of `id` in channel "work": its idle time (ms) and
  // delivery count; both -1 if it is not pending.
  std::pair<long long, long long> entry(const std::string& id) {
    testutil::RawRedis raw(server_.port());
    auto r = raw.cmd({"XPENDING", testutil::stream_key("t"), "work", id, id, "1"});
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 1) return {-1, -1};
    return {r->element[0]->element[2]->integer, r->element[0]->element[3]->integer};
  }
};

// nack(ids) after give_back(ids) (a reader that gives back what it holds,
// then learns that one of them had failed after all): the nack found the
// entry with the count the give-back had lowered and left it so, and the
// next delivery did not count the failure (deliveries 1 again; with
// max_deliveries 1 it was not dead-lettered). A retried nack counts it once.
TEST_F(StreamNackGiveBackEdgesTest, ANackAfterAGiveBackCountsTheFailedDelivery) {
  StreamTopicOptions o;
  o.visibility_timeout = 10s;
  auto t = topic(o);
  auto a = joined("work", o);
  auto b = joined("work", o);
  const std::vector<std::string> ids = deliver_job(t, a);
  ASSERT_EQ(ids.size(), 1U);
  ASSERT_EQ(a.give_back(ids), StatusCode::kOk);
  ASSERT_EQ(a.nack(ids), StatusCode::kOk);
  ASSERT_EQ(a.nack(ids), StatusCode::kOk);       // a retry: counted once
  ASSERT_EQ(a.give_back(ids), StatusCode::kOk);  // and not taken back

  auto again = b.next(with_timeout(5s));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->id, ids[0]);
  EXPECT_EQ(again->deliveries, 2U) << "the nack after the give-back was not counted";

  // With max_deliveries 1 that failure sends it to the dead letters.
  ASSERT_EQ(b.ack(*again), StatusCode::kOk);
  StreamTopicOptions once = o;
  once.max_deliveries = 1;
  auto c = joined("work", once);
  ASSERT_EQ(t.append("job2").status(), StatusCode::kOk);
  auto n = c.next(with_timeout(5s));
  ASSERT_TRUE(n.ok()) << n.status();
  const std::vector<std::string> nids = {n->id};
  ASSERT_EQ(c.give_back(nids), StatusCode::kOk);
  ASSERT_EQ(c.nack(nids), StatusCode::kOk);
  auto none = c.next(with_timeout(300ms));
  EXPECT_EQ(none.status().code(), StatusCode::kDeadlineExceeded)
      << "delivered again under max_deliveries 1: " << (none.ok() ? none->id : "");
  EXPECT_EQ(c.dead_lettered(), 1U);
}

// A nack with a delay whose reply was lost (the server stopped: the call
// failed at io_timeout, and the server ran it once it went on), then a
// give-back of the same ids (a reader giving back what it holds as it
// stops): the handle did not know the nack had run, and the give-back
// lowered the count the nack had kept for its claim to raise (the failure
// not counted) and made the message claimable at once (the delay dropped).
TEST_F(StreamNackGiveBackEdgesTest, AGiveBackAfterANackWhoseReplyWasLostKeepsTheCountAndDelay) {
  StreamTopicOptions o;
  o.visibility_timeout = 10s;
  auto t = topic(o);
  RedisOptions quick = server_.options();
  quick.io_timeout = 300ms;
  StreamChannel a(quick, "t", "work", o);
  ASSERT_EQ(a.join(), StatusCode::kOk);
  auto b = joined("work", o);
  const std::vector<std::string> ids = deliver_job(t, a);
  ASSERT_EQ(ids.size(), 1U);

  server_.pause();
  const Status lost = a.nack(ids, 5s);
  server_.resume();
  EXPECT_FALSE(lost.ok()) << "the nack's reply came although the server was stopped";
  // The server runs the nack once it reads it: idle set 5 s short of 10 s.
  const auto give_up = std::chrono::steady_clock::now() + 5s;
  while (entry(ids[0]).first < 4000 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_GE(entry(ids[0]).first, 4000) << "the nack did not run";
  ASSERT_EQ(entry(ids[0]).second, 1);

  ASSERT_EQ(a.give_back(ids), StatusCode::kOk);
  ASSERT_EQ(a.give_back(), StatusCode::kOk);
  EXPECT_EQ(entry(ids[0]).second, 1) << "the give-back undid the nack's count";
  auto early = b.next(with_timeout(300ms));
  EXPECT_EQ(early.status().code(), StatusCode::kDeadlineExceeded)
      << "the nack's 5 s delay was dropped: " << (early.ok() ? early->id : "");
}

// A delayed nack by one handle, then give_back(ids) and give_back() by
// another consumer of the channel (another process's reader): neither
// touches it (not that consumer's), so the count and the delay stay, and
// the message comes again after the delay with the failure counted.
// (Passed before the fix too.)
TEST_F(StreamNackGiveBackEdgesTest, AGiveBackFromAnotherHandleLeavesADelayedNackBe) {
  StreamTopicOptions o;
  o.visibility_timeout = 10s;
  auto t = topic(o);
  auto a = joined("work", o);
  auto b = joined("work", o);
  const std::vector<std::string> ids = deliver_job(t, a);
  ASSERT_EQ(ids.size(), 1U);
  ASSERT_EQ(a.nack(ids, 1s), StatusCode::kOk);
  const auto nacked_at = std::chrono::steady_clock::now();

  ASSERT_EQ(b.give_back(ids), StatusCode::kOk);
  ASSERT_EQ(b.give_back(), StatusCode::kOk);
  EXPECT_EQ(entry(ids[0]).second, 1) << "another handle's give-back lowered the count";
  auto early = b.next(with_timeout(300ms));
  if (std::chrono::steady_clock::now() < nacked_at + 1s) {
    EXPECT_EQ(early.status().code(), StatusCode::kDeadlineExceeded)
        << "the nack's delay was dropped: " << (early.ok() ? early->id : "");
  }
  // The nacking handle looks again once the delay is over (another within
  // half the timeout).
  auto again = early.ok() ? std::move(early) : a.next(with_timeout(5s));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->id, ids[0]);
  EXPECT_EQ(again->deliveries, 2U);
}

// What a consumer gave back and no one has claimed since is still its own
// to acknowledge (as before the fix, when it stayed in its pending list),
// also while another consumer holds messages (the ack script's slow path).
TEST_F(StreamNackGiveBackEdgesTest, AnAckAfterAGiveBackOrANackStillAcknowledges) {
  StreamTopicOptions o;
  o.visibility_timeout = 10s;
  auto t = topic(o);
  auto a = joined("work", o);
  auto b = joined("work", o);
  ASSERT_EQ(testutil::append(t, testutil::numbered("m", 3)), StatusCode::kOk);
  auto got = testutil::read_messages(a, 2, /*ack=*/false);
  ASSERT_EQ(got.size(), 2U);
  auto other = b.next(with_timeout(5s));  // b holds m2
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_EQ(a.give_back(std::vector<std::string>{got[0].id}), StatusCode::kOk);
  ASSERT_EQ(a.nack(got[1], 5s), StatusCode::kOk);
  const std::vector<std::string> ids = {got[0].id, got[1].id};
  ASSERT_EQ(a.ack(ids), StatusCode::kOk);
  EXPECT_EQ(pending_list("work"),
            (std::vector<std::string>{other->id + " " + b.consumer() + " 1"}));
}

// nack(ids) or give_back(ids) naming one id twice, whose entry was deleted
// from the stream by hand: the release script counted it as dropped once
// per time it was named (XCLAIM drops it from the pending list the first
// time and returns it neither time), so the channel's acknowledged count
// passed the truth and its unacknowledged count (and the bound) left out
// a message it had not had. Failed before the fix.
TEST_F(StreamNackGiveBackEdgesTest, AnIdNamedTwiceWhoseEntryWasDeletedCountsAsDroppedOnce) {
  for (const bool counted : {true, false}) {
    SCOPED_TRACE(counted ? "nack" : "give_back");
    StreamTopicOptions o;
    o.visibility_timeout = 10s;
    auto t = topic(o);
    ASSERT_EQ(t.destroy(), StatusCode::kOk);
    auto c = joined("work", o);
    ASSERT_EQ(testutil::append(t, testutil::numbered("m", 2)), StatusCode::kOk);
    auto m = c.next(with_timeout(5s));
    ASSERT_TRUE(m.ok()) << m.status();
    testutil::RawRedis raw(server_.port());
    ASSERT_EQ(raw.integer({"XDEL", testutil::stream_key("t"), m->id}), 1);
    const std::vector<std::string> twice = {m->id, m->id};
    ASSERT_EQ(counted ? c.nack(twice) : c.give_back(twice), StatusCode::kOk);
    auto st = t.stats();
    ASSERT_TRUE(st.ok()) << st.status();
    ASSERT_EQ(st->channels.size(), 1U);
    EXPECT_EQ(st->channels[0].skipped_retention, 1U);
    EXPECT_EQ(st->channels[0].unacknowledged, 1U) << "m1, not delivered yet";
  }
}

}  // namespace
}  // namespace sluice
