#include "log/format.h"

#include <isa-l/crc.h>

#include <atomic>
#include <charconv>
#include <cstdio>

namespace sluice::log {

std::uint32_t crc32c(const void* data, std::size_t n, std::uint32_t crc) {
  // ISA-L's crc32_iscsi works on the raw register: seed with ~crc, invert out.
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));  // not written
  std::uint32_t reg = ~crc;
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

void encode_segment_header(char* out, std::uint64_t base_seq, std::uint32_t flags) {
  std::memcpy(out, kSegmentMagic.data(), 8);
  put32(out + 8, kFormatVersion);
  put32(out + 12, kSegmentHeaderSize);
  put64(out + 16, base_seq);
  put32(out + 24, flags);
  put32(out + 28, crc32c(out, 28));
}

std::optional<std::uint64_t> decode_segment_header(const char* in) {
  if (std::memcmp(in, kSegmentMagic.data(), 8) != 0) return std::nullopt;
  if (get32(in + 28) != crc32c(in, 28)) return std::nullopt;
  if (get32(in + 8) != kFormatVersion || get32(in + 12) != kSegmentHeaderSize) return std::nullopt;
  return get64(in + 16);
}

std::uint32_t segment_header_flags(const char* in) {
  return decode_segment_header(in) ? get32(in + 24) : 0;
}

namespace {

std::uint32_t record_crc(const char* header, std::string_view payload) {
  std::uint32_t c = crc32c(header, 4);  // the length
  c = crc32c(header + 8, 8, c);         // the seq
  return crc32c(payload.data(), payload.size(), c);
}

}  // namespace

void encode_record_header(char* out, std::uint64_t seq, std::string_view payload) {
  put32(out, static_cast<std::uint32_t>(payload.size()));
  put64(out + 8, seq);
  put32(out + 4, record_crc(out, payload));
}

void encode_record(char* out, std::uint64_t seq, std::string_view payload) {
  char header[kRecordHeaderSize];
  encode_record_header(header, seq, payload);
  std::memcpy(out + kRecordHeaderSize, payload.data(), payload.size());
  std::memcpy(out + 8, header + 8, 8);                  // the seq
  std::atomic_signal_fence(std::memory_order_release);  // the compiler keeps the order
  std::memcpy(out, header, 8);                          // length and CRC
}

RecordView decode_record(const char* p, std::size_t avail, std::uint32_t max_payload,
                         std::optional<std::uint64_t> expected_seq) {
  RecordView v;
  if (avail < kRecordHeaderSize) {
    v.kind = RecordView::kIncomplete;
    return v;
  }
  const std::uint32_t len = get32(p);
  if (len > max_payload) return v;  // kInvalid
  const std::uint64_t seq = get64(p + 8);
  if (expected_seq && seq != *expected_seq) return v;
  if (avail < kRecordHeaderSize + len) {
    v.kind = RecordView::kIncomplete;
    return v;
  }
  const std::string_view payload(p + kRecordHeaderSize, len);
  if (get32(p + 4) != record_crc(p, payload)) return v;
  v.kind = RecordView::kValid;
  v.seq = seq;
  v.payload = payload;
  v.size = kRecordHeaderSize + len;
  return v;
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
