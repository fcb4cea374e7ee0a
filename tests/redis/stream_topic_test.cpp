// StreamTopic/StreamChannel against a real redis-server started per test.
// Waiting is observed, never assumed: a test that needs an append or a read
// to be blocked on the server first waits until the server says so
// (INFO clients: blocked_clients).
#include "sluice/redis/stream_topic.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <future>
#include <map>
#include <set>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "redis/stream_helpers.h"
#include "testutil/prometheus.h"
#include "testutil/redis_server.h"
#include "testutil/wait_for.h"

extern char** environ;  // NOLINT

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testutil::eventually;
using testutil::pending_list;
using testutil::RawRedis;
using testutil::RedisServer;

// A consumer process (stream_consumer_child) of channel `channel` of topic
// "t": it reads `batch` messages, acknowledges the first `ack`, says which
// (acked, held), and waits to be killed, holding the rest (kept claimed
// with keep_alive). Killed and reaped when it goes out of scope.
struct ConsumerChild {
  ConsumerChild(int port, const std::string& channel, int batch, int ack, bool keep_alive = false) {
    int out[2];
    if (pipe(out) != 0) return;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    std::vector<std::string> args = {SLUICE_STREAM_CHILD,   std::to_string(port), "t", channel,
                                     std::to_string(batch), std::to_string(ack)};
    if (keep_alive) args.emplace_back("1");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int rc = posix_spawn(&pid, SLUICE_STREAM_CHILD, &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    if (rc != 0) {
      pid = 0;
      close(out[0]);
      return;
    }
    FILE* from = fdopen(out[0], "r");
    char line[256];
    while (!ready && std::fgets(line, sizeof line, from) != nullptr) {
      std::string l(line);
      if (!l.empty() && l.back() == '\n') l.pop_back();
      if (l == "ready") ready = true;
      if (l.starts_with("acked ")) acked.push_back(l.substr(6));
      if (l.starts_with("held ")) held.push_back(l.substr(5));
    }
    std::fclose(from);
  }
  ~ConsumerChild() { kill_now(); }
  ConsumerChild(const ConsumerChild&) = delete;
  ConsumerChild& operator=(const ConsumerChild&) = delete;
  void kill_now() {
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    int st = 0;
    waitpid(pid, &st, 0);
    pid = 0;
  }

  pid_t pid = 0;
  bool ready = false;  // it got its batch
  std::vector<std::string> acked;
  std::vector<std::string> held;
};

class StreamTopicTest : public ::testing::Test {
 protected:
  StreamTopic topic(StreamTopicOptions o = {}) { return {server_.options(), "t", std::move(o)}; }
  StreamChannel channel(const std::string& name, StreamTopicOptions o = {}) {
    return {server_.options(), "t", name, std::move(o)};
  }
  // A consumer of a channel made now (it sees everything appended after).
  StreamChannel joined(const std::string& name, StreamTopicOptions o = {}) {
    StreamChannel c = channel(name, std::move(o));
    EXPECT_EQ(c.join(), StatusCode::kOk);
    return c;
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
    return testutil::read_messages(c, n, ack);
  }
  static std::vector<std::string> payloads(const std::vector<StreamMessage>& ms) {
    std::vector<std::string> v;
    for (const auto& m : ms) v.push_back(m.payload);
    return v;
  }
  static std::vector<std::string> sorted(std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  }
  static StreamChannelStats channel_stats(StreamTopic& t, const std::string& name) {
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

  RedisServer server_;
  RawRedis raw_{server_.port()};
};

TEST_F(StreamTopicTest, AppendReadAckInOrderWithKeysUnderOneHashTag) {
  auto t = topic();
  auto c = joined("work");
  auto id = t.append("first");
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_NE(id->find('-'), std::string::npos);
  ASSERT_EQ(append(t, numbered(0, 5)), StatusCode::kOk);
  auto one = c.next(with_timeout(10s));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->id, *id);
  EXPECT_EQ(one->payload, "first");
  EXPECT_EQ(one->deliveries, 1U);
  ASSERT_EQ(c.ack(*one), StatusCode::kOk);
  EXPECT_EQ(payloads(read(c, 5)), numbered(0, 5));

  auto st = t.stats();
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->appended, 6U);
  EXPECT_EQ(st->retained, 6U);
  ASSERT_EQ(st->channels.size(), 1U);
  EXPECT_EQ(st->channels[0].name, "work");
  EXPECT_EQ(st->channels[0].unacknowledged, 0U);
  EXPECT_EQ(st->channels[0].pending, 0U);
  // Every key of the topic carries the hash tag {t}: one Cluster slot.
  auto keys = raw_.cmd({"KEYS", "*"});
  ASSERT_GT(keys->elements, 0U);
  for (std::size_t i = 0; i < keys->elements; ++i) {
    EXPECT_EQ(std::string(keys->element[i]->str).rfind("sluice:{t}:", 0), 0U)
        << keys->element[i]->str;
  }
  ASSERT_EQ(t.destroy(), StatusCode::kOk);
  EXPECT_EQ(raw_.integer({"EXISTS", "sluice:{t}:stream", "sluice:{t}:meta", "sluice:{t}:acked",
                          "sluice:{t}:wake", "sluice:{t}:dead"}),
            0);
}

TEST_F(StreamTopicTest, ChannelsAreMadeListedAndDeleted) {
  auto t = topic();
  auto a = t.channel("a");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->name(), "a");
  EXPECT_EQ(a->topic(), "t");
  ASSERT_TRUE(t.channel("b").ok());
  EXPECT_EQ(*t.channels(), (std::vector<std::string>{"a", "b"}));
  ASSERT_EQ(append(t, numbered(0, 3)), StatusCode::kOk);
  auto held = read(*a, 1, /*ack=*/false);

  ASSERT_EQ(t.delete_channel("a"), StatusCode::kOk);
  EXPECT_EQ(*t.channels(), (std::vector<std::string>{"b"}));
  EXPECT_EQ(t.delete_channel("a").code(), StatusCode::kNotFound);
  // A consumer of the deleted channel is told once; its next call makes the
  // channel again (at the oldest retained message), with nothing held.
  std::vector<StreamMessage> got;
  EXPECT_EQ(a->next_batch(got, 10, with_timeout(1s)), StatusCode::kNotFound);
  EXPECT_EQ(sorted(payloads(read(*a, 3))), numbered(0, 3));
  EXPECT_EQ(channel_stats(t, "a").unacknowledged, 0U);
  EXPECT_EQ(channel_stats(t, "b").unacknowledged, 3U);
}

// The topic's stats in the Prometheus text format (stream_metrics.cpp).
TEST_F(StreamTopicTest, TheStatsRenderAsPrometheusText) {
  auto t = topic();
  auto a = joined("a");
  auto b = joined("b");
  ASSERT_EQ(append(t, numbered(0, 4)), StatusCode::kOk);
  EXPECT_EQ(payloads(read(a, 4)), numbered(0, 4));
  auto held = read(b, 1, /*ack=*/false);
  auto st = t.stats();
  ASSERT_TRUE(st.ok()) << st.status();
  const auto e = testutil::parse_prometheus(to_prometheus(*st, "orders"));
  ASSERT_EQ(e.error, "");
  EXPECT_EQ(e.at("sluice_stream_appended_total{name=\"orders\"}"), 4);
  EXPECT_EQ(e.at("sluice_stream_appended_bytes_total{name=\"orders\"}"), 8);
  EXPECT_EQ(e.at("sluice_stream_retained{name=\"orders\"}"), 4);
  EXPECT_EQ(e.at("sluice_stream_closed{name=\"orders\"}"), 0);
  EXPECT_EQ(e.at("sluice_stream_channel_unacknowledged{name=\"orders\",channel=\"a\"}"), 0);
  EXPECT_EQ(e.at("sluice_stream_channel_unacknowledged{name=\"orders\",channel=\"b\"}"), 4);
  EXPECT_EQ(e.at("sluice_stream_channel_pending{name=\"orders\",channel=\"b\"}"), 1);
  EXPECT_EQ(e.types.at("sluice_stream_channel_pending"), "gauge");
}

TEST_F(StreamTopicTest, EveryChannelSeesEveryMessage) {
  auto t = topic();
  auto a = joined("a");
  auto b = joined("b");
  ASSERT_EQ(append(t, numbered(0, 20)), StatusCode::kOk);
  EXPECT_EQ(payloads(read(a, 20)), numbered(0, 20));
  EXPECT_EQ(payloads(read(b, 20)), numbered(0, 20));
}

