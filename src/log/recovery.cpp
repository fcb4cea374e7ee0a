#include "log/recovery.h"

#include <algorithm>
#include <map>
#include <string_view>
#include <utility>

#include "log/read_buffer.h"
#include "log/summary.h"

namespace sluice::log {

namespace {

std::string seq_range(std::uint64_t from, std::uint64_t count) {
  if (count == 0) return "no whole record lost";
  return "seqs " + std::to_string(from) + ".." + std::to_string(from + count - 1) + " lost";
}

// The offset of the next valid record after `off` whose seq is larger than
// `expected` (size if none). A candidate's CRC is computed only where its
// seq is one that could follow and its length fits in the file (a length
// is bounded by the file, not by max_message_bytes: docs/log_format.md).
std::size_t resync(std::string_view data, std::size_t off, std::uint64_t expected, bool timed,
                   std::uint64_t& found_seq) {
  const std::size_t size = data.size();
  for (std::size_t o = off + 1; o + kUntimedRecordHeaderSize <= size; ++o) {
    const std::uint64_t seq = get64(data.data() + o + 8);
    if (seq <= expected || seq > expected + (size - off) / kUntimedRecordHeaderSize) continue;
    if (decode_record(data.data() + o, size - o, seq, timed).kind == RecordView::kValid) {
      found_seq = seq;
      return o;
    }
  }
  return size;
}

// Notes the valid record `v` (seq `seq`, at `off`) in s: its time, the
// sparse index. `prev_time`: the last append time seen before it.
void note_record(const RecordView& v, std::uint64_t seq, std::uint64_t off, Scanned& s,
                 std::optional<TimeUs>& prev_time) {
  if (v.timed) {
    if (prev_time && v.time < *prev_time && s.time_backwards++ == 0) s.first_backwards_seq = seq;
    if (!s.has_time) s.first_time = s.max_time = v.time;
    s.max_time = std::max(s.max_time, v.time);
    s.has_time = true;
    s.last_time = v.time;
    prev_time = v.time;
  }
  if (s.index.empty() || off >= s.index.back().off + kIndexSpacing) {
    s.index.push_back({seq, off, s.max_time});  // as Segment::note
  }
}

// Scans one segment's records from the header on, indexing them, in `data`
// (the whole file). `prev_time`: the last append time seen in earlier
// segments (timed ones).
void scan_segment(std::string_view data, bool last, Scanned& s, std::optional<TimeUs>& prev_time,
                  RecoveryReport& report) {
  std::uint64_t expected = s.base_seq;
  std::size_t off = kSegmentHeaderSize;
  const std::size_t size = data.size();
  while (off < size) {
    RecordView v = decode_record(data.data() + off, size - off, expected, s.timed);
    if (v.kind == RecordView::kValid) {
      note_record(v, expected, off, s, prev_time);
      off += v.size;
      ++expected;
      continue;
    }
    // Zeros to the end: space the writer reserved and never wrote (a crash
    // before the close or roll that gives it back). Not damage.
    const std::size_t nonzero = data.find_last_not_of('\0');
    if (nonzero == std::string_view::npos || nonzero < off) {
      s.torn = true;
      break;
    }
    std::uint64_t found_seq = 0;
    const std::size_t found = resync(data, off, expected, s.timed, found_seq);
    if (found < size) {
      const std::uint64_t lost = found_seq - expected;
      s.skips.push_back({off, found, lost, found_seq});
      report.corrupt.push_back({s.path, off, found - off, "corrupt: " + seq_range(expected, lost)});
      off = found;
      expected = found_seq;
      continue;
    }
    if (last) {
      s.torn = true;
      report.truncated.push_back({s.path, off, nonzero + 1 - off, "torn tail"});
    } else {
      s.skips.push_back({off, size, 0, expected});
      report.corrupt.push_back({s.path, off, size - off,
                                "corrupt to the end of the segment: later seqs of this segment "
                                "lost"});
    }
    break;
  }
  s.end = s.torn ? off : size;
  s.next_seq = expected;
}

// [0, size) of a segment file through a window of ~1 MiB (or one record,
// whatever its length).
// A scan read the whole file into memory, zeroed first: a reader opening a
// topic whose writer was live held its 64 MiB newest segment to read one
// message (60 ms and 65 MB for `sluice get --count 1`).
class SegmentWindow {
 public:
  SegmentWindow(File& f, std::uint64_t size) : f_(f), size_(size) {}
  std::uint64_t size() const { return size_; }

