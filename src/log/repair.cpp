// repair_topic (sluice/log/inspect.h): moves what stops the writer or a
// channel from opening into a quarantine directory, and records lost seqs
// as known gaps (the `after gap` header flag, docs/log_format.md). Under the
// topic's writer lock; every step is one rename or one synced write, so a
// crash between steps leaves a topic the next repair (or open) handles. A
// file moved or copied into the quarantine has its entry there synced
// before anything else is done, so a power cut never loses it
// (tests/log/repair_edges_test.cpp cuts at every call).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <functional>
#include <memory>

#include "log/format.h"
#include "log/inspect.h"
#include "log/position.h"
#include "log/segment.h"
#include "log/topic_impl.h"

namespace sluice {
namespace log {
namespace {

using Severity = LogFinding::Severity;

std::string utc_stamp() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

// A step of the plan: described first, applied unless dry-run.
struct Step {
  TopicRepairAction action;
  std::function<Status()> apply;
};

// Rewrites a segment header with `flags`, synced, keeping its format
// version (its records are in that format).
Status rewrite_header(FileSystem& fs, const std::string& path, std::uint64_t base,
                      std::uint32_t flags, std::uint32_t version) {
  auto f = fs.open(path, OpenMode::kReadWrite);
  if (!f.ok()) return f.status();
  char header[kSegmentHeaderSize];
  encode_segment_header(header, base, flags, version);
  if (Status s = (*f)->pwrite(header, sizeof header, 0); !s.ok()) return s;
  return (*f)->sync();
}

Status copy_file(FileSystem& fs, const std::string& from, const std::string& to) {
  auto data = read_whole(fs, from);
  if (!data.ok()) return data.status();
  auto f = fs.open(to, OpenMode::kCreateNew);
  if (!f.ok()) return f.status();
  if (Status s = (*f)->pwrite(data->data(), data->size(), 0); !s.ok()) return s;
  return (*f)->sync();
}

// The seqs a moved segment held, for its action's line.
std::string holding(const Found& f) {
  if (f.count == 0) return "no record";
  return std::to_string(f.count) + " records (" + seqs(f.first, f.last + 1) + ")";
}

}  // namespace

Result<TopicRepairReport> repair_topic(FileSystem& fs, const std::string& dir,
                                       const TopicRepairOptions& ro, const TopicOptions& opt) {
  if (Status s = validate(opt); !s.ok()) return s;
  if (!fs.is_dir(dir)) return Status(StatusCode::kNotFound, "no directory " + dir);
  // The writer's role: no writer may append (or recover) while we move its
  // segments. LOCK is created only in a topic (one copied without it).
  std::unique_ptr<File> lock;
  // Registered as this process's writer while it holds LOCK: a topic of
  // this process opened meanwhile is refused the writer's role, and a
  // reader's probe (live_writer) names this process.
  auto canon = fs.canonical(dir);
  const WritingHere here(fs, canon.ok() ? *canon : dir);
  if (!here.held()) {
    return Status(StatusCode::kInUse, "topic " + dir +
                                          " is open for writing in this process (PID " +
                                          std::to_string(getpid()) + ")");
  }
  {
    auto f = fs.open(dir + "/LOCK", OpenMode::kReadWrite);
    if (!f.ok() && f.code() == StatusCode::kNotFound) {
      if (auto t = look(fs, dir, opt); !t.ok()) return t.status();
      if (!ro.dry_run) f = fs.open(dir + "/LOCK", OpenMode::kCreate);
    }
    if (f.ok()) {
      if (Status s = (*f)->lock("topic " + dir + " is open for writing"); !s.ok()) return s;
      lock = std::move(*f);
    } else if (!(ro.dry_run && f.code() == StatusCode::kNotFound)) {
      return f.status();
    }
  }
  auto snap = look(fs, dir, opt);
  if (!snap.ok()) return snap.status();
  const TopicInspection& t = snap->out;
  const Scan& scan = snap->scan;

  TopicRepairReport out;
  out.dry_run = ro.dry_run;
  // Beside the topic ("dir/" is "dir"), never inside it.
  std::string beside = dir;
  while (beside.size() > 1 && beside.back() == '/') beside.pop_back();
  const std::string stem =
      (ro.quarantine_dir.empty() ? beside + ".quarantine" : ro.quarantine_dir) + "/" + utc_stamp();
  std::string q = stem;
  for (int i = 2; fs.is_dir(q); ++i) q = stem + "-" + std::to_string(i);
  std::vector<Step> steps;
  bool quarantine = false;
  const auto move = [&](const std::string& path, std::string why, std::uint64_t records) {
    quarantine = true;
    const std::string to = q + "/" + base_name(path);
    steps.push_back(
        {{"move " + base_name(path) + " to the quarantine: " + std::move(why), path, to, records},
         [&fs, path, to, &q] {
           // The new entry is durable before anything can make the old
           // one's removal durable: a power cut leaves the file in one
           // place or both, never in neither.
           if (Status s = fs.rename(path, to); !s.ok()) return s;
           return fs.sync_dir(q);
         }});
  };

  // Channels first: take each lock we need before anything changes.
  std::vector<std::unique_ptr<File>> pos_locks;
  bool pos_moved = false;
  for (const ChannelInspection& c : t.channels) {
    const bool damaged = c.state == ChannelInspection::State::kDamaged;
    const bool bad_slot = c.state == ChannelInspection::State::kValid &&
                          c.slots[1 - c.current_slot].set && !c.slots[1 - c.current_slot].valid;
    if (!damaged && !bad_slot) continue;
    auto f = fs.open(c.file, OpenMode::kReadWrite);
    if (!f.ok()) {
      if (f.code() == StatusCode::kNotFound) continue;  // deleted since the look
      return f.status();
    }
    if (Status s = (*f)->lock("channel '" + c.name + "' is in use"); !s.ok()) return s;
    File* file = f->get();
    pos_locks.push_back(std::move(*f));
    // Deleted between the open and the lock (delete_channel holds the lock
    // while it removes the name): the file at the name, if any, is then not
    // the one we hold, and nothing of that channel is left to repair.
    {
      auto at_name = fs.open(c.file, OpenMode::kRead);
      if (!at_name.ok() && at_name.code() != StatusCode::kNotFound) return at_name.status();
      Result<int> holder = at_name.ok() ? (*at_name)->lock_holder() : Result<int>(0);
      if (!holder.ok()) return holder.status();
      if (*holder != static_cast<int>(::getpid())) continue;
    }
    // Looked at before the lock: a reader may have written since (and left).
    // Its write goes to the slot not in use, the damaged one, so any change
    // of state or generation means there is nothing left to repair here;
    // writing the old position over it would take its acknowledgements back.
    auto now = read_position(*file);
    if (!now.ok()) return now.status();
    if (damaged ? now->state != PositionState::kDamaged
                : now->state != PositionState::kValid ||
                      now->slot.generation != c.slots[c.current_slot].generation) {
      continue;
    }
    if (damaged) {
      move(c.file,
           "channel '" + c.name +
               "' position file has no valid slot (the channel "
               "starts again at the oldest record and redelivers)",
           0);
      pos_moved = true;
      continue;
    }
    quarantine = true;
    const std::string copy = q + "/" + base_name(c.file);
    steps.push_back({{"copy " + base_name(c.file) + " to the quarantine", c.file, copy, 0},
                     [&fs, from = c.file, copy, &q] {
                       // Durable (its directory entry too) before the slot
                       // it keeps is rewritten.
                       if (Status s = copy_file(fs, from, copy); !s.ok()) return s;
                       return fs.sync_dir(q);
                     }});
    const std::uint64_t gen = c.slots[c.current_slot].generation + 1;
    const std::uint64_t next = c.next_seq;
    steps.push_back(
        {{"rewrite the damaged slot " + std::to_string(gen % 2) + " of channel '" + c.name +
              "' (generation " + std::to_string(gen) + ", next seq " + std::to_string(next) + ")",
          c.file, "", 0},
         [file, gen, next] {
           if (Status s = write_position(*file, gen, next); !s.ok()) return s;
           return file->sync();
         }});
  }

  // The newest segment's header is damaged but records follow it: an empty
  // segment flagged `after gap` takes over after its last seq (no seq is
  // used twice), then the damaged one moves out. In this order a crash in
  // between leaves it an older skipped segment, which opens.
  std::uint64_t prev_next = scan.segments.empty() ? 0 : scan.segments.back().next_seq;
  if (scan.damaged_newest) {
    const std::string path = *scan.damaged_newest;
    const std::uint64_t base = *parse_segment_name(base_name(path));
    const Found f = snap->found.at(path);
    const std::uint64_t from = scan.segments.empty() ? base : std::min(prev_next, base);
    const std::uint64_t next = std::max({f.count > 0 ? f.last + 1 : base + 1, base + 1, from});
    out.records_lost += next - from;
    steps.push_back(
        {{"create " + segment_name(next) + " flagged `after gap`: appends continue at seq " +
              std::to_string(next) + " (" + seqs(from, next) + " lost from delivery)",
          dir + "/" + segment_name(next), "", 0},
         [&fs, dir, next] {
           auto seg = create_segment(fs, dir, next, /*sync=*/true, kSegmentAfterGap);
           if (!seg.ok()) return seg.status();
           return fs.sync_dir(dir);
         }});
    move(path, "bad segment header before " + holding(f), f.count);
  }
  // Older segments readers skip whole.
  const std::uint64_t first_valid =
      scan.segments.empty() ? ~std::uint64_t{0} : scan.segments.front().base_seq;
  const std::uint64_t last_valid = scan.segments.empty() ? 0 : scan.segments.back().base_seq;
  for (const std::string& path : scan.skipped) {
    const Found f = snap->found.at(path);
    const std::uint64_t base = *parse_segment_name(base_name(path));
    // Between two scanned segments its seqs count in the gap flagged below;
    // after the last one, in the range a damaged newest segment's
    // replacement skips (above), if there is one.
    if (base < first_valid || (base > last_valid && !scan.damaged_newest)) {
      out.records_lost += f.count;
    }
    move(path, "skipped whole by readers (bad header or overlap), " + holding(f), f.count);
  }
  // Gaps between the segments readers use: a known loss from now on.
  for (std::size_t i = 1; i < scan.segments.size(); ++i) {
    const Scanned& a = scan.segments[i - 1];
    const Scanned& b = scan.segments[i];
    if (b.base_seq <= a.next_seq || (b.flags & kSegmentAfterGap) != 0) continue;
    out.records_lost += b.base_seq - a.next_seq;
    steps.push_back({{"flag " + base_name(b.path) +
                          " `after gap`: " + seqs(a.next_seq, b.base_seq) + " are a known loss",
                      b.path, "", 0},
                     [&fs, path = b.path, base = b.base_seq, flags = b.flags,
                      version = b.timed ? kFormatVersion : kUntimedFormatVersion] {
                       return rewrite_header(fs, path, base, flags | kSegmentAfterGap, version);
                     }});
  }

  for (const LogFinding& f : t.findings) {
    if (f.severity == Severity::kDamage && !f.repairable) out.left.push_back(f);
  }
  for (const Step& s : steps) out.actions.push_back(s.action);
  if (quarantine) out.quarantine = q;
  if (ro.dry_run || steps.empty()) return out;

  if (quarantine) {
    if (Status s = create_dirs(fs, q); !s.ok()) return s;
  }
  for (const Step& s : steps) {
    if (Status st = s.apply(); !st.ok()) return st;
  }
  if (quarantine) {
    // The renames are durable in both directories before we report them
    // (the quarantine's side already is: each step synced it).
    if (Status s = fs.sync_dir(dir); !s.ok()) return s;
    if (pos_moved) {
      if (Status s = fs.sync_dir(dir + "/channels"); !s.ok()) return s;
    }
  }
  // What is left, as a fresh look sees it.
  auto after = look(fs, dir, opt);
  if (!after.ok()) return after.status();
  out.left.clear();
  for (const LogFinding& f : after->out.findings) {
    if (f.severity == Severity::kDamage) out.left.push_back(f);
  }
  return out;
}

}  // namespace log

Result<TopicRepairReport> repair_topic(const std::string& dir, const TopicRepairOptions& repair,
                                       TopicOptions options) {
  return log::repair_topic(log::posix_file_system(), dir, repair, options);
}

}  // namespace sluice
