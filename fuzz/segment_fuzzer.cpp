// libFuzzer target for the segment reader: any bytes as a topic's only
// segment (after a valid header, or raw) must open, verify and read back
// without crashing; every record the reader delivers must be one that is in
// the bytes, whole and with its CRC, in increasing seq order; and the
// recovered topic must take and deliver a new append.
// Build and run: scripts/dev fuzz [seconds]
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "log/format.h"
#include "sluice/log/channel.h"
#include "sluice/log/topic.h"

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // On tmpfs where there is one: opening syncs, and a disk's syncs would
  // make each run take milliseconds.
  static const fs::path dir =
      (fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path()) /
      ("sluice-fuzz-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  // Half the inputs get a valid header, so that the fuzzer reaches records.
  std::string bytes;
  if (size > 0 && (data[0] & 1) != 0) {
    char header[sluice::log::kSegmentHeaderSize];
    sluice::log::encode_segment_header(header, 0);
    bytes.assign(header, sizeof header);
    bytes.append(reinterpret_cast<const char*>(data) + 1, size - 1);
  } else {
    bytes.assign(reinterpret_cast<const char*>(data), size);
  }
  std::ofstream(dir / sluice::log::segment_name(0), std::ios::binary) << bytes;
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
    std::uint64_t last = 0;
    bool any = false;
    for (int i = 0; i < 10000; ++i) {
      auto m = (*c)->next(now());
      if (!m.ok()) break;
      // The reader's claims: seqs increase; every record it returns is one a
      // writer wrote, byte for byte, CRC included, somewhere in the segment.
      if (any && m->seq <= last) __builtin_trap();
      any = true;
      last = m->seq;
      if (m->payload.size() > o.max_message_bytes) __builtin_trap();
      std::string rec(sluice::log::kRecordHeaderSize + m->payload.size(), '\0');
      sluice::log::encode_record(rec.data(), m->seq, m->payload);
      const auto at = bytes.find(rec, sluice::log::kSegmentHeaderSize);
      if (at == std::string::npos) __builtin_trap();
      auto v = sluice::log::decode_record(bytes.data() + at, bytes.size() - at, o.max_message_bytes,
                                          m->seq);
      if (v.kind != sluice::log::RecordView::kValid) __builtin_trap();
    }
    // The recovered log accepts appends, at its end, and delivers them.
    const std::uint64_t next = (*t)->next_seq();
    auto a = (*t)->append("after");
    if (!a.ok() || *a != next) __builtin_trap();
    auto m = (*c)->next(now());
    while (m.ok() && m->seq < next) m = (*c)->next(now());
    if (!m.ok() || m->seq != next || m->payload != "after") __builtin_trap();
  }
  return 0;
}
