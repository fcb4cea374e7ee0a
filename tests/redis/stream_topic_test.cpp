// StreamTopic/StreamChannel against a real redis-server started per test.
#include "sluice/redis/stream_topic.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <map>
#include <set>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "testutil/redis_server.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testutil::RawRedis;
using testutil::RedisServer;

class StreamTopicTest : public ::testing::Test {
 protected:
  StreamTopic topic(StreamTopicOptions o = {}) { return {server_.options(), "t", std::move(o)}; }
  StreamChannel channel(const std::string& name, StreamTopicOptions o = {}) {
    return {server_.options(), "t", name, std::move(o)};
  }
  static std::vector<std::string> numbered(int from, int to) {
    std::vector<std::string> v;
    for (int i = from; i < to; ++i) v.push_back("m" + std::to_string(i));
    return v;
  }
  static Status append(StreamTopic& t, const std::vector<std::string>& msgs,
                       std::size_t* done = nullptr, const Context& ctx = {}) {
    std::vector<std::string_view> views(msgs.begin(), msgs.end());
    return t.append_batch(views, ctx, done);
  }
  // Exactly n messages (several reads if need be), acknowledged or not.
  static std::vector<StreamMessage> read(StreamChannel& c, std::size_t n, bool ack = true) {
    std::vector<StreamMessage> out;
    const Context ctx = with_timeout(10s);
    while (out.size() < n) {
      std::vector<StreamMessage> got;
      Status s = c.read(got, n - out.size(), ctx);
      EXPECT_TRUE(s.ok()) << s;
      if (!s.ok()) break;
      for (auto& m : got) {
        if (ack) {
          EXPECT_TRUE(c.ack(m).ok());
        }
        out.push_back(std::move(m));
      }
    }
    return out;
  }
  static std::vector<std::string> payloads(const std::vector<StreamMessage>& ms) {
    std::vector<std::string> v;
    for (const auto& m : ms) v.push_back(m.payload);
    return v;
  }

  RedisServer server_;
  RawRedis raw_{server_.port()};
};

TEST_F(StreamTopicTest, AppendReadAckInOrderWithKeysUnderOneHashTag) {
  auto t = topic();
  auto c = channel("work");
  auto id = t.append("first");
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_NE(id->find('-'), std::string::npos);
  ASSERT_EQ(append(t, numbered(0, 5)), StatusCode::kOk);
  auto got = read(c, 6);
  EXPECT_EQ(got[0].id, *id);
  EXPECT_EQ(payloads(got), (std::vector<std::string>{"first", "m0", "m1", "m2", "m3", "m4"}));
  EXPECT_EQ(got[0].deliveries, 1U);

  auto st = t.stats();
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->appended, 6U);
  ASSERT_EQ(st->channels.size(), 1U);
  EXPECT_EQ(st->channels[0].name, "work");
  EXPECT_EQ(st->channels[0].unacknowledged, 0U);
  EXPECT_EQ(st->channels[0].pending, 0U);
  // Every key of the topic carries the hash tag {t}: one Cluster slot.
  auto keys = raw_.cmd({"KEYS", "*"});
  ASSERT_GT(keys->elements, 0U);
  for (std::size_t i = 0; i < keys->elements; ++i) {
    EXPECT_NE(std::string(keys->element[i]->str).find("sluice:{t}:"), std::string::npos)
        << keys->element[i]->str;
  }
  ASSERT_EQ(t.destroy(), StatusCode::kOk);
  EXPECT_EQ(raw_.integer({"EXISTS", "sluice:{t}:stream", "sluice:{t}:meta", "sluice:{t}:acked"}),
            0);
}

