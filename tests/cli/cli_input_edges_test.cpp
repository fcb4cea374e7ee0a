// The sluice command's input handling and its --metrics server at their
// edges (each test failed on the code before its fix).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "cli/cli_child.h"
#include "cli/metrics_client.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

using testutil::Child;
using testutil::CliChild;
using testutil::connect_to;
using testutil::Outcome;
using testutil::port_in;
using testutil::run_cli;
using Clock = std::chrono::steady_clock;

// A client that sends a request's first line, then one header byte a second
// (a slow client, or slowloris) until `stop` or `seconds` have passed.
class SlowClient {
 public:
  SlowClient(int port, int seconds) : fd_(connect_to(port)) {
    thread_ = std::thread([this, seconds] {
      const std::string start = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
      if (::write(fd_, start.data(), start.size()) < 0) return;
      for (int i = 0; i < seconds * 10 && !stop_; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (i % 10 == 9 && ::write(fd_, "a", 1) < 0) return;
      }
    });
  }
  ~SlowClient() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  bool connected() const { return fd_ >= 0; }

 private:
  int fd_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// GET /metrics, HTTP/1.0; the reply's status line, or "" if none came within
// `timeout` (SO_RCVTIMEO).
std::string scrape_status(int port, std::chrono::seconds timeout) {
  const int fd = connect_to(port);
  if (fd < 0) return "";
  timeval tv{static_cast<time_t>(timeout.count()), 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  std::string reply;
  if (::write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) reply.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return reply.substr(0, reply.find("\r\n"));
}

class CliInputEdgesTest : public ::testing::Test {
 protected:
  Outcome run(std::vector<std::string> args, const std::string& input = "") {
    return run_cli(store_, std::move(args), input);
  }
  std::string store_ = testutil::test_dir("cli-input-edges").string();
};

// args.cpp parse_time: seconds(secs) + nanoseconds(ns) cast to
// system_clock::duration (int64 ns) overflows past 2262-04-11; the time
// wraps to the 1700s, so "skip to 2300" replays every message instead.
TEST_F(CliInputEdgesTest, SeekToATimeAfterTheYear2262SkipsEverythingRatherThanReplaying) {
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  ASSERT_EQ(run({"put", "q"}, "a\nb\nc\n").rc, 0);
  ASSERT_EQ(run({"get", "q", "--count", "3"}).out, "a\nb\nc\n");
  for (const char* t : {"2200-01-01T00:00:00Z", "2300-01-01T00:00:00Z", "@10000000000"}) {
    Outcome s = run({"seek", "q", "--to-time", t});
    // Either refused as out of range, or a move to the end; never a replay.
    if (s.rc == 0) {
      EXPECT_NE(s.out.find("unacknowledged=0\n"), std::string::npos) << t << ":\n" << s.out;
    } else {
      EXPECT_EQ(s.rc, 2) << t << ": " << s.err;
    }
    Outcome g = run({"get", "q", "--timeout", "0.2"});
    EXPECT_EQ(g.out, "") << "--to-time " << t << " replayed";
  }
}

// A get whose stdout is closed (`>&-`): fd 1 is free, so the store's first
// file opened (the channel's lock file, readers/default.lock) becomes fd 1;
// get writes the messages into it, counts them taken ("a file") and
// acknowledges them: lost. It must fail (exit 7) and acknowledge nothing.
TEST_F(CliInputEdgesTest, GetWithItsStdoutClosedAcknowledgesNothing) {
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  ASSERT_EQ(run({"put", "q"}, "aaa\nbbb\n").rc, 0);
  Child get(
      {"/bin/sh", "-c", "exec \"$0\" --store \"$1\" get q --timeout 0.3 >&-", SLUICE_CLI, store_});
  get.close_stdin();
  Outcome r = get.finish();
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.rc, 9) << "it ran to its --timeout as if it had written the messages somewhere";
  Outcome stat = run({"stat", "q"});
  EXPECT_NE(stat.out.find("consumed=0\n"), std::string::npos) << stat.out;
  EXPECT_EQ(run({"get", "q", "--count", "2", "--timeout", "1"}).out, "aaa\nbbb\n");
}

// A put whose stdin is closed (`<&-`) has no input, not an empty one. main()
// holds fd 0 with /dev/null (so no store file becomes it), and put read that
// as an empty input: exit 0, and with --close it closed the queue, ending
// its readers, for a producer whose input never came. It must fail (exit 7,
// as get with a closed stdout does) and leave the queue open.
TEST_F(CliInputEdgesTest, PutWithItsStdinClosedFailsAndLeavesTheQueueOpen) {
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  Child put({"/bin/sh", "-c", "exec \"$0\" --store \"$1\" put q --close <&-", SLUICE_CLI, store_});
  Outcome r = put.finish();
  EXPECT_EQ(r.rc, 7) << r.err;
  EXPECT_NE(r.err.find("stdin is closed"), std::string::npos) << r.err;
  Outcome stat = run({"stat", "q"});
  EXPECT_NE(stat.out.find("closed=false\n"), std::string::npos) << stat.out;
}

// metrics_server.cpp: one httplib worker (ThreadPool(1)) and no deadline for
// a whole request: a client that sends its headers slowly holds the only
// worker, and every scrape waits behind it.
TEST_F(CliInputEdgesTest, ASlowMetricsClientDoesNotStarveScrapes) {
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  CliChild put(store_, {"put", "q", "--metrics", "127.0.0.1:0"});
  const int port = port_in(put.read_err_until("/metrics\n"));
  ASSERT_GT(port, 0) << put.err;
  ASSERT_EQ(scrape_status(port, std::chrono::seconds(5)), "HTTP/1.1 200 OK");
  {
    SlowClient slow(port, 30);
    ASSERT_TRUE(slow.connected());
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const auto t0 = Clock::now();
    const std::string status = scrape_status(port, std::chrono::seconds(10));
    const auto took = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_EQ(status, "HTTP/1.1 200 OK") << "no answer within 10 s (took " << took << " s)";
    EXPECT_LT(took, 2.0);
  }
  put.close_stdin();
  EXPECT_EQ(put.finish().rc, 0);
}

// Likewise at the end: ~MetricsServer stops the server and joins its thread,
// which waits for the worker, which reads the slow client's request for as
// long as bytes keep coming (5 s per byte). SIGTERM must still end put at once
// (docs/cli.md: "SIGINT or SIGTERM stops put and get cleanly (exit 130)").
TEST_F(CliInputEdgesTest, ASlowMetricsClientDoesNotHoldTheCommandsExit) {
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  CliChild put(store_, {"put", "q", "--metrics", "127.0.0.1:0"});
  const int port = port_in(put.read_err_until("/metrics\n"));
  ASSERT_GT(port, 0) << put.err;
  SlowClient slow(port, 20);
  ASSERT_TRUE(slow.connected());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto t0 = Clock::now();
  put.signal(SIGTERM);
  Outcome r = put.finish();
  const auto took = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(r.rc, 130) << r.err;
  EXPECT_LT(took, 2.0) << "put took " << took << " s to exit after SIGTERM";
}

// httplib 0.11.4 keeps every header line of a request (each up to 8 KiB, no
// limit on their number or total) in memory: one request that never ends its
// headers grows the command without bound. Under an address-space limit (as
// a container's memory limit or the OOM killer would) the allocation fails
// in the server's worker thread, and std::bad_alloc there is std::terminate:
// the put aborts (exit 134) with its producer's data path. A request's head
// should be capped (431/400 and close) at a few KiB.
TEST_F(CliInputEdgesTest, AnEndlessRequestHeadDoesNotGrowOrCrashTheCommand) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ulimit -v: a sanitizer's runtime reserves more address space than that";
#endif
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  Child put({"/bin/sh", "-c",
             "ulimit -v 500000; exec \"$0\" --store \"$1\" put q --metrics 127.0.0.1:0", SLUICE_CLI,
             store_});
  const int port = port_in(put.read_err_until("/metrics\n"));
  ASSERT_GT(port, 0) << put.err;
  const int fd = connect_to(port);
  ASSERT_GE(fd, 0);
  std::string head = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  std::size_t sent = 0;
  if (::write(fd, head.data(), head.size()) > 0) {
    const std::string value(4000, 'a');
    for (int i = 0; i < 150000; ++i) {  // 600 MB of headers, or until the server hangs up
      const std::string line = "X-" + std::to_string(i) + ": " + value + "\r\n";
      if (::send(fd, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size())) {
        break;
      }
      sent += line.size();
    }
  }
  ::close(fd);
  put.write_stdin("after\n");
  put.close_stdin();
  Outcome r = put.finish();
  EXPECT_EQ(r.rc, 0) << "after " << sent << " bytes of request headers:\n" << r.err;
  EXPECT_EQ(run({"get", "q", "--count", "1", "--timeout", "1"}).out, "after\n");
}

}  // namespace
}  // namespace sluice
