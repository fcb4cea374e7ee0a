// sluice's own keys of a pressure queue N (P:N:purged, P:N:deleting,
// P:N:inflight, P:N:inflight_marks; docs/redis_keys.md) are where the data
// list of another queue lies, if one is named "N:purged" and so on: the
// protocol allows any name. Queues of those names, made by a client that
// follows the protocol (tests/redis/reference_client.h), on a real
// redis-server, must keep their messages whatever sluice does to N, and must
// not change what sluice says about N.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "redis/reference_client.h"
#include "sluice/redis/pressure_queue.h"
#include "testutil/redis_server.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testutil::RawRedis;
using testutil::RedisServer;
using testutil::ReferenceClient;

const std::vector<std::string> kNeighbours = {"q:purged", "q:deleting", "q:inflight",
                                              "q:inflight_marks"};

class PressureNeighbourQueueTest : public ::testing::Test {
 protected:
  PressureQueue queue() { return {server_.options(), "q"}; }
  std::string key(const std::string& suffix = "") { return "__pressure__:q" + suffix; }

  // Makes each neighbour queue with one message, as another client does.
  void make_neighbours(const std::vector<std::string>& names = kNeighbours) {
    for (const std::string& n : names) {
      ReferenceClient other(server_.port(), n);
      other.create(0);
      other.put("keep " + n);
    }
  }
  // Each neighbour still holds its message, and gives it to another client.
  void expect_neighbours_kept(const std::vector<std::string>& names = kNeighbours) {
    for (const std::string& n : names) {
      EXPECT_EQ(raw_.lrange("__pressure__:" + n), std::vector<std::string>{"keep " + n}) << n;
      ReferenceClient other(server_.port(), n);
      EXPECT_EQ(other.get(), "keep " + n);
    }
  }

  RedisServer server_;
  RawRedis raw_{server_.port()};
};

TEST_F(PressureNeighbourQueueTest, CreateAndDeleteLeaveQueuesNamedLikeSluicesOwnKeysAlone) {
  make_neighbours();
  auto q = queue();
  EXPECT_EQ(q.destroy().status().code(), StatusCode::kNotFound);  // no queue yet
  Status made = q.create(2);
  ASSERT_TRUE(made.ok()) << made;
  ASSERT_TRUE(q.put("x").ok());
  auto gone = q.destroy();
  ASSERT_TRUE(gone.ok()) << gone.status();
  EXPECT_EQ(*gone, 1U);
  expect_neighbours_kept();
}

// A delete that finds a role held marks the queue as being deleted while it
// waits; the mark's key is the data list of a queue named "q:deleting".
TEST_F(PressureNeighbourQueueTest, ADeleteThatWaitsForARoleLeavesAQueueNamedLikeItsMarkAlone) {
  auto q = queue();
  ASSERT_TRUE(q.create(0).ok());
  make_neighbours({"q:deleting"});
  raw_.cmd({"RPOP", key(":consumer_free")});  // another client inside a get
  raw_.cmd({"SET", key(":consumer"), "another-client"});
  EXPECT_EQ(q.destroy(with_timeout(300ms)).status().code(), StatusCode::kDeadlineExceeded);
  expect_neighbours_kept({"q:deleting"});
}

// A closed queue is closed (kClosed), not "being deleted" (kNotFound),
// whatever a queue named "q:deleting" holds.
TEST_F(PressureNeighbourQueueTest, AClosedQueueIsNotTakenForOneBeingDeleted) {
  auto q = queue();
  ASSERT_TRUE(q.create(0).ok());
  make_neighbours({"q:deleting"});
  ASSERT_TRUE(q.put("x").ok());
  ASSERT_TRUE(q.close().ok());
  EXPECT_EQ(q.put("late").code(), StatusCode::kClosed);
  auto x = q.get(with_timeout(10s));
  ASSERT_TRUE(x.ok()) << x.status();
  EXPECT_EQ(*x, "x");
  auto end = q.get(with_timeout(10s));
  EXPECT_EQ(end.status().code(), StatusCode::kClosed) << end.status();
  expect_neighbours_kept({"q:deleting"});
}

