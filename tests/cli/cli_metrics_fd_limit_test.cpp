// sluice --metrics out of file descriptors: accept4 failing with EMFILE
// leaves the connection in the backlog, so the listening socket stays
// readable; the server must back off (not spin on poll and accept4), and
// answer what waited once descriptors are free again.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_child.h"
#include "cli/metrics_client.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

using testutil::CliChild;
using testutil::main_thread_state;
using testutil::Outcome;
using testutil::port_in;
using testutil::run_cli;
using testutil::scrape;
using Clock = std::chrono::steady_clock;

// A connection with a whole GET /metrics sent.
int ask(int port) {
  const int fd = testutil::connect_to(port);
  if (fd < 0) return -1;
  const std::string req = "GET /metrics HTTP/1.0\r\n\r\n";
  EXPECT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  return fd;
}

// Reads the answer to its end (waiting up to `limit` in all); closes fd.
std::string answer(int fd, std::chrono::milliseconds limit) {
  std::string r;
  const auto until = Clock::now() + limit;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    r.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return r;
}

// The lowest descriptor number free in `pid`: the one its next open takes.
int lowest_free_fd(pid_t pid) {
  std::set<int> open;
  DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (d == nullptr) return -1;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') open.insert(std::atoi(e->d_name));
  }
  ::closedir(d);
  int fd = 0;
  while (open.contains(fd)) ++fd;
  return fd;
}

// User + system CPU seconds of `pid` so far.
double cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream rest(all.substr(all.rfind(')') + 2));  // from field 3 (state) on
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i >= 14) ticks += std::stod(field);  // utime, stime
  }
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

TEST(CliMetricsFdLimitTest, BacksOffWhenOutOfDescriptorsAndServesOnceTheyAreFree) {
  const std::string store = testutil::test_dir("cli-metrics-fd-limit").string();
  ASSERT_EQ(run_cli(store, {"create", "q"}).rc, 0);
  // A put waiting on its stdin: nothing but the server works meanwhile.
  CliChild put(store, {"put", "q", "--metrics", "127.0.0.1:0"});
  const int port = port_in(put.read_err_until("/metrics\n"));
  ASSERT_GT(port, 0) << put.err;
  // The limit only once the command waits on its stdin: its start opens
  // descriptors after the line above (the stop's eventfd; under UBSan, a pipe
  // to check the first call of each virtual function's object, which at the
  // limit fails as "invalid vptr" and ends the command). So one message goes
  // in first, and the limit waits for its count and the main thread asleep.
  put.write_stdin("first\n");
  const auto waiting = [&] {
    return scrape(port).find("sluice_cli_messages_total{command=\"put\",queue=\"q\"} 1\n") !=
               std::string::npos &&
           main_thread_state(put.pid()) == 'S';
  };
  const auto until = Clock::now() + std::chrono::seconds(30);
  while (!waiting() && Clock::now() < until) {
  }
  ASSERT_TRUE(waiting()) << "the put did not come to wait on its stdin";

  rlimit old{};
  ASSERT_EQ(::prlimit(put.pid(), RLIMIT_NOFILE, nullptr, &old), 0);
  const int lowest = lowest_free_fd(put.pid());
  ASSERT_GT(lowest, 2);
  // A limit at the lowest free number: no new descriptor (those open stay).
  rlimit low = old;
  low.rlim_cur = static_cast<rlim_t>(lowest);
  ASSERT_EQ(::prlimit(put.pid(), RLIMIT_NOFILE, &low, nullptr), 0);
  // They wait in the backlog: accept4 fails with EMFILE.
  std::vector<int> clients;
  for (int i = 0; i < 4; ++i) {
    const int fd = ask(port);
    ASSERT_GE(fd, 0);
    clients.push_back(fd);
  }

  const double before = cpu_seconds(put.pid());
  const auto t0 = Clock::now();
  // A window of wall time to measure CPU over (not a synchronisation).
  ::poll(nullptr, 0, 1000);
  const double busy =
      (cpu_seconds(put.pid()) - before) / std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_LT(busy, 0.1) << "the metrics server spins while accept4 fails with EMFILE";

  ASSERT_EQ(::prlimit(put.pid(), RLIMIT_NOFILE, &old, nullptr), 0);
  for (int fd : clients) {
    const std::string r = answer(fd, std::chrono::milliseconds(10000));
    EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0U) << r;
  }
  const std::string r = answer(ask(port), std::chrono::milliseconds(10000));
  EXPECT_NE(r.find("sluice_cli_messages_total"), std::string::npos) << r;

  put.close_stdin();
  const Outcome o = put.finish();
  EXPECT_EQ(o.rc, 0) << o.err;
}

}  // namespace
}  // namespace sluice
