// The command out of file descriptors when it makes the stop's eventfd
// (detail::StopFd): SIGINT/SIGTERM are blocked and taken by a sigwait thread,
// so a poll that waits without that eventfd must still see the stop
// (docs/cli.md: "SIGINT or SIGTERM stops put and get cleanly (exit 130)").
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <string>

#include "cli/cli_child.h"
#include "cli/fd_limit.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

using testutil::Child;
using testutil::ends_soon;
using testutil::main_thread_state;
using testutil::open_on;
using testutil::Outcome;
using testutil::run_cli;
using Clock = std::chrono::steady_clock;

// Waits (up to 30 s) until the child exited (false) or its main thread
// sleeps with a file open whose link has `what` (true): put then waits on
// its stdin, get (once the queue is open) for room in its stdout.
bool comes_to_wait(const Child& c, const std::string& what) {
  const auto until = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < until) {
    const char state = main_thread_state(c.pid());
    if (state == 'Z' || state == '?') return false;
    if (state == 'S' && open_on(c.pid(), what) > 0) return true;
  }
  return false;
}

// `sluice args` under the lowest soft RLIMIT_NOFILE at which it comes to
// wait (comes_to_wait(what)); null if none up to 64 does.
std::unique_ptr<Child> at_lowest_limit(const std::string& store, const std::string& args,
                                       const std::string& what) {
  for (int limit = 3; limit <= 64; ++limit) {
    auto c = std::make_unique<Child>(std::vector<std::string>{
        "/bin/sh", "-c", "ulimit -S -n \"$2\" && exec \"$0\" --store \"$1\" " + args, SLUICE_CLI,
        store, std::to_string(limit)});
    if (comes_to_wait(*c, what)) return c;
  }
  return nullptr;
}

class CliStopFdLimitTest : public ::testing::Test {
 protected:
  void SetUp() override { store_ = testutil::test_dir("cli-stop-fd-limit").string(); }
  std::string stat(const std::string& q) { return run_cli(store_, {"stat", q}).out; }
  std::string store_;
};

// A put that found no descriptor for its eventfd (the lowest limit at which
// it opens the queue: the eventfd is the next descriptor it makes), given
// descriptors again, puts what it reads; SIGINT must end it at once, with
// exit 130 and every message it read in the queue.
TEST_F(CliStopFdLimitTest, SigintEndsAPutThatHasNoEventfd) {
  SKIP_UNDER_ASAN();
  ASSERT_EQ(run_cli(store_, {"create", "q"}).rc, 0);
  const std::unique_ptr<Child> put = at_lowest_limit(store_, "put q", ".seg");
  ASSERT_NE(put, nullptr) << "no limit let put open the queue";
  ASSERT_EQ(open_on(put->pid(), "eventfd"), 0)
      << "at the lowest limit that opens the queue, put still made its eventfd";
  // Descriptors again: the messages go in (listing channels takes one).
  rlimit lim{};
  ASSERT_EQ(::prlimit(put->pid(), RLIMIT_NOFILE, nullptr, &lim), 0);
  lim.rlim_cur = lim.rlim_max;
  ASSERT_EQ(::prlimit(put->pid(), RLIMIT_NOFILE, &lim, nullptr), 0);
  put->write_stdin("m1\nm2\n");
  const auto in_queue = [&] { return stat("q").find("produced=2\n") != std::string::npos; };
  for (const auto until = Clock::now() + std::chrono::seconds(30);
       !in_queue() && Clock::now() < until;) {
  }
  ASSERT_TRUE(in_queue()) << stat("q");

  put->signal(SIGINT);
  const bool ended = ends_soon(*put);
  EXPECT_TRUE(ended) << "SIGINT did not end put within 5 s";
  put->close_stdin();  // ends it if SIGINT did not
  const Outcome r = put->finish();
  if (ended) {
    EXPECT_EQ(r.rc, 130) << r.err;
    EXPECT_NE(r.err.find("2 messages enqueued"), std::string::npos) << r.err;
  }
  EXPECT_NE(stat("q").find("produced=2\n"), std::string::npos) << stat("q");
  EXPECT_EQ(run_cli(store_, {"get", "q", "--count", "2"}).out, "m1\nm2\n");
}