TEST_F(StreamTopicTest, EveryChannelSeesEveryMessage) {
  auto t = topic();
  auto a = channel("a");
  auto b = channel("b");
  std::vector<StreamMessage> none;
  // Joining happens at the first read: join both before appending.
  EXPECT_EQ(a.read(none, 1, with_timeout(1ms)), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(b.read(none, 1, with_timeout(1ms)), StatusCode::kDeadlineExceeded);
  ASSERT_EQ(append(t, numbered(0, 20)), StatusCode::kOk);
  EXPECT_EQ(payloads(read(a, 20)), numbered(0, 20));
  EXPECT_EQ(payloads(read(b, 20)), numbered(0, 20));
}

TEST_F(StreamTopicTest, ConsumersOfOneChannelShareItsMessagesExactlyOnce) {
  auto t = topic();
  constexpr int kMessages = 3000;
  {
    auto join = channel("shared");
    std::vector<StreamMessage> none;
    ASSERT_EQ(join.read(none, 1, with_timeout(1ms)), StatusCode::kDeadlineExceeded);
  }
  std::atomic<int> taken{0};
  std::vector<std::vector<std::string>> seen(3);
  std::vector<std::thread> consumers;
  for (int k = 0; k < 3; ++k) {
    consumers.emplace_back([&, k] {
      auto c = channel("shared");
      while (taken.load() < kMessages) {
        std::vector<StreamMessage> got;
        Status s = c.read(got, 50, with_timeout(50ms));
        if (s.code() == StatusCode::kDeadlineExceeded) continue;
        ASSERT_TRUE(s.ok()) << s;
        for (auto& m : got) {
          ASSERT_TRUE(c.ack(m).ok());
          seen[static_cast<std::size_t>(k)].push_back(m.payload);
        }
        taken.fetch_add(static_cast<int>(got.size()));
      }
    });
  }
  ASSERT_EQ(append(t, numbered(0, kMessages)), StatusCode::kOk);
  for (auto& th : consumers) th.join();
  std::multiset<std::string> all;
  for (const auto& s : seen) all.insert(s.begin(), s.end());
  EXPECT_EQ(all.size(), static_cast<std::size_t>(kMessages));  // none twice
  const auto want = numbered(0, kMessages);
  EXPECT_EQ(std::set<std::string>(all.begin(), all.end()),
            std::set<std::string>(want.begin(), want.end()));  // none lost
}

TEST_F(StreamTopicTest, AConsumerThatDiesUnackedHasItsMessagesClaimedByAnother) {
  StreamTopicOptions o;
  o.visibility_timeout = 200ms;
  auto t = topic(o);
  auto alive = channel("work", o);
  std::vector<StreamMessage> none;
  ASSERT_EQ(alive.read(none, 1, with_timeout(1ms)), StatusCode::kDeadlineExceeded);
  ASSERT_EQ(append(t, numbered(0, 10)), StatusCode::kOk);
  {
    auto dead = channel("work", o);
    auto held = read(dead, 4, /*ack=*/false);  // then it goes away, unacknowledged
    EXPECT_EQ(payloads(held), numbered(0, 4));
  }
  // The other consumer gets the 6 new ones at once, and the 4 after the
  // visibility timeout, delivered a second time.
  auto got = read(alive, 10);
  std::vector<std::string> p = payloads(got);
  std::sort(p.begin(), p.end());
  auto want = numbered(0, 10);
  std::sort(want.begin(), want.end());
  EXPECT_EQ(p, want);
  int again = 0;
  for (const auto& m : got) again += m.deliveries == 2 ? 1 : 0;
  EXPECT_EQ(again, 4);
  auto st = t.stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->channels[0].unacknowledged, 0U);
  EXPECT_EQ(st->channels[0].pending, 0U);
}

