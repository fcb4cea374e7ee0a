// TopicStats in the Prometheus text format: sluice_topic_*, and
// sluice_channel_* for the positions of the topic's channels.
#include "sluice/log/topic.h"
#include "sluice/metrics.h"

namespace sluice {

std::string to_prometheus(const TopicStats& s, std::string_view name) {
  PrometheusWriter w;
  const std::string n = prometheus_name_label(name);
  const auto one = [&](const char* metric, const char* type, const char* help, std::uint64_t v) {
    w.family(metric, type, help, n, static_cast<double>(v));
  };
  one("sluice_topic_appended_total", "counter", "Records appended since open.", s.appended);
  one("sluice_topic_syncs_total", "counter", "Segment fdatasyncs since open.", s.syncs);
  one("sluice_topic_segments_deleted_total", "counter", "Segments deleted by retention.",
      s.retention.segments_deleted);
  one("sluice_topic_segments_capped_total", "counter",
      "Segments a cap deleted before every channel passed them.", s.retention.segments_capped);
  one("sluice_topic_records_dropped_total", "counter",
      "Records a cap deleted before the slowest channel acknowledged them.",
      s.retention.records_dropped);
  one("sluice_topic_bound_waits_total", "counter",
      "Appends that waited for room under the topic bound (backpressure).", s.bound_waits);
  w.family("sluice_topic_bound_wait_seconds_total", "counter",
           "Time appends waited for room under the topic bound.", n, s.bound_wait_s);
  one("sluice_topic_first_seq", "gauge", "The oldest retained record.", s.first_seq);
  one("sluice_topic_next_seq", "gauge", "The seq the next append gets.", s.next_seq);
  one("sluice_topic_visible_seq", "gauge", "Channels see records below it.", s.visible_seq);
  one("sluice_topic_segments", "gauge", "Retained segment files.", s.segments);
  one("sluice_topic_disk_bytes", "gauge", "Bytes in retained segments.", s.disk_bytes);
  one("sluice_topic_closed", "gauge", "1 once the topic is closed (end of stream).",
      s.closed ? 1 : 0);
  w.header("sluice_channel_acked_seq", "gauge", "First seq a channel has not acknowledged.");
  for (const auto& c : s.channels) {
    w.sample("sluice_channel_acked_seq", n + ",channel=\"" + prometheus_escape(c.channel) + "\"",
             static_cast<double>(c.acked));
  }
  w.header("sluice_channel_lag", "gauge", "Records appended and not acknowledged by a channel.");
  for (const auto& c : s.channels) {
    w.sample("sluice_channel_lag", n + ",channel=\"" + prometheus_escape(c.channel) + "\"",
             static_cast<double>(s.next_seq > c.acked ? s.next_seq - c.acked : 0));
  }
  return w.text();
}

}  // namespace sluice
