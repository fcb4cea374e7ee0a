// The sluice command's --reconnect during a Redis outage, and what ends it
// (each test failed on the code before its fix). docs/cli.md, "Outages": "`--timeout` and signals
// end the wait as usual."
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "cli/cli_child.h"
#include "testutil/redis_server.h"
#include "testutil/temp_dir.h"
#include "testutil/wait_for.h"

#ifndef SLUICE_CLI
#error "SLUICE_CLI: the path of the sluice binary (tests/CMakeLists.txt)"
#endif

namespace sluice {
namespace {

using testutil::Child;
using testutil::Outcome;
using Env = std::map<std::string, std::string>;
using Clock = std::chrono::steady_clock;

class CliRedisOutageTest : public ::testing::Test {
 protected:
  Env base_env() const { return testutil::no_store_env(home_); }
  Child start(std::vector<std::string> args) {
    args.insert(args.begin(), {SLUICE_CLI, "--redis", url_});
    return Child(std::move(args), base_env());
  }
  Outcome run(std::vector<std::string> args, const std::string& input = "") {
    Child c = start(std::move(args));
    c.write_stdin(input);
    c.close_stdin();
    return c.finish();
  }
  // Queue q with two messages.
  void prepare() {
    EXPECT_EQ(run({"create", "q"}).rc, 0);
    EXPECT_EQ(run({"put", "q"}, "a\nb\n").rc, 0);
  }
  // Once `get` holds both messages (taken into its in-flight list, so
  // written to its stdout, which nobody reads yet), the server goes down.
  void outage(Child& get) {
    get.close_stdin();
    testutil::RawRedis raw(server_.port());
    EXPECT_TRUE(testutil::eventually([&] {
      auto k = raw.cmd({"KEYS", "*inflight:*"});
      return k->elements == 1 && raw.integer({"LLEN", k->element[0]->str}) == 2;
    }));
    server_.stop();
    get.read_err_until("retrying");
  }

  testutil::RedisServer server_;
  std::string url_ = "redis://127.0.0.1:" + std::to_string(server_.port()) + "/0";
  std::string home_ = testutil::test_dir("cli_redis_outage").string();
};

// get --timeout 1 during an outage, holding two messages nobody has read
// (so none to acknowledge): it exits 9 about when its --timeout is up, not
// when --reconnect (here 8 s) runs out. (run_get() gives the messages back
// with reconnect.retry(Context(), ...): neither the deadline nor a signal
// ends that retry.) stdout is left unread until the child has exited.
TEST_F(CliRedisOutageTest, TimeoutEndsAGetInAnOutageHoldingUnreadMessages) {
  prepare();
  Child get = start({"get", "q", "--timeout", "1", "--reconnect", "8", "--linger", "0"});
  const auto t0 = Clock::now();
  outage(get);
  get.read_err_until("\x01never");  // to EOF: the child has exited
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
  const Outcome g = get.finish();
  EXPECT_EQ(g.rc, 9) << g.err;
  EXPECT_LT(took.count(), 3000) << g.err;
}

// SIGTERM ends it at once too (exit 130), not once --reconnect runs out.
TEST_F(CliRedisOutageTest, ASignalEndsAGetInAnOutageHoldingUnreadMessages) {
  prepare();
  Child get = start({"get", "q", "--reconnect", "8", "--linger", "0"});
  outage(get);
  const auto t0 = Clock::now();
  get.signal(SIGTERM);
  get.read_err_until("\x01never");
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
  const Outcome g = get.finish();
  EXPECT_EQ(g.rc, 130) << g.err;
  EXPECT_LT(took.count(), 2000) << g.err;
}

// The reader of stdout takes the messages during the outage, so get's
// acknowledgement (ack_taken(): reconnect.retry(ctx, ...)) is what waits
// when --timeout comes: it must exit 9 as a get waiting in an outage does
// (Reconnect::get maps the outage to ctx.err()), not 10 "store unreachable".
TEST_F(CliRedisOutageTest, TimeoutDuringAnAcknowledgementRetryExitsNine) {
  prepare();
  Child get = start({"get", "q", "--timeout", "1", "--reconnect", "5", "--linger", "0"});
  outage(get);
  EXPECT_EQ(get.read_lines(2), "a\nb\n");
  const Outcome g = get.finish();
  EXPECT_EQ(g.rc, 9) << g.err;
}

// The same with SIGTERM: 130 (interrupted), not 10.
TEST_F(CliRedisOutageTest, ASignalDuringAnAcknowledgementRetryExitsInterrupted) {
  prepare();
  Child get = start({"get", "q", "--reconnect", "5", "--linger", "0"});
  outage(get);
  EXPECT_EQ(get.read_lines(2), "a\nb\n");
  // The ack is being retried once stderr says nothing new for a moment; a
  // signal at any point of the outage must end get with 130.
  get.signal(SIGTERM);
  const Outcome g = get.finish();
  EXPECT_EQ(g.rc, 130) << g.err;
}

// put --close --timeout 1: its close is retried through an outage
// (reconnect.retry(put_ctx, close)); when --timeout comes first it must
// exit 9 like every other wait of put, not 10 "store unreachable".
TEST_F(CliRedisOutageTest, TimeoutDuringAPutsCloseRetryExitsNine) {
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  Child put = start({"put", "q", "--close", "--timeout", "1", "--reconnect", "5"});
  put.write_stdin("a\n");
  testutil::RawRedis raw(server_.port());
  ASSERT_TRUE(testutil::eventually([&] {
    auto k = raw.cmd({"KEYS", "*"});
    for (std::size_t i = 0; i < k->elements; ++i) {
      auto t = raw.cmd({"TYPE", k->element[i]->str});
      if (std::string(t->str) == "list" && raw.integer({"LLEN", k->element[i]->str}) == 1) {
        return true;
      }
    }
    return false;
  }));
  server_.stop();
  put.close_stdin();  // end of input: now the close, with the server down
  const Outcome p = put.finish();
  EXPECT_EQ(p.rc, 9) << p.err;
}

}  // namespace
}  // namespace sluice