TEST_F(StreamTopicTest, AMessageFailedMaxDeliveriesTimesIsDeadLettered) {
  StreamTopicOptions o;
  o.visibility_timeout = 50ms;
  o.max_deliveries = 3;
  auto t = topic(o);
  auto c = channel("work", o);
  std::vector<StreamMessage> none;
  ASSERT_EQ(c.read(none, 1, with_timeout(1ms)), StatusCode::kDeadlineExceeded);
  ASSERT_EQ(append(t, {"poison", "fine"}), StatusCode::kOk);
  // "poison" is never acknowledged: delivered 3 times, then dead-lettered.
  std::vector<std::uint32_t> deliveries;
  for (int round = 0; round < 50 && c.dead_lettered() == 0; ++round) {
    std::vector<StreamMessage> got;
    Status s = c.read(got, 10, with_timeout(300ms));
    if (s.code() == StatusCode::kDeadlineExceeded) continue;
    ASSERT_TRUE(s.ok()) << s;
    for (const auto& m : got) {
      if (m.payload == "poison") {
        deliveries.push_back(m.deliveries);
      } else {
        ASSERT_TRUE(c.ack(m).ok());
      }
    }
  }
  EXPECT_EQ(deliveries, (std::vector<std::uint32_t>{1, 2, 3}));
  EXPECT_EQ(c.dead_lettered(), 1U);
  auto dead = raw_.cmd({"XRANGE", "sluice:{t}:dead", "-", "+"});
  ASSERT_EQ(dead->elements, 1U);
  const auto* fields = dead->element[0]->element[1];
  EXPECT_EQ(std::string(fields->element[1]->str), "poison");
  auto st = t.stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->dead_letters, 1U);
  EXPECT_EQ(st->channels[0].dead_lettered, 1U);
  EXPECT_EQ(st->channels[0].unacknowledged, 0U);  // dead-lettered counts as done
}

TEST_F(StreamTopicTest, TheBoundHoldsUnderConcurrentProducersAndAcksReleaseIt) {
  StreamTopicOptions o;
  o.max_unconsumed = 20;
  auto c = channel("slow", o);
  std::vector<StreamMessage> none;
  ASSERT_EQ(c.read(none, 1, with_timeout(1ms)), StatusCode::kDeadlineExceeded);
  constexpr int kEach = 200;
  std::vector<std::thread> producers;
  for (int p = 0; p < 3; ++p) {
    producers.emplace_back([&, p] {
      auto t = topic(o);
      for (int i = 0; i < kEach; i += 10) {
        ASSERT_EQ(append(t, numbered(p * 1000 + i, p * 1000 + i + 10), nullptr, with_timeout(30s)),
                  StatusCode::kOk);
      }
    });
  }
  // The consumer samples the backlog from outside before each read: never
  // more than the bound unacknowledged.
  auto watcher = topic(o);
  std::uint64_t worst = 0;
  int got = 0;
  while (got < 3 * kEach) {
    auto st = watcher.stats();
    ASSERT_TRUE(st.ok()) << st.status();
    worst = std::max(worst, st->channels[0].unacknowledged);
    got += static_cast<int>(read(c, 5).size());
  }
  for (auto& th : producers) th.join();
  EXPECT_LE(worst, 20U);
  EXPECT_EQ(worst, 20U) << "the producers never reached the bound: the test proves nothing";
}

