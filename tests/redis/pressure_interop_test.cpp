// sluice and a client that speaks the protocol step by step as the existing
// clients do (reference_client.h), on the same queues of one real Redis.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <future>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "redis/reference_client.h"
#include "sluice/redis/pressure_queue.h"
#include "testutil/redis_server.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testutil::RawRedis;
using testutil::RedisServer;
using testutil::ReferenceClient;

class PressureInteropTest : public ::testing::Test {
 protected:
  PressureQueue sluice_q(const std::string& name = "q") { return {server_.options(), name}; }
  ReferenceClient reference(const std::string& name = "q") { return {server_.port(), name}; }
  // The queue's keys and values, with client ids masked (they differ by design).
  std::vector<std::string> state(const std::string& name) {
    const std::string base = "__pressure__:" + name;
    auto lines = raw_.dump(base + "*", base);
    for (auto& l : lines) {
      if (l.starts_with(":producer string") || l.starts_with(":consumer string")) {
        l = l.substr(0, l.find(" string") + 7) + " <id>";
      }
    }
    return lines;
  }

  std::string key(const std::string& suffix = "") { return "__pressure__:q" + suffix; }
  // The role is taken (no token) and `holder` is recorded as holding it.
  bool held_by(const std::string& role, const std::string& holder) {
    const std::string h = raw_.get(key(":" + role));
    // A sluice client keeping a role across a wait records its id + "+w".
    return raw_.integer({"LLEN", key(":" + role + "_free")}) == 0 &&
           (h == holder || h == holder + "+w");
  }
  std::vector<std::string> token(const std::string& role) {
    return raw_.lrange(key(":" + role + "_free"));
  }

  RedisServer server_;
  RawRedis raw_{server_.port()};
};

// What a reference client's call threw ("" if it returned).
template <class F>
std::string outcome(F f) {
  try {
    f();
    return "";
  } catch (const ReferenceClient::Error& e) {
    return e.what();
  }
}

std::vector<std::string> messages(int n, const std::string& tag) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(tag + std::to_string(i) + std::string(i % 7, '.'));
  return out;
}

TEST_F(PressureInteropTest, ReferenceProducesSluiceConsumes) {
  auto ref = reference();
  ref.create(16);
  const auto sent = messages(300, "r");
  std::jthread producer([&] {
    auto p = reference();
    for (const auto& m : sent) p.put(m);
    p.close();
  });
  auto q = sluice_q();
  std::vector<std::string> got;
  for (;;) {
    auto m = q.get();
    if (m.code() == StatusCode::kClosed) break;
    ASSERT_TRUE(m.ok()) << m.status();
    got.push_back(*m);
  }
  producer.join();
  EXPECT_EQ(got, sent);
  auto st = q.stats();
  EXPECT_EQ(st->produced_messages, 300U);
  EXPECT_EQ(st->consumed_messages, 300U);
  EXPECT_EQ(st->produced_bytes, st->consumed_bytes);
}

TEST_F(PressureInteropTest, SluiceProducesReferenceConsumes) {
  auto q = sluice_q();
  ASSERT_TRUE(q.create(16).ok());
  const auto sent = messages(300, "s");
  std::jthread producer([&] {
    auto p = sluice_q();
    for (std::size_t i = 0; i < sent.size(); i += 10) {
      // Batches and singles mixed.
      if (i % 20 == 0) {
        std::vector<std::string> batch(sent.begin() + static_cast<long>(i),
                                       sent.begin() + static_cast<long>(i + 10));
        ASSERT_TRUE(p.put_many(batch).ok());
      } else {
        for (std::size_t k = i; k < i + 10; ++k) ASSERT_TRUE(p.put(sent[k]).ok());
      }
    }
    ASSERT_TRUE(p.close().ok());
  });
  auto ref = reference();
  std::vector<std::string> got;
  for (;;) {
    try {
      got.push_back(ref.get());
    } catch (const ReferenceClient::Error& e) {
      ASSERT_STREQ(e.what(), "QueueClosed");
      break;
    }
  }
  producer.join();
  EXPECT_EQ(got, sent);
  auto st = q.stats();
  EXPECT_EQ(st->produced_messages, 300U);
  EXPECT_EQ(st->consumed_messages, 300U);
}