TEST_F(StreamTopicTest, ConsumersOfOneChannelShareItsMessagesExactlyOnce) {
  auto t = topic();
  constexpr int kMessages = 3000;
  joined("shared");
  std::atomic<int> taken{0};
  std::vector<std::vector<std::string>> seen(3);
  std::vector<std::thread> consumers;
  for (int k = 0; k < 3; ++k) {
    consumers.emplace_back([&, k] {
      auto c = channel("shared");  // each thread its own handle (connection)
      while (taken.load() < kMessages) {
        std::vector<StreamMessage> got;
        Status s = c.next_batch(got, 50, with_timeout(50ms));
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
  for (const auto& s : seen) EXPECT_FALSE(s.empty()) << "a consumer got nothing: not shared";
}

TEST_F(StreamTopicTest, AConsumerThatDiesUnackedHasItsMessagesClaimedByAnother) {
  StreamTopicOptions o;
  o.visibility_timeout = 200ms;
  auto t = topic(o);
  auto alive = joined("work", o);
  ASSERT_EQ(append(t, numbered(0, 10)), StatusCode::kOk);
  {
    auto dead = channel("work", o);
    auto held = read(dead, 4, /*ack=*/false);  // then it goes away, unacknowledged
    EXPECT_EQ(payloads(held), numbered(0, 4));
  }
  // The other consumer gets the 6 new ones at once, and the 4 after the
  // visibility timeout, delivered a second time.
  auto got = read(alive, 10);
  EXPECT_EQ(sorted(payloads(got)), sorted(numbered(0, 10)));
  int again = 0;
  for (const auto& m : got) again += m.deliveries == 2 ? 1 : 0;
  EXPECT_EQ(again, 4);
  auto st = channel_stats(t, "work");
  EXPECT_EQ(st.unacknowledged, 0U);
  EXPECT_EQ(st.pending, 0U);
}

// A consumer killed in the middle of a batch (a real process, SIGKILLed once
// it reported what it acknowledged and what it holds): what it held is
// delivered again to another consumer, nothing is lost, and only what it
// held comes twice.
TEST_F(StreamTopicTest, AConsumerProcessKilledMidBatchLosesNothing) {
  StreamTopicOptions o;
  o.visibility_timeout = 200ms;
  auto t = topic(o);
  auto survivor = joined("work", o);
  ASSERT_EQ(append(t, numbered(0, 10)), StatusCode::kOk);

  ConsumerChild child(server_.port(), "work", 6, 3);
  child.kill_now();
  const bool ready = child.ready;
  const auto& acked = child.acked;
  const auto& held = child.held;
  ASSERT_TRUE(ready) << "the child did not get its batch";
  EXPECT_EQ(acked, numbered(0, 3));
  EXPECT_EQ(held, numbered(3, 6));
  EXPECT_EQ(channel_stats(t, "work").pending, 3U);  // held by the dead process

  auto got = read(survivor, 7);
  std::vector<std::string> again;
  for (const auto& m : got) {
    if (m.deliveries == 2) again.push_back(m.payload);
  }
  EXPECT_EQ(sorted(again), held);
  std::vector<std::string> all = acked;
  for (const auto& p : payloads(got)) all.push_back(p);
  EXPECT_EQ(sorted(all), sorted(numbered(0, 10)));  // each exactly once beyond the kill
  auto cs = channel_stats(t, "work");
  EXPECT_EQ(cs.unacknowledged, 0U);
  EXPECT_EQ(cs.pending, 0U);
}

// keep_alive: a consumer that lives keeps what it holds, however long it
// takes, while another waits through several timeouts; one it gives back
// (nack) is no longer kept by its next round. A consumer process that dies
// (SIGKILL) holding messages, kept claimed until then, gives them up after
// the timeout. The
// timeout is the channel's (1 s, set_visibility_timeout): the waiter and
// the child go by it though their options say 30 s. Without the keep-alive
// the waiter takes everything after a second.
TEST_F(StreamTopicTest, ALiveConsumerKeepsWhatItHoldsPastTheTimeoutADeadOneGivesItUp) {
  auto t = topic();
  StreamTopicOptions keep;
  keep.keep_alive = true;
  auto live = joined("work", keep);
  ASSERT_EQ(live.set_visibility_timeout(1s), StatusCode::kOk);
  EXPECT_EQ(channel_stats(t, "work").visibility_timeout, 1s);
  auto waiter = joined("work");  // 30 s by its options, no keep-alive
  ASSERT_EQ(append(t, numbered(0, 6)), StatusCode::kOk);
  auto mine = read(live, 3, /*ack=*/false);
  ASSERT_EQ(payloads(mine), numbered(0, 3));
  ConsumerChild child(server_.port(), "work", 3, 0, /*keep_alive=*/true);
  ASSERT_TRUE(child.ready) << "the child did not get its batch";
  ASSERT_EQ(child.held, numbered(3, 6));
  ASSERT_EQ(live.nack(mine[0]), StatusCode::kOk);  // given back: not kept any more
  // A keep-alive round of `live` after the nack: m1's idle time goes back
  // (the server's state, sampled). A round that still kept m0 would make
  // it look busy again.
  const auto idle = [&](const std::string& id) {
    auto p = raw_.cmd({"XPENDING", "sluice:{t}:stream", "work", id, id, "1"});
    return p->elements == 1 ? p->element[0]->element[2]->integer : -1;
  };
  long long before = idle(mine[1].id);
  ASSERT_TRUE(eventually([&] {
    std::this_thread::sleep_for(20ms);
    const long long now = idle(mine[1].id);
    return now < std::exchange(before, now);
  }));

  // Three timeouts: the waiter gets only what was given back.
  std::vector<std::string> got;
  const auto until = std::chrono::steady_clock::now() + 3s;
  while (std::chrono::steady_clock::now() < until) {
    std::vector<StreamMessage> batch;
    const Status s = waiter.next_batch(batch, 10, with_timeout(200ms));
    if (s.code() == StatusCode::kDeadlineExceeded) continue;
    ASSERT_EQ(s, StatusCode::kOk);
    for (const auto& m : batch) {
      got.push_back(m.payload);
      EXPECT_EQ(m.deliveries, 2U) << m.payload;
      EXPECT_EQ(waiter.ack(m), StatusCode::kOk);
    }
  }
  EXPECT_EQ(got, numbered(0, 1));
  EXPECT_EQ(waiter.visibility_timeout(), 1s);  // learned from the channel
  EXPECT_EQ(channel_stats(t, "work").pending, 5U);

  child.kill_now();
  auto theirs = read(waiter, 3);
  EXPECT_EQ(sorted(payloads(theirs)), child.held);
  for (const auto& m : theirs) EXPECT_EQ(m.deliveries, 2U) << m.payload;
  // The live consumer still holds its own, delivered once.
  const std::vector<std::string> ids = {mine[1].id, mine[2].id};
  auto pending = raw_.cmd({"XPENDING", "sluice:{t}:stream", "work", "-", "+", "10"});
  ASSERT_EQ(pending->elements, 2U);
  for (std::size_t i = 0; i < 2; ++i) {
    const redisReply* e = pending->element[i];
    EXPECT_EQ(std::string(e->element[0]->str), ids[i]);
    EXPECT_EQ(std::string(e->element[1]->str), live.consumer());
    EXPECT_EQ(e->element[3]->integer, 1);  // JUSTID: the keep-alive counts no delivery
  }
  ASSERT_EQ(live.ack(ids), StatusCode::kOk);
  auto cs = channel_stats(t, "work");
  EXPECT_EQ(cs.unacknowledged, 0U);
  EXPECT_EQ(cs.pending, 0U);
}

// The keep-alive touches only what its consumer still holds: a message
// another consumer claimed from it (after its keep-alive missed a whole
// timeout: a process stopped in a debugger, a network outage) stays with
// the other one. (An XCLAIM with min-idle 0 would take it back.)
TEST_F(StreamTopicTest, TheKeepAliveNeverTakesBackAMessageAnotherConsumerClaimed) {
  auto t = topic();
  StreamTopicOptions keep;
  keep.keep_alive = true;
  keep.visibility_timeout = 300ms;
  auto first = joined("work", keep);
  ASSERT_EQ(append(t, numbered(0, 1)), StatusCode::kOk);
  auto held = read(first, 1, /*ack=*/false);
  auto claimed = raw_.cmd({"XCLAIM", "sluice:{t}:stream", "work", "other", "0", held[0].id});
  ASSERT_EQ(claimed->elements, 1U);
  // Three timeouts: nine rounds of the first's keep-alive.
  std::this_thread::sleep_for(900ms);
  auto p = raw_.cmd({"XPENDING", "sluice:{t}:stream", "work", "-", "+", "10"});
  ASSERT_EQ(p->elements, 1U);
  EXPECT_EQ(std::string(p->element[0]->element[1]->str), "other");
  EXPECT_GE(p->element[0]->element[2]->integer, 900);  // idle: nobody touched it
  // Its ack is refused: the other one's delivery stays (its ack decides).
  ASSERT_EQ(first.ack(held[0]), StatusCode::kInUse);
  EXPECT_EQ(channel_stats(t, "work").pending, 1U);
}

// replicas: an append waits for that many replicas (WAIT); a server without
// them cannot confirm it, so the append is in doubt, saying so, and *done
// does not count it. create() records the number: a handle that asks for
// none waits for it too. With a replica attached, appends succeed.
TEST_F(StreamTopicTest, AnAppendFewerReplicasHaveIsInDoubt) {
  StreamTopicOptions o;
  o.replicas = 1;
  RedisOptions quick = server_.options();
  // WAIT waits three quarters of it; the last quarter is the reply's margin
  // (100 ms of 400 was too little under TSan on a loaded CI machine).
  quick.io_timeout = 1200ms;
  StreamTopic made(quick, "t", o);
  const std::string chans[] = {"work"};
  ASSERT_EQ(made.create(chans), StatusCode::kOk);
  auto st = made.stats();
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->replicas, 1U);

  for (const bool recorded : {false, true}) {
    SCOPED_TRACE(recorded ? "a handle that asks for none" : "the handle that made it");
    StreamTopic t(quick, "t", recorded ? StreamTopicOptions{} : o);
    for (int round = 0; round < 2;
         ++round) {  // the first learns the recorded value; then pipelined
      std::size_t done = 7;
      const Status s = append(t, numbered(0, 3), &done);
      EXPECT_EQ(s, StatusCode::kUnavailable);
      EXPECT_NE(s.message().find("only 0 of the 1 replicas"), std::string_view::npos) << s;
      EXPECT_NE(s.message().find("3 messages after the first 0"), std::string_view::npos) << s;
      EXPECT_EQ(done, 0U);
      EXPECT_EQ(t.in_doubt(), 3U);
    }
  }

  raw_.cmd({"CONFIG", "SET", "repl-diskless-sync-delay", "0"});  // 5 s by default
  RedisServer replica;
  ASSERT_EQ(RawRedis(replica.port())
                .cmd({"REPLICAOF", "127.0.0.1", std::to_string(server_.port())})
                ->type,
            REDIS_REPLY_STATUS);
  // Until the replica has synced and the primary streams to it (Redis 7
  // starts at the replica's first ACK, up to a second after the sync), WAIT
  // says 0: wait until it has acknowledged a write (offset > 0; a write
  // before the sync left the offset at 0, which WAIT would take as done).
  ASSERT_TRUE(eventually([&] {
    raw_.cmd({"SET", "probe", "1"});
    if (raw_.integer({"WAIT", "1", "100"}) != 1) return false;
    auto r = RawRedis(replica.port()).cmd({"INFO", "replication"});
    const std::string info(r->str, r->len);
    const auto at = info.find("slave_repl_offset:");
    return at != std::string::npos && std::stoll(info.substr(at + 18)) > 0;
  }));
  StreamTopic t(quick, "t");
  std::size_t done = 0;
  ASSERT_EQ(append(t, numbered(0, 3), &done), StatusCode::kOk);
  EXPECT_EQ(done, 3U);
  EXPECT_EQ(t.in_doubt(), 0U);
  EXPECT_EQ(RawRedis(replica.port()).integer({"XLEN", "sluice:{t}:stream"}), 3 * 4 + 3);
}

TEST_F(StreamTopicTest, ConsumersThatComeAndGoDoNotPileUp) {
  StreamTopicOptions o;
  o.visibility_timeout = 50ms;
  auto t = topic(o);
  auto keeper = joined("work", o);
  ASSERT_EQ(append(t, numbered(0, 5)), StatusCode::kOk);
  for (int i = 0; i < 5; ++i) {
    auto passing = channel("work", o);
    read(passing, 1);  // reads, acknowledges, goes away
  }
  EXPECT_EQ(raw_.cmd({"XINFO", "CONSUMERS", "sluice:{t}:stream", "work"})->elements, 5U);
  // The remaining consumer forgets those that hold nothing once they have
  // been idle for the visibility timeout (at a full claim scan).
  EXPECT_TRUE(eventually([&] {
    std::vector<StreamMessage> none;
    (void)keeper.next_batch(none, 1, with_timeout(20ms));
    return raw_.cmd({"XINFO", "CONSUMERS", "sluice:{t}:stream", "work"})->elements <= 1;
  }));
}

TEST_F(StreamTopicTest, NackGivesMessagesBackAtOnceCountingADelivery) {
  StreamTopicOptions o;  // visibility timeout 30 s: nothing here waits for it
  auto t = topic(o);
  auto c = joined("work", o);
  ASSERT_EQ(append(t, numbered(0, 4)), StatusCode::kOk);
  auto held = read(c, 2, /*ack=*/false);
  ASSERT_EQ(c.nack(held[1]), StatusCode::kOk);
  auto again = c.next(with_timeout(5s));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->payload, "m1");
  EXPECT_EQ(again->deliveries, 2U);
  ASSERT_EQ(c.ack(*again), StatusCode::kOk);
  ASSERT_EQ(c.nack(*again), StatusCode::kOk);  // acknowledged: ignored

  // nack() gives back everything held; another consumer takes it at its
  // first read.
  auto more = read(c, 2, /*ack=*/false);
  EXPECT_EQ(payloads(more), numbered(2, 4));
  ASSERT_EQ(c.nack(), StatusCode::kOk);
  auto other = channel("work", o);
  auto taken = read(other, 3);
  EXPECT_EQ(sorted(payloads(taken)), (std::vector<std::string>{"m0", "m2", "m3"}));
  for (const auto& m : taken) EXPECT_EQ(m.deliveries, 2U) << m.payload;
  // A consumer cannot give back what another holds.
  ASSERT_EQ(append(t, {"m4"}), StatusCode::kOk);
  auto m4 = read(other, 1, /*ack=*/false);
  ASSERT_EQ(c.nack(m4[0]), StatusCode::kOk);
  std::vector<StreamMessage> none;
  EXPECT_EQ(c.next_batch(none, 1, with_timeout(100ms)), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(channel_stats(t, "work").pending, 1U);
}

// XREADGROUP ... BLOCK ends at the server's first tick after its timeout
// (hz 1: up to a second); the client ends it at its deadline, and a stop
// ends it at once, without losing what arrives next.
TEST_F(StreamTopicTest, ADeadlineOrAStopEndsABlockedReadNotTheServersTick) {
  RawRedis(server_.port()).cmd({"CONFIG", "SET", "hz", "1"});
  auto t = topic();
  ASSERT_EQ(t.create(), StatusCode::kOk);
  RedisOptions o = server_.options();
  o.wait_slice = 10s;
  o.io_timeout = 30s;
  StreamChannel c(o, "t", "work", {});
  ASSERT_EQ(c.join(), StatusCode::kOk);
  std::vector<StreamMessage> got;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(c.next_batch(got, 10, with_timeout(50ms)), StatusCode::kDeadlineExceeded);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 900ms) << "attempt " << i;
  }
  std::stop_source stop;
  auto blocked = std::async(std::launch::async,
                            [&] { return c.next_batch(got, 10, Context(stop.get_token())); });
  RawRedis raw(server_.port());
  ASSERT_TRUE(testutil::eventually([&] { return raw.blocked_clients() == 1; }));
  stop.request_stop();
  ASSERT_EQ(blocked.wait_for(5s), std::future_status::ready) << "still waiting on the server";
  EXPECT_EQ(blocked.get(), StatusCode::kCancelled);
  EXPECT_TRUE(got.empty());
  ASSERT_EQ(append(t, {"m0", "m1"}), StatusCode::kOk);
  EXPECT_EQ(payloads(read(c, 2)), (std::vector<std::string>{"m0", "m1"}));
  raw.cmd({"CONFIG", "SET", "hz", "10"});  // a shutdown waits for a tick
}

// nack with retry_after: the message stays away that long (from this
// consumer and from the others), then comes again with its count raised.
TEST_F(StreamTopicTest, ANackWithADelayBringsTheMessageBackOnlyAfterIt) {
  StreamTopicOptions o;
  o.visibility_timeout = 10s;  // far longer than the test: only the delay can bring it back
  auto t = topic(o);
  auto c = joined("work", o);
  auto other = joined("work", o);
  ASSERT_EQ(append(t, {"later"}), StatusCode::kOk);
  auto held = read(c, 1, /*ack=*/false);
  EXPECT_EQ(c.nack(held[0], 11s).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.nack(held[0], -1ms).code(), StatusCode::kInvalidArgument);
  const auto given_back = std::chrono::steady_clock::now();
  ASSERT_EQ(c.nack(held[0], 400ms), StatusCode::kOk);
  std::vector<StreamMessage> none;
  EXPECT_EQ(c.next_batch(none, 1, with_timeout(150ms)), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(other.next_batch(none, 1, with_timeout(100ms)), StatusCode::kDeadlineExceeded);
  auto again = c.next(with_timeout(5s));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_GE(std::chrono::steady_clock::now() - given_back, 400ms);
  EXPECT_EQ(again->payload, "later");
  EXPECT_EQ(again->deliveries, 2U);
  ASSERT_EQ(c.ack(*again), StatusCode::kOk);
  EXPECT_EQ(channel_stats(t, "work").unacknowledged, 0U);
}

TEST_F(StreamTopicTest, AMessageFailedMaxDeliveriesTimesIsDeadLettered) {
  StreamTopicOptions o;
  o.max_deliveries = 3;
  auto t = topic(o);
  auto c = joined("work", o);
  ASSERT_EQ(append(t, {"poison", "fine"}), StatusCode::kOk);
  // The handler fails on "poison" every time (nack): delivered 3 times, then
  // dead-lettered instead of a 4th.
  std::vector<std::uint32_t> deliveries;
  for (int round = 0; round < 10 && c.dead_lettered() == 0; ++round) {
    std::vector<StreamMessage> got;
    Status s = c.next_batch(got, 10, with_timeout(100ms));
    if (s.code() == StatusCode::kDeadlineExceeded) continue;
    ASSERT_TRUE(s.ok()) << s;
    for (const auto& m : got) {
      if (m.payload == "poison") {
        deliveries.push_back(m.deliveries);
        ASSERT_EQ(c.nack(m), StatusCode::kOk);
      } else {
        ASSERT_EQ(c.ack(m), StatusCode::kOk);
      }
    }
  }
  EXPECT_EQ(deliveries, (std::vector<std::uint32_t>{1, 2, 3}));
  EXPECT_EQ(c.dead_lettered(), 1U);
  auto dead = raw_.cmd({"XRANGE", "sluice:{t}:dead", "-", "+"});
  ASSERT_EQ(dead->elements, 1U);
  std::map<std::string, std::string> fields;
  const auto* f = dead->element[0]->element[1];
  for (std::size_t i = 0; i + 1 < f->elements; i += 2) {
    fields[f->element[i]->str] = std::string(f->element[i + 1]->str, f->element[i + 1]->len);
  }
  EXPECT_EQ(fields["d"], "poison");
  EXPECT_EQ(fields["channel"], "work");
  EXPECT_EQ(fields["deliveries"], "4");
  EXPECT_NE(fields["id"].find('-'), std::string::npos);
  auto st = t.stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->dead_letters, 1U);
  EXPECT_EQ(st->channels[0].dead_lettered, 1U);
  EXPECT_EQ(st->channels[0].unacknowledged, 0U);  // dead-lettered counts as done
  EXPECT_EQ(st->channels[0].pending, 0U);
}

// StartFrom::kTail: a new channel reads only what is appended after it was
// made; what came before neither reaches it nor holds the bound for it. A
// channel that exists keeps its place whatever the handle says.
TEST_F(StreamTopicTest, AChannelMadeAtTheTailSeesOnlyWhatComesAfter) {
  StreamTopicOptions o;
  o.max_unconsumed = 5;
  o.on_bound = BoundPolicy::kFail;
  auto t = topic(o);
  auto early = joined("early", o);
  ASSERT_EQ(append(t, numbered(0, 5)), StatusCode::kOk);
  StreamTopicOptions tail = o;
  tail.start = StartFrom::kTail;
  auto late = joined("late", tail);
  EXPECT_EQ(channel_stats(t, "late").unacknowledged, 0U);
  // "early" also starts from the tail now, but exists: it keeps its five.
  auto early_again = joined("early", tail);
  EXPECT_EQ(payloads(read(early_again, 5)), numbered(0, 5));
  ASSERT_EQ(append(t, numbered(5, 7)), StatusCode::kOk);
  EXPECT_EQ(payloads(read(late, 2)), numbered(5, 7));
  EXPECT_EQ(payloads(read(early, 2)), numbered(5, 7));
  std::vector<StreamMessage> none;
  EXPECT_EQ(late.next_batch(none, 10, with_timeout(100ms)), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(channel_stats(t, "late").unacknowledged, 0U);
  // The bound counts from where "late" started: five more fit.
  ASSERT_EQ(append(t, numbered(7, 12)), StatusCode::kOk);
  EXPECT_EQ(append(t, {"over"}), StatusCode::kRejected);
  // A channel made at the tail of an empty topic gets the first message.
  StreamTopicOptions fresh = tail;
  auto other = StreamChannel(server_.options(), "u", "c", fresh);
  ASSERT_EQ(other.join(), StatusCode::kOk);
  StreamTopic u(server_.options(), "u", fresh);
  ASSERT_TRUE(u.append("first").ok());
  auto m = other.next(with_timeout(5s));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->payload, "first");
}

TEST_F(StreamTopicTest, ConsumeHandlesEverythingInOrderUntilTheTopicIsClosed) {
  auto t = topic();
  auto c = joined("work");
  ASSERT_EQ(append(t, numbered(0, 150)), StatusCode::kOk);
  ASSERT_EQ(t.close(), StatusCode::kOk);
  std::vector<std::string> seen;
  Status s = c.consume(
      [&](const StreamMessage& m) {
        seen.push_back(m.payload);
        return Status::Ok();
      },
      with_timeout(10s), /*batch=*/16);
  EXPECT_EQ(s.code(), StatusCode::kClosed) << s;
  EXPECT_EQ(seen, numbered(0, 150));
  const StreamChannelStats st = channel_stats(t, "work");
  EXPECT_EQ(st.unacknowledged, 0U);
  EXPECT_EQ(st.pending, 0U);
  EXPECT_EQ(c.consume([](const StreamMessage&) { return Status::Ok(); }, {}, 0).code(),
            StatusCode::kInvalidArgument);
}

// A message that always fails (by status or by throwing) does not stop the
// others: it comes again until max_deliveries, then goes to the dead letters.
TEST_F(StreamTopicTest, ConsumeGoesOnPastFailuresAndDeadLettersWhatNeverSucceeds) {
  StreamTopicOptions o;
  o.max_deliveries = 3;
  auto t = topic(o);
  auto c = joined("work", o);
  ASSERT_EQ(append(t, {"m0", "poison", "m2", "throws-once", "m4"}), StatusCode::kOk);
  ASSERT_EQ(t.close(), StatusCode::kOk);
  std::map<std::string, std::vector<std::uint32_t>> deliveries;
  Status s = c.consume(
      [&](const StreamMessage& m) -> Status {
        deliveries[m.payload].push_back(m.deliveries);
        if (m.payload == "poison") return {StatusCode::kInternal, "cannot handle"};
        if (m.payload == "throws-once" && m.deliveries == 1) throw std::runtime_error("flaky");
        return Status::Ok();
      },
      with_timeout(10s), /*batch=*/8);
  EXPECT_EQ(s.code(), StatusCode::kClosed) << s;
  using D = std::vector<std::uint32_t>;
  EXPECT_EQ(deliveries["m0"], D{1});
  EXPECT_EQ(deliveries["m2"], D{1});
  EXPECT_EQ(deliveries["m4"], D{1});
  EXPECT_EQ(deliveries["throws-once"], (D{1, 2}));
  EXPECT_EQ(deliveries["poison"], (D{1, 2, 3}));
  EXPECT_EQ(c.dead_lettered(), 1U);
  const StreamChannelStats st = channel_stats(t, "work");
  EXPECT_EQ(st.unacknowledged, 0U);
  EXPECT_EQ(st.dead_lettered, 1U);
}

// A stop seen between messages: what was handled is acknowledged, the rest
// of the batch is given back and goes to the next consumer; nothing is lost
// or handled twice.
TEST_F(StreamTopicTest, ConsumeStoppedMidBatchAcknowledgesWhatItHandledAndGivesBackTheRest) {
  auto t = topic();
  auto c = joined("work");
  ASSERT_EQ(append(t, numbered(0, 10)), StatusCode::kOk);
  std::stop_source stop;
  std::vector<std::string> first;
  Status s = c.consume(
      [&](const StreamMessage& m) {
        first.push_back(m.payload);
        if (first.size() == 4) stop.request_stop();
        return Status::Ok();
      },
      Context(stop.get_token()), /*batch=*/10);
  EXPECT_EQ(s.code(), StatusCode::kCancelled) << s;
  EXPECT_EQ(first, numbered(0, 4));
  EXPECT_EQ(channel_stats(t, "work").unacknowledged, 6U);
  auto other = channel("work");
  EXPECT_EQ(sorted(payloads(read(other, 6))), sorted(numbered(4, 10)));
  EXPECT_EQ(channel_stats(t, "work").unacknowledged, 0U);
}

TEST_F(StreamTopicTest, AMessageHeldPastTheTimeoutTooOftenIsDeadLettered) {
  StreamTopicOptions o;
  o.visibility_timeout = 50ms;
  o.max_deliveries = 2;
  auto t = topic(o);
  auto c = joined("work", o);
  ASSERT_EQ(append(t, {"stuck"}), StatusCode::kOk);
  // Never acknowledged nor given back: redelivered after the timeout.
  std::vector<std::uint32_t> deliveries;
  for (int round = 0; round < 100 && c.dead_lettered() == 0; ++round) {
    std::vector<StreamMessage> got;
    Status s = c.next_batch(got, 10, with_timeout(100ms));
    if (s.code() == StatusCode::kDeadlineExceeded) continue;
    ASSERT_TRUE(s.ok()) << s;
    for (const auto& m : got) deliveries.push_back(m.deliveries);
  }
  EXPECT_EQ(deliveries, (std::vector<std::uint32_t>{1, 2}));
  EXPECT_EQ(t.stats()->dead_letters, 1U);
}

// Three producers on their own connections against one slow channel. An
// observer outside the library (its own connection, Redis's own numbers:
// XINFO GROUPS pending + lag) samples the backlog all along.
TEST_F(StreamTopicTest, TheBoundHoldsUnderConcurrentProducers) {
  StreamTopicOptions o;
  o.max_unconsumed = 20;
  auto c = joined("slow", o);
  constexpr int kEach = 200;
  std::atomic<bool> stop{false};
  std::atomic<long long> worst{0};
  std::atomic<int> samples{0};
  std::thread observer([&] {
    RawRedis r(server_.port());
    while (!stop.load()) {
      auto g = r.cmd({"XINFO", "GROUPS", "sluice:{t}:stream"});
      if (g->type != REDIS_REPLY_ARRAY || g->elements != 1) continue;
      long long pending = -1;
      long long lag = -1;
      const auto* f = g->element[0];
      for (std::size_t i = 0; i + 1 < f->elements; i += 2) {
        const std::string name = f->element[i]->str;
        if (name == "pending") pending = f->element[i + 1]->integer;
        if (name == "lag" && f->element[i + 1]->type == REDIS_REPLY_INTEGER) {
          lag = f->element[i + 1]->integer;
        }
      }
      ASSERT_GE(pending, 0);
      ASSERT_GE(lag, 0) << "Redis could not say the group's lag";
      worst = std::max(worst.load(), pending + lag);
      samples.fetch_add(1);
    }
  });
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
  std::set<std::string> got;
  while (got.size() < 3 * kEach) {
    for (const auto& m : read(c, 5)) got.insert(m.payload);
  }
  for (auto& th : producers) th.join();
  stop = true;
  observer.join();
  EXPECT_EQ(got.size(), 3U * kEach);
  EXPECT_GT(samples.load(), 10);
  EXPECT_LE(worst.load(), 20);
  EXPECT_EQ(worst.load(), 20) << "the producers never reached the bound: the test proves nothing";
}

TEST_F(StreamTopicTest, AtTheBoundAppendsWaitHonouringStopAndDeadline) {
  StreamTopicOptions o;
  o.max_unconsumed = 3;
  auto c = joined("slow", o);
  auto t = topic(o);
  std::size_t done = 0;
  EXPECT_EQ(append(t, numbered(0, 5), &done, with_timeout(100ms)), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(done, 3U);  // a prefix, never past the bound
  EXPECT_EQ(channel_stats(t, "slow").unacknowledged, 3U);

  // A stop reaches an append waiting on the server within a slice.
  std::stop_source stop;
  auto stopped = std::async(std::launch::async, [&] {
    auto t2 = topic(o);
    return t2.append("x", Context(stop.get_token())).status().code();
  });
  ASSERT_TRUE(eventually([&] { return raw_.blocked_clients() == 1; }));
  stop.request_stop();
  EXPECT_EQ(stopped.get(), StatusCode::kCancelled);

  StreamTopicOptions fail = o;
  fail.on_bound = BoundPolicy::kFail;
  auto tf = topic(fail);
  auto rejected = tf.append("y");
  EXPECT_EQ(rejected.status().code(), StatusCode::kRejected);
  EXPECT_NE(rejected.status().message().find("127.0.0.1:" + std::to_string(server_.port())),
            std::string_view::npos)
      << rejected.status();
  EXPECT_EQ(t.stats()->appended, 3U);  // neither got in
}

// An append waiting at the bound ends at its deadline or stop, not at the
// server's tick (hz 1) or at the end of its server-side slice.
TEST_F(StreamTopicTest, AtTheBoundAnAppendsWaitEndsOnTheClientsTime) {
  raw_.cmd({"CONFIG", "SET", "hz", "1"});
  StreamTopicOptions o;
  o.max_unconsumed = 1;
  auto c = joined("slow", o);
  RedisOptions ro = server_.options();
  ro.wait_slice = 10s;
  ro.io_timeout = 30s;
  StreamTopic t(ro, "t", o);
  ASSERT_TRUE(t.append("a").ok());
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(t.append("b", with_timeout(50ms)).status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 900ms);
  std::stop_source stop;
  auto stopped = std::async(
      std::launch::async, [&] { return t.append("c", Context(stop.get_token())).status().code(); });
  ASSERT_TRUE(eventually([&] { return raw_.blocked_clients() == 1; }));
  stop.request_stop();
  ASSERT_EQ(stopped.wait_for(5s), std::future_status::ready) << "still waiting on the server";
  EXPECT_EQ(stopped.get(), StatusCode::kCancelled);
  EXPECT_EQ(t.stats()->appended, 1U);
  raw_.cmd({"CONFIG", "SET", "hz", "10"});  // a shutdown waits for a tick
}

// One acknowledgement of three messages wakes three waiting appends, each
// passing the wake on to the next while there is room: none waits out its
// slice (long here, and longer than the deadline).
TEST_F(StreamTopicTest, AnAckWakesEveryAppendThereIsRoomFor) {
  StreamTopicOptions o;
  o.max_unconsumed = 3;
  RedisOptions slow_slices = server_.options();
  slow_slices.wait_slice = 5s;
  slow_slices.io_timeout = 20s;
  auto c = joined("slow", o);
  auto t = topic(o);
  ASSERT_EQ(append(t, numbered(0, 3)), StatusCode::kOk);
  auto held = read(c, 3, /*ack=*/false);
  std::vector<std::future<StatusCode>> waiting;
  for (int i = 0; i < 3; ++i) {
    waiting.push_back(std::async(std::launch::async, [&, i] {
      StreamTopic ti(slow_slices, "t", o);
      return ti.append("w" + std::to_string(i), with_timeout(3s)).status().code();
    }));
  }
  ASSERT_TRUE(eventually([&] { return raw_.blocked_clients() == 3; }));
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> ids;
  for (const auto& m : held) ids.push_back(m.id);
  ASSERT_EQ(c.ack(ids), StatusCode::kOk);
  for (auto& w : waiting) EXPECT_EQ(w.get(), StatusCode::kOk);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  EXPECT_EQ(channel_stats(t, "slow").unacknowledged, 3U);
}

TEST_F(StreamTopicTest, DeletingTheSlowestChannelReleasesTheBound) {
  StreamTopicOptions o;
  o.max_unconsumed = 2;
  auto fast = joined("fast", o);
  auto slow = joined("slow", o);
  auto t = topic(o);
  ASSERT_EQ(append(t, numbered(0, 2)), StatusCode::kOk);
  read(fast, 2);
  auto waiting = std::async(std::launch::async, [&] {
    auto t2 = topic(o);
    return t2.append("m2", with_timeout(10s)).status().code();
  });
  ASSERT_TRUE(eventually([&] { return raw_.blocked_clients() == 1; }));
  ASSERT_EQ(t.delete_channel("slow"), StatusCode::kOk);
  EXPECT_EQ(waiting.get(), StatusCode::kOk);
}

// create() records the bound in Redis: a handle whose own options set none
// keeps it, and one with a looser bound keeps the tighter.
TEST_F(StreamTopicTest, CreateMakesChannelsAndRecordsTheBoundForEveryHandle) {
  StreamTopicOptions o;
  o.max_unconsumed = 2;
  auto maker = topic(o);
  const std::string chans[] = {"a", "b"};
  ASSERT_EQ(maker.create(chans), StatusCode::kOk);
  EXPECT_EQ(maker.create(chans), StatusCode::kAlreadyExists);
  auto st = maker.stats();
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_TRUE(st->exists);
  EXPECT_EQ(st->bound, 2U);
  EXPECT_EQ(*maker.channels(), (std::vector<std::string>{"a", "b"}));
  ASSERT_TRUE(StreamTopic(server_.options(), "t.2").append("x").ok());  // made by an append
  EXPECT_EQ(*StreamTopic::list(server_.options()), (std::vector<std::string>{"t", "t.2"}));
  EXPECT_TRUE(StreamTopic::list(server_.options(), "other")->empty());

  StreamTopicOptions loose;
  loose.max_unconsumed = 100;
  loose.on_bound = BoundPolicy::kFail;
  for (const StreamTopicOptions& other :
       {StreamTopicOptions{.on_bound = BoundPolicy::kFail}, loose}) {
    auto t = topic(other);
    std::size_t done = 0;
    EXPECT_EQ(append(t, numbered(0, 3), &done), StatusCode::kRejected);
    EXPECT_EQ(done, st->appended == 0 ? 2U : 0U);
    st = t.stats();
  }
  // Both channels exist from the first message: each has both.
  auto b = channel("b");
  EXPECT_EQ(payloads(read(b, 2)), numbered(0, 2));
  auto a = channel("a");
  EXPECT_EQ(payloads(read(a, 2)), numbered(0, 2));
}

// close(): appends fail with kClosed (one waiting at the bound too); a
// consumer gets everything, then kClosed, but not while another consumer of
// its channel still holds a message that may come back.
TEST_F(StreamTopicTest, ACloseEndsAppendsAndEachChannelOnceDrained) {
  StreamTopicOptions o;
  o.max_unconsumed = 2;
  o.visibility_timeout = 200ms;
  auto t = topic(o);
  const std::string chans[] = {"c"};
  ASSERT_EQ(t.create(chans), StatusCode::kOk);
  ASSERT_EQ(append(t, numbered(0, 2)), StatusCode::kOk);
  auto waiting = std::async(std::launch::async, [&] {
    auto t2 = topic(o);
    return t2.append("late", with_timeout(10s)).status().code();
  });
  ASSERT_TRUE(eventually([&] { return raw_.blocked_clients() == 1; }));
  ASSERT_EQ(t.close(), StatusCode::kOk);
  EXPECT_EQ(waiting.get(), StatusCode::kClosed);
  EXPECT_EQ(t.append("after").status().code(), StatusCode::kClosed);
  EXPECT_EQ(t.close(), StatusCode::kOk);  // idempotent
  EXPECT_TRUE(t.stats()->closed);

  auto holder = channel("c", o);
  auto held = read(holder, 1, /*ack=*/false);
  auto other = channel("c", o);
  EXPECT_EQ(payloads(read(other, 1)), numbered(1, 2));
  // The held message may still come back: `other` waits for it (claims it
  // once the holder's visibility timeout passes) instead of ending.
  auto again = other.next(with_timeout(10s));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->payload, held[0].payload);
  EXPECT_EQ(again->deliveries, 2U);
  ASSERT_EQ(other.ack(*again), StatusCode::kOk);
  EXPECT_EQ(other.next(with_timeout(10s)).status().code(), StatusCode::kClosed);
  EXPECT_EQ(holder.next(with_timeout(10s)).status().code(), StatusCode::kClosed);
}

// A read blocked on the server (XREADGROUP BLOCK) when another client
// deletes the topic: Redis answers "UNBLOCKED the stream key no longer
// exists", which was a kInternal error (`sluice get` exit 1, not 3).
TEST_F(StreamTopicTest, AReadWaitingWhenTheTopicIsDeletedSaysNotFound) {
  auto t = topic();
  auto c = channel("c");
  ASSERT_EQ(c.join(), StatusCode::kOk);
  auto waiting = std::async(std::launch::async, [&] {
    std::vector<StreamMessage> out;
    return c.next_batch(out, 1, with_timeout(30s));
  });
  ASSERT_TRUE(eventually([&] { return raw_.blocked_clients() == 1; }));
  ASSERT_EQ(topic().destroy(), StatusCode::kOk);
  const Status s = waiting.get();
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s;
}

// With create_if_missing false, a destroyed topic is not made again by a
// handle that outlived it: appends and joins get kNotFound.
TEST_F(StreamTopicTest, WithoutCreateIfMissingADestroyedTopicStaysGone) {
  StreamTopicOptions strict;
  strict.create_if_missing = false;
  auto t = topic(strict);
  EXPECT_EQ(t.append("x").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(channel("c", strict).join(), StatusCode::kNotFound);
  EXPECT_EQ(t.close(), StatusCode::kNotFound);
  EXPECT_FALSE(t.stats()->exists);

  const std::string chans[] = {"c"};
  ASSERT_EQ(t.create(chans), StatusCode::kOk);
  ASSERT_TRUE(t.append("x").ok());
  auto c = channel("c", strict);
  EXPECT_EQ(payloads(read(c, 1)), (std::vector<std::string>{"x"}));
  ASSERT_EQ(t.destroy(), StatusCode::kOk);
  EXPECT_EQ(t.append("y").status().code(), StatusCode::kNotFound);
  std::vector<StreamMessage> out;
  EXPECT_EQ(c.next_batch(out, 1, with_timeout(10s)), StatusCode::kNotFound);
  EXPECT_EQ(c.next_batch(out, 1, with_timeout(10s)), StatusCode::kNotFound);  // not made again
  EXPECT_EQ(raw_.integer({"EXISTS", "sluice:{t}:stream", "sluice:{t}:meta"}), 0);
}

TEST_F(StreamTopicTest, RetentionTrimsOnlyWhatEveryChannelAcknowledged) {
  auto t = topic();
  auto fast = joined("fast");
  auto slow = joined("slow");
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
  EXPECT_EQ(st->records_dropped, 0U);
  // slow still gets everything it has not acknowledged.
  ASSERT_TRUE(slow.ack(std::span<const std::string>({held[1].id, held[2].id, held[3].id})).ok());
  EXPECT_EQ(payloads(read(slow, 6)), numbered(4, 10));
  EXPECT_EQ(*t.trim(), 9U);
  EXPECT_EQ(t.stats()->retained, 0U);

  // A channel that joins late starts at the oldest retained message and
  // counts only those as unacknowledged.
  ASSERT_EQ(append(t, numbered(10, 12)), StatusCode::kOk);
  auto late = joined("late");
  EXPECT_EQ(channel_stats(t, "late").unacknowledged, 2U);
  EXPECT_EQ(payloads(read(late, 2)), numbered(10, 12));
  EXPECT_EQ(channel_stats(t, "late").unacknowledged, 0U);
}

// Appends trim by themselves (every 1024 messages): with one channel that
// acknowledges nothing, they trim nothing, and it gets everything.
TEST_F(StreamTopicTest, AppendsNeverTrimWhatAChannelHasNotAcknowledged) {
  auto t = topic();
  auto fast = joined("fast");
  auto slow = joined("slow");
  constexpr int kMessages = 2500;
  for (int i = 0; i < kMessages; i += 100) {
    ASSERT_EQ(append(t, numbered(i, i + 100)), StatusCode::kOk);
    read(fast, 100);
  }
  auto held = read(slow, 1000, /*ack=*/false);                                   // delivered, held
  ASSERT_EQ(append(t, numbered(kMessages, kMessages + 1100)), StatusCode::kOk);  // trims again
  read(fast, 1100);
  auto st = t.stats();
  EXPECT_EQ(st->trimmed, 0U);
  EXPECT_EQ(st->retained, static_cast<std::uint64_t>(kMessages + 1100));
  ASSERT_EQ(slow.nack(), StatusCode::kOk);
  auto all = read(slow, kMessages + 1100);
  EXPECT_EQ(sorted(payloads(all)), sorted(numbered(0, kMessages + 1100)));
  EXPECT_EQ(*t.trim(), static_cast<std::uint64_t>(kMessages + 1100));
}

TEST_F(StreamTopicTest, TheCapDropsTheOldestAndCountsWhatEachChannelLost) {
  StreamTopicOptions o;
  o.max_retained_messages = 5;
  auto t = topic(o);
  auto fast = joined("fast", o);
  auto slow = joined("slow", o);
  ASSERT_EQ(append(t, numbered(0, 5)), StatusCode::kOk);  // at the cap
  read(fast, 5);
  auto held = read(slow, 2, /*ack=*/false);  // m0, m1 held by slow
  // Three more: m0..m2 go. fast had acknowledged them; slow held two and had
  // not read the third.
  ASSERT_EQ(append(t, numbered(5, 8)), StatusCode::kOk);
  auto st = t.stats();
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->retained, 5U);
  EXPECT_EQ(st->records_dropped, 3U);
  EXPECT_EQ(st->trimmed, 0U);
  EXPECT_EQ(channel_stats(t, "fast").skipped_retention, 0U);
  EXPECT_EQ(channel_stats(t, "slow").skipped_retention, 3U);
  EXPECT_EQ(channel_stats(t, "slow").unacknowledged, 5U);
  EXPECT_EQ(channel_stats(t, "slow").pending, 0U);
  // slow's late acknowledgement of what was dropped counts nothing twice;
  // it reads on from what is left.
  ASSERT_EQ(slow.ack(std::span<const std::string>({held[0].id, held[1].id})), StatusCode::kOk);
  EXPECT_EQ(channel_stats(t, "slow").unacknowledged, 5U);
  EXPECT_EQ(payloads(read(slow, 5)), numbered(3, 8));
  read(fast, 3);
  // Now everything retained is acknowledged everywhere: what the cap
  // removes next is trimmed, not dropped.
  ASSERT_EQ(append(t, {"m8"}), StatusCode::kOk);
  st = t.stats();
  EXPECT_EQ(st->records_dropped, 3U);
  EXPECT_EQ(st->trimmed, 1U);
  EXPECT_EQ(st->retained, 5U);
}

// max_retained_age: entries older than the age by the server's clock go at
// the next append (or trim()), counted like the count cap's: dropped for a
// channel that had not acknowledged them, trimmed where every one had.
// Waiting here is for the server's clock to pass a point, read from it.
TEST_F(StreamTopicTest, TheAgeCapDropsWhatIsOlderAndCountsWhatEachChannelLost) {
  StreamTopicOptions o;
  o.max_retained_age = 1s;
  auto t = topic(o);
  auto fast = joined("fast", o);
  auto slow = joined("slow", o);
  std::string last_id;
  for (int i = 0; i < 4; ++i) {
    auto id = t.append("m" + std::to_string(i));
    ASSERT_TRUE(id.ok()) << id.status();
    last_id = *id;
  }
  read(fast, 3);                             // m0..m2 acknowledged
  auto held = read(slow, 1, /*ack=*/false);  // m0 held, m1..m3 unread
  auto server_ms = [&] {
    auto r = raw_.cmd({"TIME"});
    return std::stoll(r->element[0]->str) * 1000 + std::stoll(r->element[1]->str) / 1000;
  };
  auto ms_of = [](const std::string& id) { return std::stoll(id.substr(0, id.find('-'))); };
  ASSERT_LT(server_ms(), ms_of(last_id) + 1000) << "the machine took a second for 4 appends";
  EXPECT_EQ(t.trim().value(), 0U);  // young: nothing goes
  ASSERT_TRUE(eventually([&] { return server_ms() > ms_of(last_id) + 1000; }));
  auto m4 = t.append("m4");
  ASSERT_TRUE(m4.ok()) << m4.status();
  auto st = t.stats();
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->retained, 1U);
  EXPECT_EQ(st->records_dropped, 4U);  // m0..m2 slow's, m3 both's: each counted once
  EXPECT_EQ(st->trimmed, 0U);
  EXPECT_EQ(channel_stats(t, "fast").skipped_retention, 1U);
  EXPECT_EQ(channel_stats(t, "slow").skipped_retention, 4U);
  EXPECT_EQ(channel_stats(t, "fast").unacknowledged, 1U);
  EXPECT_EQ(channel_stats(t, "slow").unacknowledged, 1U);
  EXPECT_EQ(slow.ack(held[0]), StatusCode::kOk);  // too late: counts nothing twice
  EXPECT_EQ(channel_stats(t, "slow").unacknowledged, 1U);
  EXPECT_EQ(payloads(read(slow, 1)), (std::vector<std::string>{"m4"}));
  EXPECT_EQ(payloads(read(fast, 1)), (std::vector<std::string>{"m4"}));
  // With no append, trim() applies the cap: m4, acknowledged by both, is trimmed.
  ASSERT_TRUE(eventually([&] { return server_ms() > ms_of(*m4) + 1000; }));
  EXPECT_EQ(t.trim().value(), 1U);
  st = t.stats();
  EXPECT_EQ(st->retained, 0U);
  EXPECT_EQ(st->trimmed, 1U);
  EXPECT_EQ(st->records_dropped, 4U);
  o.max_retained_age = -1ms;
  EXPECT_EQ(topic(o).append("x").status().code(), StatusCode::kInvalidArgument);
}