  // [off, off + n) (off + n <= size), or nullptr if the file does not hold
  // it now (it shrank, or a read failed: the caller reads it whole).
  const char* get(std::uint64_t off, std::size_t n) {
    if (off >= from_ && off - from_ + n <= buf_.size()) return buf_.data() + (off - from_);
    const auto want =
        static_cast<std::size_t>(std::min<std::uint64_t>(std::max(n, kChunk), size_ - off));
    auto got = f_.pread(buf_.take(want), want, off);
    if (!got.ok() || *got < n) {
      buf_.shrink(0);
      return nullptr;
    }
    buf_.shrink(*got);
    from_ = off;
    return buf_.data();
  }

  // Whether [off, size) holds only zeros (nullopt: unknown, as get()).
  std::optional<bool> zeros_from(std::uint64_t off) {
    for (std::uint64_t o = off; o < size_;) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, size_ - o));
      const char* p = get(o, n);
      if (p == nullptr) return std::nullopt;
      if (std::string_view(p, n).find_first_not_of('\0') != std::string_view::npos) return false;
      o += n;
    }
    return true;
  }

 private:
  static constexpr std::size_t kChunk = std::size_t{1} << 20;
  File& f_;
  const std::uint64_t size_;
  ReadBuffer buf_;  // [from_, from_ + buf_.size()) of the file
  std::uint64_t from_ = 0;
};

// scan_segment through a window: the usual segment (valid records, then
// perhaps the writer's reserved zeros) is read once with ~1 MiB in memory.
// false where that cannot decide (a record that is not valid with non-zero
// bytes after it: damage, or a write in progress; a failed read): the caller
// restores s and prev_time and scans the whole file as before.
bool scan_segment_windowed(SegmentWindow& w, Scanned& s, std::optional<TimeUs>& prev_time) {
  const std::uint64_t size = w.size();
  std::uint64_t expected = s.base_seq;
  std::uint64_t off = kSegmentHeaderSize;
  while (off < size) {
    std::size_t avail =
        static_cast<std::size_t>(std::min<std::uint64_t>(kUntimedRecordHeaderSize, size - off));
    const char* p = w.get(off, avail);
    if (p == nullptr) return false;
    if (avail == kUntimedRecordHeaderSize) {
      // The whole record it claims, as far as the file holds it (a record
      // that runs past the end is not valid).
      avail += static_cast<std::size_t>(
          std::min(std::uint64_t{get32(p)}, size - off - kUntimedRecordHeaderSize));
      p = w.get(off, avail);
      if (p == nullptr) return false;
    }
    const RecordView v = decode_record(p, avail, expected, s.timed);
    if (v.kind != RecordView::kValid) break;
    note_record(v, expected, off, s, prev_time);
    off += v.size;
    ++expected;
  }
  if (off < size) {
    const std::optional<bool> zeros = w.zeros_from(off);
    if (!zeros || !*zeros) return false;
    s.torn = true;  // as scan_segment: reserved space, not damage
  }
  s.end = off;
  s.next_seq = expected;
  return true;
}

