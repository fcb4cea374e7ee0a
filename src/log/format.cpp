#include "log/format.h"

#include <isa-l/crc.h>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdio>

namespace sluice::log {

namespace {

#if defined(__x86_64__)
// Short inputs (a record's header fields, a small payload) through the
// SSE4.2 crc32 instruction inline: a call into ISA-L costs about as much for
// 4 bytes as for 100, and a record's CRC was four such calls, a quarter of
// a small append. Same polynomial (CRC-32C, reflected) and the same raw
// register as ISA-L.
__attribute__((target("sse4.2"))) std::uint32_t crc_short(std::uint32_t reg, const unsigned char* p,
                                                          std::size_t n) {
  std::uint64_t r = reg;
  for (; n >= 8; p += 8, n -= 8) {
    std::uint64_t v = 0;
    std::memcpy(&v, p, 8);
    r = _mm_crc32_u64(r, v);
  }
  auto r32 = static_cast<std::uint32_t>(r);
  if (n >= 4) {
    std::uint32_t v = 0;
    std::memcpy(&v, p, 4);
    r32 = _mm_crc32_u32(r32, v);
    p += 4;
    n -= 4;
  }
  for (; n > 0; ++p, --n) r32 = _mm_crc32_u8(r32, *p);
  return r32;
}
__attribute__((target("sse4.2"))) std::uint32_t crc_u32_u64(std::uint32_t reg, std::uint32_t a,
                                                            std::uint64_t b) {
  reg = _mm_crc32_u32(reg, a);  // x86 is little-endian: the bytes put32/put64 store
  return static_cast<std::uint32_t>(_mm_crc32_u64(reg, b));
}
__attribute__((target("sse4.2"))) std::uint32_t crc_u64(std::uint32_t reg, std::uint64_t v) {
  return static_cast<std::uint32_t>(_mm_crc32_u64(reg, v));
}
const bool g_have_sse42 = __builtin_cpu_supports("sse4.2");
constexpr std::size_t kShortCrc = 256;  // longer: ISA-L's folding is faster
#endif

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t n, std::uint32_t crc) {
  // ISA-L's crc32_iscsi works on the raw register: seed with ~crc, invert out.
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));  // not written
  std::uint32_t reg = ~crc;
#if defined(__x86_64__)
  if (n <= kShortCrc && g_have_sse42) return ~crc_short(reg, p, n);
#endif
  while (n > 0) {  // its length is an int
    const int chunk = static_cast<int>(std::min<std::size_t>(n, 1U << 30));
    reg = crc32_iscsi(p, chunk, reg);
    p += chunk;
    n -= static_cast<std::size_t>(chunk);
  }
  return ~reg;
}

std::string segment_name(std::uint64_t base_seq) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%020llu", static_cast<unsigned long long>(base_seq));
  return std::string(buf) + std::string(kSegmentSuffix);
}

std::optional<std::uint64_t> parse_segment_name(std::string_view name) {
  if (name.size() != 20 + kSegmentSuffix.size() || !name.ends_with(kSegmentSuffix)) {
    return std::nullopt;
  }
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(name.data(), name.data() + 20, v);
  if (ec != std::errc() || p != name.data() + 20) return std::nullopt;
  return v;
}

void encode_segment_header(char* out, std::uint64_t base_seq, std::uint32_t flags,
                           std::uint32_t version) {
  std::memcpy(out, kSegmentMagic.data(), 8);
  put32(out + 8, version);
  put32(out + 12, kSegmentHeaderSize);
  put64(out + 16, base_seq);
  put32(out + 24, flags);
  put32(out + 28, crc32c(out, 28));
}

std::optional<std::uint64_t> decode_segment_header(const char* in) {
  if (std::memcmp(in, kSegmentMagic.data(), 8) != 0) return std::nullopt;
  if (get32(in + 28) != crc32c(in, 28)) return std::nullopt;
  const std::uint32_t version = get32(in + 8);
  if ((version != kFormatVersion && version != kUntimedFormatVersion) ||
      get32(in + 12) != kSegmentHeaderSize) {
    return std::nullopt;
  }
  return get64(in + 16);
}

