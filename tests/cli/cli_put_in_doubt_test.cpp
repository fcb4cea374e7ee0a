// What `sluice put` says about messages in doubt (docs/cli.md, Redis,
// "Failures": "put counts only those certainly enqueued and says how many
// are in doubt") when --reconnect retries them and the outage outlasts it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <thread>
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

class CliPutInDoubtTest : public ::testing::Test {
 protected:
  Child start(std::vector<std::string> args) {
    args.insert(args.begin(), {SLUICE_CLI, "--redis", url_});
    return Child(std::move(args), testutil::no_store_env(home_));
  }
  Outcome run(std::vector<std::string> args) {
    Child c = start(std::move(args));
    c.close_stdin();
    return c.finish();
  }

  testutil::RedisServer server_{/*persistent=*/true};  // the XADD survives the stop
  std::string url_ = "redis://127.0.0.1:" + std::to_string(server_.port()) + "/0";
  std::string home_ = testutil::test_dir("cli_put_in_doubt").string();
};

// The batch is appended, then the connection breaks while the put waits
// for a replica (no answer: the 3 messages are in doubt). Every retry then
// finds the server gone (connection refused: nothing sent, so nothing new
// in doubt). The 3 are still in doubt when --reconnect gives up: put must
// say so, not "0 messages enqueued; the rest ... from byte 0, was not" (a
// caller sending the rest again would put them in twice without knowing).
TEST_F(CliPutInDoubtTest, ABatchInDoubtStaysInDoubtWhenTheRetriesAreRefused) {
  ASSERT_EQ(run({"create", "t", "--stream", "--replicas", "1"}).rc, 0);
  Child put = start({"put", "t", "--reconnect", "1"});
  put.write_stdin("a\nb\nc\n");
  put.close_stdin();
  testutil::RawRedis raw(server_.port());
  ASSERT_TRUE(testutil::eventually([&] { return raw.blocked_in("wait"); }));
  server_.stop();
  const Outcome p = put.finish();
  EXPECT_EQ(p.rc, 10) << p.err;
  EXPECT_NE(p.err.find("0 messages enqueued; 3 more may or may not have been"), std::string::npos)
      << p.err;
  // No retry reached the server: nothing was sent twice.
  EXPECT_EQ(p.err.find("sent again"), std::string::npos) << p.err;
  // They were in fact appended.
  server_.restart();
  const Outcome st = run({"stat", "t"});
  EXPECT_NE(st.out.find("produced=3\n"), std::string::npos) << st.out << st.err;
}

// Every attempt is appended, then its connection is killed while it waits
// for a replica: in doubt, sent again, in doubt again, until --reconnect
// gives up. The batch is then in the topic more than once, and put must say
// that it sent messages again (docs/cli.md, "Outages": "messages in doubt
// may go in twice (at least once; it says how many)"), as it does when a
// retry succeeds.
TEST_F(CliPutInDoubtTest, MessagesSentAgainAreReportedWhenPutFailsInTheEnd) {
  ASSERT_EQ(run({"create", "t", "--stream", "--replicas", "1"}).rc, 0);
  Child put = start({"put", "t", "--reconnect", "1"});
  put.write_stdin("a\nb\nc\n");
  put.close_stdin();
  // Cuts every attempt once it waits for a replica (its XADD is in).
  std::atomic<bool> stop{false};
  std::atomic<int> cuts{0};
  std::thread cutter([&] {
    testutil::RawRedis raw(server_.port());
    while (!stop) {
      if (raw.blocked_in("wait")) {
        raw.cmd({"CLIENT", "KILL", "TYPE", "normal"});  // not this connection (SKIPME yes)
        ++cuts;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // a poll, not a wait for it
    }
  });
  const Outcome p = put.finish();
  stop = true;
  cutter.join();
  EXPECT_EQ(p.rc, 10) << p.err;
  ASSERT_GE(cuts.load(), 2) << p.err;
  const Outcome st = run({"stat", "t"});
  ASSERT_NE(st.out.find("produced=" + std::to_string(3 * cuts.load()) + "\n"), std::string::npos)
      << st.out << st.err << p.err;
  EXPECT_NE(p.err.find("3 messages were sent again"), std::string::npos) << p.err;
}

}  // namespace
}  // namespace sluice
