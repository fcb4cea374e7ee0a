// Pressure queues beside the protocol's other clients, at the edges of a
// role: the gap between their BRPOP and their SET, a wait whose reply was
// lost, a forked child's id, Redis's "not now" errors. Each test failed on
// the code before its fix (docs/redis_keys.md, "roles").
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <future>
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

class PressureRoleEdgesTest : public ::testing::Test {
 protected:
  PressureQueue sluice_q(const std::string& name = "q") { return {server_.options(), name}; }
  ReferenceClient reference(const std::string& name = "q") { return {server_.port(), name}; }
  std::string key(const std::string& suffix = "") { return "__pressure__:q" + suffix; }

  RedisServer server_;
  RawRedis raw_{server_.port()};
};

// A reference client pauses right after popping a role token (BRPOP), before
// its SET of the holder key, as every existing client may (separate round
// trips). `step` is "producer token taken" or "consumer token taken".
struct PausedReference {
  std::promise<void> taken;
  std::promise<void> go;
  std::future<void> done;
};

// The previous operation on the queue was this sluice thread's, so
// :producer still holds its id. A reference producer pops :producer_free and
// has not yet written its own id. A sluice put on the same thread must now
// see the role as taken (by the reference client), not as its own.
TEST_F(PressureRoleEdgesTest, ASluicePutDoesNotTakeAReferenceProducersFreshlyPoppedRoleForItsOwn) {
  auto q = sluice_q();
  ASSERT_TRUE(q.create(0).ok());
  ASSERT_TRUE(q.put("a").ok());  // :producer := this thread's sluice id, token back
  PausedReference p;
  auto taken = p.taken.get_future();
  auto go = p.go.get_future().share();
  p.done = std::async(std::launch::async, [&] {
    auto ref = reference();
    ref.on_step([&](const char* step) {
      if (std::string(step) == "producer token taken") {
        p.taken.set_value();
        go.wait();
      }
    });
    ref.put("b");
  });
  taken.wait();
  // The role is held by the reference producer: the protocol says wait.
  PutResult r = q.put("c", with_timeout(300ms));
  p.go.set_value();
  p.done.get();
  EXPECT_EQ(r.code(), StatusCode::kDeadlineExceeded)
      << "sluice put entered while the reference producer held the role: " << r.status;
  EXPECT_EQ(raw_.lrange(key(":producer_free")).size(), 1U)
      << "the producer role now has more than one token: two producers can hold it at once";
}

// The same for the consumer role.
TEST_F(PressureRoleEdgesTest, ASluiceGetDoesNotTakeAReferenceConsumersFreshlyPoppedRoleForItsOwn) {
  auto q = sluice_q();
  ASSERT_TRUE(q.create(0).ok());
  for (const char* m : {"1", "2", "3"}) ASSERT_TRUE(q.put(m).ok());
  ASSERT_EQ(*q.get(), "1");  // :consumer := this thread's sluice id
  PausedReference p;
  auto taken = p.taken.get_future();
  auto go = p.go.get_future().share();
  std::string ref_got;
  p.done = std::async(std::launch::async, [&] {
    auto ref = reference();
    ref.on_step([&](const char* step) {
      if (std::string(step) == "consumer token taken") {
        p.taken.set_value();
        go.wait();
      }
    });
    ref_got = ref.get();
  });
  taken.wait();
  auto r = q.get(with_timeout(300ms));
  p.go.set_value();
  p.done.get();
  EXPECT_EQ(r.code(), StatusCode::kDeadlineExceeded)
      << "sluice get entered while the reference consumer held the role; got "
      << (r.ok() ? *r : std::string(r.status().message()));
  EXPECT_EQ(raw_.lrange(key(":consumer_free")).size(), 1U)
      << "the consumer role now has more than one token: two consumers can hold it at once";
}

