// PressureStats in the Prometheus text format.
#include "sluice/metrics.h"
#include "sluice/redis/pressure_queue.h"

namespace sluice {

std::string to_prometheus(const PressureStats& s, std::string_view name) {
  PrometheusWriter w;
  const std::string n = prometheus_name_label(name);
  const auto one = [&](const char* metric, const char* type, const char* help, double v) {
    w.family(metric, type, help, n, v);
  };
  const auto d = [](std::uint64_t v) { return static_cast<double>(v); };
  one("sluice_redis_produced_messages_total", "counter", "Messages put (all clients).",
      d(s.produced_messages));
  one("sluice_redis_produced_bytes_total", "counter", "Bytes put (all clients).",
      d(s.produced_bytes));
  one("sluice_redis_consumed_messages_total", "counter", "Messages got (all clients).",
      d(s.consumed_messages));
  one("sluice_redis_consumed_bytes_total", "counter", "Bytes got (all clients).",
      d(s.consumed_bytes));
  one("sluice_redis_purged_messages_total", "counter", "Messages dropped by purge.", d(s.purged));
  one("sluice_redis_length", "gauge", "Messages in the queue now.", d(s.length));
  one("sluice_redis_bound", "gauge", "The queue's bound (0: unbounded).", d(s.bound));
  one("sluice_redis_in_flight", "gauge", "Messages taken by reliable gets, not acknowledged.",
      d(s.in_flight));
  one("sluice_redis_closed", "gauge", "1 once the queue is closed.", s.closed ? 1 : 0);
  one("sluice_redis_producer_free", "gauge", "1 while nobody holds the producer role.",
      s.producer_free ? 1 : 0);
  one("sluice_redis_consumer_free", "gauge", "1 while nobody holds the consumer role.",
      s.consumer_free ? 1 : 0);
  return w.text();
}

}  // namespace sluice