TEST_F(PressureInteropTest, InterleavedClientsKeepOneFifo) {
  auto q = sluice_q();
  ASSERT_TRUE(q.create(0).ok());
  auto ref = reference();
  std::vector<std::string> sent;
  for (int i = 0; i < 40; ++i) {
    const std::string m = std::to_string(i);
    if (i % 3 == 0) {
      ref.put(m);
    } else {
      ASSERT_TRUE(q.put(m).ok());
    }
    sent.push_back(m);
  }
  std::vector<std::string> got;
  for (int i = 0; i < 40; ++i) got.push_back(i % 2 == 0 ? ref.get() : *q.get());
  EXPECT_EQ(got, sent);
}

// The same operations through each client leave the same keys and values.
TEST_F(PressureInteropTest, SameKeysAndValuesAsTheReferenceClient) {
  for (long long bound : {0LL, 3LL}) {
    const std::string a = "ref" + std::to_string(bound);
    const std::string b = "slc" + std::to_string(bound);
    auto ref = reference(a);
    auto q = sluice_q(b);
    ref.create(bound);
    ASSERT_TRUE(q.create(static_cast<std::uint64_t>(bound)).ok());
    EXPECT_EQ(state(a), state(b)) << "after create, bound " << bound;
    for (const char* m : {"one", "two!", "three"}) {
      ref.put(m);
      ASSERT_TRUE(q.put(m).ok());
    }
    EXPECT_EQ(state(a), state(b)) << "after puts, bound " << bound;
    EXPECT_EQ(ref.get(), *q.get());
    EXPECT_EQ(state(a), state(b)) << "after a get, bound " << bound;
    ref.close();
    ASSERT_TRUE(q.close().ok());
    EXPECT_EQ(ref.get(), *q.get());
    EXPECT_EQ(ref.get(), *q.get());
    EXPECT_EQ(state(a), state(b)) << "after close and drain, bound " << bound;
    ref.del();
    ASSERT_TRUE(q.destroy().ok());
    EXPECT_TRUE(state(a).empty());
    EXPECT_TRUE(state(b).empty());
  }
}

TEST_F(PressureInteropTest, ReferenceProducerInsideAPutExcludesSluice) {
  auto q = sluice_q();
  ASSERT_TRUE(q.create(1).ok());
  ASSERT_TRUE(q.put("first").ok());
  // The reference producer blocks on the full queue holding the role.
  auto ref_put = std::async(std::launch::async, [&] { reference().put("second"); });
  ASSERT_TRUE(testutil::eventually([&] { return raw_.blocked_clients() == 1; }));
  auto tried = q.try_put("third");
  EXPECT_EQ(tried.code(), StatusCode::kInUse);
  EXPECT_EQ(q.put("third", with_timeout(100ms)).code(), StatusCode::kDeadlineExceeded);
  auto waiting = std::async(std::launch::async, [&] { return sluice_q().put("third"); });
  EXPECT_EQ(*q.get(), "first");
  ref_put.get();
  EXPECT_EQ(*q.get(), "second");
  EXPECT_TRUE(waiting.get().ok());
  EXPECT_EQ(*q.get(), "third");
}

// The existing clients hold the producer role for the whole of a put,
// including its wait for room (the protocol's Put: BRPOP :producer_free,
// SET :producer, then BRPOP :not_full). A waiting sluice put does the same, so
// another producer gets INUSE, not FULL, and producers never interleave.
TEST_F(PressureInteropTest, ASluicePutWaitingForRoomHoldsTheProducerRole) {
  auto q = sluice_q();
  ASSERT_TRUE(q.create(1).ok());
  ASSERT_TRUE(q.put("first").ok());
  std::promise<std::string> id;
  auto waiting = std::async(std::launch::async, [&] {
    auto p = sluice_q();
    id.set_value(p.client_id());
    return p.put("second", with_timeout(20s));  // bounded: a failed test must not hang
  });
  const std::string holder = id.get_future().get();
  ASSERT_TRUE(testutil::eventually([&] { return held_by("producer", holder); }, 5s));
  auto ref = reference();
  EXPECT_EQ(outcome([&] { ref.try_put("ref"); }), "QueueInUse");
  EXPECT_EQ(q.try_put("third").code(), StatusCode::kInUse);
  EXPECT_EQ(q.put("third", with_timeout(100ms)).code(), StatusCode::kDeadlineExceeded);
  // A reference producer that blocks for the role goes after the sluice put.
  auto ref_put = std::async(std::launch::async, [&] { reference().put("by reference"); });
  ASSERT_TRUE(testutil::eventually([&] { return raw_.blocked_clients() == 2; }));
  EXPECT_EQ(*q.get(), "first");
  EXPECT_TRUE(waiting.get().ok());
  EXPECT_EQ(*q.get(), "second");
  ref_put.get();
  EXPECT_EQ(*q.get(), "by reference");
  EXPECT_EQ(token("producer"), std::vector<std::string>{"0"});
}