// create() records the caps as it records the bound: a handle whose own
// options set none (a short-lived producer, `sluice put`) applies them.
TEST_F(StreamTopicTest, CreateRecordsTheCapsForEveryHandle) {
  StreamTopicOptions o;
  o.max_retained_messages = 3;
  o.max_retained_age = 1s;
  ASSERT_EQ(topic(o).create(), StatusCode::kOk);
  auto plain = topic();  // no caps of its own
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(plain.append("m" + std::to_string(i)).ok());
  auto st = plain.stats();
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->retained, 3U);         // the recorded count cap
  EXPECT_EQ(st->records_dropped, 2U);  // no channels: what went is dropped
  // A looser cap of its own does not loosen the recorded one.
  StreamTopicOptions loose;
  loose.max_retained_messages = 100;
  auto other = topic(loose);
  auto m5 = other.append("m5");
  ASSERT_TRUE(m5.ok()) << m5.status();
  EXPECT_EQ(other.stats()->retained, 3U);
  // The recorded age, applied by a trim() from a handle with none.
  auto server_ms = [&] {
    auto r = raw_.cmd({"TIME"});
    return std::stoll(r->element[0]->str) * 1000 + std::stoll(r->element[1]->str) / 1000;
  };
  auto six = other.stats();
  ASSERT_TRUE(
      eventually([&] { return server_ms() > std::stoll(m5->substr(0, m5->find('-'))) + 1000; }));
  EXPECT_EQ(plain.trim().value(), 3U);
  EXPECT_EQ(plain.stats()->retained, 0U);
  EXPECT_EQ(plain.stats()->records_dropped, six->records_dropped + 3);
}

