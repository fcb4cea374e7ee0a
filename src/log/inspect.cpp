// inspect_topic and repair_topic (sluice/log/inspect.h): recovery's scan
// (recovery.h), read without taking any lock, turned into a description and
// a list of findings; the repair applies what the writer's open refuses to
// guess.
#include "sluice/log/inspect.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <map>
#include <optional>

#include "log/file_system.h"
#include "log/format.h"
#include "log/inspect.h"
#include "log/notify.h"
#include "log/position.h"
#include "log/recovery.h"
#include "log/summary.h"
#include "log/topic_impl.h"

namespace sluice {

bool TopicInspection::damaged() const {
  return std::any_of(findings.begin(), findings.end(), [](const LogFinding& f) {
    return f.severity == LogFinding::Severity::kDamage;
  });
}

namespace log {

std::string seqs(std::uint64_t from, std::uint64_t to) {  // [from, to)
  if (to == from + 1) return "seq " + std::to_string(from);
  return "seqs " + std::to_string(from) + ".." + std::to_string(to - 1);
}

std::string base_name(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

namespace {

Found find_records(const std::string& data, std::uint64_t base) {
  // Format 1 decoding finds the records of both formats (format.h).
  Found f;
  const std::size_t size = data.size();
  std::size_t o = kSegmentHeaderSize;
  while (o + kUntimedRecordHeaderSize <= size) {
    const std::uint64_t seq = get64(data.data() + o + 8);
    if (seq >= base && seq <= base + size / kUntimedRecordHeaderSize &&
        (f.count == 0 || seq > f.last)) {
      const RecordView v = decode_record(data.data() + o, size - o, seq, false);
      if (v.kind == RecordView::kValid) {
        if (f.count++ == 0) f.first = seq;
        f.last = seq;
        o += v.size;
        continue;
      }
    }
    ++o;
  }
  return f;
}

using Severity = LogFinding::Severity;

void add(TopicInspection& t, Severity sev, std::string file, std::uint64_t offset,
         std::uint64_t length, std::string what, std::string advice, bool repairable = false) {
  t.findings.push_back(
      {sev, std::move(file), offset, length, std::move(what), std::move(advice), repairable});
}

const char* const kNothingToDo = "nothing to do: the writer repairs it when it next opens";
const char* const kUnsyncedAdvice =
    "nothing to do: in durability none a power cut takes what sync() had not reached (use "
    "a durable mode, or sync(), to keep it)";
const char* const kRepair = "run `sluice repair` (moves it to the quarantine; deletes nothing)";

Status read_channels(FileSystem& fs, const std::string& dir, TopicInspection& t) {
  const std::string cdir = dir + "/channels";
  auto names = fs.list(cdir);
  if (!names.ok()) return names.code() == StatusCode::kNotFound ? Status::Ok() : names.status();
  std::sort(names->begin(), names->end());
  for (const std::string& name : *names) {
    if (!name.ends_with(".pos")) continue;
    ChannelInspection c;
    c.name = name.substr(0, name.size() - 4);
    c.file = cdir + "/" + name;
    auto bytes = read_whole(fs, c.file);
    if (!bytes.ok()) {
      if (bytes.code() == StatusCode::kNotFound) continue;  // deleted meanwhile
      return bytes.status();
    }
    c.file_bytes = bytes->size();
    for (int i = 0; i < 2; ++i) {
      const std::size_t at = static_cast<std::size_t>(i) * kPositionSlotSize;
      if (at + kPositionSlotSize > bytes->size()) continue;
      const std::string_view slot(bytes->data() + at, kPositionSlotSize);
      PositionSlotInspection& s = c.slots[i];
      s.set = slot.find_first_not_of('\0') != std::string_view::npos;
      if (auto v = decode_position_slot(slot.data())) {
        s.valid = true;
        s.generation = v->generation;
        s.next_seq = v->next_seq;
      }
    }
    const PositionRead p = decode_positions(*bytes);
    switch (p.state) {
      case PositionState::kValid:
        c.state = ChannelInspection::State::kValid;
        c.next_seq = p.slot.next_seq;
        for (int i = 0; i < 2; ++i) {
          if (c.slots[i].valid && c.slots[i].generation == p.slot.generation) {
            c.current_slot = i;
            break;
          }
        }
        break;
      case PositionState::kUnset:
        c.state = ChannelInspection::State::kUnset;
        break;
      case PositionState::kDamaged:
        c.state = ChannelInspection::State::kDamaged;
        break;
    }
    t.channels.push_back(std::move(c));
  }
  return Status::Ok();
}

void read_notify(FileSystem& fs, const std::string& dir, TopicInspection& t) {
  auto f = fs.open(dir + "/NOTIFY", OpenMode::kRead);
  if (!f.ok()) return;
  char page[sizeof(NotifyPage)] = {};
  auto got = (*f)->pread(page, sizeof page, 0);
  if (!got.ok() || *got < sizeof page) return;
  NotifyPage p;
  std::memcpy(&p, page, sizeof p);  // native byte order, as the writer maps it
  t.has_notify = true;
  t.visible_seq = p.visible_seq;
  t.notify_closed = p.closed != 0;
}

Result<std::uint64_t> file_size(FileSystem& fs, const std::string& path) {
  auto f = fs.open(path, OpenMode::kRead);
  if (!f.ok()) return f.status();
  return (*f)->size();
}

// One segment with a valid header that recovery scanned.
Status describe_scanned(FileSystem& fs, const Scanned& s, std::uint64_t torn_bytes,
                        SegmentInspection& g) {
  g.file = s.path;
  g.base_seq = s.base_seq;
  g.header_valid = true;
  g.flags = s.flags;
  g.version = s.timed ? kFormatVersion : kUntimedFormatVersion;
  if (s.has_time) {
    g.first_time = time_of(s.first_time);
    g.last_time = time_of(s.last_time);
  }
  auto size = file_size(fs, s.path);
  if (!size.ok()) return size.status();
  g.file_bytes = *size;
  Scanned from_summary;
  g.summary = read_summary(fs, s.path, s.base_seq, *size, from_summary);
  std::uint64_t lost = 0;
  for (const Skip& k : s.skips) {
    lost += k.lost;
    g.damaged_bytes += k.to - k.from;
  }
  g.next_seq = s.next_seq;
  g.records = s.next_seq - s.base_seq >= lost ? s.next_seq - s.base_seq - lost : 0;
  if (g.records > 0) {
    g.first_seq = s.base_seq;
    if (!s.skips.empty() && s.skips.front().from == kSegmentHeaderSize) {
      g.first_seq += s.skips.front().lost;
    }
    g.last_seq = s.next_seq - 1;
  }
  if (s.torn && g.file_bytes > s.end) {
    const std::uint64_t tail = g.file_bytes - s.end;
    g.damaged_bytes += std::min(torn_bytes, tail);
    g.reserved_bytes = tail - std::min(torn_bytes, tail);
  }
  const std::uint64_t other = g.damaged_bytes + g.reserved_bytes;
  g.record_bytes = g.file_bytes > other ? g.file_bytes - other : 0;
  return Status::Ok();
}

Status describe_damaged(FileSystem& fs, const std::string& path, std::uint64_t base, Snapshot& snap,
                        SegmentInspection& g) {
  g.file = path;
  g.base_seq = base;
  auto data = read_whole(fs, path);
  if (!data.ok()) return data.status();
  g.file_bytes = data->size();
  if (data->size() >= kSegmentHeaderSize && decode_segment_header(data->data()) == base) {
    g.header_valid = true;  // an overlapping segment
    g.flags = segment_header_flags(data->data());
    g.version = segment_header_version(data->data());
  }
  const Found f = find_records(*data, base);
  snap.found[path] = f;
  g.records = f.count;
  g.first_seq = f.first;
  g.last_seq = f.last;
  g.next_seq = f.count > 0 ? f.last + 1 : base;
  g.damaged_bytes = g.file_bytes;
  return Status::Ok();
}

void segment_findings(const Snapshot& snap, const SegmentInspection& g, const Scanned* s,
                      const Scanned* prev, std::uint64_t torn_bytes, TopicInspection& t) {
  const Scan& scan = snap.scan;
  const std::string& path = g.file;
  if (s == nullptr) {  // not one readers use
    const std::string recs = g.records == 0 ? std::string("no record")
                                            : std::to_string(g.records) + " records (" +
                                                  seqs(g.first_seq, g.last_seq + 1) + ")";
    if (scan.damaged_newest == path) {
      add(t, Severity::kDamage, path, 0, g.file_bytes,
          "bad segment header before " + recs +
              ": the writer cannot open the topic (put and close fail)",
          "run `sluice repair` (moves the segment to the quarantine; its records are lost "
          "from delivery, the seqs continue after them)",
          true);
    } else if (scan.reuse_base == g.base_seq) {
      add(t, Severity::kNote, path, 0, g.file_bytes,
          "newest segment without a header and without records (a power cut while it was "
          "created)",
          kNothingToDo);
    } else if (std::find(scan.empty.begin(), scan.empty.end(), path) != scan.empty.end()) {
      add(t, Severity::kNote, path, 0, g.file_bytes,
          g.header_valid || !g.sealed
              ? "segment without records named inside the log (a roll failed and removed it, "
                "and a power cut undid the removal)"
              : "older segment without a header and without records (a power cut while it "
                "was created)",
          kNothingToDo);
    } else if (g.header_valid) {
      add(t, Severity::kDamage, path, 0, g.file_bytes,
          "segment overlaps the one before it: skipped whole, its " + recs + " not delivered",
          kRepair, true);
    } else {
      add(t, Severity::kDamage, path, 0, g.file_bytes,
          "bad segment header: skipped whole, its " + recs + " not delivered", kRepair, true);
    }
    return;
  }
  const auto unsynced_gap = [&] {
    return std::any_of(snap.report.truncated.begin(), snap.report.truncated.end(),
                       [&](const LogDamage& d) {
                         return d.file == path && d.offset == 0 && d.what.ends_with(kUnsyncedGap);
                       });
  };
  if (prev != nullptr && s->base_seq > prev->next_seq && !g.after_gap && unsynced_gap()) {
    add(t, Severity::kNote, path, 0, 0,
        seqs(prev->next_seq, s->base_seq) +
            " lost with the unsynced tail of the segment before: a power cut, as it was sealed "
            "without a sync (durability none), or else a segment file removed",
        kUnsyncedAdvice);
  } else if (prev != nullptr && s->base_seq > prev->next_seq && !g.after_gap) {
    add(t, Severity::kDamage, path, 0, 0,
        seqs(prev->next_seq, s->base_seq) +
            " missing before this segment (a segment file lost or removed?): those records "
            "are not delivered",
        "restore the missing segment from a backup if there is one; else `sluice repair` "
        "records the gap as a known loss",
        true);
  }
  if ((g.flags & ~(kSegmentAfterGap | kSegmentClosed | kSegmentAfterUnsynced)) != 0) {
    add(t, Severity::kDamage, path, 24, 4,
        "unknown header flags " + std::to_string(g.flags) + " (written by a newer sluice?)",
        "read it with the sluice version that wrote it");
  }
  if (g.closed_mark && (g.sealed || g.records > 0)) {
    add(t, Severity::kDamage, path, 0, g.file_bytes,
        g.sealed ? "closed mark on a segment that is not the newest: appends followed a close"
                 : "closed mark on a segment that holds records",
        "the queue's end of stream is uncertain: inspect it; readers stop at the mark");
  }
  if (s->time_backwards > 0) {
    add(t, Severity::kNote, path, 0, 0,
        std::to_string(s->time_backwards) + " record(s) with an append time before the one " +
            "before them, from seq " + std::to_string(s->first_backwards_seq) +
            " (a writer of this format never does that: the file was changed or copied in)",
        "nothing to do for delivery; a search by time may land after some records of that "
        "time");
  }
  for (const Skip& k : s->skips) {
    // Recovery's report names the seqs lost ("corrupt: seqs 17..20 lost"), or
    // calls them a power cut's in a segment sealed without a sync.
    std::string lost = "no whole record lost";
    bool unsynced = false;
    for (const LogDamage& d : snap.report.corrupt) {
      if (d.file == path && d.offset == k.from && d.what.starts_with("corrupt: ")) {
        lost = d.what.substr(9);
      }
    }
    for (const LogDamage& d : snap.report.truncated) {
      if (d.file == path && d.offset == k.from && d.what.starts_with(kUnsyncedLoss)) {
        unsynced = true;
        if (d.what.starts_with(std::string(kUnsyncedLoss) + ": ")) {
          lost = d.what.substr(kUnsyncedLoss.size() + 2);
        }
      }
    }
    const bool to_end = k.to >= g.file_bytes && k.lost == 0;
    if (unsynced) {
      add(t, Severity::kNote, path, k.from, k.to - k.from,
          std::string(to_end ? "unsynced tail" : "unsynced bytes") +
              " lost in a power cut (zeroed sectors; the segment was sealed without a sync, in "
              "durability none): " +
              (to_end ? std::string("its later records are lost") : lost + "; readers skip them"),
          kUnsyncedAdvice);
      continue;
    }
    const std::string what =
        to_end ? "corrupt from here to the end of the segment: its later records are lost"
               : "corrupt bytes (checksum or length wrong): " + lost + "; readers skip them";
    add(t, Severity::kDamage, path, k.from, k.to - k.from, what,
        "nothing to do for delivery; a crash does not do this: check the disk (dmesg, "
        "smartctl); the bytes stay in place for inspection");
  }
  if (torn_bytes > 0) {
    add(t, Severity::kNote, path, s->end, torn_bytes,
        "torn tail: a write that did not complete (a crash, or a write in progress)", kNothingToDo);
  }
}

void channel_findings(ChannelInspection& c, const TopicInspection& t,
                      std::vector<LogFinding>& out) {
  const auto note = [&](Severity sev, std::string what, std::string advice, bool repairable) {
    out.push_back({sev, c.file, 0, c.file_bytes, "channel '" + c.name + "': " + std::move(what),
                   std::move(advice), repairable});
  };
  switch (c.state) {
    case ChannelInspection::State::kDamaged:
      note(Severity::kDamage, "position file has no valid slot: the channel cannot open",
           "run `sluice repair` (moves the file to the quarantine; the channel then starts "
           "again at the oldest record and redelivers)",
           true);
      return;
    case ChannelInspection::State::kUnset:
      note(Severity::kNote,
           "position file never reached the disk (a power cut as the channel was created): "
           "it starts at the oldest record",
           "nothing to do", false);
      return;
    case ChannelInspection::State::kValid:
      break;
  }
  const int other = 1 - c.current_slot;
  if (c.slots[other].set && !c.slots[other].valid) {
    note(Severity::kDamage,
         "slot " + std::to_string(other) + " of the position file is damaged (slot " +
             std::to_string(c.current_slot) + " is in use: generation " +
             std::to_string(c.slots[c.current_slot].generation) + ", next seq " +
             std::to_string(c.next_seq) + ")",
         "run `sluice repair` (copies the file to the quarantine, then rewrites the slot)", true);
  }
  if (c.next_seq > t.next_seq) {
    note(Severity::kNote,
         "position " + std::to_string(c.next_seq) + " is past the end of the log (" +
             std::to_string(t.next_seq) +
             "): a power cut took records it had passed; seqs continue after it",
         kNothingToDo, false);
  } else if (c.next_seq < t.first_seq) {
    note(Severity::kNote,
         "position " + std::to_string(c.next_seq) + " is before the oldest retained record (" +
             std::to_string(t.first_seq) + "): a retention cap deleted " +
             seqs(c.next_seq, t.first_seq) + " before it read them",
         "nothing to do (counted as dropped when the channel opens)", false);
  }
}

}  // namespace

Result<Snapshot> look(FileSystem& fs, const std::string& dir, const TopicOptions& opt,
                      bool beside_writer) {
  if (Status s = validate(opt); !s.ok()) return s;
  if (!fs.is_dir(dir)) return Status(StatusCode::kNotFound, "no directory " + dir);
  Snapshot snap;
  TopicInspection& t = snap.out;
  t.dir = dir;
  // Positions before segments: what a live writer appends meanwhile only
  // makes the log longer than the positions we hold.
  if (Status s = read_channels(fs, dir, t); !s.ok()) return s;
  read_notify(fs, dir, t);
  RecoveryReport& report = snap.report;
  for (int attempt = 0;; ++attempt) {
    report = {};
    auto scan = scan_topic(fs, dir, report);
    if (scan.ok()) {
      snap.scan = std::move(*scan);
      break;
    }
    // A live writer's retention deleted a segment between list and read.
    if (scan.code() != StatusCode::kNotFound || attempt == 4) return scan.status();
  }
  // A batch being copied in, beside a live writer whose NOTIFY count (read
  // before the scan) is therefore current.
  struct InFlight {
    std::string file;
    std::uint64_t offset = 0;
    int pid = 0;
  };
  std::optional<InFlight> in_flight;
  if (beside_writer && t.has_notify && !snap.scan.segments.empty()) {
    auto canon = fs.canonical(dir);
    if (const int pid = live_writer(fs, canon.ok() ? *canon : dir); pid != 0) {
      if (auto cut = drop_writes_in_progress(snap.scan, report, t.visible_seq)) {
        in_flight = InFlight{snap.scan.segments.back().path, *cut, pid};
      }
    }
  }
  const Scan& scan = snap.scan;
  std::map<std::uint64_t, std::string> damaged;  // files without a scanned segment
  for (const std::string& p : scan.skipped) damaged[*parse_segment_name(base_name(p))] = p;
  for (const std::string& p : scan.empty) damaged[*parse_segment_name(base_name(p))] = p;
  if (scan.damaged_newest) {
    damaged[*parse_segment_name(base_name(*scan.damaged_newest))] = *scan.damaged_newest;
  }
  if (scan.reuse_base) damaged[*scan.reuse_base] = dir + "/" + segment_name(*scan.reuse_base);
  if (scan.segments.empty() && damaged.empty() && t.channels.empty() && !t.has_notify &&
      !fs.is_dir(dir + "/channels")) {
    return Status(StatusCode::kNotFound, "no segment files, no channels/, no NOTIFY in " + dir);
  }
  const auto torn_of = [&](const std::string& path) {
    for (const LogDamage& d : report.truncated) {
      if (d.file == path && d.what == "torn tail") return d.length;
    }
    return std::uint64_t{0};
  };
  // Every segment file in base order: scanned ones and damaged ones.
  std::map<std::uint64_t, const Scanned*> scanned;
  for (const Scanned& s : scan.segments) scanned[s.base_seq] = &s;
  std::vector<std::uint64_t> bases;
  for (const auto& [b, s] : scanned) bases.push_back(b);
  for (const auto& [b, p] : damaged) bases.push_back(b);
  std::sort(bases.begin(), bases.end());
  bases.erase(std::unique(bases.begin(), bases.end()), bases.end());
  for (std::size_t i = 0; i < bases.size(); ++i) {
    SegmentInspection g;
    auto it = scanned.find(bases[i]);
    Status st = it != scanned.end()
                    ? describe_scanned(fs, *it->second, torn_of(it->second->path), g)
                    : describe_damaged(fs, damaged[bases[i]], bases[i], snap, g);
    if (!st.ok()) return st;
    g.after_gap = (g.flags & kSegmentAfterGap) != 0;
    g.closed_mark = (g.flags & kSegmentClosed) != 0;
    g.sealed = i + 1 < bases.size();
    t.bytes += g.file_bytes;
    t.segments.push_back(std::move(g));
  }
  const Scanned* prev = nullptr;
  for (const SegmentInspection& g : t.segments) {
    auto it = scanned.find(g.base_seq);
    const Scanned* s = it != scanned.end() ? it->second : nullptr;
    segment_findings(snap, g, s, prev, s != nullptr ? torn_of(s->path) : 0, t);
    if (s != nullptr) {
      t.records += g.records;
      prev = s;
    }
  }
  if (in_flight) {
    add(t, Severity::kNote, in_flight->file, in_flight->offset, 0,
        "a write in progress: the writer (" +
            (in_flight->pid > 0 ? "PID " + std::to_string(in_flight->pid) : "another process") +
            ") had published up to seq " + std::to_string(t.visible_seq) +
            "; what follows was being copied in, not read",
        "nothing to do (verify again when the writer is idle to read those bytes too)");
  }
  for (const std::string& p : scan.tmp) {
    add(t, Severity::kNote, p, 0, 0, "leftover temporary file", kNothingToDo);
  }
  if (!scan.segments.empty()) {
    t.first_seq = scan.segments.front().base_seq;
    t.next_seq = scan.segments.back().next_seq;
  }
  if (scan.reuse_base) {
    if (scan.segments.empty()) t.first_seq = *scan.reuse_base;
    t.next_seq = std::max(t.next_seq, *scan.reuse_base);
  }
  t.closed = scan.closed;
  std::vector<LogFinding> chan;
  for (ChannelInspection& c : t.channels) {
    if (c.state == ChannelInspection::State::kValid) {
      c.unacked = t.next_seq - std::clamp(c.next_seq, t.first_seq, t.next_seq);
    } else {
      c.unacked = t.next_seq - t.first_seq;
    }
    channel_findings(c, t, chan);
  }
  t.findings.insert(t.findings.end(), chan.begin(), chan.end());
  return snap;
}

}  // namespace log

Result<TopicInspection> inspect_topic(const std::string& dir, TopicOptions options) {
  auto snap = log::look(log::posix_file_system(), dir, options, /*beside_writer=*/true);
  if (!snap.ok()) return snap.status();
  return std::move(snap->out);
}

}  // namespace sluice
