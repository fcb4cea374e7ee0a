#include "metrics_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include "cli.h"

namespace sluice::cli {
namespace {

constexpr std::size_t kMaxHead = 8192;              // a request line and headers
constexpr std::size_t kMaxConnections = 16;         // at once; more wait in the backlog
constexpr std::chrono::seconds kConnectionLife{5};  // from accept to the last byte sent
// After the answer: how long the client may take to close, and how much of
// what it still sends (a body) is read and dropped. Closing with bytes
// unread would send a reset that may reach the client before the answer.
constexpr std::chrono::seconds kLinger{1};
constexpr std::size_t kMaxDrained = 1 << 20;
// accept4 out of descriptors (EMFILE, ENFILE) or memory leaves the connection
// in the backlog, so the listening socket stays readable: stop polling it
// this long rather than spin, then try again.
constexpr std::chrono::milliseconds kAcceptBackoff{100};
// How long a /metrics request waits for its stat of the queue (a stat on a
// Redis that does not answer takes its 5 s timeout): then it is answered
// with the queue as last known.
constexpr std::chrono::milliseconds kStatWait{500};

std::string response(std::string_view status, std::string_view type, const std::string& body,
                     bool head) {
  std::string r = "HTTP/1.1 " + std::string(status) + "\r\nContent-Type: " + std::string(type) +
                  "\r\nContent-Length: " + std::to_string(body.size()) +
                  "\r\nConnection: close\r\n\r\n";
  if (!head) r += body;
  return r;
}

}  // namespace

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(std::string_view addr,
                                                            const CommandMetrics& metrics) {
  const auto bad = [&](std::string_view why) {
    return Status(StatusCode::kInvalidArgument,
                  "--metrics '" + std::string(addr) + "': " + std::string(why));
  };
  const auto colon = addr.rfind(':');
  if (colon == std::string_view::npos) return bad("expected HOST:PORT, e.g. 127.0.0.1:9464");
  std::string host(addr.substr(0, colon));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) host = "127.0.0.1";
  const std::string_view port_text = addr.substr(colon + 1);
  int port = -1;
  const auto [end, ec] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port < 0 || port > 65535) {
    return bad("the port is not a number in 0..65535 (0: any free port)");
  }

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) {
    return bad("cannot listen there (is it an address of this host?)");
  }
  std::unique_ptr<MetricsServer> m(new MetricsServer());
  for (addrinfo* ai = found; ai != nullptr && m->listen_fd_ < 0; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    // SO_REUSEADDR (a restart may bind while old connections linger), not
    // SO_REUSEPORT: an address in use must fail.
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 16) == 0) {
      m->listen_fd_ = fd;
    } else {
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  if (m->listen_fd_ < 0) {
    return bad("cannot listen there (port in use, or not an address of this host)");
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  if (::getsockname(m->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len) == 0) {
    port = bound.ss_family == AF_INET6
               ? ntohs(reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port)
               : ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
  }
  m->wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  m->stat_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (m->wake_fd_ < 0 || m->stat_fd_ < 0) {
    return Status(StatusCode::kIOError, std::string("--metrics: eventfd: ") + std::strerror(errno));
  }
  const bool v6 = host.find(':') != std::string::npos;
  m->url_ = "http://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port) + "/metrics";
  MetricsServer* self = m.get();
  if (metrics.stat) {
    m->sampler_ = std::make_unique<StatSampler>(metrics.stat, [self] {
      const std::uint64_t one = 1;
      if (::write(self->stat_fd_, &one, sizeof one) < 0) {
        // An eventfd counter write does not fail.
      }
    });
  }
  m->thread_ = std::thread([self, &metrics] { self->serve(metrics); });
  return m;
}

void MetricsServer::serve(const CommandMetrics& metrics) {
  using Clock = std::chrono::steady_clock;
  struct Conn {
    int fd;
    Clock::time_point deadline;
    std::string in;
    std::string out;  // the response, once the head is in
    std::size_t sent = 0;
    bool lingering = false;  // answered, its side shut down: reading until the client's end
    std::size_t drained = 0;
    std::uint64_t stat_wanted = 0;  // a /metrics request waiting for stats_done_ to reach it
    Clock::time_point stat_until;   // ... until then at most
    bool head = false;
  };
  std::vector<Conn> conns;
  auto accept_paused_until = Clock::time_point::min();
  const auto answer = [&](Conn& c) {
    const auto line_end = c.in.find("\r\n");
    const std::string_view line = std::string_view(c.in).substr(0, line_end);
    const auto sp1 = line.find(' ');
    const auto sp2 = line.find(' ', sp1 == line.npos ? line.size() : sp1 + 1);
    const std::string_view method = line.substr(0, sp1);
    const std::string_view target =
        sp1 == line.npos || sp2 == line.npos ? "" : line.substr(sp1 + 1, sp2 - sp1 - 1);
    const std::string_view path = target.substr(0, target.find('?'));
    const bool head = method == "HEAD";
    if (sp2 == line.npos || (method != "GET" && !head)) {
      c.out = response("400 Bad Request", "text/plain", "bad request\n", false);
    } else if (path != "/metrics") {
      c.out = response("404 Not Found", "text/plain", "not found: try /metrics\n", head);
    } else if (sampler_) {
      // Answered once the stat thread has sampled the queue for it.
      c.stat_wanted = sampler_->request();
      c.stat_until = Clock::now() + kStatWait;
      c.head = head;
    } else {
      c.out = response("200 OK", "text/plain; version=0.0.4; charset=utf-8",
                       metrics.render(StatSample{}), head);
    }
  };
  // Answers the requests whose stat is in, or late.
  const auto answer_stats = [&](Clock::time_point now) {
    if (std::none_of(conns.begin(), conns.end(), [](const Conn& c) { return c.stat_wanted != 0; }))
      return;
    const std::uint64_t done = sampler_->answered();
    const StatSample sample = sampler_->sample(done, now);
    std::string fresh, late;  // each rendered once
    for (Conn& c : conns) {
      if (c.stat_wanted == 0 || (c.stat_wanted > done && now < c.stat_until)) continue;
      std::string& body = c.stat_wanted <= done ? fresh : late;
      if (body.empty()) {
        StatSample s = sample;
        s.ok = sample.ok && c.stat_wanted <= done;
        body = metrics.render(s);
      }
      c.out = response("200 OK", "text/plain; version=0.0.4; charset=utf-8", body, c.head);
      c.stat_wanted = 0;
    }
  };
  for (;;) {
    std::vector<pollfd> fds;
    fds.push_back({wake_fd_, POLLIN, 0});
    const bool paused = Clock::now() < accept_paused_until;
    fds.push_back({conns.size() < kMaxConnections && !paused ? listen_fd_ : -1, POLLIN, 0});
    fds.push_back({stat_fd_, POLLIN, 0});
    auto next = paused ? accept_paused_until : Clock::time_point::max();
    for (const Conn& c : conns) {
      // Waiting for its stat: no I/O (errors are still reported).
      const short ev = c.stat_wanted != 0 ? 0 : c.out.empty() || c.lingering ? POLLIN : POLLOUT;
      fds.push_back({c.fd, ev, 0});
      next = std::min(next, c.stat_wanted != 0 ? std::min(c.deadline, c.stat_until) : c.deadline);
    }
    int ms = -1;
    if (next != Clock::time_point::max()) {
      ms = static_cast<int>(std::clamp<std::int64_t>(
          std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now()).count(), 0, 60000));
    }
    if (::poll(fds.data(), fds.size(), ms) < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) break;  // the destructor
    if (fds[2].revents != 0) {
      std::uint64_t n = 0;
      if (::read(stat_fd_, &n, sizeof n) < 0) {
        // EAGAIN: already read; the sampler holds the state either way.
      }
    }
    const auto now = Clock::now();
    answer_stats(now);
    std::vector<bool> done(conns.size(), false);
    for (std::size_t i = 0; i < conns.size(); ++i) {
      Conn& c = conns[i];
      const short ev = fds[i + 3].revents;
      if (now >= c.deadline || (ev & (POLLERR | POLLNVAL)) != 0) {
        done[i] = true;
        continue;
      }
      if (c.stat_wanted != 0) {
        continue;  // answered by answer_stats
      } else if (c.lingering && (ev & (POLLIN | POLLHUP)) != 0) {
        char buf[4096];
        const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
        if (n > 0) c.drained += static_cast<std::size_t>(n);
        done[i] = n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR) || c.drained > kMaxDrained;
      } else if (c.out.empty() && (ev & (POLLIN | POLLHUP)) != 0) {
        char buf[4096];
        const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
        if (n <= 0) {
          done[i] = n == 0 || (errno != EAGAIN && errno != EINTR);
          continue;
        }
        c.in.append(buf, static_cast<std::size_t>(n));
        if (c.in.find("\r\n\r\n") != std::string::npos) {
          answer(c);
          if (c.stat_wanted != 0) continue;
        } else if (c.in.size() > kMaxHead) {
          c.out =
              response("431 Request Header Fields Too Large", "text/plain", "too large\n", false);
        }
      } else if (!c.out.empty() && (ev & POLLOUT) != 0) {
        const ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
        if (n < 0 && errno != EAGAIN && errno != EINTR) {
          done[i] = true;
        } else if (n > 0) {
          c.sent += static_cast<std::size_t>(n);
          if (c.sent == c.out.size()) {
            // The end of the answer; the connection closes once the client
            // has closed its side too (or at the linger's end).
            ::shutdown(c.fd, SHUT_WR);
            c.lingering = true;
            c.deadline = std::min(c.deadline, now + kLinger);
          }
        }
      }
    }
    for (std::size_t i = conns.size(); i-- > 0;) {
      if (done[i]) {
        ::close(conns[i].fd);
        conns.erase(conns.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
    if ((fds[1].revents & POLLIN) != 0) {
      while (conns.size() < kMaxConnections) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
          if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            accept_paused_until = Clock::now() + kAcceptBackoff;
          }
          break;
        }
        conns.push_back({fd, Clock::now() + kConnectionLife, {}, {}, 0, false, 0, 0, {}, false});
      }
    }
  }
  for (const Conn& c : conns) ::close(c.fd);
}

MetricsServer::~MetricsServer() {
  if (wake_fd_ >= 0) {
    const std::uint64_t one = 1;
    if (::write(wake_fd_, &one, sizeof one) < 0) {
      // An eventfd counter write does not fail.
    }
  }
  if (thread_.joinable()) thread_.join();
  // Not after a stat in progress: it ends alone, and no longer says so on
  // stat_fd_ once this returns.
  sampler_.reset();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  if (stat_fd_ >= 0) ::close(stat_fd_);
}

std::unique_ptr<MetricsServer> serve_metrics(std::string_view addr, std::string_view cmd,
                                             const CommandMetrics& metrics, int* rc) {
  if (addr.empty()) return nullptr;
  auto server = MetricsServer::start(addr, metrics);
  if (!server.ok()) {
    *rc = fail(cmd, "metrics", server.status());
    return nullptr;
  }
  std::cerr << ("sluice " + std::string(cmd) + ": metrics on " + (*server)->url() + "\n");
  return std::move(*server);
}

}  // namespace sluice::cli