std::uint32_t segment_header_flags(const char* in) {
  return decode_segment_header(in) ? get32(in + 24) : 0;
}

std::uint32_t segment_header_version(const char* in) {
  return decode_segment_header(in) ? get32(in + 8) : 0;
}

namespace {

// The CRC of a record: its length field, its seq, its time (format 2) and
// its payload, in that order (the bytes 0-3, then 8 .. 16+length).
std::uint32_t record_crc(std::uint32_t len, std::uint64_t seq, const TimeUs* time,
                         std::string_view payload) {
#if defined(__x86_64__)
  if (g_have_sse42) {
    std::uint32_t reg = crc_u32_u64(~0U, len, seq);
    if (time != nullptr) reg = crc_u64(reg, static_cast<std::uint64_t>(*time));
    const auto* p = reinterpret_cast<const unsigned char*>(payload.data());
    if (payload.size() <= kShortCrc) return ~crc_short(reg, p, payload.size());
    return crc32c(payload.data(), payload.size(), ~reg);
  }
#endif
  char fields[20];
  put32(fields, len);
  put64(fields + 4, seq);
  std::size_t n = 12;
  if (time != nullptr) {
    put64(fields + 12, static_cast<std::uint64_t>(*time));
    n = 20;
  }
  return crc32c(payload.data(), payload.size(), crc32c(fields, n));
}

}  // namespace

namespace {

// Stores a record whose CRC is known: seq, time and payload first, length
// and CRC last (encode_record says why).
void store_record(char* out, std::uint64_t seq, std::optional<TimeUs> time,
                  std::string_view payload, std::uint32_t len, std::uint32_t crc) {
  const std::size_t h = record_header_size(time.has_value());
  std::memcpy(out + h, payload.data(), payload.size());
  put64(out + 8, seq);
  if (time) put64(out + kUntimedRecordHeaderSize, static_cast<std::uint64_t>(*time));
  char head[8];
  put32(head, len);
  put32(head + 4, crc);
  std::atomic_signal_fence(std::memory_order_release);  // the compiler keeps the order
  std::memcpy(out, head, 8);                            // length and CRC last
}

std::uint32_t record_length(std::optional<TimeUs> time, std::string_view payload) {
  return static_cast<std::uint32_t>(payload.size() + (time ? kTimeSize : 0));
}

#if defined(__x86_64__)
// The CRCs of three records at once: crc32 takes 3 cycles to give its result
// and 1 to start the next, so one record's chain of 8-byte steps leaves the
// unit idle two cycles in three; three independent chains fill it (ISA-L
// does the same inside one long buffer). Short payloads only.
// `times`: the three records' times (format 2), or null.
__attribute__((target("sse4.2"))) void record_crc3(const std::uint64_t* seqs, const TimeUs* times,
                                                   const std::string_view* payloads,
                                                   std::uint32_t* crcs) {
  std::uint64_t r[3];
  for (int k = 0; k < 3; ++k) {
    const auto len = static_cast<std::uint32_t>(payloads[k].size() + (times ? kTimeSize : 0));
    std::uint32_t reg = crc_u32_u64(~0U, len, seqs[k]);
    if (times != nullptr) reg = crc_u64(reg, static_cast<std::uint64_t>(times[k]));
    r[k] = reg;
  }
  const auto* p0 = reinterpret_cast<const unsigned char*>(payloads[0].data());
  const auto* p1 = reinterpret_cast<const unsigned char*>(payloads[1].data());
  const auto* p2 = reinterpret_cast<const unsigned char*>(payloads[2].data());
  const std::size_t common =
      std::min({payloads[0].size(), payloads[1].size(), payloads[2].size()}) / 8 * 8;
  for (std::size_t j = 0; j < common; j += 8) {
    std::uint64_t v0 = 0;
    std::uint64_t v1 = 0;
    std::uint64_t v2 = 0;
    std::memcpy(&v0, p0 + j, 8);
    std::memcpy(&v1, p1 + j, 8);
    std::memcpy(&v2, p2 + j, 8);
    r[0] = _mm_crc32_u64(r[0], v0);
    r[1] = _mm_crc32_u64(r[1], v1);
    r[2] = _mm_crc32_u64(r[2], v2);
  }
  const unsigned char* ps[3] = {p0, p1, p2};
  for (int k = 0; k < 3; ++k) {
    crcs[k] =
        ~crc_short(static_cast<std::uint32_t>(r[k]), ps[k] + common, payloads[k].size() - common);
  }
}
#endif

}  // namespace

