// Shared by topic_crash_test and its child: topic options per mode, and
// self-checking payloads: an identity tag (writer process, thread, counter),
// then bytes derived from it, so any changed byte shows.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <string_view>

#include "sluice/log/topic.h"

namespace sluice::testutil {

inline TopicOptions crash_topic_options(std::string_view mode) {
  TopicOptions o;
  o.segment_bytes = 64 * 1024;  // small: many rolls
  o.max_message_bytes = 4096;
  o.sync_interval = std::chrono::milliseconds(2);
  o.durability = mode == "none"       ? Durability::kNone
                 : mode == "interval" ? Durability::kInterval
                 : mode == "append"   ? Durability::kPerAppend
                                      : Durability::kGroupCommit;
  return o;
}

inline char pattern(std::uint64_t tag, std::size_t i) {
  return static_cast<char>((tag >> (8 * (i % 8))) ^ (i * 131));
}

// The identity of a record: who wrote it, and its place in that writer's
// sequence of appends.
inline std::uint64_t make_tag(std::uint32_t process, std::uint32_t thread, std::uint32_t n) {
  return (std::uint64_t{process & 0xFFFFFF} << 40) | (std::uint64_t{thread & 0xFF} << 32) | n;
}
inline std::uint64_t tag_writer(std::uint64_t tag) { return tag >> 32; }
inline std::uint32_t tag_counter(std::uint64_t tag) { return static_cast<std::uint32_t>(tag); }

inline std::string make_payload(std::string_view sizes, std::uint64_t tag) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::size_t n = sizes == "100" ? 100 : sizes == "1k" ? 1024 : 16 + rng() % 3000;
  std::string p(n, '\0');
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(tag >> (8 * i));
  for (std::size_t i = 8; i < n; ++i) p[i] = pattern(tag, i);
  return p;
}

inline std::uint64_t payload_tag(std::string_view p) {
  std::uint64_t tag = 0;
  for (int i = 7; i >= 0; --i) tag = (tag << 8) | static_cast<unsigned char>(p[i]);
  return tag;
}

// True if p is exactly what make_payload produced (any length >= 16).
inline bool payload_ok(std::string_view p) {
  if (p.size() < 16) return false;
  std::uint64_t tag = 0;
  for (int i = 7; i >= 0; --i) tag = (tag << 8) | static_cast<unsigned char>(p[i]);
  for (std::size_t i = 8; i < p.size(); ++i) {
    if (p[i] != pattern(tag, i)) return false;
  }
  return true;
}

}  // namespace sluice::testutil