TEST_F(PressureInteropTest, AWaitingSluicePutGivesTheRoleBackWhenCancelledOrPastItsDeadline) {
  auto q = sluice_q();
  ASSERT_TRUE(q.create(1).ok());
  ASSERT_TRUE(q.put("first").ok());
  std::stop_source stop;
  std::promise<std::string> id;
  auto cancelled = std::async(std::launch::async, [&] {
    auto p = sluice_q();
    id.set_value(p.client_id());
    return p.put("second", Context(stop.get_token(), Context::Clock::now() + 20s));
  });
  const std::string holder = id.get_future().get();
  ASSERT_TRUE(testutil::eventually([&] { return held_by("producer", holder); }, 5s));
  stop.request_stop();
  auto r = cancelled.get();
  EXPECT_EQ(r.code(), StatusCode::kCancelled);
  EXPECT_EQ(r.delivery(), Delivery::kNotEnqueued);
  EXPECT_EQ(token("producer"), std::vector<std::string>{"0"});
  auto ref = reference();
  ref.hold_producer();  // at once: the role is free
  ref.release_producer();

  std::promise<std::string> id2;
  auto timed = std::async(std::launch::async, [&] {
    auto p = sluice_q();
    id2.set_value(p.client_id());
    return p.put("second", with_timeout(2s));
  });
  const std::string holder2 = id2.get_future().get();
  ASSERT_TRUE(testutil::eventually([&] { return held_by("producer", holder2); }, 5s));
  EXPECT_EQ(timed.get().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(token("producer"), std::vector<std::string>{"0"});
  EXPECT_EQ(outcome([&] { ref.try_put("ref"); }), "QueueFull");  // free, and still full
  EXPECT_EQ(raw_.lrange(key()), std::vector<std::string>{"first"});
}

// The protocol's Get holds the consumer role while it waits for data
// (BRPOP :consumer_free, SET :consumer, then BRPOP on the data and :closed);
// so does a waiting sluice get.
TEST_F(PressureInteropTest, ASluiceGetWaitingForDataHoldsTheConsumerRole) {
  auto q = sluice_q();
  ASSERT_TRUE(q.create(0).ok());
  std::promise<std::string> id;
  auto waiting = std::async(std::launch::async, [&] {
    auto c = sluice_q();
    id.set_value(c.client_id());
    return c.get(with_timeout(20s));
  });
  const std::string holder = id.get_future().get();
  ASSERT_TRUE(testutil::eventually([&] { return held_by("consumer", holder); }, 5s));
  auto ref = reference();
  EXPECT_EQ(outcome([&] { ref.try_get(); }), "QueueInUse");
  EXPECT_EQ(q.try_get().code(), StatusCode::kInUse);
  ASSERT_TRUE(q.put("hello").ok());
  auto got = waiting.get();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "hello");
  EXPECT_EQ(token("consumer"), std::vector<std::string>{"0"});
  EXPECT_EQ(outcome([&] { ref.try_get(); }), "QueueEmpty");

  std::stop_source stop;
  std::promise<std::string> id2;
  auto cancelled = std::async(std::launch::async, [&] {
    auto c = sluice_q();
    id2.set_value(c.client_id());
    return c.get(Context(stop.get_token(), Context::Clock::now() + 20s));
  });
  const std::string holder2 = id2.get_future().get();
  ASSERT_TRUE(testutil::eventually([&] { return held_by("consumer", holder2); }, 5s));
  stop.request_stop();
  EXPECT_EQ(cancelled.get().code(), StatusCode::kCancelled);
  EXPECT_EQ(token("consumer"), std::vector<std::string>{"0"});
  ASSERT_TRUE(q.put("for the reference").ok());
  EXPECT_EQ(ref.try_get(), "for the reference");
}

