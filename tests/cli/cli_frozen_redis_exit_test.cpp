// A put's --metrics server and progress line with a Redis that does not
// answer (stopped with SIGSTOP, as a stalled server): SIGTERM or SIGINT
// must end the command without waiting for the queue's stat in progress (a
// stat takes the Redis timeout, 5 s, to fail), and the progress line keeps
// redrawing meanwhile, with the queue as last known.
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <string>
#include <vector>

#include "cli/cli_child.h"
#include "cli/metrics_client.h"
#include "testutil/prometheus.h"
#include "testutil/redis_server.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

using testutil::Child;
using testutil::Outcome;
using testutil::parse_prometheus;
using testutil::port_in;
using testutil::scrape;
using Clock = std::chrono::steady_clock;

// How long the command may take to exit after the signal. A stat in
// progress on the stopped Redis fails only at the Redis timeout, 5 s after
// it began; each test makes sure one is in progress (began less than a
// second before the signal), so a command that waits for it takes 4 s or
// more, and one that does not takes milliseconds (sanitizers included).
constexpr std::chrono::milliseconds kExitBound{2500};

std::string redis_url(const testutil::RedisServer& server) {
  return "redis://127.0.0.1:" + std::to_string(server.port()) + "/0";
}

TEST(CliFrozenRedisExitTest, MetricsServerExitDoesNotWaitForAStatInProgress) {
  testutil::RedisServer server;
  const std::string url = redis_url(server);
  const auto env = testutil::no_store_env(testutil::test_dir("cli-frozen-exit").string());
  {
    Child create({SLUICE_CLI, "--redis", url, "create", "q", "--bound", "7"}, env);
    create.close_stdin();
    ASSERT_EQ(create.finish().rc, 0);
  }
  // stdin stays open and empty: put waits for input until the signal.
  Child put({SLUICE_CLI, "--redis", url, "put", "q", "--metrics", "127.0.0.1:0"}, env);
  const int port = port_in(put.read_err_until("/metrics\n"));
  ASSERT_GT(port, 0) << put.err;
  const std::string labels = "{command=\"put\",queue=\"q\"}";
  ASSERT_EQ(parse_prometheus(scrape(port)).at("sluice_store_stat_ok" + labels), 1);

  server.pause();
  // This scrape's stat is now in progress on the stopped Redis: the scrape
  // is answered late, from the last known queue, after 500 ms.
  const testutil::Exposition e = parse_prometheus(scrape(port));
  EXPECT_EQ(e.at("sluice_store_stat_ok" + labels), 0);
  EXPECT_EQ(e.at("sluice_store_bound" + labels), 7);

  const auto t0 = Clock::now();
  put.signal(SIGTERM);
  const Outcome o = put.finish();
  const auto took = Clock::now() - t0;
  server.resume();  // only now: the put had to end with Redis still stopped
  EXPECT_EQ(o.rc, 130) << o.err;
  EXPECT_LT(took, kExitBound) << "the exit waited for the stat on the stopped Redis: "
                              << std::chrono::duration<double>(took).count() << " s";
}

// `sluice --redis URL args...` on a new pseudo-terminal (stdin, stdout and
// stderr), so its progress line shows.
class TtyChild {
 public:
  explicit TtyChild(std::vector<std::string> args) {
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = ::forkpty(&master_, nullptr, nullptr, nullptr);
    if (pid_ == 0) {
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }
  ~TtyChild() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (master_ >= 0) ::close(master_);
  }
  TtyChild(const TtyChild&) = delete;
  TtyChild& operator=(const TtyChild&) = delete;

  pid_t pid() const { return pid_; }
  // Reads what the terminal shows until `until` or the child's side closes
  // (false then).
  bool read_until(Clock::time_point until) {
    while (Clock::now() < until) {
      pollfd p{master_, POLLIN, 0};
      const auto ms = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
      if (::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(ms, 0))) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::read(master_, buf, sizeof buf);
      if (n <= 0) return false;  // EIO: the child's side is closed
      screen.append(buf, static_cast<std::size_t>(n));
    }
    return true;
  }
  // Reads to the end of the child's output (at most until `until`), then
  // reaps it; its status, or -1 if it had not exited by then.
  int finish(Clock::time_point until) {
    while (read_until(until)) {
      if (Clock::now() >= until) return -1;
    }
    int status = 0;
    if (::waitpid(pid_, &status, 0) != pid_) return -1;
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  std::string screen;

 private:
  pid_t pid_ = -1;
  int master_ = -1;
};

// Redraws of the progress line in `screen` from `from` on.
std::size_t redraws(const std::string& screen, std::size_t from) {
  std::size_t n = 0;
  for (auto at = screen.find("\r\033[K", from); at != std::string::npos;
       at = screen.find("\r\033[K", at + 1)) {
    ++n;
  }
  return n;
}

TEST(CliFrozenRedisExitTest, ProgressLineRedrawsAndExitsWhileAStatHangs) {
  testutil::RedisServer server;
  const std::string url = redis_url(server);
  const auto env = testutil::no_store_env(testutil::test_dir("cli-frozen-progress").string());
  {
    Child create({SLUICE_CLI, "--redis", url, "create", "q", "--bound", "7"}, env);
    create.close_stdin();
    ASSERT_EQ(create.finish().rc, 0);
  }
  // put on a terminal, no input typed: it waits, redrawing four times a second.
  TtyChild put({SLUICE_CLI, "--redis", url, "put", "q"});
  ASSERT_GT(put.pid(), 0);
  const auto shown = Clock::now() + std::chrono::seconds(30);
  while (put.screen.find("depth 0/7") == std::string::npos && Clock::now() < shown) {
    ASSERT_TRUE(put.read_until(Clock::now() + std::chrono::milliseconds(100))) << put.screen;
  }
  ASSERT_NE(put.screen.find("depth 0/7"), std::string::npos) << put.screen;

  server.pause();
  // Within the next 1.5 s a stat starts and hangs; the line must go on
  // redrawing (six times at four a second; three at least here) with the
  // depth as last known, not freeze for the 5 s of the stat's timeout.
  const std::size_t mark = put.screen.size();
  ASSERT_TRUE(put.read_until(Clock::now() + std::chrono::milliseconds(1500))) << put.screen;
  const std::string after = put.screen.substr(mark);
  EXPECT_GE(redraws(put.screen, mark), 3u) << "the line froze behind the stat: " << after;
  EXPECT_NE(after.rfind("depth 0/7"), std::string::npos) << after;

  const auto t0 = Clock::now();
  ::kill(put.pid(), SIGINT);
  const int rc = put.finish(t0 + kExitBound);
  const auto took = Clock::now() - t0;
  server.resume();  // only now: the put had to end with Redis still stopped
  EXPECT_EQ(rc, 130) << put.screen;
  EXPECT_LT(took, kExitBound) << "the exit waited for the stat on the stopped Redis: "
                              << std::chrono::duration<double>(took).count() << " s";
}

}  // namespace
}  // namespace sluice
