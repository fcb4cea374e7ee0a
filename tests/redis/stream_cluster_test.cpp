// StreamTopic/StreamChannel on a real 3-primary Redis Cluster (made by the
// test binary with `redis-cli --cluster create`, shared by its tests; each
// test uses its own topic names). Handles are given the first node only:
// topics on the other shards are reached by following MOVED, and a slot
// resharded while in use by following ASK, then MOVED.
#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "redis/stream_helpers.h"
#include "sluice/redis/stream_topic.h"
#include "sluice/store.h"
#include "testutil/redis_cluster.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testutil::append;
using testutil::numbered;
using testutil::RawRedis;
using testutil::RedisCluster;
using testutil::stream_key;
using testutil::take;

RedisCluster& cluster() {
  static RedisCluster c(3);
  return c;
}

// A topic name of this test (prefix) on node `node`.
std::string name_on(const std::string& prefix, std::size_t node) {
  for (int i = 0;; ++i) {
    std::string n = prefix + "." + std::to_string(i);
    if (cluster().node_of(stream_key(n)) == node) return n;
  }
}

TEST(StreamClusterTest, EveryOperationOnTopicsOnEveryShard) {
  RedisOptions seed = cluster().options();
  std::vector<std::string> names;
  for (std::size_t node = 0; node < cluster().size(); ++node) names.push_back(name_on("ops", node));
  for (const std::string& name : names) {
    StreamTopicOptions o;
    o.max_unconsumed = 1000;
    StreamTopic t(seed, name, o);
    const std::string chans[] = {"a", "b"};
    ASSERT_EQ(t.create(chans), StatusCode::kOk) << name;
    const auto msgs = numbered(name + "/", 200);
    ASSERT_EQ(append(t, msgs), StatusCode::kOk) << name;
    // Every channel sees every message, on whichever shard the topic is.
    StreamChannel a(seed, name, "a", o);
    StreamChannel b(seed, name, "b", o);
    EXPECT_EQ(take(a, 200), msgs);
    EXPECT_EQ(take(b, 200), msgs);
    auto st = t.stats();
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_EQ(st->appended, 200U);
    EXPECT_EQ(st->bound, 1000U);
    ASSERT_EQ(st->channels.size(), 2U);
    EXPECT_EQ(st->channels[0].unacknowledged, 0U);
    ASSERT_TRUE(t.trim().ok());
    EXPECT_EQ(t.stats()->retained, 0U);
    // The keys are where the slot says, one hash tag for all.
    const std::size_t node = cluster().node_of(stream_key(name));
    RawRedis raw(cluster().port(node));
    EXPECT_EQ(raw.integer({"EXISTS", "sluice:{" + name + "}:meta", "sluice:{" + name + "}:acked"}),
              2);
  }
  // Listing scans every primary.
  auto listed = StreamTopic::list(seed);
  ASSERT_TRUE(listed.ok()) << listed.status();
  for (const std::string& name : names) {
    EXPECT_TRUE(std::binary_search(listed->begin(), listed->end(), name)) << name;
  }
  for (const std::string& name : names) {
    StreamTopic t(seed, name);
    ASSERT_EQ(t.close(), StatusCode::kOk);
    StreamChannel a(seed, name, "a");
    EXPECT_EQ(a.next(with_timeout(10s)).status().code(), StatusCode::kClosed);
    ASSERT_EQ(t.destroy(), StatusCode::kOk);
    EXPECT_FALSE(t.stats()->exists);
  }
}

