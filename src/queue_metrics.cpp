// QueueStats (Queue<T>, SpscQueue<T>) in the Prometheus text format: sluice_queue_*.
#include "sluice/metrics.h"
#include "sluice/queue_stats.h"

namespace sluice {

std::string to_prometheus(const QueueStats& s, std::string_view name) {
  PrometheusWriter w;
  const std::string n = prometheus_name_label(name);
  const auto add = [&](const char* metric, const char* type, const char* help, double v) {
    w.family(metric, type, help, n, v);
  };
  const auto d = [](std::uint64_t v) { return static_cast<double>(v); };
  add("sluice_queue_pushed_total", "counter", "Pushes accepted (memory or spill store).",
      d(s.pushed));
  add("sluice_queue_pulled_total", "counter", "Items handed to pullers.", d(s.pulled));
  add("sluice_queue_dropped_total", "counter", "Pushes refused by DropNewest.", d(s.dropped));
  add("sluice_queue_evicted_total", "counter", "Oldest items evicted by DropOldest or Sample.",
      d(s.evicted));
  add("sluice_queue_rejected_total", "counter", "Pushes refused by Reject or a full store.",
      d(s.rejected));
  add("sluice_queue_sampled_out_total", "counter", "Pushes refused by Sample.", d(s.sampled_out));
  add("sluice_queue_spilled_total", "counter", "Pushes that went to the spill store.",
      d(s.spilled));
  add("sluice_queue_capacity", "gauge", "In-memory capacity.", d(s.capacity));
  add("sluice_queue_depth", "gauge", "Items held now (memory and spill store).", d(s.depth));
  add("sluice_queue_high_watermark", "gauge", "Largest in-memory depth seen.", d(s.high_watermark));
  add("sluice_queue_spill_depth", "gauge", "Items in the spill store now.", d(s.spill_depth));
  add("sluice_queue_waiting_pushers", "gauge", "Threads waiting for room now.",
      d(s.waiting_pushers));
  add("sluice_queue_waiting_pullers", "gauge", "Threads waiting for an item now.",
      d(s.waiting_pullers));
  return w.text();
}

}  // namespace sluice
