// libFuzzer target for the segment reader: any bytes as a topic's only
// segment (after a valid header, or raw) must open, verify and read back
// without crashing, and deliver only records whose CRC holds.
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
  static const fs::path dir =
      fs::temp_directory_path() / ("sluice-fuzz-" + std::to_string(getpid()));
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
  {
    auto c = (*t)->channel("f");
    if (c.ok()) {
      for (int i = 0; i < 10000; ++i) {
        auto m = (*c)->next(sluice::Context(std::stop_token{}, std::chrono::steady_clock::now()));
        if (!m.ok()) break;
        if (m->payload.size() > o.max_message_bytes) __builtin_trap();
      }
    }
    (void)(*t)->append("after");  // the recovered log accepts appends
  }
  return 0;
}