// peek, seek and purge on topics on every shard (one hash tag: each is one
// script on the topic's node), with handles given the first node only.
TEST(StreamClusterTest, PeekSeekAndPurgeOnTopicsOnEveryShard) {
  RedisOptions seed = cluster().options();
  for (std::size_t node = 0; node < cluster().size(); ++node) {
    const std::string name = name_on("look", node);
    StreamTopic t(seed, name);
    const std::string chans[] = {"a"};
    ASSERT_EQ(t.create(chans), StatusCode::kOk) << name;
    const auto msgs = numbered("m", 10);
    ASSERT_EQ(append(t, msgs), StatusCode::kOk) << name;
    StreamChannel a(seed, name, "a");
    std::vector<StreamMessage> held;
    ASSERT_EQ(a.next_batch(held, 3, with_timeout(10s)), StatusCode::kOk);
    ASSERT_EQ(held.size(), 3U);
    auto p = t.peek("a", "", 100);
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_EQ(p->size(), 10U) << name;
    for (std::size_t i = 0; i < p->size(); ++i) {
      EXPECT_EQ((*p)[i].payload, msgs[i]);
      EXPECT_EQ((*p)[i].deliveries, i < 3 ? 1U : 0U);
    }
    auto page = t.peek("a", (*p)[4].id, 2);
    ASSERT_TRUE(page.ok()) << page.status();
    ASSERT_EQ(page->size(), 2U);
    EXPECT_EQ((*page)[0].payload, msgs[5]);
    StreamSeekResult where;
    ASSERT_EQ(t.seek("a", (*p)[6].id, &where), StatusCode::kOk) << name;
    EXPECT_EQ(where.unacknowledged, 3U);
    EXPECT_EQ(where.dropped_pending, 3U);
    EXPECT_EQ(take(a, 1), std::vector<std::string>{msgs[7]});
    ASSERT_EQ(t.seek("a", "0", &where), StatusCode::kOk);
    EXPECT_EQ(where.unacknowledged, 10U);
    auto n = t.purge("a");
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(*n, 10U);
    auto st = t.stats();
    ASSERT_TRUE(st.ok()) << st.status();
    ASSERT_EQ(st->channels.size(), 1U);
    EXPECT_EQ(st->channels[0].unacknowledged, 0U);
    EXPECT_EQ(st->channels[0].purged, 10U);
    ASSERT_EQ(t.destroy(), StatusCode::kOk);
  }
}

// Three consumers of one channel of a topic on another shard than the seed
// get each message exactly once while all acknowledge.
TEST(StreamClusterTest, ConsumersOfOneChannelShareItExactlyOnce) {
  RedisOptions seed = cluster().options();
  const std::string name = name_on("share", 2);
  StreamTopic t(seed, name);
  const std::string chans[] = {"work"};
  ASSERT_EQ(t.create(chans), StatusCode::kOk);
  constexpr int kMessages = 3000;
  const auto msgs = numbered("m", kMessages);
  std::vector<std::future<std::vector<std::string>>> consumers;
  std::atomic<int> got_total{0};
  for (int i = 0; i < 3; ++i) {
    consumers.push_back(std::async(std::launch::async, [&] {
      StreamChannel c(seed, name, "work");
      std::vector<std::string> mine;
      while (got_total.load() < kMessages) {
        std::vector<StreamMessage> got;
        Status s = c.next_batch(got, 50, with_timeout(200ms));
        if (s.code() == StatusCode::kDeadlineExceeded) continue;
        if (!s.ok()) {
          ADD_FAILURE() << s;
          break;
        }
        std::vector<std::string> ids;
        for (auto& m : got) {
          ids.push_back(m.id);
          mine.push_back(std::move(m.payload));
        }
        EXPECT_EQ(c.ack(ids), StatusCode::kOk);
        got_total += static_cast<int>(got.size());
      }
      return mine;
    }));
  }
  ASSERT_EQ(append(t, msgs), StatusCode::kOk);
  std::multiset<std::string> all;
  for (auto& c : consumers) {
    for (auto& m : c.get()) all.insert(std::move(m));
  }
  EXPECT_EQ(all, std::multiset<std::string>(msgs.begin(), msgs.end()));
  EXPECT_EQ(t.stats()->channels[0].unacknowledged, 0U);
}

// Producers on their own connections never pass the bound of a topic on a
// shard other than the seed's; a slow consumer lets them through.
TEST(StreamClusterTest, TheBoundHoldsUnderConcurrentProducers) {
  RedisOptions seed = cluster().options();
  const std::string name = name_on("bound", 1);
  StreamTopicOptions o;
  o.max_unconsumed = 20;
  StreamTopic maker(seed, name, o);
  const std::string chans[] = {"slow"};
  ASSERT_EQ(maker.create(chans), StatusCode::kOk);
  std::vector<std::future<Status>> producers;
  for (int p = 0; p < 3; ++p) {
    producers.push_back(std::async(std::launch::async, [&, p] {
      StreamTopic t(seed, name);  // the recorded bound applies
      return append(t, numbered("p" + std::to_string(p) + "-", 100), with_timeout(60s));
    }));
  }
  StreamChannel slow(seed, name, "slow");
  std::size_t seen = 0;
  std::uint64_t worst = 0;
  while (seen < 300) {
    auto st = maker.stats();
    ASSERT_TRUE(st.ok()) << st.status();
    worst = std::max(worst, st->channels[0].unacknowledged);
    seen += take(slow, 1).size();
  }
  for (auto& p : producers) EXPECT_EQ(p.get(), StatusCode::kOk);
  EXPECT_LE(worst, 20U);
  EXPECT_GT(worst, 0U);
  EXPECT_EQ(maker.stats()->appended, 300U);
}

