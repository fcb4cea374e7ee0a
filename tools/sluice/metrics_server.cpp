#include "metrics_server.h"

#include <httplib.h>

#include <charconv>
#include <iostream>
#include <memory>
#include <thread>

#include "cli.h"

namespace sluice::cli {

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

  std::unique_ptr<MetricsServer> m(new MetricsServer());
  m->server_ = std::make_unique<httplib::Server>();
  httplib::Server& svr = *m->server_;
  // One worker: scrapes are rare and small; the default pool starts 8 threads.
  svr.new_task_queue = [] { return new httplib::ThreadPool(1); };
  // httplib's default adds SO_REUSEPORT, which lets a second command bind
  // the same port and take half the scrapes: an address in use must fail.
  svr.set_socket_options([](socket_t sock) {
    const int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  svr.Get("/metrics", [&metrics](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  if (port == 0) {
    port = svr.bind_to_any_port(host);
    if (port < 0) return bad("cannot listen there (is it an address of this host?)");
  } else if (!svr.bind_to_port(host, port)) {
    return bad("cannot listen there (port in use, or not an address of this host)");
  }
  const bool v6 = host.find(':') != std::string::npos;
  m->url_ = "http://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port) + "/metrics";
  auto ended = std::make_shared<std::atomic<bool>>(false);
  m->thread_ = std::thread([&svr, ended] {
    svr.listen_after_bind();
    ended->store(true);
  });
  // stop() before the accept loop has started would be lost (and the join
  // in the destructor would hang): wait until it runs.
  while (!svr.is_running() && !ended->load()) std::this_thread::yield();
  return m;
}

MetricsServer::~MetricsServer() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
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