TEST_F(StreamTopicTest, WhatTheCapDroppedNoLongerHoldsTheBound) {
  StreamTopicOptions o;
  o.max_unconsumed = 3;
  o.max_retained_messages = 2;
  o.on_bound = BoundPolicy::kFail;
  auto never = joined("never", o);  // reads nothing
  auto t = topic(o);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(t.append("m" + std::to_string(i)).ok()) << i;
  auto st = t.stats();
  EXPECT_EQ(st->records_dropped, 8U);
  EXPECT_EQ(channel_stats(t, "never").skipped_retention, 8U);
  EXPECT_EQ(channel_stats(t, "never").unacknowledged, 2U);
  EXPECT_EQ(payloads(read(never, 2)), numbered(8, 10));

  // Without channels, everything the cap removes is dropped.
  StreamTopic lone(server_.options(), "lone", o);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(lone.append("x").ok());
  EXPECT_EQ(lone.stats()->records_dropped, 3U);
}

// A persistent server (appendonly, fsync always) killed with SIGKILL in the
// middle of a stream: every call says kUnavailable naming host:port (a read
// waiting on the server included), and after the restart the calls recover
// with every acknowledged append and acknowledgement kept.
TEST_F(StreamTopicTest, AServerKilledMidStreamIsUnavailableThenNothingAcknowledgedIsLost) {
  RedisServer persistent(/*persistent=*/true);
  const std::string where = "127.0.0.1:" + std::to_string(persistent.port());
  StreamTopicOptions o;
  o.visibility_timeout = 200ms;
  StreamTopic t(persistent.options(), "t", o);
  StreamChannel c(persistent.options(), "t", "work", o);
  ASSERT_EQ(c.join(), StatusCode::kOk);
  ASSERT_EQ(append(t, numbered(0, 5)), StatusCode::kOk);
  auto got = read(c, 3, /*ack=*/false);
  ASSERT_EQ(c.ack(std::span<const std::string>({got[0].id, got[1].id})), StatusCode::kOk);
  // m0, m1 acknowledged; m2 held; m3, m4 not delivered.

  StreamChannel waiter(persistent.options(), "t", "other", o);
  ASSERT_EQ(waiter.join(), StatusCode::kOk);
  read(waiter, 5);
  auto waiting = std::async(std::launch::async, [&] {
    std::vector<StreamMessage> none;
    return waiter.next_batch(none, 1, with_timeout(30s));
  });
  RawRedis probe(persistent.port());
  ASSERT_TRUE(eventually([&] { return probe.blocked_clients() == 1; }));
  persistent.kill();
  Status w = waiting.get();
  EXPECT_EQ(w.code(), StatusCode::kUnavailable) << w;
  EXPECT_NE(w.message().find(where), std::string_view::npos) << w;

  auto r = t.append("during");
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find(where), std::string_view::npos) << r.status();
  std::vector<StreamMessage> none;
  Status s = c.next_batch(none, 1, with_timeout(5s));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find(where), std::string_view::npos) << s;
  EXPECT_EQ(c.ack(got[2]).code(), StatusCode::kUnavailable);
  auto st0 = t.stats();
  EXPECT_EQ(st0.status().code(), StatusCode::kUnavailable);

  persistent.restart();
  ASSERT_EQ(t.append("after").status().code(), StatusCode::kOk);
  auto st = t.stats();
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->appended, 6U);
  auto cs = channel_stats(t, "work");
  EXPECT_EQ(cs.unacknowledged, 4U);  // m2 m3 m4 after
  EXPECT_EQ(cs.pending, 1U);         // m2, still held
  // m0 and m1 never come back; m2 does once its holder's timeout passes.
  auto rest = read(c, 4);
  EXPECT_EQ(sorted(payloads(rest)), (std::vector<std::string>{"after", "m2", "m3", "m4"}));
  EXPECT_EQ(channel_stats(t, "work").unacknowledged, 0U);
}