void encode_record(char* out, std::uint64_t seq, std::optional<TimeUs> time,
                   std::string_view payload) {
  const std::uint32_t len = record_length(time, payload);
  // The CRC from the values, not from `out`: reading back what was just
  // stored there stalls on store forwarding.
  const std::uint32_t crc = record_crc(len, seq, time ? &*time : nullptr, payload);
  store_record(out, seq, time, payload, len, crc);
}

void encode_records(char* out, std::uint64_t first_seq, std::optional<TimeUs> time,
                    std::span<const std::string_view> payloads) {
  const std::size_t h = record_header_size(time.has_value());
  std::size_t i = 0;
#if defined(__x86_64__)
  if (g_have_sse42) {
    for (; i + 3 <= payloads.size(); i += 3) {
      const std::string_view* p = payloads.data() + i;
      if (std::max({p[0].size(), p[1].size(), p[2].size()}) > kShortCrc) {
        for (int k = 0; k < 3; ++k) {
          encode_record(out, first_seq + i + k, time, p[k]);
          out += h + p[k].size();
        }
        continue;
      }
      const std::uint64_t seqs[3] = {first_seq + i, first_seq + i + 1, first_seq + i + 2};
      const TimeUs times[3] = {time.value_or(0), time.value_or(0), time.value_or(0)};
      std::uint32_t crcs[3];
      record_crc3(seqs, time ? times : nullptr, p, crcs);
      for (int k = 0; k < 3; ++k) {
        store_record(out, seqs[k], time, p[k], record_length(time, p[k]), crcs[k]);
        out += h + p[k].size();
      }
    }
  }
#endif
  for (; i < payloads.size(); ++i) {
    encode_record(out, first_seq + i, time, payloads[i]);
    out += h + payloads[i].size();
  }
}

RecordView decode_record(const char* p, std::size_t avail,
                         std::optional<std::uint64_t> expected_seq, bool timed, RecordCheck check) {
  // Each return builds its whole RecordView at once: filling a
  // zero-initialised one field by field made GCC copy it out through the
  // stack with wider loads than its stores (store-forwarding stalls, a
  // quarter of a reader process's CPU on 100-byte records).
  constexpr auto incomplete = [] {
    RecordView v;
    v.kind = RecordView::kIncomplete;
    return v;
  };
  if (avail < kUntimedRecordHeaderSize) return incomplete();
  const std::uint32_t len = get32(p);
  if (timed && len < kTimeSize) return {};  // kInvalid
  const std::uint64_t seq = get64(p + 8);
  if (expected_seq && seq != *expected_seq) return {};
  if (avail < kUntimedRecordHeaderSize + std::size_t{len}) return incomplete();
  const char* body = p + kUntimedRecordHeaderSize;
  TimeUs time = 0;
  std::string_view payload(body, len);
  if (timed) {
    time = static_cast<TimeUs>(get64(body));
    payload.remove_prefix(kTimeSize);
  }
  if (check == RecordCheck::kCrc &&
      get32(p + 4) != record_crc(len, seq, timed ? &time : nullptr, payload)) {
    return {};  // kInvalid
  }
  return {.kind = RecordView::kValid,
          .seq = seq,
          .payload = payload,
          .size = kUntimedRecordHeaderSize + std::size_t{len},
          .timed = timed,
          .time = std::clamp(time, kMinTimeUs, kMaxTimeUs)};
}

