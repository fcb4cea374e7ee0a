// CommandMetrics (a running put or get) in the Prometheus text format:
// sluice_cli_* for the command, sluice_store_* for its queue as the store
// sees it (sluice_queue_* is the in-memory Queue's). Served by
// metrics_server.cpp.
#include "metrics_server.h"
#include "sluice/metrics.h"

namespace sluice::cli {

std::string CommandMetrics::render() const {
  StatSample sample;
  if (stat) {
    if (auto info = stat(); info.ok()) {
      sample.info = std::move(*info);
      sample.ok = true;
    }
  }
  return render(sample);
}

std::string CommandMetrics::render(const StatSample& sample) const {
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
    // A stat that failed or is late (say Redis is down) does not fail the
    // scrape: the queue's lines are the last known, if any, and say how old.
    one("sluice_store_stat_ok", "gauge",
        "1 if this scrape's stat of the queue succeeded in time; 0: the sluice_store_* values "
        "are the last known, if any.",
        sample.ok ? 1 : 0);
    if (const auto& info = sample.info) {
      one("sluice_store_stat_age_seconds", "gauge",
          "Seconds since the stat of the sluice_store_* values began.", sample.age_seconds);
      one("sluice_store_length", "gauge",
          "Messages put and not yet acknowledged by the slowest channel.",
          static_cast<double>(info->length));
      one("sluice_store_bound", "gauge", "The queue's bound (0: unbounded).",
          static_cast<double>(info->bound));
      one("sluice_store_produced_total", "counter", "Messages ever put into the queue.",
          static_cast<double>(info->produced));
      one("sluice_store_consumed_total", "counter", "Messages acknowledged by the slowest channel.",
          static_cast<double>(info->consumed));
      one("sluice_store_closed", "gauge", "1 once the queue is closed.", info->closed ? 1 : 0);
    }
  }
  return w.text();
}

}  // namespace sluice::cli
