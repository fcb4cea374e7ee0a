// The command on Redis out of file descriptors when a blocked command makes
// its stop's eventfd (Connection::await_reply's detail::StopFd): SIGINT must
// still end a get waiting on an empty queue, exit 130, nothing lost
// (docs/cli.md: "SIGINT or SIGTERM stops put and get cleanly (exit 130)").
// The command's waits on the server are 50 ms slices (RedisOptions::
// wait_slice), so this holds even if await_reply waited for the reply
// without its 100 ms slices; tests/redis/transport_stop_fd_limit_test.cpp
// holds those slices with a wait that the server would end only much later.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "cli/cli_child.h"
#include "cli/fd_limit.h"
#include "testutil/redis_server.h"

#ifndef SLUICE_CLI
#error "SLUICE_CLI: the path of the sluice binary (tests/CMakeLists.txt)"
#endif

namespace sluice {
namespace {

using testutil::Child;
using testutil::ends_soon;
using testutil::main_thread_state;
using testutil::open_on;
using testutil::Outcome;
using testutil::run_cli;
using Clock = std::chrono::steady_clock;

class CliRedisStopFdLimitTest : public ::testing::TestWithParam<bool> {
 protected:
  bool stream() const { return GetParam(); }
  // The command the get waits in on the server, as CLIENT LIST names it.
  std::string wait_command() const { return stream() ? "xreadgroup" : "blmove"; }

  // Waits (up to 30 s) until the child exited (false) or a client is blocked
  // in wait_command() on the server while the child's main thread sleeps
  // (true): get waits in await_reply.
  bool comes_to_wait(const Child& c) {
    for (const auto until = Clock::now() + std::chrono::seconds(30); Clock::now() < until;) {
      const char state = main_thread_state(c.pid());
      if (state == 'Z' || state == '?') return false;
      if (state == 'S' && raw_.blocked_in(wait_command())) return true;
    }
    return false;
  }

  // `sluice get q` under the lowest soft RLIMIT_NOFILE at which it comes to
  // wait on the server; null if none up to 64 does. Below it the command
  // fails (--reconnect 0: at once), so at it every descriptor the command
  // makes after its Redis connection fails, and the stop's eventfd of each
  // blocked command is made after it.
  std::unique_ptr<Child> get_at_lowest_limit() {
    for (int limit = 3; limit <= 64; ++limit) {
      auto c = std::make_unique<Child>(std::vector<std::string>{
          "/bin/sh", "-c",
          "ulimit -S -n \"$2\" && exec \"$0\" --store \"$1\" get q --reconnect 0 --linger 0",
          SLUICE_CLI, url_, std::to_string(limit)});
      if (comes_to_wait(*c)) return c;
    }
    return nullptr;
  }

  testutil::RedisServer server_;
  testutil::RawRedis raw_{server_.port()};
  std::string url_ = "redis://127.0.0.1:" + std::to_string(server_.port()) + "/0";
};

// get on an empty queue, blocked on the server with no descriptor for the
// stop's eventfd: SIGINT ends it with exit 130; it took nothing, and let go
// of the queue: a message put afterwards is there for the next get.
TEST_P(CliRedisStopFdLimitTest, SigintEndsAGetBlockedOnTheServerWithoutAnEventfd) {
  SKIP_UNDER_ASAN();
  std::vector<std::string> create = {"create", "q"};
  if (stream()) create.emplace_back("--stream");
  ASSERT_EQ(run_cli(url_, create).rc, 0);
  const std::unique_ptr<Child> get = get_at_lowest_limit();
  ASSERT_NE(get, nullptr) << "no limit let get wait on the server";
  // Three with descriptors to spare: get's reader watch and stop, and the
  // blocked command's stop.
  ASSERT_LT(open_on(get->pid(), "eventfd"), 3)
      << "at the lowest limit that waits on the server, get still made every eventfd";

  const Outcome r = interrupt(*get, SIGINT, "get");
  EXPECT_EQ(r.out, "");

  ASSERT_EQ(run_cli(url_, {"put", "q"}, "m1\n").rc, 0);
  const Outcome again = run_cli(url_, {"get", "q", "--count", "1", "--timeout", "10"});
  EXPECT_EQ(again.rc, 0) << again.err;
  EXPECT_EQ(again.out, "m1\n");
  const std::string stat = run_cli(url_, {"stat", "q"}).out;
  EXPECT_NE(stat.find("produced=1\n"), std::string::npos) << stat;
  EXPECT_NE(stat.find("consumed=1\n"), std::string::npos) << stat;
  EXPECT_NE(stat.find("channel.default.pending=0\n"), std::string::npos) << stat;
}

INSTANTIATE_TEST_SUITE_P(Kinds, CliRedisStopFdLimitTest, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "Streams" : "Pressure"; });

}  // namespace
}  // namespace sluice
