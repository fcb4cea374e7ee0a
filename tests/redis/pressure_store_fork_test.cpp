// The Redis store's pressure-queue readers in a process
// forked from one that had used the store (a pre-forking server, Python's
// multiprocessing with the fork start method).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "sluice/store.h"
#include "testutil/redis_server.h"

namespace sluice {
namespace {

using testutil::RawRedis;
using testutil::RedisServer;

std::vector<std::string> smembers(RawRedis& raw, const std::string& key) {
  auto r = raw.cmd({"SMEMBERS", key});
  std::vector<std::string> out;
  for (std::size_t i = 0; i < r->elements; ++i) {
    out.emplace_back(r->element[i]->str, r->element[i]->len);
  }
  return out;
}

// Two live readers of one queue, the parent and its forked child, must each
// have their own in-flight list: a reader acknowledges the oldest n of its
// list, so sharing one makes one reader acknowledge the other's messages.
// The consumer name is "sluice.default.<client_id()>_r<N>", and both the
// client id (thread_local, made before the fork) and the counter N (a static
// atomic) are copied by fork(): the two readers get the same name.
TEST(PressureStoreForkTest, AForkedReaderDoesNotShareItsParentsInFlightList) {
  RedisServer server;
  RawRedis raw(server.port());
  const std::string url = "redis://127.0.0.1:" + std::to_string(server.port()) + "/0";
  auto store = QueueStore::open(url);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->create("jobs", 0).ok());
  {
    auto w = (*store)->writer("jobs", Context());
    ASSERT_TRUE(w.ok()) << w.status();
    const std::vector<std::string_view> msgs = {"m1", "m2"};
    ASSERT_TRUE((*w)->put(msgs, Context(), nullptr).ok());
  }
  int got_pipe[2], exit_pipe[2];
  ASSERT_EQ(pipe(got_pipe), 0);
  ASSERT_EQ(pipe(exit_pipe), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // a worker: takes one message and holds it (not yet processed)
    auto s = QueueStore::open(url);
    if (!s.ok()) _exit(2);
    auto r = (*s)->reader("jobs", kDefaultChannel, Context());
    if (!r.ok()) _exit(3);
    std::vector<StoreMessage> out;
    if (!(*r)->get(out, 1, Context()).ok() || out.size() != 1) _exit(4);
    (void)!write(got_pipe[1], out[0].data.data(), out[0].data.size());
    char c;
    (void)!read(exit_pipe[0], &c, 1);  // alive until told
    _exit(0);
  }
  char buf[16] = {};
  const auto n = read(got_pipe[0], buf, sizeof buf);
  ASSERT_GT(n, 0);
  const std::string childs(buf, static_cast<std::size_t>(n));
  EXPECT_EQ(childs, "m1");
  // The parent (another worker) takes the next, processes and acknowledges it.
  auto r = (*store)->reader("jobs", kDefaultChannel, Context());
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<StoreMessage> out;
  ASSERT_TRUE((*r)->get(out, 1, Context()).ok());
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].data, "m2");
  ASSERT_TRUE((*r)->ack_prefix(1).ok());
  // What is still in flight must be the child's m1, which it never acknowledged.
  std::vector<std::string> in_flight;
  for (const std::string& c : smembers(raw, "__pressure__:jobs:inflight")) {
    for (const std::string& m : raw.lrange("__pressure__:jobs:inflight:" + c)) {
      in_flight.push_back(m);
    }
  }
  const auto readers = smembers(raw, "__pressure__:jobs:inflight").size();
  (void)!write(exit_pipe[1], "x", 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(readers, 2U) << "both readers use one in-flight list";
  EXPECT_EQ(in_flight, std::vector<std::string>{"m1"})
      << "the parent's ack acknowledged the child's message: m1 is gone unprocessed, m2 "
         "(acknowledged) is still in flight and goes back to the queue";
}

}  // namespace
}  // namespace sluice
