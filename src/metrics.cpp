#include "sluice/metrics.h"

#include <cmath>
#include <cstdio>

#include "sluice/queue_stats.h"
#include "sluice/run_pipeline.h"
#include "sluice/stage.h"

namespace sluice {
namespace {

std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

void PrometheusWriter::header(std::string_view metric, std::string_view type,
                              std::string_view help) {
  out_ += "# HELP ";
  out_ += metric;
  out_ += ' ';
  out_ += help;
  out_ += "\n# TYPE ";
  out_ += metric;
  out_ += ' ';
  out_ += type;
  out_ += '\n';
}

void PrometheusWriter::sample(std::string_view metric, std::string_view labels, double value) {
  out_ += metric;
  if (!labels.empty()) {
    out_ += '{';
    out_ += labels;
    out_ += '}';
  }
  out_ += ' ';
  out_ += number(value);
  out_ += '\n';
}

void PrometheusWriter::histogram(std::string_view metric, std::string_view labels,
                                 const Histogram& h) {
  const std::string sep = labels.empty() ? "" : ",";
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i <= h.bounds().size(); ++i) {
    cumulative += h.counts()[i];
    const std::string le = i < h.bounds().size() ? number(h.bounds()[i]) : "+Inf";
    sample(std::string(metric) + "_bucket", std::string(labels) + sep + "le=\"" + le + "\"",
           static_cast<double>(cumulative));
  }
  sample(std::string(metric) + "_sum", labels, h.sum());
  sample(std::string(metric) + "_count", labels, static_cast<double>(h.count()));
}

std::string prometheus_escape(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

namespace {

// One family with one sample, labelled by the component's name.
struct Family {
  PrometheusWriter& w;
  std::string labels;
  void add(const char* metric, const char* type, const char* help, double v) {
    w.header(metric, type, help);
    w.sample(metric, labels, v);
  }
};

}  // namespace

std::string to_prometheus(const QueueStats& s, std::string_view name) {
  PrometheusWriter w;
  Family f{w, "name=\"" + prometheus_escape(name) + "\""};
  const auto d = [](std::uint64_t v) { return static_cast<double>(v); };
  f.add("sluice_queue_pushed_total", "counter", "Pushes accepted (memory or spill store).",
        d(s.pushed));
  f.add("sluice_queue_pulled_total", "counter", "Items handed to pullers.", d(s.pulled));
  f.add("sluice_queue_dropped_total", "counter", "Pushes refused by DropNewest.", d(s.dropped));
  f.add("sluice_queue_evicted_total", "counter", "Oldest items evicted by DropOldest or Sample.",
        d(s.evicted));
  f.add("sluice_queue_rejected_total", "counter", "Pushes refused by Reject or a full store.",
        d(s.rejected));
  f.add("sluice_queue_sampled_out_total", "counter", "Pushes refused by Sample.", d(s.sampled_out));
  f.add("sluice_queue_spilled_total", "counter", "Pushes that went to the spill store.",
        d(s.spilled));
  f.add("sluice_queue_capacity", "gauge", "In-memory capacity.", d(s.capacity));
  f.add("sluice_queue_depth", "gauge", "Items held now (memory and spill store).", d(s.depth));
  f.add("sluice_queue_high_watermark", "gauge", "Largest in-memory depth seen.",
        d(s.high_watermark));
  f.add("sluice_queue_spill_depth", "gauge", "Items in the spill store now.", d(s.spill_depth));
  f.add("sluice_queue_waiting_pushers", "gauge", "Threads waiting for room now.",
        d(s.waiting_pushers));
  f.add("sluice_queue_waiting_pullers", "gauge", "Threads waiting for an item now.",
        d(s.waiting_pullers));
  return w.text();
}

std::string to_prometheus(const StageStats& s, std::string_view name) {
  PrometheusWriter w;
  Family f{w, "name=\"" + prometheus_escape(name) + "\""};
  const auto d = [](std::uint64_t v) { return static_cast<double>(v); };
  f.add("sluice_stage_items_in_total", "counter", "Items taken from the input.", d(s.items_in));
  f.add("sluice_stage_items_out_total", "counter", "Results written to the output.",
        d(s.items_out));
  f.add("sluice_stage_errors_total", "counter", "Error results, thrown ones included.",
        d(s.errors));
  f.add("sluice_stage_errors_after_stop_total", "counter",
        "Results after a fail-fast or first-success stop.", d(s.errors_after_stop));
  f.add("sluice_stage_blocked_on_input_seconds_total", "counter",
        "Time workers waited for input, summed.", s.blocked_on_input_s);
  f.add("sluice_stage_blocked_on_output_seconds_total", "counter",
        "Time workers waited for room in the output, summed.", s.blocked_on_output_s);
  f.add("sluice_stage_width", "gauge", "Workers.", d(s.width));
  f.add("sluice_stage_busy_workers", "gauge", "Workers inside fn now.", d(s.busy_workers));
  f.add("sluice_stage_input_depth", "gauge", "Items waiting in the input.", d(s.input_depth));
  f.add("sluice_stage_output_depth", "gauge", "Results waiting in the output.", d(s.output_depth));
  return w.text();
}

std::string to_prometheus(const PipelineStats& s, std::string_view name) {
  PrometheusWriter w;
  Family f{w, "name=\"" + prometheus_escape(name) + "\""};
  f.add("sluice_pipeline_items_total", "counter", "Items taken from the source.",
        static_cast<double>(s.items));
  f.add("sluice_pipeline_sunk_total", "counter", "Results given to the sink.",
        static_cast<double>(s.sunk));
  f.add("sluice_pipeline_errors_total", "counter", "Error results (fn failed or threw).",
        static_cast<double>(s.errors));
  return w.text();
}

}  // namespace sluice