// Scans the segment file `f` (its header valid, `size` bytes) into s,
// through a window where it can, else whole as read_whole gives it.
Status scan_segment_file(FileSystem& fs, File& f, std::uint64_t size, bool last, Scanned& s,
                         std::optional<TimeUs>& prev_time, RecoveryReport& report) {
  const Scanned before = s;
  const std::optional<TimeUs> prev_before = prev_time;
  {
    // Gone before the whole read below: it may hold a long record.
    SegmentWindow w(f, size);
    if (scan_segment_windowed(w, s, prev_time)) return Status::Ok();
  }
  s = before;
  prev_time = prev_before;
  auto data = read_whole(fs, s.path);
  if (!data.ok()) return data.status();
  if (data->size() > size) data->resize(size);  // what the window saw: appends go past it
  scan_segment(*data, last, s, prev_time, report);
  return Status::Ok();
}

// Whether bytes after an invalid header hold any valid record of `base`'s
// segment (a byte-by-byte search, as resync does). Format 1 decoding finds
// the records of both formats (a format 2 record is a valid format 1 one
// whose payload starts with the time).
bool holds_records(const std::string& data, std::uint64_t base) {
  const std::size_t size = data.size();
  for (std::size_t o = kSegmentHeaderSize; o + kUntimedRecordHeaderSize <= size; ++o) {
    const std::uint64_t seq = get64(data.data() + o + 8);
    if (seq < base || seq > base + size / kUntimedRecordHeaderSize) continue;
    if (decode_record(data.data() + o, size - o, seq, false).kind == RecordView::kValid) {
      return true;
    }
  }
  return false;
}

// Appends the segment at `path` to `out` from its summary, if it has one
// that matches it and its header is valid (the flags are the header's).
bool summarized(FileSystem& fs, const std::string& path, std::uint64_t base,
                std::vector<Scanned>& out) {
  auto f = fs.open(path, OpenMode::kRead);
  if (!f.ok()) return false;
  auto size = (*f)->size();
  if (!size.ok()) return false;
  Scanned s;
  if (!read_summary(fs, path, base, *size, s)) return false;
  char header[kSegmentHeaderSize];
  auto got = (*f)->pread(header, sizeof header, 0);
  if (!got.ok() || *got != sizeof header || decode_segment_header(header) != std::optional(base) ||
      (segment_header_version(header) != kUntimedFormatVersion) != s.timed) {
    return false;
  }
  s.flags = segment_header_flags(header);
  out.push_back(std::move(s));
  return true;
}

// Whether bytes [from, to) of a segment (`data`, read from `from`; the file
// is `size` bytes) are what a power cut leaves of unsynced writes: each
// 512-byte sector reaches the disk or not, and one that did not reads as
// zeros past the synced size. So zeros from `from`, or from a sector's start
// inside, to that sector's end (or the file's end). A flipped bit leaves no
// such run.
bool torn_by_power_cut(std::string_view data, std::uint64_t from, std::uint64_t size) {
  constexpr std::uint64_t kSector = 512;
  const std::uint64_t to = from + data.size();
  for (std::uint64_t p = from; p < to; p = (p / kSector + 1) * kSector) {
    std::uint64_t e = (p / kSector + 1) * kSector;
    if (e > to) {
      if (to != size) break;
      e = to;
    }
    if (data.substr(p - from, e - p).find_first_not_of('\0') == std::string_view::npos) {
      return true;
    }
  }
  return false;
}

// The segment at `path` was sealed without a sync (the next one's header
// says so): its damage that a power cut explains (torn_by_power_cut) moves
// from corrupt to truncated, as a lost unsynced write (readers skip it all
// the same). Returns whether none is left in corrupt.
Result<bool> unsynced_losses(FileSystem& fs, const std::string& path, RecoveryReport& report) {
  constexpr std::string_view kCorrupt = "corrupt";
  bool explained = true;
  for (auto it = report.corrupt.begin(); it != report.corrupt.end();) {
    if (it->file != path || it->offset < kSegmentHeaderSize || !it->what.starts_with(kCorrupt)) {
      ++it;
      continue;
    }
    auto f = fs.open(path, OpenMode::kRead);
    if (!f.ok()) return f.status();
    auto size = (*f)->size();
    if (!size.ok()) return size.status();
    std::string bytes(static_cast<std::size_t>(it->length), '\0');
    auto got = (*f)->pread(bytes.data(), bytes.size(), it->offset);
    if (!got.ok()) return got.status();
    bytes.resize(*got);
    if (!torn_by_power_cut(bytes, it->offset, *size)) {
      explained = false;
      ++it;
      continue;
    }
    LogDamage d = std::move(*it);
    it = report.corrupt.erase(it);
    const std::string rest = d.what.substr(kCorrupt.size());  // ": seqs 3..5 lost", " to the..."
    d.what = std::string(kUnsyncedLoss) + (rest.starts_with(":") ? "" : ",") + rest;
    report.truncated.push_back(std::move(d));
  }
  return explained;
}

}  // namespace