// A waiting sluice get that sees the queue closed gives the role back, so a
// reference client's delete (which waits for both tokens) can finish.
TEST_F(PressureInteropTest, AReferenceDeleteFinishesUnderAWaitingSluiceGet) {
  auto q = sluice_q();
  ASSERT_TRUE(q.create(0).ok());
  std::promise<std::string> id;
  auto waiting = std::async(std::launch::async, [&] {
    auto c = sluice_q();
    id.set_value(c.client_id());
    return c.get(with_timeout(20s));
  });
  const std::string holder = id.get_future().get();
  ASSERT_TRUE(testutil::eventually([&] { return held_by("consumer", holder); }, 5s));
  reference().del();
  const StatusCode c = waiting.get().code();
  EXPECT_TRUE(c == StatusCode::kNotFound || c == StatusCode::kClosed) << c;
  EXPECT_TRUE(state("q").empty());
}

TEST_F(PressureInteropTest, ReferenceConsumerInsideAGetExcludesSluice) {
  auto q = sluice_q();
  ASSERT_TRUE(q.create(0).ok());
  auto ref_get = std::async(std::launch::async, [&] { return reference().get(); });
  ASSERT_TRUE(testutil::eventually([&] { return raw_.blocked_clients() == 1; }));
  EXPECT_EQ(q.try_get().code(), StatusCode::kInUse);
  ASSERT_TRUE(q.put("for the reference").ok());
  EXPECT_EQ(ref_get.get(), "for the reference");
  EXPECT_EQ(q.try_get().code(), StatusCode::kWouldBlock);  // role free again
}

TEST_F(PressureInteropTest, SluiceCloseWakesABlockedReferenceConsumer) {
  auto q = sluice_q();
  ASSERT_TRUE(q.create(0).ok());
  auto ref_get = std::async(std::launch::async, [&] {
    try {
      reference().get();
      return std::string("got a message");
    } catch (const ReferenceClient::Error& e) {
      return std::string(e.what());
    }
  });
  ASSERT_TRUE(testutil::eventually([&] { return raw_.blocked_clients() == 1; }));
  ASSERT_TRUE(q.close().ok());
  EXPECT_EQ(ref_get.get(), "QueueClosed");
  EXPECT_EQ(*q.closed(), true);
}

// Hazard 8: a reference producer blocked on a full queue when the queue is
// deleted pushes its message into the dying queue. sluice's destroy counts it.
TEST_F(PressureInteropTest, DestroyReportsWhatABlockedReferenceProducerPushed) {
  auto q = sluice_q();
  ASSERT_TRUE(q.create(1).ok());
  ASSERT_TRUE(q.put("queued").ok());
  auto ref_put = std::async(std::launch::async, [&] { reference().put("late"); });
  ASSERT_TRUE(testutil::eventually([&] { return raw_.blocked_clients() == 1; }));
  auto gone = q.destroy(with_timeout(10s));
  ASSERT_TRUE(gone.ok()) << gone.status();
  ref_put.get();
  EXPECT_EQ(*gone, 2U);  // "queued" and "late": both reported, none silently
  EXPECT_TRUE(state("q").empty());
}

// Hazard 3: a reference consumer refills :not_full after its pop, which can
// land after the queue filled again. sluice's producer re-checks the length
// atomically, so it never passes the bound.
TEST_F(PressureInteropTest, SluiceProducerNeverPassesTheBoundAgainstAReferenceConsumer) {
  constexpr int kBound = 4;
  constexpr int kMessages = 1500;
  auto q = sluice_q();
  ASSERT_TRUE(q.create(kBound).ok());
  std::atomic<bool> done{false};
  std::atomic<long long> max_seen{0};
  std::jthread sampler([&] {
    RawRedis watch(server_.port());
    while (!done) {
      const long long len = watch.integer({"LLEN", "__pressure__:q"});
      if (len > max_seen) max_seen = len;
    }
  });
  std::jthread producer([&] {
    auto p = sluice_q();
    for (int i = 0; i < kMessages; ++i) ASSERT_TRUE(p.put(std::to_string(i)).ok());
  });
  auto ref = reference();
  for (int i = 0; i < kMessages; ++i) ASSERT_EQ(ref.get(), std::to_string(i));
  producer.join();
  done = true;
  sampler.join();
  EXPECT_LE(max_seen.load(), kBound);
}

