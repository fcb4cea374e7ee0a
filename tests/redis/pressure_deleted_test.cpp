// A pressure queue deleted by another client while a put or get waits on it
// (a real redis-server): the waiting call returns kNotFound, as a Streams
// channel's read does (stream_topic_test, AReadWaitingWhenTheTopicIsDeleted-
// SaysNotFound), through PressureQueue and through the RedisStore's reader
// and writer. A sluice delete that finds a role held closes the queue first
// and waits for the holder; the holder took that close for a normal one and
// returned kClosed (`sluice get` exit 0, `sluice put` exit 5).
#include <gtest/gtest.h>

#include <future>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/redis/pressure_queue.h"
#include "sluice/store.h"
#include "testutil/redis_server.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testutil::RawRedis;
using testutil::RedisServer;

class PressureDeletedTest : public ::testing::Test {
 protected:
  PressureQueue queue() { return {server_.options(), "q"}; }
  std::string key(const std::string& suffix = "") { return "__pressure__:q" + suffix; }
  bool waiting() { return raw_.blocked_clients() == 1; }
  // Takes the consumer role as a client of the protocol does when it must
  // wait for data (pops the token, records itself), under an id nobody can
  // judge dead, so a waiter never restores it.
  void hold_consumer() {
    ASSERT_EQ(raw_.lrange(key(":consumer_free")).size(), 1U);
    raw_.cmd({"RPOP", key(":consumer_free")});
    raw_.cmd({"SET", key(":consumer"), "another-client"});
  }
  void release_consumer() { raw_.cmd({"LPUSH", key(":consumer_free"), "0"}); }
  bool closed() { return raw_.integer({"EXISTS", key(":closed")}) == 1; }
  // The mark of a delete under way, waiting for a role (pressure.lua).
  bool deleting() { return raw_.integer({"EXISTS", key(":deleting")}) == 1; }

  RedisServer server_;
  RawRedis raw_{server_.port()};
};

TEST_F(PressureDeletedTest, AGetWaitingForDataReturnsNotFound) {
  auto q = queue();
  ASSERT_TRUE(q.create(0).ok());
  auto get = std::async(std::launch::async, [&] { return queue().get(with_timeout(30s)); });
  ASSERT_TRUE(testutil::eventually([&] { return waiting(); }));
  auto gone = q.destroy(with_timeout(30s));
  ASSERT_TRUE(gone.ok()) << gone.status();
  const auto r = get.get();
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status();
  EXPECT_NE(r.status().message().find("deleted"), std::string_view::npos) << r.status();
  EXPECT_TRUE(raw_.dump(key("*"), "").empty());  // the mark went with the queue
}

TEST_F(PressureDeletedTest, AReliableGetWaitingForDataReturnsNotFound) {
  auto q = queue();
  ASSERT_TRUE(q.create(0).ok());
  ASSERT_TRUE(q.put("a").ok());
  auto get = std::async(std::launch::async, [&] {
    auto c = queue();
    std::vector<std::string> out;
    Status first = c.get_many_reliable("w", out, 10, with_timeout(30s));
    if (!first.ok() || out != std::vector<std::string>{"a"}) return first;
    return c.get_many_reliable("w", out, 10, with_timeout(30s));  // waits
  });
  ASSERT_TRUE(testutil::eventually([&] { return waiting(); }));
  auto gone = q.destroy(with_timeout(30s));
  ASSERT_TRUE(gone.ok()) << gone.status();
  EXPECT_EQ(*gone, 1U);  // "a", in flight
  const Status s = get.get();
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s;
}

TEST_F(PressureDeletedTest, APutWaitingForRoomReturnsNotFoundWithNothingMoreEnqueued) {
  auto q = queue();
  ASSERT_TRUE(q.create(1).ok());
  auto put = std::async(std::launch::async, [&] {
    const std::vector<std::string> msgs = {"in", "waiting"};
    return queue().put_many(msgs, with_timeout(30s));
  });
  ASSERT_TRUE(testutil::eventually([&] { return waiting(); }));
  auto gone = q.destroy(with_timeout(30s));
  ASSERT_TRUE(gone.ok()) << gone.status();
  EXPECT_EQ(*gone, 1U);
  const PutResult r = put.get();
  EXPECT_EQ(r.code(), StatusCode::kNotFound) << r.status;
  EXPECT_EQ(r.enqueued, 1U);
  EXPECT_EQ(r.delivery(1), Delivery::kNotEnqueued);
  EXPECT_TRUE(raw_.dump(key("*"), "").empty());
}