Result<std::vector<Skip>> find_damage(FileSystem& fs, const std::string& path, std::uint64_t base,
                                      bool timed, std::uint64_t end) {
  auto f = fs.open(path, OpenMode::kRead);
  if (!f.ok()) return f.status();
  auto size = (*f)->size();
  if (!size.ok()) return size.status();
  Scanned s;
  s.base_seq = base;
  s.path = path;
  s.timed = timed;
  std::optional<TimeUs> prev_time;
  RecoveryReport ignored;
  // Complete records only: appends go past `end`.
  const std::uint64_t stop = std::min(*size, end);
  if (Status st = scan_segment_file(fs, **f, stop, /*last=*/false, s, prev_time, ignored);
      !st.ok()) {
    return st;
  }
  // Zeros below `end` are not a reserve (records were there: the summary, or
  // the writer, said so) but damage to the end: a reader skips them rather
  // than stop there for good.
  if (s.torn && s.end < stop) s.skips.push_back({s.end, stop, 0, s.next_seq});
  return std::move(s.skips);
}

Status validate(const TopicOptions& o) {
  if (o.max_message_bytes == 0) {
    return {StatusCode::kInvalidArgument, "max_message_bytes must be at least 1"};
  }
  if (o.segment_bytes <
      kSegmentHeaderSize + kRecordHeaderSize + std::uint64_t{o.max_message_bytes}) {
    return {StatusCode::kInvalidArgument,
            "segment_bytes (" + std::to_string(o.segment_bytes) +
                ") must hold at least one record of max_message_bytes (" +
                std::to_string(o.max_message_bytes) + " + " +
                std::to_string(kSegmentHeaderSize + kRecordHeaderSize) + " bytes)"};
  }
  return Status::Ok();
}

