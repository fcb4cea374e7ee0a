// PipelineStats (run_pipeline) in the Prometheus text format: sluice_pipeline_*.
#include "sluice/metrics.h"
#include "sluice/run_pipeline.h"

namespace sluice {

std::string to_prometheus(const PipelineStats& s, std::string_view name) {
  PrometheusWriter w;
  const std::string n = prometheus_name_label(name);
  const auto add = [&](const char* metric, const char* type, const char* help, double v) {
    w.family(metric, type, help, n, v);
  };
  add("sluice_pipeline_items_total", "counter", "Items taken from the source.",
      static_cast<double>(s.items));
  add("sluice_pipeline_sunk_total", "counter", "Results given to the sink.",
      static_cast<double>(s.sunk));
  add("sluice_pipeline_errors_total", "counter", "Error results (fn failed or threw).",
      static_cast<double>(s.errors));
  return w.text();
}

}  // namespace sluice
