// See json_out.h.
#include "json_out.h"

#include <time.h>

#include <cstdio>
#include <nlohmann/json.hpp>

namespace sluice::cli {
namespace {

using Json = nlohmann::ordered_json;  // keys in the order written

Json count_or_null(const std::optional<std::uint64_t>& n) { return n ? Json(*n) : Json(nullptr); }

}  // namespace

std::string rfc3339(std::chrono::system_clock::time_point t) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch());
  auto secs = std::chrono::floor<std::chrono::seconds>(us);
  const auto frac = (us - secs).count();
  const std::time_t tt = static_cast<std::time_t>(secs.count());
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[96];  // room for any int the compiler can imagine
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<long long>(frac));
  return buf;
}

bool valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    const unsigned c = *p;
    if (c < 0x80) {
      ++p;
      continue;
    }
    int n = 0;
    std::uint32_t cp = 0;
    if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (end - p <= n) return false;
    for (int i = 1; i <= n; ++i) {
      if ((p[i] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i] & 0x3F);
    }
    static constexpr std::uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    p += n + 1;
  }
  return true;
}

std::string base64(std::string_view s) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((s.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= s.size(); i += 3) {
    const std::uint32_t v = static_cast<unsigned char>(s[i]) << 16 |
                            static_cast<unsigned char>(s[i + 1]) << 8 |
                            static_cast<unsigned char>(s[i + 2]);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (const std::size_t left = s.size() - i; left != 0) {
    std::uint32_t v = static_cast<unsigned char>(s[i]) << 16;
    if (left == 2) v |= static_cast<unsigned char>(s[i + 1]) << 8;
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += left == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

namespace {

void append_json(std::string_view data, const std::optional<std::uint64_t>& seq,
                 std::string_view id,
                 const std::optional<std::chrono::system_clock::time_point>& time,
                 const std::optional<std::uint32_t>& deliveries, std::string_view channel,
                 std::string& out) {
  Json j;
  j["seq"] = seq ? Json(*seq) : Json(nullptr);
  j["id"] = id.empty() ? Json(nullptr) : Json(std::string(id));
  j["time"] = time ? Json(rfc3339(*time)) : Json(nullptr);
  j["deliveries"] = deliveries ? Json(*deliveries) : Json(nullptr);
  j["channel"] = channel;
  if (valid_utf8(data)) {
    j["data"] = data;
  } else {
    j["data"] = base64(data);
    j["encoding"] = "base64";
  }
  out += j.dump();
  out += '\n';
}

}  // namespace

void append_message_json(const StoreMessage& m, std::string_view channel, std::string& out) {
  append_json(m.data, m.seq, m.id, m.time, m.deliveries, channel, out);
}

void append_message_json(const MessageBatch& b, std::size_t i, std::string_view channel,
                         std::string& out) {
  const MessageBatch::Entry& e = b.entry(i);
  append_json(b.data(i), e.seq, b.id(i), e.time, e.deliveries, channel, out);
}

std::string stat_json(const QueueInfo& info) {
  Json j;
  j["name"] = info.name;
  j["bound"] = info.bound;
  j["closed"] = info.closed;
  j["length"] = info.length;
  j["waiting"] = count_or_null(info.waiting);
  j["in_flight"] = count_or_null(info.in_flight);
  j["produced"] = info.produced;
  j["consumed"] = info.consumed;
  j["produced_bytes"] = count_or_null(info.produced_bytes);
  j["consumed_bytes"] = count_or_null(info.consumed_bytes);
  j["channels"] = info.channels;
  j["kind"] = info.kind;
  // Seconds, as the option takes them: a whole number, or with the ms.
  const auto ms = info.max_age.count();
  j["max_age"] = ms % 1000 == 0 ? Json(ms / 1000) : Json(static_cast<double>(ms) / 1000.0);
  j["replicas"] = info.replicas;
  Json chans = Json::array();
  for (const ChannelInfo& c : info.channel_info) {
    Json o;
    o["name"] = c.name;
    o["lag"] = c.lag;
    o["pending"] = c.pending;
    o["dead_lettered"] = c.dead_lettered;
    o["purged"] = c.purged;
    chans.push_back(std::move(o));
  }
  j["channel_info"] = std::move(chans);
  // Channel names come from file names, which may hold any bytes (one made
  // by hand): replaced with U+FFFD rather than an exception that aborts.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace sluice::cli