Result<Scan> scan_topic(FileSystem& fs, const std::string& dir, RecoveryReport& report,
                        bool use_summaries) {
  auto names = fs.list(dir);
  if (!names.ok()) return names.status();
  Scan out;
  std::map<std::uint64_t, std::string> files;
  for (const std::string& name : *names) {
    if (name.ends_with(".tmp")) {
      out.tmp.push_back(dir + "/" + name);
      report.removed.push_back(dir + "/" + name);
      continue;
    }
    if (auto base = parse_segment_name(name)) files[*base] = dir + "/" + name;
  }
  for (const std::string& name : *names) {
    if (!name.ends_with(kSummarySuffix)) continue;
    const std::string seg =
        name.substr(0, name.size() - kSummarySuffix.size()) + std::string(kSegmentSuffix);
    const auto base = parse_segment_name(seg);
    if (!base || !files.contains(*base)) out.stale_summaries.push_back(dir + "/" + name);
  }
  std::size_t i = 0;
  std::optional<TimeUs> prev_time;
  std::string previous_file;
  for (const auto& [base, path] : files) {
    const bool last = ++i == files.size();
    // kSegmentAfterUnsynced speaks of the file just before: the segment
    // before, unless that one was skipped or removed.
    const std::string file_before = std::exchange(previous_file, path);
    const bool after_unsynced_prev =
        !out.segments.empty() && out.segments.back().path == file_before;
    // A segment with a summary that matches it is not read (after a gap or
    // an overlap it is: recovery says what that is). The newest has one
    // only while it is as the writer's clean close left it.
    const bool follows = out.segments.empty() || base == out.segments.back().next_seq;
    if (use_summaries && follows && summarized(fs, path, base, out.segments)) {
      const Scanned& s = out.segments.back();
      if ((s.flags & kSegmentAfterUnsynced) != 0 && after_unsynced_prev) {
        auto done = unsynced_losses(fs, out.segments[out.segments.size() - 2].path, report);
        if (!done.ok()) return done.status();
      }
      if (s.has_time) prev_time = s.last_time;
      if (last && (s.flags & kSegmentClosed) != 0) out.closed = report.closed = true;
      ++report.summarized;
      continue;
    }
    auto f = fs.open(path, OpenMode::kRead);
    if (!f.ok()) return f.status();
    auto size = (*f)->size();
    if (!size.ok()) return size.status();
    char header[kSegmentHeaderSize];
    auto got = *size >= kSegmentHeaderSize ? (*f)->pread(header, sizeof header, 0)
                                           : Result<std::size_t>(std::size_t{0});
    if (!got.ok()) return got.status();
    const bool header_ok =
        *got == sizeof header && decode_segment_header(header) == std::optional(base);
    if (!header_ok) {
      auto data = read_whole(fs, path);
      if (!data.ok()) return data.status();
      if (!holds_records(*data, base)) {
        // A segment whose header never reached the disk (or was lost with
        // it) and no record after: empty, whatever its (preallocated) size.
        // Named inside the log, it is a failed roll's (removed, but a power
        // cut undid the removal): its name holds no high-water mark either.
        if (last && (out.segments.empty() || base >= out.segments.back().next_seq)) {
          out.reuse_base = base;
          report.truncated.push_back({path, 0, data->size(),
                                      "segment header lost before any record was written: "
                                      "emptied and reused"});
        } else {
          out.empty.push_back(path);
          previous_file = file_before;  // it holds nothing: a flag after it speaks past it
          report.removed.push_back(path);
        }
      } else if (last) {
        out.damaged_newest = path;
        report.corrupt.push_back({path, 0, data->size(), "bad segment header before records"});
      } else {
        out.skipped.push_back(path);
        report.corrupt.push_back({path, 0, data->size(), "bad segment header: segment skipped"});
      }
      continue;
    }
    Scanned s;
    s.base_seq = base;
    s.path = path;
    s.flags = segment_header_flags(header);
    s.timed = segment_header_version(header) != kUntimedFormatVersion;
    if (!out.segments.empty() && base != out.segments.back().next_seq) {
      const std::uint64_t prev = out.segments.back().next_seq;
      if (base < prev) {
        // A header and no record: a roll that failed took it back and a
        // power cut undid the removal (appends had gone on in the segment
        // before). Nothing to skip: it goes, as an empty segment does.
        SegmentWindow w(**f, *size);
        if (const std::optional<bool> zeros = w.zeros_from(kSegmentHeaderSize); zeros && *zeros) {
          out.empty.push_back(path);
          previous_file = file_before;  // it holds nothing: a flag after it speaks past it
          report.removed.push_back(path);
          continue;
        }
        out.skipped.push_back(path);
        report.corrupt.push_back({path, 0, 0, "segment overlaps the previous one: skipped"});
        continue;
      }
      // Mode none: the unsynced tail a power cut took (or a segment file
      // removed: the disk cannot tell), unless the segment before holds
      // damage no power cut explains.
      bool unsynced = false;
      if ((s.flags & kSegmentAfterUnsynced) != 0 && after_unsynced_prev) {
        auto done = unsynced_losses(fs, out.segments.back().path, report);
        if (!done.ok()) return done.status();
        unsynced = *done;
      }
      if ((s.flags & kSegmentAfterGap) != 0) {
        // A known loss.
      } else if (unsynced) {
        report.truncated.push_back(
            {path, 0, 0, seq_range(prev, base - prev) + std::string(kUnsyncedGap)});
      } else {
        report.corrupt.push_back(
            {path, 0, 0, "gap before this segment: " + seq_range(prev, base - prev)});
      }
    } else if ((s.flags & kSegmentAfterUnsynced) != 0 && after_unsynced_prev) {
      auto done = unsynced_losses(fs, out.segments.back().path, report);
      if (!done.ok()) return done.status();
    }
    if (Status st = scan_segment_file(fs, **f, *size, last, s, prev_time, report); !st.ok()) {
      return st;
    }
    if (last && (s.flags & kSegmentClosed) != 0) out.closed = report.closed = true;
    out.segments.push_back(std::move(s));
  }
  return out;
}

