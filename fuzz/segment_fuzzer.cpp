// libFuzzer target for the segment reader: any bytes as a topic's only
// segment (after a valid header of either format, or raw) must open, verify
// and read back without crashing; every record the reader delivers must be
// one that is in the bytes, whole and with its CRC, in increasing seq order,
// with a time exactly when the segment's format has one; a cursor must
// deliver what the channel does; a search by time must find the first
// record at or after it; and the recovered topic must take and deliver a
// new append whose time is not before any time read.
// Build and run: scripts/dev fuzz [seconds]
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "log/format.h"
#include "sluice/log/channel.h"
#include "sluice/log/cursor.h"
#include "sluice/log/topic.h"

namespace fs = std::filesystem;
namespace lg = sluice::log;

namespace {

std::optional<lg::TimeUs> micros(const sluice::LogMessage& m) {
  if (!m.time) return std::nullopt;
  return std::chrono::duration_cast<std::chrono::microseconds>(m.time->time_since_epoch()).count();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // On tmpfs where there is one: opening syncs, and a disk's syncs would
  // make each run take milliseconds.
  static const fs::path dir =
      (fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path()) /
      ("sluice-fuzz-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  // Half the inputs get a valid header, so that the fuzzer reaches records;
  // of those, half a format 1 header (records without time), half format 2.
  std::string bytes;
  std::optional<bool> timed;  // the header's format, if valid
  if (size > 0 && (data[0] & 1) != 0) {
    timed = (data[0] & 2) == 0;
    char header[lg::kSegmentHeaderSize];
    lg::encode_segment_header(header, 0, 0,
                              *timed ? lg::kFormatVersion : lg::kUntimedFormatVersion);
    bytes.assign(header, sizeof header);
    bytes.append(reinterpret_cast<const char*>(data) + 1, size - 1);
  } else {
    bytes.assign(reinterpret_cast<const char*>(data), size);
  }
  std::ofstream(dir / lg::segment_name(0), std::ios::binary) << bytes;
  sluice::TopicOptions o;
  o.segment_bytes = 1 << 20;
  o.max_message_bytes = 4096;
  o.durability = sluice::Durability::kNone;
  (void)sluice::verify_topic(dir.string(), o);
  auto t = sluice::Topic::open(dir.string(), o);
  if (!t.ok()) return 0;
  const auto now = [] {
    return sluice::Context(std::stop_token{}, std::chrono::steady_clock::now());
  };
  {
    auto c = (*t)->channel("f");
    if (!c.ok()) __builtin_trap();  // a recovered topic always takes a channel
    auto cur = (*t)->cursor(0);
    if (!cur.ok()) __builtin_trap();
    std::vector<sluice::LogMessage> peeked;
    if (!(*cur)->next_batch(peeked, 20000).ok()) __builtin_trap();
    std::uint64_t last = 0;
    bool any = false;
    std::optional<lg::TimeUs> latest;
    std::size_t n = 0;
    for (int i = 0; i < 10000; ++i) {
      auto m = (*c)->next(now());
      if (!m.ok()) break;
      // The reader's claims: seqs increase; every record it returns is one a
      // writer wrote, byte for byte, CRC (and time) included, somewhere in
      // the segment; records have a time exactly in a format 2 segment.
      if (any && m->seq <= last) __builtin_trap();
      any = true;
      last = m->seq;
      const std::optional<lg::TimeUs> tm = micros(*m);
      if (!timed || tm.has_value() != *timed) __builtin_trap();
      if (tm && (!latest || *tm > *latest)) latest = tm;
      if (tm && (*tm == lg::kMaxTimeUs || *tm == lg::kMinTimeUs)) {
        // Saturated (the bytes hold a time system_clock cannot): the record
        // is in the bytes with some time at or beyond that bound.
        bool found = false;
        for (std::size_t at = lg::kSegmentHeaderSize; !found && at < bytes.size(); ++at) {
          auto v = lg::decode_record(bytes.data() + at, bytes.size() - at, m->seq, true);
          found = v.kind == lg::RecordView::kValid && v.payload == m->payload && v.time == *tm;
        }
        if (!found) __builtin_trap();
      } else {
        std::string rec(lg::record_header_size(tm.has_value()) + m->payload.size(), '\0');
        lg::encode_record(rec.data(), m->seq, tm, m->payload);
        const auto at = bytes.find(rec, lg::kSegmentHeaderSize);
        if (at == std::string::npos) __builtin_trap();
        auto v = lg::decode_record(bytes.data() + at, bytes.size() - at, m->seq, tm.has_value());
        if (v.kind != lg::RecordView::kValid) __builtin_trap();
      }
      // The cursor read the same records, without taking them.
      if (n >= peeked.size() || peeked[n].seq != m->seq || peeked[n].payload != m->payload ||
          peeked[n].time != m->time) {
        __builtin_trap();
      }
      ++n;
    }
    if (n != peeked.size()) __builtin_trap();
    // A search by any record's time (in format 2: times need not increase
    // in these bytes) finds the first record read whose time is at or
    // after it.
    for (const auto& p : peeked) {
      if (!p.time) continue;
      std::uint64_t want = (*t)->next_seq();
      for (const auto& q : peeked) {
        if (*q.time >= *p.time) {
          want = q.seq;
          break;
        }
      }
      auto at_time = (*t)->seq_at_time(*p.time);
      if (!at_time.ok() || *at_time != want) __builtin_trap();
    }
    // The recovered log accepts appends, at its end, and delivers them, with
    // a time not before any time it holds.
    const std::uint64_t next = (*t)->next_seq();
    auto a = (*t)->append("after");
    if (!a.ok() || *a != next) __builtin_trap();
    auto m = (*c)->next(now());
    while (m.ok() && m->seq < next) m = (*c)->next(now());
    if (!m.ok() || m->seq != next || m->payload != "after" || !m->time) __builtin_trap();
    if (latest && *micros(*m) < *latest) __builtin_trap();
    auto back = (*t)->seq_at_time(*m->time);
    if (!back.ok() || *back > next) __builtin_trap();
  }
  return 0;
}