TEST_F(PressureNeighbourQueueTest, StatsCountNothingOfQueuesNamedLikeSluicesOwnKeys) {
  auto q = queue();
  ASSERT_TRUE(q.create(0).ok());
  make_neighbours();
  ASSERT_TRUE(q.put("x").ok());
  auto st = q.stats();
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->length, 1U);
  EXPECT_EQ(st->in_flight, 0U);
  EXPECT_EQ(st->stale_in_flight, 0U);
  EXPECT_EQ(st->purged, 0U);
  expect_neighbours_kept();
}

// purge() counts in P:q:purged, the data list of a queue named "q:purged":
// it refuses, saying so, before it drops anything.
TEST_F(PressureNeighbourQueueTest, APurgeThatCannotBeCountedDropsNothing) {
  auto q = queue();
  ASSERT_TRUE(q.create(0).ok());
  make_neighbours({"q:purged"});
  ASSERT_TRUE(q.put("x").ok());
  auto n = q.purge();
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("q:purged"), std::string_view::npos) << n.status();
  EXPECT_EQ(*q.length(), 1U);
  expect_neighbours_kept({"q:purged"});
}

// Reliable gets register their consumer in P:q:inflight and mark its list
// in P:q:inflight_marks, the data lists of queues named "q:inflight" and
// "q:inflight_marks". Beside such a queue a reliable get cannot keep its
// list findable: it refuses, saying so, and takes nothing.
TEST_F(PressureNeighbourQueueTest, AReliableGetThatCannotRegisterTakesNothing) {
  auto q = queue();
  ASSERT_TRUE(q.create(0).ok());
  ASSERT_TRUE(q.put("x").ok());
  make_neighbours({"q:inflight"});
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto got = q.get_reliable("w", with_timeout(10s));
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument) << got.status();
    EXPECT_NE(got.status().message().find("'q:inflight'"), std::string_view::npos) << got.status();
  }
  EXPECT_EQ(*q.length(), 1U);
  EXPECT_TRUE(q.inflight("w")->empty());
  auto st = q.stats();
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->consumer_free, true);  // the role is not left taken
  EXPECT_EQ(*q.get(with_timeout(10s)), "x");
  expect_neighbours_kept({"q:inflight"});
}

// A mark that cannot be read (P:q:inflight_marks holds a queue's messages)
// is no mark: reliable gets and acks go on as with a list from before marks.
TEST_F(PressureNeighbourQueueTest, ReliableGetsAndAcksGoOnBesideAQueueNamedLikeTheMarks) {
  auto q = queue();
  ASSERT_TRUE(q.create(0).ok());
  ASSERT_TRUE(q.put("x").ok());
  ASSERT_TRUE(q.put("y").ok());
  make_neighbours({"q:inflight_marks"});
  auto x = q.get_reliable("w", with_timeout(10s));
  ASSERT_TRUE(x.ok()) << x.status();
  auto y = q.get_reliable("w", with_timeout(10s));
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(*x + *y, "xy");
  Status acked = q.ack("w", 1);
  EXPECT_TRUE(acked.ok()) << acked;
  auto back = q.requeue_inflight("w");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, 1U);
  EXPECT_EQ(*q.get(with_timeout(10s)), "y");
  expect_neighbours_kept({"q:inflight_marks"});
}

// list() finds queues by their :bound key, a string. A list whose name ends
// in ":bound" is no queue's: the data of a queue named "jobs:bound", or the
// in-flight list of a reliable consumer named "bound".
TEST_F(PressureNeighbourQueueTest, ListShowsOnlyQueuesThatExist) {
  ReferenceClient jobs(server_.port(), "jobs:bound");
  jobs.create(0);
  jobs.put("m");
  auto q = queue();
  ASSERT_TRUE(q.create(0).ok());
  ASSERT_TRUE(q.put("x").ok());
  ASSERT_TRUE(q.get_reliable("bound", with_timeout(10s)).ok());
  auto names = PressureQueue::list(server_.options());
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_EQ(*names, (std::vector<std::string>{"jobs:bound", "q"}));
}

}  // namespace
}  // namespace sluice