// The name RedisStore gives a reader's in-flight list, for a process that
// has exited (so requeue_orphans judges it gone, as after a SIGKILL).
std::string dead_reader() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  std::array<char, 256> host{};
  gethostname(host.data(), host.size() - 1);
  const std::string id =
      std::string(host.data()) + "_pid" + std::to_string(pid) + "_tid" + std::to_string(pid);
  return "sluice.default." + id + "_r0";
}

// A reader of the old queue died holding "old0" and "old1"; the reference
// client, which knows only the 12 keys, deleted the queue; sluice made it
// again and it got more puts than the old one had, so its counters cannot
// tell the two apart. create removed the old in-flight list, so the next
// reader's recovery puts nothing of the old queue back.
TEST_F(PressureInteropTest,
       ADeadReadersMessagesDoNotComeBackAfterAReferenceDeleteAndASluiceCreate) {
  auto q = sluice_q();
  ASSERT_TRUE(q.create(0).ok());
  for (const char* m : {"old0", "old1", "old2"}) ASSERT_TRUE(q.put(m).ok());
  const std::string dead = dead_reader();
  std::vector<std::string> taken;
  ASSERT_TRUE(q.get_many_reliable(dead, taken, 2).ok());
  ASSERT_EQ(taken, (std::vector<std::string>{"old0", "old1"}));

  reference().del();
  ASSERT_TRUE(q.create(0).ok());
  EXPECT_TRUE(raw_.dump(key(":inflight*"), "").empty()) << "create left the old in-flight keys";
  const std::vector<std::string> fresh = {"new0", "new1", "new2", "new3", "new4"};
  for (const auto& m : fresh) ASSERT_TRUE(q.put(m).ok());

  auto back = q.requeue_orphans("sluice.default.");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, 0U);
  std::vector<std::string> got;
  ASSERT_TRUE(q.get_many(got, 100).ok());
  EXPECT_EQ(got, fresh);
  EXPECT_EQ(q.stats()->in_flight, 0U);
}

// The same with the reference client making the queue again too: sluice's
// create never ran, so the old list is still there. Its mark (the produced
// count and bound when it was taken) is ahead of the new queue's, so the
// next reader's recovery drops it instead of putting it back; stats count
// it apart meanwhile. A new queue with another bound is told apart however
// many puts it has had.
TEST_F(PressureInteropTest, ADeadReadersMessagesDoNotComeBackAfterAReferenceDeleteAndCreate) {
  for (const long long new_bound : {5LL, 0LL}) {
    SCOPED_TRACE("re-created with bound " + std::to_string(new_bound));
    auto q = sluice_q();
    ASSERT_TRUE(q.create(5).ok());
    for (const char* m : {"old0", "old1", "old2"}) ASSERT_TRUE(q.put(m).ok());
    const std::string dead = dead_reader();
    std::vector<std::string> taken;
    ASSERT_TRUE(q.get_many_reliable(dead, taken, 2).ok());

    auto ref = reference();
    ref.del();
    ref.create(new_bound);
    // Another bound: even more puts than the old queue had do not hide it.
    const int puts = new_bound == 5 ? 2 : 4;
    std::vector<std::string> fresh;
    for (int i = 0; i < puts; ++i) fresh.push_back("new" + std::to_string(i));
    for (const auto& m : fresh) ref.put(m);

    auto st = q.stats();
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_EQ(st->in_flight, 0U);
    EXPECT_EQ(st->stale_in_flight, 2U);
    auto back = q.requeue_orphans("sluice.default.");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, 0U);
    EXPECT_EQ(q.stats()->stale_in_flight, 0U);
    EXPECT_TRUE(raw_.dump(key(":inflight*"), "").empty());
    std::vector<std::string> got;
    ASSERT_TRUE(q.get_many(got, 100).ok());
    EXPECT_EQ(got, fresh);
    ASSERT_TRUE(q.destroy().ok());
  }
}

