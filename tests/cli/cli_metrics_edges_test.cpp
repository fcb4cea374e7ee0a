// sluice --metrics: how the server ends a connection whose client sent more
// than a request's head (a body, or a head over the 8 KiB cap).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <string>

#include "cli/cli_child.h"
#include "cli/metrics_client.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

using testutil::CliChild;
using testutil::Outcome;
using testutil::port_in;
using testutil::run_cli;

struct Reply {
  std::string data;  // every byte read
  int error = 0;     // errno of the read that ended it; 0: end of file
};

// Sends `request` whole (it fits the loopback buffers), then reads until the
// end of the stream.
Reply ask(int port, const std::string& request) {
  Reply r;
  const int fd = testutil::connect_to(port);
  if (fd < 0) {
    r.error = errno;
    return r;
  }
  std::size_t off = 0;
  while (off < request.size()) {
    const ssize_t n = ::send(fd, request.data() + off, request.size() - off, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may stop reading: what it answered is read below
    off += static_cast<std::size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);  // as curl does once its request is out
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      r.data.append(buf, static_cast<std::size_t>(n));
    } else {
      r.error = n == 0 ? 0 : errno;
      break;
    }
  }
  ::close(fd);
  return r;
}

class CliMetricsEdgesTest : public ::testing::Test {
 protected:
  Outcome run(std::vector<std::string> args, const std::string& input = "") {
    return run_cli(store_, std::move(args), input);
  }
  std::string store_ = testutil::test_dir("cli-metrics-edges").string();
};

// Bytes left unread when the server closes make the kernel send a reset in
// place of the end of file: the client sees ECONNRESET (and may lose the
// answer) instead of a 200, 400 or 431 that ends cleanly.
TEST_F(CliMetricsEdgesTest, AnswersEndCleanlyWhenTheClientSentMoreThanTheHead) {
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  CliChild get(store_, {"get", "q", "--metrics", "127.0.0.1:0"});
  const int port = port_in(get.read_err_until("/metrics\n"));
  ASSERT_GT(port, 0) << get.err;
  const std::string body(20000, 'x');

  Reply r = ask(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 20000\r\n\r\n" + body);
  EXPECT_EQ(r.error, 0) << std::strerror(r.error);
  EXPECT_EQ(r.data.rfind("HTTP/1.1 200 OK\r\n", 0), 0U) << r.data;
  EXPECT_NE(r.data.find("sluice_cli_messages_total"), std::string::npos) << r.data;

  r = ask(port, "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 20000\r\n\r\n" + body);
  EXPECT_EQ(r.error, 0) << std::strerror(r.error);
  EXPECT_EQ(r.data.rfind("HTTP/1.1 400 ", 0), 0U) << r.data;

  r = ask(port, "GET /metrics HTTP/1.1\r\nX-Big: " + std::string(30000, 'a') + "\r\n\r\n");
  EXPECT_EQ(r.error, 0) << std::strerror(r.error);
  EXPECT_EQ(r.data.rfind("HTTP/1.1 431 ", 0), 0U) << r.data;

  get.signal(SIGTERM);
  EXPECT_EQ(get.finish().rc, 130);
}

}  // namespace
}  // namespace sluice
