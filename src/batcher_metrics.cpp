// BatcherStats in the Prometheus text format: batcher_*, the names the
// batcher's specification gives (M1), so no sluice_ prefix.
#include "sluice/batcher.h"
#include "sluice/metrics.h"

namespace sluice {

std::string to_prometheus(const BatcherStats& s, std::string_view name) {
  const std::string n = prometheus_name_label(name);
  PrometheusWriter w;
  auto counter = [&](const char* metric, const char* help, std::uint64_t v) {
    w.header(metric, "counter", help);
    w.sample(metric, n, static_cast<double>(v));
  };
  counter("batcher_enqueued_total", "Items accepted by Add.", s.enqueued);
  counter("batcher_flushed_ok_total", "Items in successful flushes.", s.flushed_ok);
  counter("batcher_flushed_fail_total", "Items in failed flushes.", s.flushed_fail);
  counter("batcher_dropped_on_shutdown_total", "Items lost on shutdown timeout.",
          s.dropped_on_shutdown);
  counter("batcher_try_add_refused_total", "TryAdd calls refused (input full or closed).",
          s.try_add_refused);
  counter("batcher_sink_exceptions_total", "Sink calls that threw.", s.sink_exceptions);
  counter("batcher_sink_retries_total", "Sink calls that retried a failed batch.", s.retries);
  w.header("batcher_flush_total", "counter", "Flushes by reason.");
  for (std::size_t r = 0; r < kFlushReasonCount; ++r) {
    w.sample("batcher_flush_total",
             n + ",reason=\"" + std::string(flush_reason_name(static_cast<FlushReason>(r))) + "\"",
             static_cast<double>(s.flushes_by_reason[r]));
  }
  w.header("batcher_queue_depth", "gauge", "Items in the bounded input.");
  w.sample("batcher_queue_depth", n, static_cast<double>(s.queued));
  w.header("batcher_in_flight", "gauge", "Items accepted and not yet flushed or dropped.");
  w.sample("batcher_in_flight", n, static_cast<double>(s.in_flight));
  w.header("batcher_batch_size_items", "histogram", "Batch sizes.");
  w.histogram("batcher_batch_size_items", n, s.batch_size);
  w.header("batcher_flush_duration_seconds", "histogram", "Flush durations.");
  w.histogram("batcher_flush_duration_seconds", n + ",result=\"ok\"", s.flush_seconds_ok);
  w.histogram("batcher_flush_duration_seconds", n + ",result=\"fail\"", s.flush_seconds_fail);
  return w.text();
}

}  // namespace sluice