// A reader that lives across the delete and the re-create holds messages of
// the old queue: its next get, ack or requeue says so (kNotFound), drops
// them, and never mixes them with the new queue's messages or counts them
// there.
TEST_F(PressureInteropTest, AReaderAcrossAReferenceDeleteAndCreateGetsNotFoundAndMixesNothing) {
  for (const std::string op : {"get", "ack", "requeue"}) {
    SCOPED_TRACE(op);
    auto q = sluice_q();
    ASSERT_TRUE(q.create(0).ok());
    for (const char* m : {"old0", "old1", "old2"}) ASSERT_TRUE(q.put(m).ok());
    std::vector<std::string> taken;
    ASSERT_TRUE(q.get_many_reliable("w", taken, 2).ok());

    auto ref = reference();
    ref.del();
    ref.create(0);
    ref.put("new0");

    Status s;
    if (op == "get") s = q.get_reliable("w", with_timeout(5s)).status();
    if (op == "ack") s = q.ack("w", 2);
    if (op == "requeue") s = q.requeue_inflight("w").status();
    EXPECT_EQ(s.code(), StatusCode::kNotFound) << s;
    EXPECT_NE(s.message().find("made again"), std::string_view::npos) << s;
    EXPECT_NE(s.message().find("its 2 unacknowledged"), std::string_view::npos) << s;
    EXPECT_EQ(raw_.integer({"EXISTS", key(":inflight:w")}), 0);
    auto st = q.stats();
    EXPECT_EQ(st->consumed_messages, 0U);
    EXPECT_EQ(st->in_flight + st->stale_in_flight, 0U);
    // The new queue's message is where it was, and a later get takes it.
    auto next = q.get_reliable("w", with_timeout(5s));
    ASSERT_TRUE(next.ok()) << next.status();
    EXPECT_EQ(*next, "new0");
    ASSERT_TRUE(q.ack("w").ok());
    EXPECT_EQ(q.stats()->consumed_messages, 1U);
    ASSERT_TRUE(q.destroy().ok());
  }
}

// peek shows what a reference producer put, in the order a reference
// consumer then gets it, and takes nothing.
TEST_F(PressureInteropTest, PeekShowsWhatAReferenceConsumerGetsNext) {
  auto ref = reference();
  ref.create(0);
  for (const char* m : {"a", "b", "c"}) ref.put(m);
  auto q = sluice_q();
  const auto before = state("q");
  EXPECT_EQ(*q.peek(2), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(state("q"), before);
  EXPECT_EQ(ref.get(), "a");
  EXPECT_EQ(*q.peek(5), (std::vector<std::string>{"b", "c"}));
}

// A reference producer blocked at the bound (in BRPOP on :not_full, holding
// the producer role) continues after a sluice purge, as after a get; the
// queue then works on for both clients, the protocol's keys as a get would
// have left them but for the consumed counters, which count only gets (the
// purge has its own).
TEST_F(PressureInteropTest, AReferenceProducerWaitingForRoomContinuesAfterASluicePurge) {
  auto ref = reference();
  ref.create(2);
  ref.put("a");
  ref.put("b");
  auto blocked = std::async(std::launch::async, [&] { reference().put("c"); });
  ASSERT_TRUE(testutil::eventually([&] { return raw_.blocked_clients() == 1; }));
  auto q = sluice_q();
  auto n = q.purge();
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 2U);
  blocked.get();  // throws (and fails the test) if its BRPOP timed out
  EXPECT_EQ(ref.get(), "c");
  const std::vector<std::string> want = {
      ":bound string 2",
      ":consumer string <id>",
      ":consumer_free list [0]",
      ":not_full list [0]",
      ":producer string <id>",
      ":producer_free list [0]",
      ":purged string 2",
      ":stats:consumed_bytes string 1",
      ":stats:consumed_messages string 1",
      ":stats:produced_bytes string 3",
      ":stats:produced_messages string 3",
  };
  EXPECT_EQ(state("q"), want);
  // Both clients go on: a reference producer against a sluice consumer, at
  // the bound, and the other way round.
  std::jthread producer([&] {
    auto p = reference();
    for (int i = 0; i < 50; ++i) p.put("r" + std::to_string(i));
  });
  for (int i = 0; i < 50; ++i) EXPECT_EQ(*q.get(with_timeout(10s)), "r" + std::to_string(i));
  producer.join();
  std::jthread sluice_producer([&] {
    auto p = sluice_q();
    for (int i = 0; i < 50; ++i)
      EXPECT_TRUE(p.put("s" + std::to_string(i), with_timeout(10s)).ok());
  });
  for (int i = 0; i < 50; ++i) EXPECT_EQ(ref.get(), "s" + std::to_string(i));
  sluice_producer.join();
  auto st = q.stats();
  EXPECT_EQ(st->produced_messages, 103U);
  EXPECT_EQ(st->consumed_messages, 101U);
  EXPECT_EQ(st->purged, 2U);
}

}  // namespace
}  // namespace sluice