TEST_F(StreamTopicTest, AtTheBoundAppendsWaitHonouringStopAndDeadlineOrFail) {
  StreamTopicOptions o;
  o.max_unconsumed = 3;
  auto c = channel("slow", o);
  std::vector<StreamMessage> none;
  ASSERT_EQ(c.read(none, 1, with_timeout(1ms)), StatusCode::kDeadlineExceeded);
  auto t = topic(o);
  std::size_t done = 0;
  EXPECT_EQ(append(t, numbered(0, 5), &done, with_timeout(100ms)), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(done, 3U);  // a prefix, never past the bound

  std::stop_source stop;
  auto stopped = std::async(std::launch::async, [&] {
    auto t2 = topic(o);
    return append(t2, {"x"}, nullptr, Context(stop.get_token())).code();
  });
  stop.request_stop();
  EXPECT_EQ(stopped.get(), StatusCode::kCancelled);

  StreamTopicOptions fail = o;
  fail.block_at_bound = false;
  auto tf = topic(fail);
  EXPECT_EQ(tf.append("y").status().code(), StatusCode::kRejected);

  // An ack makes room and wakes a waiting append.
  auto waiting = std::async(std::launch::async, [&] {
    auto t3 = topic(o);
    return append(t3, {"after"}, nullptr, with_timeout(10s)).code();
  });
  read(c, 1);
  EXPECT_EQ(waiting.get(), StatusCode::kOk);
}

TEST_F(StreamTopicTest, RetentionTrimsOnlyWhatEveryChannelAcknowledged) {
  auto t = topic();
  auto fast = channel("fast");
  auto slow = channel("slow");
  std::vector<StreamMessage> none;
  ASSERT_EQ(fast.read(none, 1, with_timeout(1ms)), StatusCode::kDeadlineExceeded);
  ASSERT_EQ(slow.read(none, 1, with_timeout(1ms)), StatusCode::kDeadlineExceeded);
  ASSERT_EQ(append(t, numbered(0, 10)), StatusCode::kOk);
  read(fast, 10);
  auto held = read(slow, 4, /*ack=*/false);  // delivered to slow, not acknowledged
  ASSERT_TRUE(slow.ack(held[0]).ok());       // m0 done everywhere; m1..m3 pending
  auto n = t.trim();
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 1U);
  auto st = t.stats();
  EXPECT_EQ(st->retained, 9U);
  EXPECT_EQ(st->trimmed, 1U);
  // slow still gets everything it has not acknowledged.
  ASSERT_TRUE(slow.ack(std::span<const std::string>({held[1].id, held[2].id, held[3].id})).ok());
  EXPECT_EQ(payloads(read(slow, 6)), numbered(4, 10));
  EXPECT_EQ(*t.trim(), 9U);
  EXPECT_EQ(t.stats()->retained, 0U);

  // A channel that joins late starts at the oldest retained message and
  // counts only those as unacknowledged.
  ASSERT_EQ(append(t, numbered(10, 12)), StatusCode::kOk);
  auto late = channel("late");
  EXPECT_EQ(payloads(read(late, 2)), numbered(10, 12));
  auto after = t.stats();
  ASSERT_TRUE(after.ok()) << after.status();
  bool found = false;
  for (const auto& ch : after->channels) {
    if (ch.name == "late") {
      found = true;
      EXPECT_EQ(ch.unacknowledged, 0U);
    }
  }
  EXPECT_TRUE(found);
}

TEST_F(StreamTopicTest, ADeadServerIsUnavailableNamingItThenCallsRecover) {
  RedisServer persistent(/*persistent=*/true);
  StreamTopic t(persistent.options(), "t");
  StreamChannel c(persistent.options(), "t", "work");
  std::vector<StreamMessage> none;
  ASSERT_EQ(c.read(none, 1, with_timeout(1ms)), StatusCode::kDeadlineExceeded);
  ASSERT_EQ(t.append("before").status().code(), StatusCode::kOk);
  persistent.stop();
  auto r = t.append("during");
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("127.0.0.1:" + std::to_string(persistent.port())),
            std::string_view::npos)
      << r.status();
  persistent.restart();
  ASSERT_EQ(t.append("after").status().code(), StatusCode::kOk);
  // The channel's connection broke with the server: its first call says so,
  // the next reconnects.
  std::vector<StreamMessage> got;
  int broken = 0;
  while (got.size() < 2) {
    Status s = c.read(got, 10, with_timeout(5s));
    if (s.code() == StatusCode::kUnavailable && broken++ == 0) continue;
    ASSERT_TRUE(s.ok()) << s;
  }
  EXPECT_LE(broken, 1);
  EXPECT_EQ(payloads(got), (std::vector<std::string>{"before", "after"}));
}

TEST_F(StreamTopicTest, BadNamesAreInvalidArgument) {
  StreamTopic t(server_.options(), "a{b}");
  EXPECT_EQ(t.append("x").status().code(), StatusCode::kInvalidArgument);
  StreamChannel c(server_.options(), "t", "has space");
  std::vector<StreamMessage> out;
  EXPECT_EQ(c.read(out, 1, with_timeout(1ms)), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.read(out, 0), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice
