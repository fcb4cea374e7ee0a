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

#include "sluice/redis/stream_topic.h"
#include "sluice/store.h"
#include "testutil/redis_cluster.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testutil::RawRedis;
using testutil::RedisCluster;

RedisCluster& cluster() {
  static RedisCluster c(3);
  return c;
}

std::string stream_key(const std::string& topic) { return "sluice:{" + topic + "}:stream"; }

// A topic name of this test (prefix) on node `node`.
std::string name_on(const std::string& prefix, std::size_t node) {
  for (int i = 0;; ++i) {
    std::string n = prefix + "." + std::to_string(i);
    if (cluster().node_of(stream_key(n)) == node) return n;
  }
}

std::vector<std::string> numbered(const std::string& tag, int n) {
  std::vector<std::string> v;
  for (int i = 0; i < n; ++i) v.push_back(tag + std::to_string(i));
  return v;
}

Status append(StreamTopic& t, const std::vector<std::string>& msgs, const Context& ctx = {}) {
  std::vector<std::string_view> views(msgs.begin(), msgs.end());
  return t.append_batch(views, ctx);
}

// Exactly n payloads from c, acknowledged.
std::vector<std::string> take(StreamChannel& c, std::size_t n) {
  std::vector<std::string> out;
  const Context ctx = with_timeout(20s);
  while (out.size() < n) {
    std::vector<StreamMessage> got;
    Status s = c.next_batch(got, n - out.size(), ctx);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) break;
    std::vector<std::string> ids;
    for (auto& m : got) {
      ids.push_back(m.id);
      out.push_back(std::move(m.payload));
    }
    EXPECT_EQ(c.ack(ids), StatusCode::kOk);
  }
  return out;
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
  EXPECT_EQ(names->size(), cluster().size());
  Status p = (*store)->create("plain", 10);
  EXPECT_EQ(p, StatusCode::kInvalidArgument) << p;
  EXPECT_NE(p.message().find("--stream"), std::string_view::npos) << p;
}

// Failover: a cluster of three primaries, each with a replica. The primary
// serving a topic dies (SIGKILL) while a producer and a consumer use it;
// the cluster promotes its replica. Both handles fail with kUnavailable
// until then and carry on after it, with nothing lost that was replicated
// before the kill (Redis replicates asynchronously: the test waits for the
// replica to catch up first, as WAIT would). At least once: a call cut
// off by the kill may run twice.
struct Failure {
  bool seed;   // the victim is the one node the handles were given
  bool hangs;  // SIGSTOP (alive, silent, later back) rather than SIGKILL
};

class StreamFailoverTest : public ::testing::TestWithParam<Failure> {
 protected:
  static RedisCluster& cluster() {
    static RedisCluster c(3, 1);
    return c;
  }
};

// Repeats `op` while it fails with kUnavailable (the cluster failing over),
// for at most a minute; its last status.
template <class Op>
Status through_failover(Op op, int* unavailable = nullptr) {
  const auto give_up = std::chrono::steady_clock::now() + 60s;
  for (;;) {
    Status s = op();
    if (s.code() != StatusCode::kUnavailable || std::chrono::steady_clock::now() > give_up) {
      return s;
    }
    if (unavailable != nullptr) ++*unavailable;
    std::this_thread::sleep_for(50ms);  // the cluster's state, polled: no event to wait on
  }
}

TEST_P(StreamFailoverTest, AHandleCarriesOnOnThePromotedReplica) {
  const bool kill_seed = GetParam().seed;
  RedisCluster& c = cluster();
  RedisOptions seed = c.options();
  // A silent node costs a call io_timeout: keep it short.
  seed.io_timeout = std::chrono::milliseconds(1000);
  // A topic on the seed's shard, or on another one (reached through MOVED).
  std::string name;
  std::size_t victim = 0;
  for (int i = 0; name.empty(); ++i) {
    ASSERT_LT(i, 10000);
    const std::string n = "failover." + std::to_string(i);
    const std::size_t node = c.node_of(stream_key(n));
    if ((node == 0) == kill_seed) {
      name = n;
      victim = node;
    }
  }
  StreamTopic t(seed, name);
  const std::string chans[] = {"c"};
  ASSERT_EQ(t.create(chans), StatusCode::kOk);
  StreamChannel ch(seed, name, "c");
  const auto before = numbered("before", 100);
  ASSERT_EQ(append(t, before), StatusCode::kOk);
  ASSERT_EQ(take(ch, 50), std::vector<std::string>(before.begin(), before.begin() + 50));
  ASSERT_TRUE(testutil::eventually([&] { return c.replicas_caught_up(victim); }));

  if (GetParam().hangs) {
    c.pause(victim);
  } else {
    c.kill(victim);
  }
  int unavailable = 0;
  const auto after = numbered("after", 100);
  const Status put = through_failover([&] { return append(t, after); }, &unavailable);
  ASSERT_EQ(put, StatusCode::kOk) << put;
  EXPECT_GT(unavailable, 0);  // the first call after the kill cannot succeed
  EXPECT_NE(c.node_of(stream_key(name)), victim);

  // Everything not acknowledged before the kill comes, at least once;
  // nothing acknowledged before it comes again.
  std::set<std::string> want(before.begin() + 50, before.end());
  want.insert(after.begin(), after.end());
  std::set<std::string> seen;
  while (seen.size() < want.size()) {
    std::vector<StreamMessage> got;
    const Status s = through_failover([&] { return ch.next_batch(got, 64, with_timeout(10s)); });
    ASSERT_EQ(s, StatusCode::kOk) << s;
    std::vector<std::string> ids;
    for (auto& m : got) {
      ASSERT_TRUE(want.count(m.payload)) << m.payload;
      ids.push_back(m.id);
      seen.insert(std::move(m.payload));
    }
    ASSERT_EQ(through_failover([&] { return ch.ack(ids); }), StatusCode::kOk);
  }
  auto st = t.stats();
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->channels[0].unacknowledged, 0U);
  if (GetParam().hangs) {
    // Back, it learns it was replaced and follows the new primary: what it
    // may still have run from its socket is gone, and nothing comes twice.
    c.resume(victim);
    ASSERT_TRUE(testutil::eventually([&] {
      auto r = RawRedis(c.port(victim)).cmd({"ROLE"});
      return r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
             std::string_view(r->element[0]->str, r->element[0]->len) == "slave";
    }));
    ASSERT_EQ(append(t, numbered("last", 1)), StatusCode::kOk);
    std::vector<StreamMessage> got;
    ASSERT_EQ(ch.next_batch(got, 64, with_timeout(10s)), StatusCode::kOk);
    ASSERT_EQ(got.size(), 1U);
    EXPECT_EQ(got[0].payload, "last0");
  }
}

INSTANTIATE_TEST_SUITE_P(Victim, StreamFailoverTest,
                         ::testing::Values(Failure{false, false}, Failure{true, false},
                                           Failure{false, true}, Failure{true, true}),
                         [](const auto& p) {
                           return std::string(p.param.seed ? "TheSeed" : "AnotherShard") +
                                  (p.param.hangs ? "Hangs" : "Dies");
                         });

}  // namespace
}  // namespace sluice
