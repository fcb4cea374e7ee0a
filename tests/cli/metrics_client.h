// A test's client of `sluice ... --metrics 127.0.0.1:0`: the port the
// command says it serves on, and a plain HTTP/1.0 scrape over loopback.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace sluice::testutil {

// The port in "metrics on http://127.0.0.1:PORT/metrics" (0: not found).
inline int port_in(const std::string& err) {
  const std::string key = "metrics on http://127.0.0.1:";
  const auto at = err.find(key);
  return at == std::string::npos ? 0 : std::atoi(err.c_str() + at + key.size());
}

// A connected socket to 127.0.0.1:port, or -1 (errno says why).
inline int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<std::uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;  // connect's, for the caller
    return -1;
  }
  return fd;
}

// GET /metrics over HTTP/1.0; the body of a 200, or "" on any failure.
inline std::string scrape(int port) {
  const int fd = connect_to(port);
  if (fd < 0) return "";
  std::string reply;
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (::write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) reply.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  if (reply.rfind("HTTP/1.", 0) != 0 || reply.find(" 200 ") == std::string::npos) return "";
  const auto body = reply.find("\r\n\r\n");
  return body == std::string::npos ? "" : reply.substr(body + 4);
}

}  // namespace sluice::testutil
