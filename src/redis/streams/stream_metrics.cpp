// StreamTopicStats in the Prometheus text format: sluice_stream_* for the
// topic, sluice_stream_channel_* (labelled channel="...") for its channels.
#include "sluice/metrics.h"
#include "sluice/redis/stream_topic.h"

namespace sluice {

std::string to_prometheus(const StreamTopicStats& s, std::string_view name) {
  PrometheusWriter w;
  const std::string n = prometheus_name_label(name);
  const auto one = [&](const char* metric, const char* type, const char* help, std::uint64_t v) {
    w.family(metric, type, help, n, static_cast<double>(v));
  };
  one("sluice_stream_appended_total", "counter", "Messages ever appended (all clients).",
      s.appended);
  if (s.appended_bytes) {  // a topic an older sluice appended to kept no count
    one("sluice_stream_appended_bytes_total", "counter", "Payload bytes of those messages.",
        *s.appended_bytes);
  }
  one("sluice_stream_trimmed_total", "counter",
      "Messages removed once every channel had acknowledged them.", s.trimmed);
  one("sluice_stream_records_dropped_total", "counter",
      "Messages the cap removed before some channel acknowledged them.", s.records_dropped);
  one("sluice_stream_retained", "gauge", "Messages in the stream now.", s.retained);
  one("sluice_stream_dead_letters", "gauge", "Entries in the dead-letter stream now.",
      s.dead_letters);
  one("sluice_stream_bound", "gauge", "The topic's bound (0: none).", s.bound);
  one("sluice_stream_closed", "gauge", "1 once the topic is closed.", s.closed ? 1 : 0);
  const auto per_channel = [&](const char* metric, const char* type, const char* help,
                               std::uint64_t StreamChannelStats::*field) {
    w.header(metric, type, help);
    for (const StreamChannelStats& c : s.channels) {
      w.sample(metric, n + ",channel=\"" + prometheus_escape(c.name) + "\"",
               static_cast<double>(c.*field));
    }
  };
  per_channel("sluice_stream_channel_unacknowledged", "gauge",
              "Messages appended and not acknowledged by the channel (nor dead-lettered, "
              "dropped).",
              &StreamChannelStats::unacknowledged);
  per_channel("sluice_stream_channel_pending", "gauge",
              "Of those, delivered to a consumer and held.", &StreamChannelStats::pending);
  per_channel("sluice_stream_channel_dead_lettered_total", "counter",
              "The channel's messages moved to the dead-letter stream.",
              &StreamChannelStats::dead_lettered);
  per_channel("sluice_stream_channel_skipped_retention_total", "counter",
              "Messages the cap removed before the channel acknowledged them.",
              &StreamChannelStats::skipped_retention);
  per_channel("sluice_stream_channel_purged_total", "counter",
              "Messages dropped unacknowledged by purge.", &StreamChannelStats::purged);
  return w.text();
}

}  // namespace sluice