// While the delete waits for another client's role, a call that finds the
// queue closed says it is being deleted; the mark expires (a deleter that
// dies leaves a closed queue, not one that says "deleted" for ever).
TEST_F(PressureDeletedTest, CallsDuringADeletesWaitReturnNotFound) {
  auto q = queue();
  ASSERT_TRUE(q.create(0).ok());
  hold_consumer();
  auto gone = std::async(std::launch::async, [&] { return queue().destroy(with_timeout(30s)); });
  // The delete closes the queue and sets its mark in one script.
  ASSERT_TRUE(testutil::eventually([&] { return closed(); }));
  const long long ttl = raw_.integer({"PTTL", key(":deleting")});
  EXPECT_GT(ttl, 0);
  EXPECT_LE(ttl, 2 * server_.options().io_timeout.count() + 1000);
  auto p = queue().try_put("late");
  EXPECT_EQ(p.code(), StatusCode::kNotFound) << p.status;
  EXPECT_EQ(p.delivery(), Delivery::kNotEnqueued);
  EXPECT_EQ(queue().put("late", with_timeout(10s)).code(), StatusCode::kNotFound);
  release_consumer();
  auto g = gone.get();
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(*g, 0U);
  EXPECT_TRUE(raw_.dump(key("*"), "").empty());
}

// A delete that gives up (its deadline) leaves the queue closed, and no
// mark: the calls that follow see a closed queue, as after a close.
TEST_F(PressureDeletedTest, ADeleteThatGivesUpLeavesAClosedQueue) {
  auto q = queue();
  ASSERT_TRUE(q.create(0).ok());
  ASSERT_TRUE(q.put("kept").ok());
  hold_consumer();
  auto gone = queue().destroy(with_timeout(300ms));
  EXPECT_EQ(gone.status().code(), StatusCode::kDeadlineExceeded) << gone.status();
  EXPECT_FALSE(deleting());
  release_consumer();
  EXPECT_EQ(queue().put("late").code(), StatusCode::kClosed);
  EXPECT_EQ(*queue().get(with_timeout(10s)), "kept");
  EXPECT_EQ(queue().get(with_timeout(10s)).status().code(), StatusCode::kClosed);
}

// A close is still the normal end of a waiting get.
TEST_F(PressureDeletedTest, AGetWaitingWhenTheQueueIsClosedReturnsClosed) {
  auto q = queue();
  ASSERT_TRUE(q.create(0).ok());
  auto get = std::async(std::launch::async, [&] { return queue().get(with_timeout(30s)); });
  ASSERT_TRUE(testutil::eventually([&] { return waiting(); }));
  ASSERT_TRUE(q.close().ok());
  EXPECT_EQ(get.get().status().code(), StatusCode::kClosed);
}

// The store's reader and writer (what `sluice get` and `sluice put` use).
class StoreDeletedTest : public PressureDeletedTest {
 protected:
  std::unique_ptr<QueueStore> store() {
    auto s = QueueStore::open("redis://127.0.0.1:" + std::to_string(server_.port()) + "/0");
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }
};

TEST_F(StoreDeletedTest, AWaitingReaderGetsNotFound) {
  auto s = store();
  ASSERT_TRUE(s != nullptr);
  ASSERT_EQ(s->create("q", 0), StatusCode::kOk);
  auto r = s->reader("q", kDefaultChannel, Context());
  ASSERT_TRUE(r.ok()) << r.status();
  auto get = std::async(std::launch::async, [&] {
    std::vector<StoreMessage> out;
    return (*r)->get(out, 10, with_timeout(30s));
  });
  ASSERT_TRUE(testutil::eventually([&] { return waiting(); }));
  ASSERT_EQ(store()->remove("q"), StatusCode::kOk);
  const Status g = get.get();
  EXPECT_EQ(g.code(), StatusCode::kNotFound) << g;
}

TEST_F(StoreDeletedTest, AWriterWaitingAtTheBoundGetsNotFound) {
  auto s = store();
  ASSERT_TRUE(s != nullptr);
  ASSERT_EQ(s->create("q", 1), StatusCode::kOk);
  auto w = s->writer("q", Context());
  ASSERT_TRUE(w.ok()) << w.status();
  std::size_t done = 99;
  auto put = std::async(std::launch::async, [&] {
    const std::vector<std::string_view> msgs = {"in", "waiting"};
    return (*w)->put(msgs, with_timeout(30s), &done);
  });
  ASSERT_TRUE(testutil::eventually([&] { return waiting(); }));
  ASSERT_EQ(store()->remove("q"), StatusCode::kOk);
  const Status p = put.get();
  EXPECT_EQ(p.code(), StatusCode::kNotFound) << p;
  EXPECT_EQ(done, 1U);
  EXPECT_EQ((*w)->in_doubt(), 0U);
}

}  // namespace
}  // namespace sluice
