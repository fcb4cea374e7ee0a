// Topic: opening (locks, recovery, repairs) and the public API over the
// layers in topic_core.h.
#include "sluice/log/topic.h"

#include <unistd.h>

#include <algorithm>
#include <map>
#include <utility>

#include "log/position.h"
#include "log/summary.h"
#include "log/topic_impl.h"
#include "sluice/log/channel.h"

namespace sluice {

using log::kSegmentHeaderSize;
using log::MutexLock;

namespace {

// In-process registry of topics open for writing: a second open here is
// refused as "open in this process" before it tries LOCK. Each entry holds
// the opener's pid: a forked child is another process.
std::mutex g_open_mu;
std::map<std::pair<const log::FileSystem*, std::string>, pid_t> g_open_dirs;

std::string seq_range(std::uint64_t from, std::uint64_t to) {
  return "seqs " + std::to_string(from) + ".." + std::to_string(to - 1);
}

}  // namespace

Topic::Impl::~Impl() {
  close();
  if (!registered_) return;
  std::lock_guard g(g_open_mu);
  if (auto it = g_open_dirs.find({&fs, dir}); it != g_open_dirs.end() && it->second == getpid()) {
    g_open_dirs.erase(it);
  }
}

Result<std::unique_ptr<Topic>> Topic::Impl::open(log::FileSystem& fs, const std::string& dir,
                                                 const TopicOptions& options,
                                                 const log::OpenHooks& hooks) {
  if (Status s = log::validate(options); !s.ok()) return s;
  if (options.read_only) {
    if (!fs.is_dir(dir)) return Status(StatusCode::kNotFound, "no topic in " + dir);
  } else if (hooks.existing_only) {
    // One level, not create_dirs: if dir goes meanwhile, this fails
    // (kNotFound) rather than making it again.
    if (!fs.is_dir(dir)) return Status(StatusCode::kNotFound, "no topic in " + dir);
    if (!fs.is_dir(dir + "/channels")) {
      if (Status s = fs.create_dir(dir + "/channels");
          !s.ok() && s.code() != StatusCode::kAlreadyExists) {
        if (!fs.is_dir(dir)) return Status(StatusCode::kNotFound, "no topic in " + dir);
        return s;
      }
    }
  } else if (Status s = log::create_dirs(fs, dir + "/channels"); !s.ok()) {
    return s;
  }
  auto canon = fs.canonical(dir);
  if (!canon.ok()) return canon.status();
  auto impl = std::make_unique<Impl>(fs, *canon, options, options.read_only);
  impl->hooks = hooks;
  Status s = options.read_only ? impl->open_reader() : impl->open_writer();
  if (!s.ok()) return s;
  return std::unique_ptr<Topic>(new Topic(std::move(impl)));
}

Status Topic::Impl::open_reader() {
  // The writer's published count, read before the scan: every record below
  // it was whole while the scan read it. (No NOTIFY yet: no writer has
  // published anything, and the page is made below, once the topic is known
  // to exist.)
  std::uint64_t published = 0;
  const bool had_notify = fs.exists(dir + "/NOTIFY");
  if (had_notify) {
    if (Status s = notify.open(fs, dir); !s.ok()) return s;
    published = notify.visible();
  }
  auto scan = log::scan_topic(fs, dir, report, /*use_summaries=*/true);
  if (!scan.ok()) return scan.status();
  if (scan->segments.empty()) return {StatusCode::kNotFound, "no topic in " + dir};
  report.truncated.clear();  // a torn tail may be a write in progress
  report.removed.clear();
  scan->reuse_base.reset();  // the writer's to repair
  // A gap past what the writer had published may be a batch being copied in
  // (seen 2026-11-26: a reader process opened beside a writer appending 12
  // KiB batches skipped the first records of a batch as corrupt, silently).
  // The view stops there and refresh() reads on, only what the writer
  // published, stopping at real damage with kCorruption (Segment::damaged_at).
  // A stale count (the page is not synced) only stops the view early.
  (void)log::drop_writes_in_progress(*scan, report, published);
  // Whole records past it: written, not yet synced and published. Without a
  // live writer the count may be stale (the page is never synced; a power
  // cut may leave an older one) and what is on disk is what the next
  // writer's recovery keeps.
  if (had_notify && scan->segments.back().next_seq > published && log::live_writer(fs, dir) != 0) {
    if (Status s = log::cut_unpublished(fs, *scan, report, published); !s.ok()) {
      return s;
    }
  }
  if (!had_notify) {
    if (Status s = notify.open(fs, dir); !s.ok()) return s;
  }
  MutexLock lk(mu);
  if (Status s = adopt(*scan); !s.ok()) return s;
  first_seq = segs.front()->base_seq;
  visible_seq = next_seq;
  if (scan->closed) closed.store(true, std::memory_order_release);
  return Status::Ok();
}

Status Topic::Impl::open_writer() {
  {
    std::lock_guard g(g_open_mu);
    auto [it, fresh] = g_open_dirs.try_emplace({&fs, dir}, getpid());
    if (!fresh && it->second != getpid()) {
      it->second = getpid();  // inherited through fork: not open in this process
      fresh = true;
    }
    if (!fresh) {
      return {StatusCode::kInUse, "topic " + dir + " is already open in this process (PID " +
                                      std::to_string(getpid()) + ")"};
    }
    registered_ = true;
  }
  for (int attempt = 0;; ++attempt) {
    auto lock = fs.open(dir + "/LOCK", log::OpenMode::kCreate);
    if (!lock.ok()) return lock.status();
    if (Status s = (*lock)->lock("topic " + dir + " is open for writing"); !s.ok()) return s;
    // The topic may have been deleted and made again between our open and
    // our lock (the store renames a queue away, then creates it anew): our
    // lock would then be on a file nobody reaches, and a second writer
    // would lock the new LOCK beside us. The LOCK at the path now must be
    // the one we locked: held by this process.
    auto at_path = fs.open(dir + "/LOCK", log::OpenMode::kRead);
    if (!at_path.ok() && at_path.code() != StatusCode::kNotFound) return at_path.status();
    Result<int> holder = at_path.ok() ? (*at_path)->lock_holder() : Result<int>(0);
    if (!holder.ok()) return holder.status();
    if (*holder == static_cast<int>(::getpid())) {
      lock_file_ = std::move(*lock);
      break;
    }
    if (attempt == 8) {
      return {StatusCode::kInUse, "topic " + dir + " is being deleted and made again meanwhile"};
    }
  }
  if (Status s = notify.open(fs, dir); !s.ok()) return s;

  auto scan = log::scan_topic(fs, dir, report, /*use_summaries=*/true);
  if (!scan.ok()) return scan.status();
  if (scan->damaged_newest) {
    return {StatusCode::kCorruption,
            "segment " + *scan->damaged_newest +
                " has a damaged header but holds records: appends cannot continue after it; "
                "move it out of the topic (verify_topic() describes the damage)"};
  }
  auto hwm = highest_position();
  if (!hwm.ok()) return hwm.status();
  std::uint64_t synced = 0;
  {
    MutexLock lk(mu);
    // Closed: appends stay refused. The mark stays the newest segment (it is
    // adopted as the last one, and nothing is ever written to it).
    closing = scan->closed;
    if (Status s = repair(*scan); !s.ok()) return s;
    if (Status s = adopt(*scan); !s.ok()) return s;
    if (segs.empty()) {
      auto seg = log::create_segment(fs, dir, 0, /*sync=*/true, 0, write_version());
      if (!seg.ok()) return seg.status();
      segs.push_back(*seg);
      disk_bytes = kSegmentHeaderSize;
      if (Status s = fs.sync_dir(dir); !s.ok()) return s;
    }
    if (Status s = adopt_last(); !s.ok()) return s;
    // What recovery kept is durable before anyone sees it (after a process
    // crash, written records may not have been synced yet).
    if (Status s = sync_locked(); !s.ok()) return s;
    summarize_read_segments(*scan);
    if (*hwm > next_seq && !closing) {  // (closing: the log was synced before the mark)
      report.truncated.push_back({segs.back()->path, 0, 0,
                                  seq_range(next_seq, *hwm) +
                                      " lost with an unsynced tail that channels had passed; "
                                      "seqs continue after them"});
      if (Status s = skip_to(*hwm); !s.ok()) return s;
      if (Status s = sync_locked(); !s.ok()) return s;  // kNone defers the roll's syncs
    }
    // Records from now on carry their append time: a format 1 last segment
    // (an older sluice wrote it) takes no more.
    if (!segs.back()->timed && !hooks.untimed && !closing) {
      if (Status s = upgrade_last(); !s.ok()) return s;
      if (Status s = sync_locked(); !s.ok()) return s;  // kNone defers a roll's syncs
    }
    first_seq = segs.front()->base_seq;
    publish(*segs.back(), segs.back()->written, next_seq);
    synced = next_seq;
    if (closing) {
      closed.store(true, std::memory_order_release);
      notify.close();  // the page may have been recreated since the close
    }
  }
  start(synced);
  return Status::Ok();
}

// Older segments recovery had to read (no summary yet: an older sluice, or
// a roll without sync) get one, so the next open need not read them. Not in
// kNone, whose sealed segments may not be on disk yet.
void Topic::Impl::summarize_read_segments(const log::Scan& scan) {
  if (opt.durability == Durability::kNone) return;
  for (std::size_t i = 0; i + 1 < scan.segments.size() && i + 1 < segs.size(); ++i) {
    const log::Scanned& s = scan.segments[i];
    // The damage found is in segs[i]->skips: adopt() moved s.skips there.
    if (!s.verified || !segs[i]->skips.empty() || s.torn) continue;  // summarized, or damaged
    (void)log::write_summary(fs, *segs[i], s.next_seq, s.last_time);
  }
}

Status Topic::Impl::repair(log::Scan& scan) {
  bool removed = false;
  for (const auto& path : scan.stale_summaries) (void)fs.remove(path);
  for (const auto& path : scan.tmp) removed |= fs.remove(path).ok();
  for (const auto& path : scan.empty) removed |= fs.remove(path).ok();
  return removed ? fs.sync_dir(dir) : Status::Ok();
}

Status Topic::Impl::adopt(log::Scan& scan) {
  const bool writer = !reader;
  for (std::size_t i = 0; i < scan.segments.size(); ++i) {
    auto& s = scan.segments[i];
    const bool last = i + 1 == scan.segments.size() && !scan.reuse_base;
    const bool writable = writer && last;
    auto f = fs.open(s.path, writable ? log::OpenMode::kReadWrite : log::OpenMode::kRead);
    if (!f.ok()) return f.status();
    if (writable && s.torn) {
      if (Status st = (*f)->truncate(s.end); !st.ok()) return st;
    }
    auto seg = std::make_shared<log::Segment>();
    seg->base_seq = s.base_seq;
    seg->path = s.path;
    seg->file = std::move(*f);
    seg->end.store(s.end);
    seg->written = s.end;
    seg->sealed.store(!last);
    seg->skips = std::move(s.skips);
    seg->verified.store(s.verified, std::memory_order_relaxed);  // before the segment is shared
    seg->timed = s.timed;
    seg->index = std::move(s.index);
    seg->has_time = s.has_time;
    seg->max_time = s.max_time;
    next_seq = s.next_seq;
    disk_bytes += s.end;
    segs.push_back(std::move(seg));
  }
  if (!scan.reuse_base || !writer) return Status::Ok();
  // The newest segment lost its header before any record reached it: its
  // name still says where seqs continue, so reuse it rather than lose that.
  const std::uint64_t base = *scan.reuse_base;
  if (!segs.empty() && base < next_seq) {
    return {StatusCode::kCorruption,
            "segment " + log::segment_name(base) + " overlaps " + segs.back()->path};
  }
  const bool gap = !segs.empty() && base > next_seq;
  if (gap) {
    report.truncated.push_back({segs.back()->path, segs.back()->written, 0,
                                seq_range(next_seq, base) + " lost with an unsynced tail"});
  }
  auto seg = std::make_shared<log::Segment>();
  seg->base_seq = base;
  seg->path = dir + "/" + log::segment_name(base);
  auto f = fs.open(seg->path, log::OpenMode::kReadWrite);
  if (!f.ok()) return f.status();
  seg->file = std::move(*f);
  seg->timed = !hooks.untimed;
  char header[kSegmentHeaderSize];
  log::encode_segment_header(header, base, gap ? log::kSegmentAfterGap : 0, write_version());
  Status st = seg->file->truncate(kSegmentHeaderSize);
  if (st.ok()) st = seg->file->pwrite(header, sizeof header, 0);
  if (st.ok()) st = seg->file->sync();
  if (!st.ok()) return st;
  next_seq = base;
  disk_bytes += kSegmentHeaderSize;
  segs.push_back(std::move(seg));
  return Status::Ok();
}

Result<std::uint64_t> Topic::Impl::highest_position() {
  auto names = fs.list(channel_dir());
  if (!names.ok()) return names.status();
  std::uint64_t hwm = 0;
  for (const std::string& name : *names) {
    if (!name.ends_with(".pos")) continue;
    auto f = fs.open(channel_dir() + "/" + name, log::OpenMode::kRead);
    if (!f.ok()) {
      if (f.code() == StatusCode::kNotFound) continue;  // deleted meanwhile
      return f.status();
    }
    auto p = log::read_position(**f);
    if (!p.ok()) return p.status();
    if (p->state == log::PositionState::kValid) hwm = std::max(hwm, p->slot.next_seq);
  }
  return hwm;
}

Topic::Topic(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Topic::~Topic() {
  if (impl_) impl_->close();  // channels may keep impl_ alive; appends end here
}

Result<std::unique_ptr<Topic>> Topic::open(const std::string& dir, TopicOptions options) {
  return Impl::open(log::posix_file_system(), dir, options);
}

Result<std::uint64_t> Topic::append(std::string_view payload, const Context& ctx) {
  return append_batch(std::span<const std::string_view>(&payload, 1), ctx);
}

Result<std::uint64_t> Topic::append_batch(std::span<const std::string_view> payloads,
                                          const Context& ctx) {
  Impl& t = *impl_;
  if (t.reader) {
    return Status(StatusCode::kInvalidArgument, "topic " + t.dir + " was opened read-only");
  }
  if (ctx.stop_requested()) return StatusCode::kCancelled;
  if (payloads.empty()) return Status(StatusCode::kInvalidArgument, "append_batch: no records");
  std::size_t bytes = 0;
  const std::size_t header = log::record_header_size(!t.hooks.untimed);
  for (std::string_view p : payloads) {
    if (p.size() > t.opt.max_message_bytes) {
      return Status(StatusCode::kInvalidArgument, "message of " + std::to_string(p.size()) +
                                                      " bytes exceeds max_message_bytes " +
                                                      std::to_string(t.opt.max_message_bytes));
    }
    bytes += header + p.size();
  }
  MutexLock lk(t.mu);
  if (t.closing) return Status(StatusCode::kClosed, "topic " + t.dir + " is closed");
  if (t.opt.max_unconsumed > 0) {
    if (Status s = t.wait_for_room(payloads.size(), ctx); !s.ok()) return s;
  }
  if (t.must_roll(bytes)) {
    if (Status s = t.roll(); !s.ok()) return s;
    // Channels in other processes release segments through their files:
    // look at them on every roll.
    if (Status s = t.trim_locked(); !s.ok()) return s;
  }
  auto first = t.write_batch(payloads, bytes);
  if (!first.ok()) return first;
  if (t.opt.durability == Durability::kGroupCommit) {
    lk.unlock();
    if (Status s = t.wait_durable(*first + payloads.size()); !s.ok()) return s;
  }
  return first;
}

Status Topic::sync() {
  Impl& t = *impl_;
  if (t.reader) return Status::Ok();  // nothing of ours to sync
  MutexLock lk(t.mu);
  return t.sync_locked();
}

Status Topic::close() {
  Impl& t = *impl_;
  if (t.reader) {
    return {StatusCode::kInvalidArgument,
            "topic " + t.dir + " was opened read-only: only its writer can close it"};
  }
  MutexLock lk(t.mu);
  return t.mark_closed();
}

bool Topic::closed() const {
  if (impl_->reader && !impl_->closed.load(std::memory_order_acquire)) impl_->refresh();
  return impl_->closed.load(std::memory_order_acquire);
}

std::uint64_t Topic::next_seq() const {
  MutexLock lk(impl_->mu);
  return impl_->next_seq;
}
std::uint64_t Topic::first_seq() const {
  MutexLock lk(impl_->mu);
  return impl_->first_seq;
}
std::uint64_t Topic::disk_bytes() const {
  MutexLock lk(impl_->mu);
  return impl_->disk_bytes;
}
Result<std::uint64_t> Topic::seq_at_time(std::chrono::system_clock::time_point t) const {
  if (impl_->reader) impl_->refresh();  // what the writer published since we looked
  return impl_->seq_at_time(t);
}
const RecoveryReport& Topic::recovery() const { return impl_->report; }
RetentionStats Topic::retention() const { return impl_->retention_stats(); }

TopicStats Topic::stats() const { return impl_->stats(); }

const std::string& Topic::dir() const { return impl_->dir; }
const TopicOptions& Topic::options() const { return impl_->opt; }

Result<std::vector<std::string>> Topic::channels() const {
  auto names = impl_->fs.list(impl_->channel_dir());
  if (!names.ok()) return names.status();
  std::vector<std::string> out;
  for (const std::string& name : *names) {
    if (name.ends_with(".pos")) out.push_back(name.substr(0, name.size() - 4));
  }
  std::sort(out.begin(), out.end());
  return out;
}

Status Topic::delete_channel(std::string_view name) {
  Impl& t = *impl_;
  {
    MutexLock lk(t.mu);
    if (t.open_channels.contains(name)) {
      return {StatusCode::kInUse, "channel '" + std::string(name) + "' is open"};
    }
  }
  // Open elsewhere (another process, another Topic here): its lock says so.
  // Held while the file goes, so no opener elsewhere takes it meanwhile.
  auto held = t.fs.open(t.channel_path(name), log::OpenMode::kReadWrite);
  if (!held.ok()) {
    if (held.code() == StatusCode::kNotFound) {
      return {StatusCode::kNotFound, "no channel '" + std::string(name) + "'"};
    }
    return held.status();
  }
  if (Status s = (*held)->lock("channel '" + std::string(name) + "' is in use"); !s.ok()) {
    return s;
  }
  if (Status s = t.fs.remove(t.channel_path(name)); !s.ok()) {
    if (s.code() == StatusCode::kNotFound) {
      return {StatusCode::kNotFound, "no channel '" + std::string(name) + "'"};
    }
    return s;
  }
  if (Status s = t.fs.sync_dir(t.channel_dir()); !s.ok()) return s;
  t.notify.acked();  // room, maybe
  return t.trim();   // it may have been the one holding old segments
}

Result<std::unique_ptr<Channel>> Topic::channel(std::string_view name) {
  return channel(name, ChannelOptions{});
}

}  // namespace sluice

namespace sluice::log {

Result<std::unique_ptr<Topic>> open_topic(FileSystem& fs, const std::string& dir,
                                          const TopicOptions& options, const OpenHooks& hooks) {
  return Topic::Impl::open(fs, dir, options, hooks);
}

bool open_for_writing_here(const FileSystem& fs, const std::string& canonical_dir) {
  std::lock_guard g(g_open_mu);
  auto it = g_open_dirs.find({&fs, canonical_dir});
  return it != g_open_dirs.end() && it->second == getpid();
}

WritingHere::WritingHere(const FileSystem& fs, std::string canonical_dir)
    : fs_(&fs), dir_(std::move(canonical_dir)) {
  std::lock_guard g(g_open_mu);
  auto [it, fresh] = g_open_dirs.try_emplace({fs_, dir_}, getpid());
  if (!fresh && it->second != getpid()) {  // inherited through fork
    it->second = getpid();
    fresh = true;
  }
  held_ = fresh;
}

WritingHere::~WritingHere() {
  if (!held_) return;
  std::lock_guard g(g_open_mu);
  if (auto it = g_open_dirs.find({fs_, dir_}); it != g_open_dirs.end() && it->second == getpid()) {
    g_open_dirs.erase(it);
  }
}

int live_writer(FileSystem& fs, const std::string& canonical_dir) {
  // A writer of this process registers before it locks LOCK: found here
  // without opening LOCK. Any file system of this process naming the same
  // directory counts (one may wrap the real disk). Closing the probe's
  // descriptor drops no lock (LOCK's is an open-file-description lock).
  std::lock_guard g(g_open_mu);
  for (const auto& [key, pid] : g_open_dirs) {
    if (key.second == canonical_dir && pid == getpid()) return static_cast<int>(pid);
  }
  auto f = fs.open(canonical_dir + "/LOCK", OpenMode::kRead);
  if (!f.ok()) return 0;
  auto pid = (*f)->lock_holder();
  return pid.ok() ? *pid : 0;
}

}  // namespace sluice::log
