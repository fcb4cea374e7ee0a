#include "metrics_server.h"

#include <httplib.h>

#include <charconv>
#include <iostream>
#include <memory>
#include <thread>

#include "cli.h"
#include "sluice/metrics.h"

namespace sluice::cli {

std::string CommandMetrics::render() const {
  const std::string labels =
      "command=\"" + prometheus_escape(command) + "\",queue=\"" + prometheus_escape(queue) + "\"";
  PrometheusWriter w;
  const auto one = [&](std::string_view metric, std::string_view type, std::string_view help,
                       double v) {
    w.header(metric, type, help);
    w.sample(metric, labels, v);
  };
  const auto load = [](const std::atomic<std::uint64_t>& a) {
    return static_cast<double>(a.load(std::memory_order_relaxed));
  };
  one("sluice_cli_messages_total", "counter",
      command == "put" ? "Messages enqueued by this command."
                       : "Messages acknowledged by this command.",
      load(messages));
  one("sluice_cli_bytes_total", "counter", "Payload bytes of those messages.", load(bytes));
  if (blocked) {
    one("sluice_cli_blocked_seconds_total", "counter",
        "Seconds puts waited because the queue was at its bound.", blocked());
  }
  if (exec) {
    w.header("sluice_cli_exec_runs_total", "counter", "--exec command runs, by outcome.");
    w.sample("sluice_cli_exec_runs_total", labels + ",outcome=\"ok\"", load(runs_ok));
    w.sample("sluice_cli_exec_runs_total", labels + ",outcome=\"failed\"", load(runs_failed));
    one("sluice_cli_dead_lettered_total", "counter",
        "Messages moved to the dead-letter queue after their last failed run.",
        load(dead_lettered));
  }
  if (stat) {
    // A failed sample (say Redis is down) leaves the queue's lines out
    // rather than failing the scrape: the command's own counters still help.
    if (auto info = stat(); info.ok()) {
      one("sluice_queue_length", "gauge",
          "Messages put and not yet acknowledged by the slowest channel.",
          static_cast<double>(info->length));
      one("sluice_queue_bound", "gauge", "The queue's bound (0: unbounded).",
          static_cast<double>(info->bound));
      one("sluice_queue_produced_total", "counter", "Messages ever put into the queue.",
          static_cast<double>(info->produced));
      one("sluice_queue_consumed_total", "counter", "Messages acknowledged by the slowest channel.",
          static_cast<double>(info->consumed));
      one("sluice_queue_closed", "gauge", "1 once the queue is closed.", info->closed ? 1 : 0);
    }
  }
  return w.text();
}

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