// A topic's slot moves to another shard while a producer and a consumer use
// it. While it migrates, the old node answers ASK for its keys: a read (one
// key) follows it at once; the scripts (several keys, some not there) get
// TRYAGAIN and are retried until the move ends, then follow MOVED. Nothing
// is lost or repeated, and the data is on the new node.
TEST(StreamClusterTest, ATopicReshardedInUseKeepsWorking) {
  RedisOptions seed = cluster().options();
  const std::string name = name_on("moving", 1);
  const long long slot = cluster().slot_of(stream_key(name));
  StreamTopic t(seed, name);
  const std::string chans[] = {"c"};
  ASSERT_EQ(t.create(chans), StatusCode::kOk);
  StreamChannel c(seed, name, "c");
  ASSERT_EQ(append(t, numbered("before", 10)), StatusCode::kOk);
  EXPECT_EQ(take(c, 10), numbered("before", 10));
  ASSERT_EQ(append(t, numbered("moving", 10)), StatusCode::kOk);

  cluster().begin_move(slot, 1, 2);  // keys on node 2; node 1 answers ASK
  std::vector<StreamMessage> got;
  ASSERT_EQ(c.next_batch(got, 10, with_timeout(10s)), StatusCode::kOk);
  std::vector<std::string> payloads;
  std::vector<std::string> ids;
  for (auto& m : got) {
    payloads.push_back(m.payload);
    ids.push_back(m.id);
  }
  EXPECT_EQ(payloads, numbered("moving", 10));
  auto during = std::async(std::launch::async, [&] {
    Status a = c.ack(ids);
    return a.ok() ? append(t, numbered("after", 10)) : a;
  });
  cluster().end_move(slot, 2);  // node 2 owns the slot: MOVED from node 1
  EXPECT_EQ(during.get(), StatusCode::kOk);
  EXPECT_EQ(take(c, 10), numbered("after", 10));

  EXPECT_EQ(cluster().node_of(stream_key(name)), 2U);
  RawRedis node2(cluster().port(2));
  EXPECT_EQ(node2.integer({"XLEN", stream_key(name)}), 30);
  auto st = t.stats();
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->appended, 30U);
  EXPECT_EQ(st->channels[0].unacknowledged, 0U);
}

// The store (what `sluice --redis` uses) on the cluster: Streams topics on
// any shard through the one node given; pressure queues, whose keys have
// no hash tag, cannot live on a cluster and say so.
TEST(StreamClusterTest, TheStoreReachesStreamsTopicsOnEveryShard) {
  auto store = QueueStore::open("redis://127.0.0.1:" + std::to_string(cluster().port(0)) + "/0");
  ASSERT_TRUE(store.ok()) << store.status();
  for (std::size_t node = 0; node < cluster().size(); ++node) {
    const std::string name = name_on("store", node);
    ASSERT_EQ((*store)->create(name, 100, QueueKind::kStream), StatusCode::kOk) << name;
    auto w = (*store)->writer(name, {});
    ASSERT_TRUE(w.ok()) << w.status();
    const std::vector<std::string_view> msgs = {"x", "y"};
    ASSERT_EQ((*w)->put(msgs, {}), StatusCode::kOk);
    for (const char* ch : {"default", "audit"}) {
      auto r = (*store)->reader(name, ch, {});
      ASSERT_TRUE(r.ok()) << r.status();
      std::vector<std::string> got;
      while (got.size() < 2) ASSERT_EQ((*r)->get(got, 2, with_timeout(10s)), StatusCode::kOk);
      EXPECT_EQ(got, (std::vector<std::string>{"x", "y"}));
      ASSERT_EQ((*r)->ack(), StatusCode::kOk);
    }
    auto info = (*store)->stat(name);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->kind, "stream");
    EXPECT_EQ(info->channels, (std::vector<std::string>{"audit", "default"}));
  }
  auto names = (*store)->list();
  ASSERT_TRUE(names.ok()) << names.status();
  // This test's topics (the binary run whole shares the cluster).
  EXPECT_EQ(std::count_if(names->begin(), names->end(),
                          [](const std::string& n) { return n.starts_with("store."); }),
            static_cast<std::ptrdiff_t>(cluster().size()));
  Status p = (*store)->create("plain", 10);
  EXPECT_EQ(p, StatusCode::kInvalidArgument) << p;
  EXPECT_NE(p.message().find("--stream"), std::string_view::npos) << p;
}

}  // namespace
}  // namespace sluice