TEST_F(StreamTopicTest, AServerOutOfMemoryIsUnavailableNamingIt) {
  auto t = topic();
  ASSERT_TRUE(t.append("small").ok());
  auto info = raw_.cmd({"INFO", "memory"});
  const std::string text(info->str, info->len);
  const long long used = std::stoll(text.substr(text.find("used_memory:") + 12));
  raw_.cmd({"CONFIG", "SET", "maxmemory-policy", "noeviction"});
  raw_.cmd({"CONFIG", "SET", "maxmemory", std::to_string(used + 200000)});
  const std::string big(500000, 'x');
  Status s;
  for (int i = 0; i < 5 && s.ok(); ++i) s = t.append(big).status();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("127.0.0.1:" + std::to_string(server_.port())), std::string_view::npos)
      << s;
  EXPECT_NE(s.message().find("OOM"), std::string_view::npos) << s;
  EXPECT_EQ(s.message().find("may or may not"), std::string_view::npos) << s;
}

// Misuse is an error, never a crash: every call on a moved-from handle.
TEST_F(StreamTopicTest, AMovedFromHandleRefusesEveryCall) {
  auto t = topic();
  auto c = joined("c");
  ASSERT_EQ(append(t, {"m0"}), StatusCode::kOk);
  auto held = read(c, 1, /*ack=*/false);
  StreamTopic t2 = std::move(t);
  StreamChannel c2 = std::move(c);
  const auto moved = StatusCode::kInvalidArgument;
  EXPECT_EQ(t.append("x").status().code(), moved);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(append(t, {"x"}).code(), moved);
  EXPECT_EQ(t.create().code(), moved);
  EXPECT_EQ(t.close().code(), moved);
  EXPECT_EQ(t.trim().status().code(), moved);
  EXPECT_EQ(t.stats().status().code(), moved);
  EXPECT_EQ(t.channel("c").status().code(), moved);
  EXPECT_EQ(t.channels().status().code(), moved);
  EXPECT_EQ(t.delete_channel("c").code(), moved);
  EXPECT_EQ(t.destroy().code(), moved);
  EXPECT_NE(std::string(t.stats().status().message()).find("moved from"), std::string::npos);
  EXPECT_EQ(c.join().code(), moved);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(c.next(with_timeout(1s)).status().code(), moved);
  std::vector<StreamMessage> out;
  EXPECT_EQ(c.next_batch(out, 1, with_timeout(1s)).code(), moved);
  EXPECT_EQ(c.ack(held[0]).code(), moved);
  EXPECT_EQ(c.nack(held[0]).code(), moved);
  EXPECT_EQ(c.nack(held[0], 1ms).code(), moved);
  EXPECT_EQ(c.nack().code(), moved);
  EXPECT_EQ(c.consume([](const StreamMessage&) { return Status::Ok(); }, with_timeout(1s)).code(),
            moved);
  // The handles they moved into work.
  ASSERT_EQ(c2.ack(held[0]), StatusCode::kOk);
  EXPECT_TRUE(t2.append("m1").ok());
  EXPECT_EQ(channel_stats(t2, "c").unacknowledged, 1U);
}

