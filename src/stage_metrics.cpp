// StageStats (Stage<In, Out>) in the Prometheus text format: sluice_stage_*.
#include "sluice/metrics.h"
#include "sluice/stage.h"

namespace sluice {

std::string to_prometheus(const StageStats& s, std::string_view name) {
  PrometheusWriter w;
  const std::string n = prometheus_name_label(name);
  const auto add = [&](const char* metric, const char* type, const char* help, double v) {
    w.family(metric, type, help, n, v);
  };
  const auto d = [](std::uint64_t v) { return static_cast<double>(v); };
  add("sluice_stage_items_in_total", "counter", "Items taken from the input.", d(s.items_in));
  add("sluice_stage_items_out_total", "counter", "Results written to the output.", d(s.items_out));
  add("sluice_stage_errors_total", "counter", "Error results, thrown ones included.", d(s.errors));
  add("sluice_stage_errors_after_stop_total", "counter",
      "Results after a fail-fast or first-success stop.", d(s.errors_after_stop));
  add("sluice_stage_blocked_on_input_seconds_total", "counter",
      "Time workers waited for input, summed.", s.blocked_on_input_s);
  add("sluice_stage_blocked_on_output_seconds_total", "counter",
      "Time workers waited for room in the output, summed.", s.blocked_on_output_s);
  add("sluice_stage_width", "gauge", "Workers.", d(s.width));
  add("sluice_stage_busy_workers", "gauge", "Workers inside fn now.", d(s.busy_workers));
  add("sluice_stage_input_depth", "gauge", "Items waiting in the input.", d(s.input_depth));
  add("sluice_stage_output_depth", "gauge", "Results waiting in the output.", d(s.output_depth));
  return w.text();
}

}  // namespace sluice