std::size_t decode_records(const char* p, std::size_t avail, std::uint64_t first_seq, bool timed,
                           RecordView* out, std::size_t max) {
  // Frame them first, then check the CRCs three at a time (as encode_records
  // computes them): one record's chain of crc32 steps leaves the unit idle
  // two cycles in three.
  // decode_record's framing checks, inline: a call per record returning its
  // view through the stack cost more than the checks (store forwarding).
  std::size_t n = 0;
  for (std::size_t pos = 0; n < max; ++n) {
    if (avail - pos < kUntimedRecordHeaderSize) break;
    const char* r = p + pos;
    const std::uint32_t len = get32(r);
    if (timed && len < kTimeSize) break;
    const std::uint64_t seq = get64(r + 8);
    if (seq != first_seq + n || avail - pos - kUntimedRecordHeaderSize < len) break;
    RecordView& v = out[n];
    v.kind = RecordView::kValid;
    v.seq = seq;
    v.size = kUntimedRecordHeaderSize + std::size_t{len};
    v.timed = timed;
    const char* body = r + kUntimedRecordHeaderSize;
    if (timed) {
      v.time = std::clamp(static_cast<TimeUs>(get64(body)), kMinTimeUs, kMaxTimeUs);
      v.payload = std::string_view(body + kTimeSize, len - kTimeSize);
    } else {
      v.time = 0;
      v.payload = std::string_view(body, len);
    }
    pos += v.size;
  }
  const std::size_t h = record_header_size(timed);
  const auto stored_crc = [&](const RecordView& v) { return get32(v.payload.data() - h + 4); };
  // The time as stored (the view's is clamped to the valid range).
  const auto raw_time = [&](const RecordView& v) {
    return timed ? static_cast<TimeUs>(get64(v.payload.data() - kTimeSize)) : TimeUs{0};
  };
  std::size_t i = 0;
#if defined(__x86_64__)
  if (g_have_sse42) {
    for (; i + 3 <= n; i += 3) {
      const RecordView* v = out + i;
      if (std::max({v[0].payload.size(), v[1].payload.size(), v[2].payload.size()}) > kShortCrc) {
        break;  // the rest one at a time
      }
      const std::uint64_t seqs[3] = {v[0].seq, v[1].seq, v[2].seq};
      const TimeUs times[3] = {raw_time(v[0]), raw_time(v[1]), raw_time(v[2])};
      const std::string_view payloads[3] = {v[0].payload, v[1].payload, v[2].payload};
      std::uint32_t crcs[3];
      record_crc3(seqs, timed ? times : nullptr, payloads, crcs);
      for (int k = 0; k < 3; ++k) {
        if (crcs[k] != stored_crc(v[k])) return i + static_cast<std::size_t>(k);
      }
    }
  }
#endif
  for (; i < n; ++i) {
    const RecordView& v = out[i];
    const auto len = static_cast<std::uint32_t>(v.size - kUntimedRecordHeaderSize);
    const TimeUs t = raw_time(v);
    if (record_crc(len, v.seq, timed ? &t : nullptr, v.payload) != stored_crc(v)) return i;
  }
  return n;
}

void encode_position_slot(char* out, const PositionSlot& slot) {
  std::memcpy(out, kPositionMagic.data(), 8);
  put64(out + 8, slot.generation);
  put64(out + 16, slot.next_seq);
  put32(out + 24, 0);
  put32(out + 28, crc32c(out, 28));
}

std::optional<PositionSlot> decode_position_slot(const char* in) {
  if (std::memcmp(in, kPositionMagic.data(), 8) != 0) return std::nullopt;
  if (get32(in + 28) != crc32c(in, 28)) return std::nullopt;
  return PositionSlot{get64(in + 8), get64(in + 16)};
}

}  // namespace sluice::log