// A get that found no descriptor for its stop's eventfd (the reader watch
// took the last one), waiting for room in a pipe its reader does not read:
// SIGINT must end it at once, with exit 130 and nothing acknowledged.
TEST_F(CliStopFdLimitTest, SigintEndsAGetWaitingForRoomWithoutAnEventfd) {
  SKIP_UNDER_ASAN();
  ASSERT_EQ(run_cli(store_, {"create", "q"}).rc, 0);
  std::string input;  // 400 KB: more than the pipe holds
  for (int i = 0; i < 400; ++i) input += std::string(999, static_cast<char>('a' + i % 26)) + "\n";
  ASSERT_EQ(run_cli(store_, {"put", "q"}, input).rc, 0);
  // Its position file open, then asleep: the pipe is full (never read here).
  const std::unique_ptr<Child> get = at_lowest_limit(store_, "get q --linger 0", ".pos");
  ASSERT_NE(get, nullptr) << "no limit let get open the queue";
  ASSERT_LT(open_on(get->pid(), "eventfd"), 2)
      << "at the lowest limit that opens the queue, get still made both eventfds";

  const Outcome r = interrupt(*get, SIGINT, "get");
  EXPECT_NE(stat("q").find("consumed=0\n"), std::string::npos) << stat("q");
  EXPECT_NE(stat("q").find("produced=400\n"), std::string::npos) << stat("q");
}

// get --exec whose runner found no descriptor for its eventfd (--metrics
// took the last ones before it; given descriptors again for the runs):
// SIGTERM must still start the grace period, then kill the command and exit
// 130, nothing acknowledged.
TEST_F(CliStopFdLimitTest, SigtermKillsAnExecCommandAfterTheGraceWithoutAnEventfd) {
  SKIP_UNDER_ASAN();
  ASSERT_EQ(run_cli(store_, {"create", "q"}).rc, 0);
  const std::string started = store_ + "/started";
  const std::unique_ptr<Child> get = at_lowest_limit(
      store_,
      "get q --metrics 127.0.0.1:0 --grace 200ms --exec 'echo x >> " + started + "; exec sleep 20'",
      "socket:");
  ASSERT_NE(get, nullptr) << "no limit let get open the queue and serve metrics";
  ASSERT_NE(get->read_err_until("/metrics\n").find("/metrics\n"), std::string::npos) << get->err;
  ASSERT_EQ(open_on(get->pid(), "eventfd"), 2)
      << "at the lowest limit that serves metrics (two eventfds), get --exec still made its own";
  rlimit lim{};
  ASSERT_EQ(::prlimit(get->pid(), RLIMIT_NOFILE, nullptr, &lim), 0);
  lim.rlim_cur = lim.rlim_max;
  ASSERT_EQ(::prlimit(get->pid(), RLIMIT_NOFILE, &lim, nullptr), 0);
  ASSERT_EQ(run_cli(store_, {"put", "q"}, "m1\n").rc, 0);
  const auto running = [&] { return std::ifstream(started).good(); };
  for (const auto until = Clock::now() + std::chrono::seconds(30);
       !running() && Clock::now() < until;) {
  }
  ASSERT_TRUE(running()) << "the command did not start";

  const Outcome r = interrupt(*get, SIGTERM, "get --exec (--grace 200ms)");
  EXPECT_NE(stat("q").find("consumed=0\n"), std::string::npos) << stat("q");
}

// --metrics out of descriptors for its eventfds: the error says why and
// the hint says what to do (not "check free space and permissions").
TEST_F(CliStopFdLimitTest, MetricsOutOfDescriptorsSaysSoAndHowToFixIt) {
  ASSERT_EQ(run_cli(store_, {"create", "q"}).rc, 0);
  for (int limit = 3; limit <= 64; ++limit) {
    Child c({"/bin/sh", "-c",
             "ulimit -S -n \"$2\" && exec \"$0\" --store \"$1\" get q --timeout 0.2 --metrics "
             "127.0.0.1:0",
             SLUICE_CLI, store_, std::to_string(limit)});
    c.close_stdin();
    const Outcome r = c.finish();
    if (r.err.find("--metrics: eventfd") == std::string::npos) continue;
    EXPECT_NE(r.err.find("Too many open files"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("ulimit -n"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("free space"), std::string::npos) << r.err;
    EXPECT_NE(r.rc, 0);
    return;
  }
  ADD_FAILURE() << "no limit from 3 to 64 ran out at the metrics server's eventfds";
}

}  // namespace
}  // namespace sluice