// A blocking put whose 'wait' script ran (the queue was full: it took the
// producer role to wait for room) but whose reply never came back returns
// kUnavailable. The header promises the role is given back on every return,
// kUnavailable included ("If Redis cannot be reached then, the handle gives
// it back at its next call or in its destructor"). It is not: the handle does
// not know it holds it, and its holder (this live process) is never judged
// gone, so every other producer waits for ever, and so does this handle's
// own close().
TEST_F(PressureRoleEdgesTest, APutWhoseWaitReplyWasLostLeavesTheProducerRoleHeldForEver) {
  RedisOptions o = server_.options();
  o.io_timeout = 200ms;
  PressureQueue q(o, "q");
  ASSERT_TRUE(q.create(1).ok());
  ASSERT_TRUE(q.put("first").ok());  // full
  server_.pause();
  auto r = q.put("second");  // its 'wait' script runs once the server resumes
  server_.resume();
  ASSERT_EQ(r.code(), StatusCode::kUnavailable) << r.status;
  // The script ran: it found the queue full and kept the role for this client.
  ASSERT_TRUE(testutil::eventually([&] {
    return raw_.integer({"LLEN", key(":producer_free")}) == 0;
  }));
  ASSERT_TRUE(raw_.get(key(":producer")).starts_with(q.client_id()));
  EXPECT_TRUE(q.length().ok());  // the handle's next call
  // Room again, made by a consumer elsewhere; then another producer (another
  // thread: another id) puts.
  auto other = [&](auto f) { return std::async(std::launch::async, f).get(); };
  ASSERT_EQ(*other([&] { return sluice_q().get(); }), "first");
  auto put = other([&] { return sluice_q().put("third", with_timeout(3s)); });
  EXPECT_TRUE(put.ok()) << "another producer: " << put.status
                        << " (the role is still held by this live handle, which does not know it)";
  auto closed = q.close(with_timeout(2s));
  EXPECT_TRUE(closed.ok()) << "close() by the holder itself: " << closed;
  EXPECT_EQ(raw_.lrange(key(":producer_free")).size(), 1U);
}

// The last producer was a sluice process that has since exited normally
// (a `sluice put` that finished): :producer still names it. A reference
// producer pops the token and, one round trip later, writes its own id. A
// sluice put that has waited a second for the role in between runs its
// recovery (waiting_for -> recover): the token is missing and the recorded
// holder's pid is gone, so it "restores" the token and takes the role, while
// the reference producer holds it. Two producers; two tokens.
TEST_F(PressureRoleEdgesTest, RecoveryDoesNotRestoreARoleALiveReferenceProducerJustTook) {
  auto q = sluice_q();
  ASSERT_TRUE(q.create(0).ok());
  ASSERT_TRUE(q.put("x").ok());
  // What a finished `sluice put` process leaves: its id in :producer (written
  // here by hand: a forked child would carry this process's id, see
  // AForkedChildHasItsOwnClientId).
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  std::string id = q.client_id();
  id = id.substr(0, id.rfind("_pid")) + "_pid" + std::to_string(child) + "_tid" +
       std::to_string(child);
  raw_.cmd({"SET", key(":producer"), id});

  PausedReference p;
  auto taken = p.taken.get_future();
  auto go = p.go.get_future().share();
  p.done = std::async(std::launch::async, [&] {
    auto ref = reference();
    ref.on_step([&](const char* step) {
      if (std::string(step) == "producer token taken") {
        p.taken.set_value();
        go.wait();  // a slow round trip before its SET :producer
      }
    });
    ref.put("reference");
  });
  taken.wait();
  PutResult r = q.put("sluice", with_timeout(1500ms));
  p.go.set_value();
  p.done.get();
  EXPECT_EQ(r.code(), StatusCode::kDeadlineExceeded)
      << "sluice put took the producer role the live reference producer held: " << r.status;
  EXPECT_EQ(raw_.lrange(key(":producer_free")).size(), 1U)
      << "the producer role now has two tokens";
}

