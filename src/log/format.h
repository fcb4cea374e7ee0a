// The durable log's on-disk format: constants, encoders, decoders.
// Normative description: docs/log_format.md. Private to the log module.
#pragma once

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace sluice::log {

constexpr std::string_view kSegmentMagic = "SLUICESG";
constexpr std::string_view kPositionMagic = "SLUICEPS";
// Segments are written in format 2: every record carries its append time.
// Format 1 segments (written before the append time existed) are read, and
// written only by the test and benchmark hook that makes old segments.
constexpr std::uint32_t kFormatVersion = 2;
constexpr std::uint32_t kUntimedFormatVersion = 1;
constexpr std::size_t kSegmentHeaderSize = 32;
// A record's header in format 2: length, CRC, seq, append time. The length
// counts the time and the payload, so that a record's size is always
// kUntimedRecordHeaderSize + length, and a format 2 record is also a valid
// format 1 record (whose payload would start with the time): an older
// sluice, which refuses format 2 headers, then finds records behind them and
// skips such segments (or refuses to write) instead of taking them for
// empty ones and deleting them.
constexpr std::size_t kRecordHeaderSize = 24;
constexpr std::size_t kTimeSize = 8;
// A record's header in format 1: length, CRC, seq.
constexpr std::size_t kUntimedRecordHeaderSize = 16;
constexpr std::size_t record_header_size(bool timed) {
  return timed ? kRecordHeaderSize : kUntimedRecordHeaderSize;
}
constexpr std::size_t kPositionSlotSize = 32;
constexpr std::string_view kSegmentSuffix = ".seg";

// CRC-32C of data, continuing from `crc` (0 for a fresh one).
std::uint32_t crc32c(const void* data, std::size_t n, std::uint32_t crc = 0);

// Little-endian fields, one load or store each (GCC 12 compiled the byte
// loops these were into byte loops: most of a reader's framing time).
inline void put32(char* p, std::uint32_t v) {
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap32(v);
  std::memcpy(p, &v, 4);
}
inline void put64(char* p, std::uint64_t v) {
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  std::memcpy(p, &v, 8);
}
inline std::uint32_t get32(const char* p) {
  std::uint32_t v = 0;
  std::memcpy(&v, p, 4);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap32(v);
  return v;
}
inline std::uint64_t get64(const char* p) {
  std::uint64_t v = 0;
  std::memcpy(&v, p, 8);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}

// Segment file name for base_seq: 20 decimal digits + ".seg".
std::string segment_name(std::uint64_t base_seq);
// base_seq from a segment file name, or nullopt if the name is not one.
std::optional<std::uint64_t> parse_segment_name(std::string_view name);

// Segment header flags (offset 24).
// The seqs between the previous segment's last record and this base_seq were
// lost with a log tail that a power cut took, and positions had already
// passed them: recovery does not report the gap as damage.
constexpr std::uint32_t kSegmentAfterGap = 1;
// The topic was closed at this segment's base_seq (end of stream): it holds
// no record, it is the newest segment, and no append follows it.
constexpr std::uint32_t kSegmentClosed = 2;
// The segment before this one was sealed without a sync (mode none, with
// records written since the last sync): a power cut before the next sync()
// may have taken its unsynced bytes, so recovery reports what it lost there
// that a power cut explains (zeroed sectors), and the gap to this segment,
// as a lost unsynced tail, not as damage (docs/log_format.md).
constexpr std::uint32_t kSegmentAfterUnsynced = 4;

void encode_segment_header(char* out, std::uint64_t base_seq, std::uint32_t flags = 0,
                           std::uint32_t version = kFormatVersion);
// base_seq if the 32 bytes are a valid header (format 1 or 2).
std::optional<std::uint64_t> decode_segment_header(const char* in);
// The flags of a valid header (0 if invalid).
std::uint32_t segment_header_flags(const char* in);
// The format version of a valid header (0 if invalid).
std::uint32_t segment_header_version(const char* in);

// A record's append time: microseconds since the Unix epoch (wall clock).
using TimeUs = std::int64_t;
// The times system_clock can hold (about +-292 years around 1970 in
// nanoseconds). A time read from disk may be anything its CRC covers:
// decode_record saturates it to this range, so every reader (and the writer
// that continues after it) sees the same value.
constexpr TimeUs kMaxTimeUs =
    std::chrono::floor<std::chrono::microseconds>(std::chrono::system_clock::duration::max())
        .count();
constexpr TimeUs kMinTimeUs =
    std::chrono::ceil<std::chrono::microseconds>(std::chrono::system_clock::duration::min())
        .count();
inline std::chrono::system_clock::time_point time_of(TimeUs us) {
  return std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::microseconds(std::clamp(us, kMinTimeUs, kMaxTimeUs))));
}

// Writes the whole record (header + payload) at `out`: seq, time and payload
// first, length and CRC last, so that a reader in another process that sees
// the length sees the rest too (x86 keeps store order; the CRC catches any
// other case). `time` nullopt: format 1.
void encode_record(char* out, std::uint64_t seq, std::optional<TimeUs> time,
                   std::string_view payload);

// encode_record of each payload, back to back from `out`, seqs from
// first_seq on: the same bytes, CRCs computed three records at a time.
void encode_records(char* out, std::uint64_t first_seq, std::optional<TimeUs> time,
                    std::span<const std::string_view> payloads);

// The result of looking at bytes [p, p + avail) as one record.
struct RecordView {
  enum Kind { kValid, kIncomplete, kInvalid } kind = kInvalid;
  std::uint64_t seq = 0;
  std::string_view payload;
  std::size_t size = 0;  // header + payload, when valid
  bool timed = false;    // format 2: `time` is its append time
  TimeUs time = 0;
};
// What decode_record checks. kFraming: the length, the seq and that the
// record is whole, not its CRC: for a reader process finding where the
// records its writer published end (the reader that delivers a record checks
// its CRC then; checking it twice cost that process 7% of its CPU).
enum class RecordCheck : std::uint8_t { kCrc, kFraming };
// Decodes one record of a format 2 segment (`timed`) or a format 1 one.
// `expected_seq` nullopt: any seq is accepted (resync search checks it after).
// Its length is bounded by the bytes there are, not by any option
// (TopicOptions::max_message_bytes bounds appends only: a writer with a
// larger one wrote valid records): a record longer than `avail` is
// kIncomplete, so a caller whose `avail` reaches the end of the file (or of
// the records known complete) takes that as not valid.
RecordView decode_record(const char* p, std::size_t avail,
                         std::optional<std::uint64_t> expected_seq, bool timed,
                         RecordCheck check = RecordCheck::kCrc);
// The valid records at p (seqs from first_seq on, up to max), into out:
// decode_record of each in turn until one is not valid, with the same
// checks. Returns how many.
std::size_t decode_records(const char* p, std::size_t avail, std::uint64_t first_seq, bool timed,
                           RecordView* out, std::size_t max);

struct PositionSlot {
  std::uint64_t generation = 0;
  std::uint64_t next_seq = 0;
};
void encode_position_slot(char* out, const PositionSlot& slot);
std::optional<PositionSlot> decode_position_slot(const char* in);

}  // namespace sluice::log
