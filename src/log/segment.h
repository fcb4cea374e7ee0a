// One segment file of a topic (docs/log_format.md): its file, the writer's
// reserve and map, and the bounds readers may read up to. Private.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "log/file_system.h"
#include "log/format.h"

namespace sluice::log {

// A range of a segment recovery found corrupt: readers jump from `from` to
// `to`, and `lost` records are gone.
struct Skip {
  std::uint64_t from = 0;
  std::uint64_t to = 0;
  std::uint64_t lost = 0;
  std::uint64_t next = 0;  // the seq of the record at `to`
};

// One entry of a segment's sparse index: the record at byte `off` has seq
// `seq`; `time` is the latest append time of the segment's records up to and
// including it (0 in a format 1 segment). A running maximum, so that entries
// are in time order even if records' times are not (the writer never lets
// them go back, but the bytes may come from elsewhere): the first record at
// or after a time t lies after the last entry whose time is below t, and at
// or before the entry after it.
struct IndexEntry {
  std::uint64_t seq = 0;
  std::uint64_t off = 0;
  TimeUs time = 0;
};

// The index holds the segment's first record and then the first record that
// starts kIndexSpacing bytes or more after the previous entry: finding a seq
// or a time reads at most that many bytes past the entry found (plus one
// record). It lives in memory only: recovery rebuilds it from the records it
// reads anyway, so there is nothing a power cut can leave inconsistent.
constexpr std::uint64_t kIndexSpacing = 64 * 1024;

// Thread safety: `end`, `sealed` and `capped` are atomics any thread may read. The
// other mutable fields belong to the writer and are changed under the
// topic's lock; `skips`, `base_seq`, `path`, `file` and `timed` are fixed once the
// segment is in the topic's list. `index`, `max_time` and `has_time` are
// read and changed under the topic's lock only.
struct Segment {
  std::uint64_t base_seq = 0;
  std::string path;
  bool timed = true;           // format 2: records carry their append time
  std::unique_ptr<File> file;  // read-write for the writer's last segment
  // Readers read complete records below `end` and nothing past it. In the
  // modes that promise durability it moves only after a sync covered the
  // bytes (the log's high watermark), so no channel sees, or acknowledges,
  // a record a power cut could take back.
  std::atomic<std::uint64_t> end{kSegmentHeaderSize};
  // A later segment exists: `end` is final (readers check it before taking
  // the topic's lock to look for the next segment).
  std::atomic<bool> sealed{false};
  // A retention cap deleted this segment before a channel here had
  // acknowledged all of it: channels still reading it jump to the oldest
  // retained segment (retention counted what they skip as theirs), rather
  // than deliver records already counted as lost.
  std::atomic<bool> capped{false};
  // Ranges found corrupt. Recovery's are fixed before the segment is
  // shared. A segment opened from its summary (summary.h) is not read at
  // open: `verified` is false and `skips` empty until the first reader that
  // meets damage there reads it whole (verify_segment, under verify_mu) and
  // publishes its skips with verified (release). Read skips only after
  // seeing verified true (acquire).
  std::vector<Skip> skips;
  std::atomic<bool> verified{true};
  std::mutex verify_mu;
  // A read-only topic (a reader in another process) found the record at
  // this offset damaged: the writer's published count is past it, yet its
  // framing (length, seq) does not read back. Readers stop there with
  // kCorruption rather than wait for it for ever. Set once, by refresh
  // (under the topic's lock).
  std::atomic<std::uint64_t> damaged_at{UINT64_MAX};

  // The sparse index (kIndexSpacing) of the records written (the writer) or
  // read (a read-only topic) so far, in seq order.
  std::vector<IndexEntry> index;
  TimeUs max_time = 0;    // the latest time of the records noted
  bool has_time = false;  // a timed record was noted
  // Notes the record at `off` (called for every record, in order).
  void note(std::uint64_t seq, std::uint64_t off, TimeUs time) {
    if (timed) {
      max_time = has_time ? std::max(max_time, time) : time;
      has_time = true;
    }
    if (index.empty() || off >= index.back().off + kIndexSpacing) {
      index.push_back({seq, off, max_time});
    }
  }

  // Writer only, under the topic's lock. `written`: complete records,
  // visible or not. `cap`: the file's size (records plus preallocated
  // zeros). `map`: a shared writable map of [0, map_len), or null (pwrite
  // only); written only below `cap`, so it never touches a page past the end
  // of the file (SIGBUS); readers here read below `end` through it.
  std::uint64_t written = kSegmentHeaderSize;
  std::uint64_t cap = 0;
  // Modes none and interval: where the next start_writeback() begins.
  std::uint64_t writeback_from = 0;
  char* map = nullptr;
  std::size_t map_len = 0;
};

// Creates <dir>/<base>.seg holding only its header, synced when `sync` (a
// directory entry must never be durable before the header it names). On
// failure the file is removed again, and the directory synced.
// `version` kUntimedFormatVersion: records without time (tests only).
Result<std::shared_ptr<Segment>> create_segment(FileSystem& fs, const std::string& dir,
                                                std::uint64_t base, bool sync,
                                                std::uint32_t flags = 0,
                                                std::uint32_t version = kFormatVersion);

// How the writer lays records down.
struct WriteOptions {
  std::uint64_t segment_bytes = 0;
  bool preallocate = false;  // cleared when the file system cannot fallocate
};

// Makes `seg` the one appends go to: its cap is its size, and it is mapped
// when preallocating on a file system where that is safe.
Status make_writable(Segment& seg, const WriteOptions& w);

// Reserves file space up to `upto` (1 MiB chunks, never past the segment
// size unless one batch needs more). A full disk fails here, before anything
// is written. Where fallocate is not supported, preallocation turns off.
Status reserve(Segment& seg, std::uint64_t upto, WriteOptions& w);

// Gives the reserved, unwritten space back (a roll or a clean close).
Status trim_reserve(Segment& seg);

// Writes the records at `written` (through the map when it fits, else one
// pwrite from `buf`) and advances `written`. Every record gets `time` in a
// timed segment. On failure the partial bytes are cut off again and nothing
// changes. The caller notes the records in the index once they are kept.
Status write_records(Segment& seg, std::span<const std::string_view> payloads,
                     std::uint64_t first_seq, TimeUs time, std::size_t bytes, std::string& buf);

}  // namespace sluice::log