TEST_F(StreamTopicTest, BadNamesAndSettingsAreInvalidArgument) {
  StreamTopic t(server_.options(), "a{b}");
  EXPECT_EQ(t.append("x").status().code(), StatusCode::kInvalidArgument);
  StreamChannel c(server_.options(), "t", "has space");
  std::vector<StreamMessage> out;
  EXPECT_EQ(c.next_batch(out, 1, with_timeout(1ms)), StatusCode::kInvalidArgument);
  EXPECT_EQ(channel("fine").next_batch(out, 0), StatusCode::kInvalidArgument);
  EXPECT_EQ(topic().channel("").status().code(), StatusCode::kInvalidArgument);
  StreamTopicOptions o;
  o.max_deliveries = 0;
  EXPECT_EQ(channel("fine", o).join(), StatusCode::kInvalidArgument);
  o = {};
  o.visibility_timeout = 0ms;
  EXPECT_EQ(topic(o).append("x").status().code(), StatusCode::kInvalidArgument);
  o = {};
  o.prefix = "p{";
  EXPECT_EQ(topic(o).stats().status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(raw_.integer({"DBSIZE"}), 0);
}

// ---- peek, seek, purge ----

// Redis's own view of a channel, for checking the counters from outside:
// its last-delivered id, pending count and lag (XINFO GROUPS).
struct GroupInfo {
  std::string last;
  long long pending = -1;
  long long lag = -1;  // -1: Redis does not know
  long long consumers = -1;
};
GroupInfo group_info(RawRedis& raw, const std::string& name) {
  GroupInfo g;
  auto r = raw.cmd({"XINFO", "GROUPS", "sluice:{t}:stream"});
  for (std::size_t i = 0; i < r->elements; ++i) {
    const redisReply* e = r->element[i];
    std::map<std::string, const redisReply*> f;
    for (std::size_t k = 0; k + 1 < e->elements; k += 2) f[e->element[k]->str] = e->element[k + 1];
    if (std::string(f["name"]->str) != name) continue;
    g.last = f["last-delivered-id"]->str;
    g.pending = f["pending"]->integer;
    g.consumers = f["consumers"]->integer;
    if (f.count("lag") != 0 && f["lag"]->type == REDIS_REPLY_INTEGER) g.lag = f["lag"]->integer;
  }
  return g;
}

// peek: the pending messages (any consumer's, with their delivery counts)
// merged in id order with those not delivered yet (deliveries 0), the
// acknowledged ones between them left out; pages continue after an id;
// nothing changes on the server (positions, pending entries and their
// counts, consumers, counters), and the consumer reads on as before.
TEST_F(StreamTopicTest, PeekShowsPendingAndUndeliveredInIdOrderWithoutTakingAnything) {
  auto t = topic();
  auto a = joined("c");
  auto b = joined("c");
  ASSERT_EQ(append(t, numbered(0, 12)), StatusCode::kOk);
  auto got = read(a, 4, /*ack=*/false);  // m0..m3
  ASSERT_EQ(a.ack(std::span<const std::string>({got[1].id, got[2].id})), StatusCode::kOk);
  ASSERT_EQ(a.nack(got[3]), StatusCode::kOk);
  auto again = read(b, 1, /*ack=*/false);  // m3, claimed by b: its second delivery
  ASSERT_EQ(payloads(again), numbered(3, 4));
  ASSERT_EQ(again[0].deliveries, 2U);

  const auto before_group = group_info(raw_, "c");
  const auto before_pending = pending_list(raw_, "c");
  const auto before_stats = channel_stats(t, "c");
  auto all = t.peek("c", "", 100);
  ASSERT_TRUE(all.ok()) << all.status();
  std::vector<std::string> want = {"m0", "m3"};
  for (int i = 4; i < 12; ++i) want.push_back("m" + std::to_string(i));
  EXPECT_EQ(payloads(*all), want);
  ASSERT_EQ(all->size(), want.size());
  EXPECT_EQ((*all)[0].deliveries, 1U);
  EXPECT_EQ((*all)[0].id, got[0].id);
  EXPECT_EQ((*all)[1].deliveries, 2U);
  for (std::size_t i = 2; i < all->size(); ++i) EXPECT_EQ((*all)[i].deliveries, 0U) << i;
  EXPECT_EQ((*all)[0].time(), stream_id_time(got[0].id));

  // Pages of 3, each after the last id of the one before: the same list.
  std::vector<StreamMessage> paged;
  std::string after;
  for (int pages = 0; pages < 10; ++pages) {
    auto page = t.peek("c", after, 3);
    ASSERT_TRUE(page.ok()) << page.status();
    if (page->empty()) break;
    EXPECT_LE(page->size(), 3U);
    after = page->back().id;
    for (auto& m : *page) paged.push_back(std::move(m));
  }
  EXPECT_EQ(payloads(paged), want);
  auto mid = t.peek("c", got[0].id, 2);  // after m0: m3 (pending), m4
  ASSERT_TRUE(mid.ok()) << mid.status();
  EXPECT_EQ(payloads(*mid), (std::vector<std::string>{"m3", "m4"}));
  EXPECT_EQ(t.peek("c", all->back().id, 5)->size(), 0U);

  // Nothing moved.
  const auto after_group = group_info(raw_, "c");
  EXPECT_EQ(after_group.last, before_group.last);
  EXPECT_EQ(after_group.pending, before_group.pending);
  EXPECT_EQ(after_group.consumers, before_group.consumers);
  EXPECT_EQ(pending_list(raw_, "c"), before_pending);
  const auto after_stats = channel_stats(t, "c");
  EXPECT_EQ(after_stats.unacknowledged, before_stats.unacknowledged);
  EXPECT_EQ(after_stats.pending, before_stats.pending);
  EXPECT_EQ(payloads(read(a, 2, /*ack=*/false)), numbered(4, 6));
}

TEST_F(StreamTopicTest, PeekOfAMissingTopicOrChannelIsNotFoundAndBadArgumentsAreRefused) {
  auto t = topic();
  EXPECT_EQ(t.peek("c", "", 10).status().code(), StatusCode::kNotFound);
  ASSERT_EQ(append(t, numbered(0, 1)), StatusCode::kOk);
  EXPECT_EQ(t.peek("c", "", 10).status().code(), StatusCode::kNotFound);
  joined("c");
  EXPECT_EQ(t.peek("c", "", 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.peek("c", "12-x", 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.peek("c", "$", 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.peek("c b", "", 1).status().code(), StatusCode::kInvalidArgument);
  auto one = t.peek("c", "0", 10);  // "ms" is "ms-0"
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(payloads(*one), numbered(0, 1));
}

// A peek while a producer appends and a consumer reads and acknowledges
// (in order, in two halves per batch) sees a snapshot: the first
// unacknowledged message and a gapless run after it, the delivered ones
// (pending) before the undelivered ones; its start never goes back.
TEST_F(StreamTopicTest, APeekWhileAppendsAndAConsumerRunSeesAConsistentPrefix) {
  constexpr int kTotal = 3000;
  auto c = joined("c");
  std::atomic<bool> stop{false};
  std::thread producer([&] {
    auto t = topic();
    for (int i = 0; i < kTotal && !stop;) {
      const int n = 1 + (i * 7) % 13;
      std::vector<std::string> batch;
      for (int k = 0; k < n && i < kTotal; ++k, ++i) batch.push_back(std::to_string(i));
      if (append(t, batch) != StatusCode::kOk) break;
    }
  });
  std::thread consumer([&] {
    int seen = 0;
    while (seen < kTotal && !stop) {
      std::vector<StreamMessage> batch;
      if (!c.next_batch(batch, 10, with_timeout(20s)).ok()) break;
      std::vector<std::string> ids;
      for (const auto& m : batch) ids.push_back(m.id);
      const std::size_t half = ids.size() / 2;
      if (c.ack(std::span<const std::string>(ids).first(half)) != StatusCode::kOk) break;
      if (c.ack(std::span<const std::string>(ids).subspan(half)) != StatusCode::kOk) break;
      seen += static_cast<int>(batch.size());
    }
  });
  auto t = topic();
  int start = 0;
  int peeks = 0;
  int with_pending = 0;
  bool done = false;
  while (!done && !HasFailure()) {
    auto p = t.peek("c", "", 50);
    ASSERT_TRUE(p.ok()) << p.status();
    ++peeks;
    if (p->empty()) {
      done = channel_stats(t, "c").unacknowledged == 0 && t.stats()->appended == kTotal;
      continue;
    }
    const int first = std::stoi(p->front().payload);
    EXPECT_GE(first, start) << "the first unacknowledged message went back";
    start = first;
    bool undelivered = false;
    for (std::size_t i = 0; i < p->size(); ++i) {
      const StreamMessage& m = (*p)[i];
      EXPECT_EQ(m.payload, std::to_string(first + static_cast<int>(i))) << "a gap or a repeat";
      if (m.deliveries == 0) undelivered = true;
      EXPECT_TRUE(m.deliveries == (undelivered ? 0U : 1U)) << "pending after undelivered";
      if (i == 0 && m.deliveries == 1) ++with_pending;
    }
    // The next page (script and XRANGE in one MULTI/EXEC): a run of its
    // own, after the first page, pending before undelivered.
    auto next = t.peek("c", p->back().id, 50);
    ASSERT_TRUE(next.ok()) << next.status();
    if (next->empty()) continue;
    const int from = std::stoi(next->front().payload);
    EXPECT_GT(from, std::stoi(p->back().payload));
    undelivered = false;
    for (std::size_t i = 0; i < next->size(); ++i) {
      const StreamMessage& m = (*next)[i];
      EXPECT_EQ(m.payload, std::to_string(from + static_cast<int>(i))) << "a gap or a repeat";
      if (m.deliveries == 0) undelivered = true;
      EXPECT_TRUE(m.deliveries == (undelivered ? 0U : 1U)) << "pending after undelivered";
    }
  }
  stop = true;
  producer.join();
  consumer.join();
  EXPECT_GT(peeks, 10);
  EXPECT_GT(with_pending, 0) << "no peek saw a message held by the consumer";
}

// seek back: the replayed messages come again and count toward the bound
// again (an append waits, or is refused, until the channel catches up);
// Redis's own lag agrees with the counters after the seek.
TEST_F(StreamTopicTest, ASeekBackReplaysAndTheReplayedCountTowardTheBound) {
  StreamTopicOptions o;
  o.max_unconsumed = 10;
  o.on_bound = BoundPolicy::kFail;
  auto t = topic(o);
  const std::string chans[] = {"c"};
  ASSERT_EQ(t.create(chans), StatusCode::kOk);
  auto c = joined("c", o);
  ASSERT_EQ(append(t, numbered(0, 10)), StatusCode::kOk);
  auto first = read(c, 10);
  EXPECT_EQ(channel_stats(t, "c").unacknowledged, 0U);
  StreamSeekResult where;
  ASSERT_EQ(t.seek("c", "0-0", &where), StatusCode::kOk);
  EXPECT_EQ(where.position, "0-0");
  EXPECT_EQ(where.next_id, first[0].id);
  EXPECT_FALSE(where.clamped);
  EXPECT_EQ(where.unacknowledged_before, 0U);
  EXPECT_EQ(where.unacknowledged, 10U);
  EXPECT_EQ(channel_stats(t, "c").unacknowledged, 10U);
  auto g = group_info(raw_, "c");
  EXPECT_EQ(g.lag + g.pending, 10);
  EXPECT_EQ(t.append("x").status().code(), StatusCode::kRejected);  // at the bound again
  auto replay = read(c, 5);
  EXPECT_EQ(payloads(replay), numbered(0, 5));
  for (const auto& m : replay) EXPECT_EQ(m.deliveries, 1U);
  ASSERT_EQ(append(t, numbered(10, 15)), StatusCode::kOk);  // room for five
  EXPECT_EQ(t.append("x").status().code(), StatusCode::kRejected);
  EXPECT_EQ(payloads(read(c, 10)), [] {
    auto v = numbered(5, 15);
    return v;
  }());
  EXPECT_EQ(channel_stats(t, "c").unacknowledged, 0U);
  g = group_info(raw_, "c");
  EXPECT_EQ(g.lag, 0);
  EXPECT_EQ(g.pending, 0);
}

// seek to an id in the middle of a stream longer than the script's pages
// (1000): the next read is the entry after it, and the count of the
// entries after it (which the script counts on the shorter side) is exact.
TEST_F(StreamTopicTest, ASeekToAnIdCountsExactlyWhatComesAfterIt) {
  auto t = topic();
  auto c = joined("c");
  constexpr int kN = 2600;
  std::vector<std::string> ids;
  for (int at = 0; at < kN; at += 500) {
    auto batch = numbered(at, std::min(kN, at + 500));
    ASSERT_EQ(append(t, batch), StatusCode::kOk);
  }
  auto p = t.peek("c", "", kN);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->size(), static_cast<std::size_t>(kN));
  for (const int at : {1200, 99, 2400, 1999, 0, kN - 1, 1000, 1001}) {
    StreamSeekResult where;
    ASSERT_EQ(t.seek("c", (*p)[at].id, &where), StatusCode::kOk) << at;
    EXPECT_EQ(where.position, (*p)[at].id);
    EXPECT_EQ(where.unacknowledged, static_cast<std::uint64_t>(kN - 1 - at)) << at;
    EXPECT_EQ(channel_stats(t, "c").unacknowledged, static_cast<std::uint64_t>(kN - 1 - at));
    const auto g = group_info(raw_, "c");
    EXPECT_EQ(g.lag, kN - 1 - at) << at;
    if (at < kN - 1) {
      EXPECT_EQ(where.next_id, (*p)[at + 1].id);
      auto m = c.next(with_timeout(5s));
      ASSERT_TRUE(m.ok()) << m.status();
      EXPECT_EQ(m->payload, "m" + std::to_string(at + 1));
    } else {
      EXPECT_EQ(where.next_id, "");
    }
  }
  // "$", or an id past the newest: the end.
  StreamSeekResult end;
  ASSERT_EQ(t.seek("c", "$", &end), StatusCode::kOk);
  EXPECT_EQ(end.position, p->back().id);
  EXPECT_EQ(end.unacknowledged, 0U);
  EXPECT_EQ(end.dropped_pending, 1U);  // the last read's message
  ASSERT_EQ(t.seek("c", "99999999999999-0", &end), StatusCode::kOk);
  EXPECT_EQ(end.position, p->back().id);
  ASSERT_EQ(t.seek("c", "0", &end), StatusCode::kOk);
  EXPECT_EQ(end.unacknowledged, static_cast<std::uint64_t>(kN));
}

// Appends leave a checkpoint every 1024 messages (id -> entries added up to
// it), so a seek counts from the nearest one: a few pages, not half the
// stream (the server's own count of XRANGE calls, scripts' included). The
// count stays exact with entries another client appended (not counted by
// the script) and after retention removed the oldest and their
// checkpoints.
TEST_F(StreamTopicTest, ASeekCountsFromTheNearestCheckpointAndStaysExact) {
  auto t = topic();
  auto c = joined("c");
  for (int at = 0; at < 10000; at += 1000)
    ASSERT_EQ(append(t, numbered(at, at + 1000)), StatusCode::kOk);
  for (int i = 0; i < 10; ++i) raw_.cmd({"XADD", "sluice:{t}:stream", "*", "d", "foreign"});
  for (int at = 10000; at < 20000; at += 1000) {
    ASSERT_EQ(append(t, numbered(at, at + 1000)), StatusCode::kOk);
  }
  EXPECT_GE(raw_.integer({"ZCARD", "sluice:{t}:index"}), 19);
  read(c, 3000);
  ASSERT_EQ(t.trim().value(), 3000U);
  // The stream's ids now, oldest first.
  std::vector<std::string> ids;
  for (std::string from = "-";;) {
    auto r = raw_.cmd({"XRANGE", "sluice:{t}:stream", from, "+", "COUNT", "5000"});
    for (std::size_t i = 0; i < r->elements; ++i) ids.emplace_back(r->element[i]->element[0]->str);
    if (r->elements < 5000) break;
    from = "(" + ids.back();
  }
  ASSERT_EQ(ids.size(), 17010U);
  const auto xrange_calls = [&] {
    auto r = raw_.cmd({"INFO", "commandstats"});
    const std::string info(r->str, r->len);
    long long n = 0;
    for (const char* cmd : {"cmdstat_xrange:calls=", "cmdstat_xrevrange:calls="}) {
      const auto at = info.find(cmd);
      if (at != std::string::npos) n += std::stoll(info.substr(at + std::strlen(cmd)));
    }
    return n;
  };
  for (const std::size_t at : {8500UL, 6000UL, 7003UL, 7012UL, 12000UL, 3UL, 17008UL, 1023UL}) {
    raw_.cmd({"CONFIG", "RESETSTAT"});
    StreamSeekResult where;
    ASSERT_EQ(t.seek("c", ids[at], &where), StatusCode::kOk) << at;
    EXPECT_EQ(where.unacknowledged, ids.size() - 1 - at) << at;
    EXPECT_EQ(channel_stats(t, "c").unacknowledged, ids.size() - 1 - at) << at;
    EXPECT_EQ(group_info(raw_, "c").lag, static_cast<long long>(ids.size() - 1 - at)) << at;
    EXPECT_LE(xrange_calls(), 8) << at;
  }
  ASSERT_EQ(t.destroy(), StatusCode::kOk);
  EXPECT_EQ(raw_.integer({"EXISTS", "sluice:{t}:index"}), 0);
}

// seek forward (and purge) frees room under the bound: an append waiting
// there is woken at once, not at the end of its (long) wait slice.
TEST_F(StreamTopicTest, ASeekForwardOrAPurgeWakesAnAppendWaitingAtTheBound) {
  StreamTopicOptions o;
  o.max_unconsumed = 4;
  RedisOptions slow_slices = server_.options();
  slow_slices.wait_slice = 5s;
  slow_slices.io_timeout = 20s;
  auto t = topic(o);
  auto c = joined("c", o);
  ASSERT_EQ(append(t, numbered(0, 4)), StatusCode::kOk);
  auto held = read(c, 2, /*ack=*/false);
  for (const bool purge : {false, true}) {
    auto waiting = std::async(std::launch::async, [&] {
      StreamTopic tw(slow_slices, "t", o);
      return tw.append("w", with_timeout(3s)).status().code();
    });
    ASSERT_TRUE(eventually([&] { return raw_.blocked_clients() == 1; }));
    const auto t0 = std::chrono::steady_clock::now();
    if (purge) {
      auto n = t.purge("c");
      ASSERT_TRUE(n.ok()) << n.status();
      EXPECT_EQ(*n, 4U);  // m2 (held), m3 and the first "w"
    } else {
      StreamSeekResult where;
      ASSERT_EQ(t.seek("c", held[1].id, &where), StatusCode::kOk);  // skip m0 (held) and m1
      EXPECT_EQ(where.unacknowledged_before, 4U);
      EXPECT_EQ(where.unacknowledged, 2U);
      EXPECT_EQ(where.dropped_pending, 2U);
    }
    EXPECT_EQ(waiting.get(), StatusCode::kOk);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
    if (!purge) {
      EXPECT_EQ(channel_stats(t, "c").unacknowledged, 3U);  // m2, m3, w
      held = read(c, 1, /*ack=*/false);                     // m2 held for the purge
      ASSERT_EQ(payloads(held), numbered(2, 3));
      ASSERT_EQ(append(t, {"m3b"}, nullptr, with_timeout(5s)),
                StatusCode::kOk);  // at the bound again
    }
  }
  auto cs = channel_stats(t, "c");
  EXPECT_EQ(cs.unacknowledged, 1U);  // the second "w"
  EXPECT_EQ(cs.pending, 0U);
  EXPECT_EQ(cs.purged, 4U);
}

// What a consumer held when a seek took it back: its ack counts nothing
// (the message comes again); once the message was delivered again to
// another consumer, its ack is refused (kInUse) and leaves that delivery
// alone: the new holder's ack counts it. Its nack is ignored.
TEST_F(StreamTopicTest, WhatAConsumerHeldBeforeASeekIsNoLongerItsOwn) {
  auto t = topic();
  auto a = joined("c");
  auto b = joined("c");
  ASSERT_EQ(append(t, numbered(0, 10)), StatusCode::kOk);
  auto held = read(a, 5, /*ack=*/false);  // m0..m4
  StreamSeekResult where;
  ASSERT_EQ(t.seek("c", held[2].id, &where), StatusCode::kOk);  // after m2
  EXPECT_EQ(where.dropped_pending, 5U);
  EXPECT_EQ(where.unacknowledged, 7U);
  EXPECT_TRUE(pending_list(raw_, "c").empty());
  std::vector<std::string> ids;
  for (const auto& m : held) ids.push_back(m.id);
  ASSERT_EQ(a.ack(std::span<const std::string>(ids).subspan(4)), StatusCode::kOk);  // m4
  ASSERT_EQ(a.nack(std::span<const std::string>(ids).first(4)), StatusCode::kOk);
  EXPECT_EQ(channel_stats(t, "c").unacknowledged, 7U);
  auto replay = read(b, 7, /*ack=*/false);
  EXPECT_EQ(payloads(replay), numbered(3, 10));  // m3, m4 again, first delivery
  EXPECT_EQ(replay[0].deliveries, 1U);
  ASSERT_EQ(a.ack(std::span<const std::string>(ids).subspan(3, 1)), StatusCode::kInUse);  // m3
  EXPECT_EQ(channel_stats(t, "c").unacknowledged, 7U);
  ASSERT_EQ(b.ack(replay[0]), StatusCode::kOk);  // m3: b's delivery
  EXPECT_EQ(channel_stats(t, "c").unacknowledged, 6U);
  std::vector<std::string> rest;
  for (std::size_t i = 1; i < replay.size(); ++i) rest.push_back(replay[i].id);
  ASSERT_EQ(b.ack(rest), StatusCode::kOk);
  EXPECT_EQ(channel_stats(t, "c").unacknowledged, 0U);
}

// A keep-alive does not renew what a seek took from its consumer: replayed
// to another consumer, the messages stay there through several rounds.
TEST_F(StreamTopicTest, AKeepAliveDoesNotTakeBackWhatASeekGaveToAnother) {
  auto t = topic();
  StreamTopicOptions keep;
  keep.keep_alive = true;
  keep.visibility_timeout = 300ms;
  auto a = joined("c", keep);
  auto b = joined("c");
  ASSERT_EQ(append(t, numbered(0, 3)), StatusCode::kOk);
  auto held = read(a, 3, /*ack=*/false);
  ASSERT_EQ(t.seek("c", "0-0"), StatusCode::kOk);
  auto replay = read(b, 3, /*ack=*/false);
  ASSERT_EQ(payloads(replay), numbered(0, 3));
  // Three timeouts: nine rounds of a's keep-alive.
  std::this_thread::sleep_for(900ms);
  for (const auto& line : pending_list(raw_, "c")) {
    EXPECT_NE(line.find(" " + b.consumer() + " 1"), std::string::npos) << line;
  }
  EXPECT_EQ(pending_list(raw_, "c").size(), 3U);
}

// A consumer blocked in a read when a seek moves its channel back gets the
// replayed messages within its wait slice.
TEST_F(StreamTopicTest, AReadBlockedWhenTheChannelMovesBackGetsTheReplay) {
  auto t = topic();
  auto c = joined("c");
  ASSERT_EQ(append(t, numbered(0, 3)), StatusCode::kOk);
  read(c, 3);
  auto reading = std::async(std::launch::async, [&] {
    std::vector<StreamMessage> out;
    Status s = c.next_batch(out, 10, with_timeout(10s));
    return std::make_pair(s, out);
  });
  ASSERT_TRUE(eventually([&] { return raw_.blocked_clients() == 1; }));
  ASSERT_EQ(t.seek("c", "0"), StatusCode::kOk);
  auto [s, out] = reading.get();
  ASSERT_EQ(s, StatusCode::kOk);
  EXPECT_EQ(payloads(out), numbered(0, 3));
}

// seek before what retention kept (the cap here; trim() below) stops at the
// oldest retained message and says so; from the last removed id on there
// is nothing to say.
TEST_F(StreamTopicTest, ASeekBeforeTheOldestRetainedStopsThereAndSaysSo) {
  StreamTopicOptions o;
  o.max_retained_messages = 5;
  auto t = topic(o);
  auto c = joined("c", o);
  std::vector<std::string> ids;
  for (int i = 0; i < 10; ++i) ids.push_back(t.append("m" + std::to_string(i)).value());
  StreamSeekResult where;
  ASSERT_EQ(t.seek("c", "0-0", &where), StatusCode::kOk);
  EXPECT_TRUE(where.clamped);
  EXPECT_EQ(where.position, ids[4]);  // the last removed
  EXPECT_EQ(where.next_id, ids[5]);
  EXPECT_EQ(where.unacknowledged, 5U);
  ASSERT_EQ(t.seek("c", ids[3], &where), StatusCode::kOk);
  EXPECT_TRUE(where.clamped);
  ASSERT_EQ(t.seek("c", ids[4], &where), StatusCode::kOk);
  EXPECT_FALSE(where.clamped);
  EXPECT_EQ(payloads(read(c, 5)), numbered(5, 10));

  // Retention by acknowledgement.
  auto t2 = StreamTopic(server_.options(), "t2");
  StreamChannel c2(server_.options(), "t2", "c");
  ASSERT_EQ(c2.join(), StatusCode::kOk);
  std::vector<std::string> ids2;
  for (int i = 0; i < 6; ++i) ids2.push_back(t2.append("m" + std::to_string(i)).value());
  read(c2, 4);
  EXPECT_EQ(t2.trim().value(), 4U);
  ASSERT_EQ(t2.seek("c", "0-0", &where), StatusCode::kOk);
  EXPECT_TRUE(where.clamped);
  EXPECT_EQ(where.next_id, ids2[4]);
  EXPECT_EQ(where.unacknowledged, 2U);
  ASSERT_EQ(t2.seek("c", ids2[3], &where), StatusCode::kOk);
  EXPECT_FALSE(where.clamped);
}

// seek_time: the first message appended at or after a time (by the ids'
// milliseconds, the server's clock). Waiting here is for the server's
// clock to pass a millisecond, read from it.
TEST_F(StreamTopicTest, ASeekToATimeStartsAtTheFirstMessageAppendedFromThen) {
  auto t = topic();
  auto c = joined("c");
  auto server_ms = [&] {
    auto r = raw_.cmd({"TIME"});
    return std::stoll(r->element[0]->str) * 1000 + std::stoll(r->element[1]->str) / 1000;
  };
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(t.append("m" + std::to_string(i)).value());
  const auto ms0 = std::stoll(ids[2].substr(0, ids[2].find('-')));
  ASSERT_TRUE(eventually([&] { return server_ms() > ms0; }));
  for (int i = 3; i < 6; ++i) ids.push_back(t.append("m" + std::to_string(i)).value());
  read(c, 6);
  const auto at = stream_id_time(ids[3]);
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::milliseconds>(at.time_since_epoch()).count(),
            std::stoll(ids[3].substr(0, ids[3].find('-'))));
  StreamSeekResult where;
  ASSERT_EQ(t.seek_time("c", at + 500us, &where), StatusCode::kOk);  // within that millisecond
  EXPECT_EQ(where.next_id, ids[3]);
  EXPECT_EQ(where.unacknowledged, 3U);
  EXPECT_EQ(payloads(read(c, 3)), numbered(3, 6));
  ASSERT_EQ(t.seek_time("c", std::chrono::system_clock::time_point{}, &where), StatusCode::kOk);
  EXPECT_EQ(where.next_id, ids[0]);
  EXPECT_EQ(where.unacknowledged, 6U);
  ASSERT_EQ(t.seek_time("c", std::chrono::system_clock::now() + std::chrono::hours(1), &where),
            StatusCode::kOk);
  EXPECT_EQ(where.position, ids[5]);  // the end
  EXPECT_EQ(where.unacknowledged, 0U);
  EXPECT_EQ(stream_id_time("not an id"), std::chrono::system_clock::time_point{});
}

// purge drops what the channel has not acknowledged, pending and not yet
// delivered, and nothing of the other channels; counted in its stats; what
// comes after is delivered as usual; a purged message's ack counts nothing.
TEST_F(StreamTopicTest, APurgeDropsWhatTheChannelHasNotAcknowledgedAndCountsIt) {
  auto t = topic();
  auto c = joined("c");
  auto other = joined("other");
  ASSERT_EQ(append(t, numbered(0, 10)), StatusCode::kOk);
  read(c, 2);
  auto held = read(c, 3, /*ack=*/false);
  auto n = t.purge("c");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 8U);
  auto cs = channel_stats(t, "c");
  EXPECT_EQ(cs.unacknowledged, 0U);
  EXPECT_EQ(cs.pending, 0U);
  EXPECT_EQ(cs.purged, 8U);
  EXPECT_EQ(channel_stats(t, "other").unacknowledged, 10U);
  EXPECT_EQ(channel_stats(t, "other").purged, 0U);
  ASSERT_EQ(c.ack(held[0]), StatusCode::kOk);
  EXPECT_EQ(channel_stats(t, "c").unacknowledged, 0U);
  EXPECT_EQ(t.peek("c", "", 10)->size(), 0U);
  std::vector<StreamMessage> none;
  EXPECT_EQ(c.next_batch(none, 10, with_timeout(100ms)), StatusCode::kDeadlineExceeded);
  ASSERT_EQ(append(t, {"after"}), StatusCode::kOk);
  EXPECT_EQ(payloads(read(c, 1)), (std::vector<std::string>{"after"}));
  EXPECT_EQ(t.purge("c").value(), 0U);
  EXPECT_EQ(channel_stats(t, "c").purged, 8U);
  EXPECT_EQ(t.purge("nope").status().code(), StatusCode::kNotFound);
  // Deleting the channel forgets its count.
  ASSERT_EQ(t.delete_channel("c"), StatusCode::kOk);
  joined("c");
  EXPECT_EQ(channel_stats(t, "c").purged, 0U);
}

TEST_F(StreamTopicTest, ASeekOfAMissingTopicOrChannelIsNotFoundAndABadIdIsRefused) {
  auto t = topic();
  EXPECT_EQ(t.seek("c", "0"), StatusCode::kNotFound);
  EXPECT_EQ(t.purge("c").status().code(), StatusCode::kNotFound);
  joined("c");
  EXPECT_EQ(t.seek("x", "0"), StatusCode::kNotFound);
  EXPECT_EQ(t.seek("c", ""), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.seek("c", "1-2-3"), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.seek("c", "-1"), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.seek("c", "+"), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.seek("c", "184467440737095516160"), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.seek("c", "$"), StatusCode::kOk);
}

}  // namespace
}  // namespace sluice
