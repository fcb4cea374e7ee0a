// run_pipeline: read numbered records, compress-like work on 4 threads, and
// write the results in input order, with no queue between the three steps.
// The source and the sink are plain functions; each of the 4 threads takes a
// record, works on it, and writes whatever results are next in order.
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "sluice/run_pipeline.h"

using sluice::Context;
using sluice::Result;
using sluice::Status;

int main() {
  int next = 0;
  auto source = [&]() -> std::optional<std::string> {  // called by one thread at a time
    if (next == 1000) return std::nullopt;
    return "record " + std::to_string(next++);
  };
  auto work = [](std::string&& rec, const Context&) -> Result<std::uint64_t> {
    std::uint64_t h = 1469598103934665603ULL;  // FNV-1a: stands in for real work
    for (unsigned char c : rec) h = (h ^ c) * 1099511628211ULL;
    return h;
  };
  std::uint64_t written = 0, combined = 0;
  auto sink = [&](Result<std::uint64_t>&& h) -> Status {  // one at a time, in input order
    combined = combined * 31 + *h;
    ++written;
    return Status::Ok();
  };
  auto r =
      sluice::run_pipeline(source, work, sink, {.width = 4, .ordering = sluice::Ordering::kStrict});
  if (!r.ok()) {
    std::fprintf(stderr, "pipeline: %s\n", r.status().to_string().c_str());
    return 1;
  }
  std::uint64_t expected = 0;  // the same, one record after another
  for (int i = 0; i < 1000; ++i)
    expected = expected * 31 + *work("record " + std::to_string(i), {});
  std::printf("%llu records in order, checksum %016llx (%s)\n",
              static_cast<unsigned long long>(written), static_cast<unsigned long long>(combined),
              combined == expected ? "as sequential" : "DIFFERS from sequential");
  return written == 1000 && combined == expected ? 0 : 1;
}
