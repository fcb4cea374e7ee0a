// Looking into a topic directory without opening it as a Topic, and
// repairing the damage that stops its writer: what `sluice log inspect`,
// `sluice log verify` and `sluice repair` print and do (docs/cli.md,
// "Inspecting and repairing a store"). The files: docs/log_format.md.
//
// Thread safety: free functions; any number may run at once, on any topics.
// Blocking: they read files (repair_topic also writes and syncs them);
//   nothing waits for another party: repair_topic fails with kInUse rather
//   than wait for a writer or a channel's reader.
// Ordering: inspect_topic reads the position files before the segments, so
//   that while a writer appends, every position it reports lies within the
//   log it reports. What it reports is not one instant's state: a record
//   being written shows as a torn tail (a note, not damage).
// Cancellation: N/A (they run to the end).
// Ownership: results are plain values. inspect_topic never changes a file
//   (files are opened read-only, no lock is taken), so it works beside a
//   live writer and on a read-only copy.
// Errors: kNotFound (no such directory, or it holds no topic), kIOError
//   (errno text), kInUse (repair_topic: the writer, or the reader of a
//   channel whose position it must rewrite, is alive, naming its PID),
//   kInvalidArgument (bad TopicOptions).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sluice/log/topic.h"
#include "sluice/status.h"

namespace sluice {

// One thing inspect_topic found that is not a healthy log.
struct LogFinding {
  enum class Severity : std::uint8_t {
    kNote,    // a trace of a crash that the writer's next open repairs by itself,
              // or a fact worth knowing (a retention cap dropped records)
    kDamage,  // a crash does not produce it: lost or unreadable data, or a
              // state that stops the writer or a channel from opening
  };
  Severity severity = Severity::kNote;
  std::string file;  // the segment or position file (or the directory)
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::string what;         // what was found and what it means
  std::string advice;       // what to do about it
  bool repairable = false;  // repair_topic() deals with it
};

struct SegmentInspection {
  std::string file;
  std::uint64_t base_seq = 0;  // from the file name
  bool header_valid = false;
  std::uint32_t flags = 0;  // header flags (valid header only)
  // Format version (valid header only): 2, records carry their append time;
  // 1, written by a sluice before the append time (records have none).
  std::uint32_t version = 0;
  // Append times of the first and last valid record (version 2, records > 0).
  std::optional<std::chrono::system_clock::time_point> first_time = std::nullopt;
  std::optional<std::chrono::system_clock::time_point> last_time = std::nullopt;
  bool after_gap = false;       // flag: the seqs before base_seq are a known loss
  bool closed_mark = false;     // flag: the topic's closed mark (end of stream)
  bool sealed = false;          // a later segment exists: nothing is appended here
  std::uint64_t records = 0;    // valid records (for a bad header: found by search)
  std::uint64_t first_seq = 0;  // of the first and last valid record (records > 0)
  std::uint64_t last_seq = 0;
  std::uint64_t next_seq = 0;        // the seq after the segment's last valid record
  std::uint64_t file_bytes = 0;      // the file's size
  std::uint64_t record_bytes = 0;    // header + records, up to the end of the last valid one
  std::uint64_t reserved_bytes = 0;  // zeros preallocated after the last record
  std::uint64_t damaged_bytes = 0;   // in corrupt ranges and a torn tail
  // A summary (docs/log_format.md, "Segment summaries") that matches it: the
  // next open takes the segment from it without reading its records.
  bool summary = false;
};

struct PositionSlotInspection {
  bool set = false;    // holds a non-zero byte
  bool valid = false;  // magic and CRC match
  std::uint64_t generation = 0;
  std::uint64_t next_seq = 0;
};

struct ChannelInspection {
  enum class State : std::uint8_t {
    kValid,    // a valid slot gives the position
    kUnset,    // empty or zeros: never reached the disk; starts at the oldest record
    kDamaged,  // bytes set but no valid slot: the channel cannot open
  };
  std::string name;
  std::string file;
  std::uint64_t file_bytes = 0;
  PositionSlotInspection slots[2];
  int current_slot = -1;  // the slot in use (-1: none)
  State state = State::kUnset;
  std::uint64_t next_seq = 0;  // first seq not acknowledged (kValid)
  std::uint64_t unacked = 0;   // retained records from next_seq on
};

struct TopicInspection {
  std::string dir;
  std::vector<SegmentInspection> segments;  // by base_seq, every *.seg file
  std::vector<ChannelInspection> channels;  // by name
  std::uint64_t first_seq = 0;              // the oldest retained seq
  std::uint64_t next_seq = 0;  // the seq the next append gets (as recovery would find it)
  std::uint64_t records = 0;   // valid records in the segments readers use
  std::uint64_t bytes = 0;     // all segment files
  bool closed = false;         // the newest segment is the closed mark
  // The writer's wake-up page (NOTIFY), if present: its high watermark
  // (readers deliver records below it) and its closed word.
  bool has_notify = false;
  std::uint64_t visible_seq = 0;
  bool notify_closed = false;
  std::vector<LogFinding> findings;  // notes and damage, in file order

  bool damaged() const;  // a finding with Severity::kDamage
};

// Describes the topic in `dir` and checks every segment (headers, record
// checksums, seq continuity across segments) and position file (both slots,
// positions within the log), changing nothing. `options.max_message_bytes`
// does not bound what is read: a record is valid at any length that fits
// in its segment file (docs/log_format.md).
Result<TopicInspection> inspect_topic(const std::string& dir, TopicOptions options = {});

struct TopicRepairOptions {
  bool dry_run = false;  // plan and report, change nothing
  // Where moved files go: a new subdirectory named after the UTC time is
  // made in it. Empty: "<dir>.quarantine". Must be on the topic's file system.
  std::string quarantine_dir;
};

struct TopicRepairAction {
  std::string what;           // one line: what was (or would be) done and why
  std::string file;           // the file changed, created or moved
  std::string to;             // where it was moved (moves only)
  std::uint64_t records = 0;  // records in a moved segment (no longer delivered)
};

struct TopicRepairReport {
  std::vector<TopicRepairAction> actions;  // in the order they were (or would be) applied
  std::string quarantine;                  // the directory files went to ("" if none)
  // Seqs that will never be delivered because of the damage repaired: the
  // gaps the repair recorded as known (after_gap), the damaged newest
  // segment's included.
  std::uint64_t records_lost = 0;
  // Damage left in place (corrupt bytes inside a segment: readers skip them
  // and deliver the rest), as inspect_topic reports it.
  std::vector<LogFinding> left;
  bool dry_run = false;
};

// Repairs what stops the writer or a channel from opening, never deleting
// data: a newest segment whose header is damaged but which holds records
// (moved to the quarantine, and an empty segment flagged `after gap` takes
// over after its last seq, so no seq is used twice), older segments readers
// skip whole (moved), gaps between segments (the later one is flagged
// `after gap`: a known loss), a position file with no valid slot (moved:
// the channel starts again at the oldest record and redelivers), and a
// damaged slot beside a valid one (the file is copied to the quarantine,
// then the slot rewritten). Takes the topic's writer lock (kInUse if a
// writer holds it) and the lock of each position file it rewrites; do not
// call it while this process has the topic open. Damage a crash leaves
// (torn tails, lost headers of empty segments) is the writer's open's to
// repair: left alone.
Result<TopicRepairReport> repair_topic(const std::string& dir,
                                       const TopicRepairOptions& repair = {},
                                       TopicOptions options = {});

}  // namespace sluice
