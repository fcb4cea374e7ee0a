// Recovery: what a topic directory holds, segment by segment
// (docs/log_format.md, "Recovery on open"). Scanning changes nothing; the
// writer's open applies the repairs it implies. Private.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "log/file_system.h"
#include "log/segment.h"
#include "sluice/log/topic.h"

namespace sluice::log {

// One segment with a valid header, as recovery found it.
struct Scanned {
  std::uint64_t base_seq = 0;
  std::string path;
  std::uint64_t end = 0;       // valid bytes (truncate here if torn)
  std::uint64_t next_seq = 0;  // after the last valid record
  std::vector<Skip> skips;
  bool torn = false;
  std::uint32_t flags = 0;  // header flags (kSegmentAfterGap)
  bool timed = true;        // format 2: records carry their append time
  // The sparse index of its valid records (segment.h), and the append times
  // of its first and last valid records (timed segments with records).
  std::vector<IndexEntry> index;
  bool has_time = false;
  TimeUs first_time = 0;
  TimeUs last_time = 0;
  TimeUs max_time = 0;  // the latest of them all
  // Valid records whose append time is below the one before them, in this
  // segment or across the previous one (none, from a writer of this
  // format); the first such seq.
  std::uint64_t time_backwards = 0;
  std::uint64_t first_backwards_seq = 0;
  // false: taken from the segment's summary (summary.h), not read; damage
  // in it is found when a reader meets it.
  bool verified = true;
};

struct Scan {
  std::vector<Scanned> segments;             // valid headers, in seq order
  std::vector<std::string> tmp;              // leftover *.tmp files
  std::vector<std::string> stale_summaries;  // *.sum files of no segment (retention's crash)
  // Segment files that hold nothing to keep, which the writer removes: an
  // older one whose header is invalid and that holds no valid record
  // (whatever its size), or one without records named inside the log (a
  // failed roll's, which a power cut brought back).
  std::vector<std::string> empty;
  // The newest segment file's header is invalid and it holds no record: the
  // writer reuses it (its name keeps the topic's high-water mark).
  std::optional<std::uint64_t> reuse_base;
  // The newest segment file's header is invalid but records follow it:
  // damage the writer must not guess about.
  std::optional<std::string> damaged_newest;
  // Older segment files skipped whole: a bad header before records, or an
  // overlap with the segment before (readers never deliver from them).
  std::vector<std::string> skipped;
  // The newest segment carries kSegmentClosed: the topic is closed.
  bool closed = false;
};

// How recovery's report names what a power cut took of a segment sealed
// without a sync (kSegmentAfterUnsynced on the next one): in `truncated`,
// not `corrupt`. Damage in it no power cut explains (no zeroed sector: a
// flipped bit) stays corrupt, and so does the gap after it then.
inline constexpr std::string_view kUnsyncedLoss =
    "not synced when the power went (sealed without a sync)";
// The gap after such a segment: "seqs 3..5 lost" + kUnsyncedGap.
inline constexpr std::string_view kUnsyncedGap =
    " with the unsynced tail of the segment before (it was sealed without a sync)";

// Scans every segment in `dir`, filling `report` with what open would find
// (and, for `empty` segments, remove or reuse). `use_summaries`: a segment
// whose summary matches it is taken from the summary, unread (verified
// false); verify, inspect and repair read everything.
// Records are valid whatever their length (within the file): no option
// bounds what is read.
Result<Scan> scan_topic(FileSystem& fs, const std::string& dir, RecoveryReport& report,
                        bool use_summaries = false);

// Reads a segment's bytes below `end` (its complete records) as recovery
// does: the ranges of them that are damaged.
Result<std::vector<Skip>> find_damage(FileSystem& fs, const std::string& path, std::uint64_t base,
                                      bool timed, std::uint64_t end);

Status validate(const TopicOptions& o);

// A gap in the newest segment followed by whole records is damage only if
// the writer had published past it (`published`: its NOTIFY count, read
// before the scan). Otherwise it may be a write in progress: the scan read a
// page before the writer's copy reached it and a later page after. Cuts the
// newest segment's view at the first such gap and drops the report's
// entries from there (corrupt, truncated); returns the offset cut at. Only the newest segment
// listed can be in flight (a roll seals the one before first), so a stale
// count (the page is not synced) cannot hide older segments; the caller
// must know the writer is alive for the count to be current.
std::optional<std::uint64_t> drop_writes_in_progress(Scan& scan, RecoveryReport& report,
                                                     std::uint64_t published);

// A live writer's records from seq `published` on (its NOTIFY count, read
// before the scan) are not durable yet in the modes that sync before they
// publish: a reader process must not deliver them (the writer may still
// fail their sync and take them back, or the power may go). Cuts the newest
// segment's view before them; refresh() reads on as the writer publishes.
// Only the newest segment holds such records: a roll syncs and publishes
// the one before.
Status cut_unpublished(FileSystem& fs, Scan& scan, RecoveryReport& report, std::uint64_t published);

}  // namespace sluice::log
