// A sealed segment's summary (docs/log_format.md, "Segment summaries"):
// what recovery learns by reading a segment (its end, its next seq, its
// sparse index and times), written beside it when the writer seals it, so
// that opening a topic reads a small file per older segment instead of
// every record. Private.
#pragma once

#include <cstdint>
#include <string>

#include "log/file_system.h"
#include "log/recovery.h"
#include "log/segment.h"

namespace sluice::log {

constexpr std::string_view kSummaryMagic = "SLUICESM";
constexpr std::uint32_t kSummaryVersion = 1;
constexpr std::string_view kSummarySuffix = ".sum";

// <dir>/<base>.sum for the segment at `segment_path` (<dir>/<base>.seg).
std::string summary_path(const std::string& segment_path);

// Writes `seg`'s summary (a sealed segment whose records, seqs up to
// `next_seq`, are on disk, with no damage found in it): to a .tmp file, renamed into place. Not
// synced: a power cut may lose it or leave it torn, and recovery then reads the segment as before
// (a torn summary fails its CRC).
Status write_summary(FileSystem& fs, const Segment& seg, std::uint64_t next_seq, TimeUs last_time);

// Fills `out` with the segment at `path` (base seq `base`, `size` bytes on
// disk) as its summary describes it, with verified = false. false if there
// is no summary or it does not match (torn, another size, another base):
// read the segment.
bool read_summary(FileSystem& fs, const std::string& path, std::uint64_t base, std::uint64_t size,
                  Scanned& out);

}  // namespace sluice::log