// Ids are "<hostname>_pid<pid>_tid<tid>" (header), but client_id() caches the
// id in a thread_local that a fork() copies: a child process that forks from
// a thread that had used a handle speaks under its parent's id.
TEST_F(PressureRoleEdgesTest, AForkedChildHasItsOwnClientId) {
  auto q = sluice_q();
  ASSERT_TRUE(q.create(0).ok());  // this thread's id is now made
  const std::string parent = q.client_id();
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const std::string id = PressureQueue(server_.options(), "q").client_id() + "\n";
    (void)!write(fds[1], id.data(), id.size());
    _exit(0);
  }
  close(fds[1]);
  char buf[512] = {};
  const auto n = read(fds[0], buf, sizeof buf - 1);
  close(fds[0]);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  ASSERT_GT(n, 0);
  const std::string id(buf, static_cast<std::size_t>(n) - 1);
  EXPECT_NE(id, parent);
  EXPECT_NE(id.find("_pid" + std::to_string(child) + "_"), std::string::npos) << id;
}

// The consequence: a forked child waits for room holding the producer role;
// the parent's put, which must wait for that role, takes the child's role
// for its own (same id, token missing) and, when its deadline ends, "gives
// it back": the token is pushed while the child still holds the role.
TEST_F(PressureRoleEdgesTest, AParentDoesNotTakeItsForkedChildsRoleForItsOwn) {
  auto q = sluice_q();
  ASSERT_TRUE(q.create(1).ok());
  ASSERT_TRUE(q.put("full").ok());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // waits for room, holding the producer role
    PressureQueue c(server_.options(), "q");
    _exit(c.put("child", with_timeout(5s)).ok() ? 0 : 1);
  }
  ASSERT_TRUE(testutil::eventually([&] {
    return raw_.integer({"LLEN", key(":producer_free")}) == 0 && raw_.blocked_clients() == 1;
  }));
  PutResult r = q.put("parent", with_timeout(300ms));
  const auto tokens = raw_.lrange(key(":producer_free")).size();
  ASSERT_EQ(*q.get(), "full");  // room: the child's put goes in
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(r.code(), StatusCode::kDeadlineExceeded) << r.status;
  EXPECT_EQ(tokens, 0U) << "the parent gave back the role its child held";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

// A server that says "not now" (BUSY: another client's script has run past
// busy-reply-threshold; likewise LOADING, OOM, READONLY, MASTERDOWN) did not
// run the call. The Streams client maps these to kUnavailable ("cannot take
// ... now"), and so does the pressure client while it sets up a connection;
// but on an established connection the pressure queue returns kInternal
// ("redis error at ..."), which callers and the CLI's --reconnect treat as
// final: `sluice put` exits 1 instead of riding through.
TEST_F(PressureRoleEdgesTest, ABusyServerIsUnavailableNotAnInternalError) {
  auto q = sluice_q();
  ASSERT_TRUE(q.create(0).ok());  // connected
  raw_.cmd({"CONFIG", "SET", "busy-reply-threshold", "50"});
  auto busy = std::async(std::launch::async, [&] {
    RawRedis other(server_.port());
    other.cmd({"EVAL", "while true do end", "0"});  // until SCRIPT KILL
  });
  RawRedis killer(server_.port());
  // Wait until the server answers BUSY.
  ASSERT_TRUE(testutil::eventually([&] {
    auto r = killer.cmd({"PING"});
    return r->type == REDIS_REPLY_ERROR && std::string(r->str).starts_with("BUSY");
  }));
  PutResult r = q.put("x");
  auto g = q.try_get();
  killer.cmd({"SCRIPT", "KILL"});
  busy.get();
  EXPECT_EQ(r.code(), StatusCode::kUnavailable) << r.status;
  EXPECT_EQ(r.delivery(), Delivery::kNotEnqueued);
  EXPECT_EQ(g.code(), StatusCode::kUnavailable) << g.status();
  EXPECT_EQ(*q.length(), 0U);
}

}  // namespace
}  // namespace sluice