std::optional<std::uint64_t> drop_writes_in_progress(Scan& scan, RecoveryReport& report,
                                                     std::uint64_t published) {
  if (scan.segments.empty()) return std::nullopt;
  Scanned& seg = scan.segments.back();
  auto bad = std::find_if(seg.skips.begin(), seg.skips.end(),
                          [&](const Skip& k) { return k.next > published; });
  if (bad == seg.skips.end()) return std::nullopt;
  const std::uint64_t from = bad->from;
  const auto past = [&](const LogDamage& d) { return d.file == seg.path && d.offset >= from; };
  std::erase_if(report.corrupt, past);
  std::erase_if(report.truncated, past);  // a torn tail past the cut is the same write
  seg.end = from;
  seg.next_seq = bad->next - bad->lost;
  seg.skips.erase(bad, seg.skips.end());
  std::erase_if(seg.index, [&](const IndexEntry& e) { return e.off >= from; });
  return from;
}

Status cut_unpublished(FileSystem& fs, Scan& scan, RecoveryReport& report,
                       std::uint64_t published) {
  if (scan.segments.empty()) return Status::Ok();
  Scanned& seg = scan.segments.back();
  if (seg.next_seq <= published) return Status::Ok();
  std::uint64_t cut = kSegmentHeaderSize;
  if (seg.base_seq < published) {
    // The record with seq `published`: from the index entry before it, at
    // most kIndexSpacing bytes (plus records) of framing to walk.
    auto e = std::find_if(seg.index.rbegin(), seg.index.rend(),
                          [&](const IndexEntry& i) { return i.seq <= published; });
    std::uint64_t off = e == seg.index.rend() ? kSegmentHeaderSize : e->off;
    std::uint64_t seq = e == seg.index.rend() ? seg.base_seq : e->seq;
    for (const Skip& k : seg.skips) {  // damage between: walk on from its end
      if (k.from >= off && k.next <= published) {
        off = k.to;
        seq = k.next;
      }
    }
    auto f = fs.open(seg.path, OpenMode::kRead);
    if (!f.ok()) return f.status();
    std::string buf(static_cast<std::size_t>(seg.end - off), '\0');
    auto got = (*f)->pread(buf.data(), buf.size(), off);
    if (!got.ok()) return got.status();
    std::size_t pos = 0;
    while (seq < published) {
      const RecordView v =
          decode_record(buf.data() + pos, *got - pos, seq, seg.timed, RecordCheck::kFraming);
      if (v.kind != RecordView::kValid) {
        return {StatusCode::kCorruption, "record " + std::to_string(seq) + " of " + seg.path +
                                             " does not read back where the scan found it"};
      }
      pos += v.size;
      ++seq;
    }
    cut = off + pos;
  }
  const auto past = [&](const LogDamage& d) { return d.file == seg.path && d.offset >= cut; };
  std::erase_if(report.corrupt, past);
  std::erase_if(report.truncated, past);
  seg.end = cut;
  seg.next_seq = std::max(published, seg.base_seq);
  std::erase_if(seg.skips, [&](const Skip& k) { return k.from >= cut; });
  std::erase_if(seg.index, [&](const IndexEntry& i) { return i.off >= cut; });
  return Status::Ok();
}

}  // namespace sluice::log
