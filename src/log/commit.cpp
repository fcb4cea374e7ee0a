#include "log/commit.h"

#include <algorithm>

#include "log/summary.h"

namespace sluice::log {

namespace {

// The longest a group-commit leader waits for appenders to come back.
constexpr std::chrono::microseconds kMaxGather{500};

}  // namespace

Commit::Commit(FileSystem& file_system, std::string directory, TopicOptions options, bool read_only)
    : TopicCore(file_system, std::move(directory), options, read_only) {
  MutexLock lk(mu);
  wopt_.segment_bytes = opt.segment_bytes;
  wopt_.preallocate = opt.preallocate;
}

Commit::~Commit() { close(); }

void Commit::close() {
  {
    MutexLock lk(mu);
    if (closed_) return;
    closed_ = true;
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (flusher_.joinable()) flusher_.join();
  MutexLock lk(mu);
  if (reader || segs.empty()) return;
  Segment& last = *segs.back();
  (void)trim_reserve(last);  // a crash leaves zeros, which recovery ignores
  if (opt.durability == Durability::kNone) return;
  // Synced and trimmed: the next open need not read it either, while it
  // stays this size (any append makes it longer).
  if (sync_locked().ok() && last.written > kSegmentHeaderSize && last.skips.empty()) {
    (void)write_summary(fs, last, next_seq, last.max_time);
  }
}

void Commit::start(std::uint64_t synced) {
  {
    MutexLock lk(mu);
    mark_synced(synced);
  }
  if (opt.durability == Durability::kInterval) flusher_ = std::thread([this] { flush_loop(); });
}

void Commit::flush_loop() {
  MutexLock lk(mu);
  while (!stopping_) {
    stop_cv_.wait_for(mu, opt.sync_interval);
    if (!dirty_ || stopping_ || !sync_failed_.ok()) continue;
    dirty_ = false;
    auto seg = segs.back();  // earlier segments were synced when they were sealed
    const std::uint64_t target = next_seq;
    lk.unlock();
    const Status s = seg->file->sync();
    lk.lock();
    ++syncs_;
    if (s.ok()) {
      mark_synced(target);
    } else {
      // Not retried: a second fdatasync would return 0 for pages whose
      // write-back failed. Appends and sync() now say so (sync_failed_).
      (void)failed_sync(s, *seg);
    }
  }
}

Status Commit::adopt_last() {
  Segment& seg = *segs.back();
  seg.written = seg.end.load(std::memory_order_relaxed);
  for (const auto& s : segs) {
    if (s->has_time) last_time_ = std::max(last_time_, s->max_time);
  }
  // The segment's age goes on across writers (`sluice put` is often one
  // process per message): from its birth time where the disk keeps one.
  const auto now = std::chrono::steady_clock::now();
  active_since_ = now;
  if (auto born = seg.file->created(); born.ok()) {
    const auto age = std::chrono::system_clock::now() - *born;
    if (age > age.zero()) {
      active_since_ = now - std::chrono::duration_cast<std::chrono::steady_clock::duration>(age);
    }
  }
  return make_writable(seg, wopt_);
}

Status Commit::roll_to(std::uint64_t base, std::uint32_t flags) {
  const std::shared_ptr<Segment> old = segs.back();
  if (Status s = trim_reserve(*old); !s.ok()) return s;
  const bool deferred = opt.durability == Durability::kNone;
  if (!deferred) {
    ++syncs_;
    if (Status s = old->file->sync(); !s.ok()) return failed_sync(s, *old);
    // Its records are on disk: the next open need not read them. A summary
    // that fails to write only makes that open read the segment.
    if (old->skips.empty()) (void)write_summary(fs, *old, next_seq, old->max_time);
  }
  // The header is synced before the directory entry that names it, in every
  // mode: a power cut never leaves a named segment without its header, and
  // the newest segment (which carries the next seq) is always on disk, so
  // retention may delete older ones without syncing their data first. Both
  // syncs touch a fresh 32-byte file, once per segment.
  // kNone: the sealed segment's records are not synced; the new header says
  // so, so that a power cut's loss of them is not taken for damage.
  if (deferred && dirty_) flags |= kSegmentAfterUnsynced;
  auto next = create_segment(fs, dir, base, /*sync=*/true, flags, write_version());
  if (!next.ok()) return next.status();
  Status made = make_writable(**next, wopt_);
  if (made.ok()) made = fs.sync_dir(dir);
  if (!made.ok()) {
    // Not rolled: the old segment takes the next appends, so a file named
    // after `base` must not stay (the next roll needs the name, or, once
    // appends went on in the old segment, it would lie inside the log).
    // If this directory sync fails too, a power cut may bring the file back:
    // recovery removes a segment without records named inside the log.
    (*next)->file.reset();
    (void)fs.remove((*next)->path);
    (void)fs.sync_dir(dir);
    return made;
  }
  if (deferred) unsynced_.push_back(old);  // its records: at the next sync()
  segs.push_back(*next);
  active_since_ = std::chrono::steady_clock::now();
  disk_bytes += kSegmentHeaderSize;
  // Everything in the sealed segment is durable now (kNone: as durable as
  // it will get before sync()), so all of it becomes visible: before the
  // followers it covers return (mark_synced), visible in the stats too.
  publish(*old, old->written, next_seq);
  if (!deferred) {
    mark_synced(next_seq);
  }
  old->sealed.store(true, std::memory_order_release);
  return Status::Ok();
}

void Commit::forget_unsynced(const Segment& seg) {
  std::erase_if(unsynced_, [&](const std::shared_ptr<Segment>& s) { return s.get() == &seg; });
}

Status Commit::skip_to(std::uint64_t seq) {
  if (Status s = roll_to(seq, kSegmentAfterGap); !s.ok()) return s;
  next_seq = seq;
  return Status::Ok();
}

bool Commit::must_roll(std::size_t bytes) const {
  const Segment& seg = *segs.back();
  if (seg.written <= kSegmentHeaderSize) return false;
  return seg.written + bytes > opt.segment_bytes || aged_out();
}

bool Commit::aged_out() const {
  if (opt.max_retained_age.count() <= 0 || segs.back()->written <= kSegmentHeaderSize) {
    return false;
  }
  return std::chrono::steady_clock::now() - active_since_ >= age_step();
}

Status Commit::roll() { return roll_to(next_seq, 0); }

Status Commit::upgrade_last() {
  Segment& last = *segs.back();
  if (last.timed || hooks.untimed || closing) return Status::Ok();
  if (last.written > kSegmentHeaderSize) return roll();
  char header[kSegmentHeaderSize];
  auto got = last.file->pread(header, sizeof header, 0);
  if (!got.ok()) return got.status();
  const std::uint32_t flags = *got == sizeof header ? segment_header_flags(header) : 0;
  encode_segment_header(header, last.base_seq, flags, kFormatVersion);
  if (Status s = last.file->pwrite(header, sizeof header, 0); !s.ok()) return s;
  ++syncs_;
  if (Status s = last.file->sync(); !s.ok()) return s;
  last.timed = true;  // open is not done: no reader has the segment yet
  return Status::Ok();
}

TimeUs Commit::append_time() {
  const auto now = hooks.clock ? hooks.clock() : std::chrono::system_clock::now();
  const TimeUs us =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
  last_time_ = std::max(last_time_, us);
  return last_time_;
}

Status Commit::mark_closed() {
  if (closed.load(std::memory_order_relaxed)) return Status::Ok();
  if (closing) {
    return {StatusCode::kIOError, "an earlier close of topic " + dir +
                                      " failed: reopen the topic to see whether it is closed"};
  }
  // The records first, in every mode: a power cut must never keep the mark
  // and lose a record it ends.
  if (Status s = sync_locked(); !s.ok()) return s;
  closing = true;  // from here the mark may be on disk: no append may follow it
  // Appenders asleep at the bound can only return kClosed now: wake them
  // whether the mark gets written or not (a failure below returns without
  // notify.close()).
  notify.acked();
  Segment& last = *segs.back();
  if (last.written > kSegmentHeaderSize) {
    // Synced header, then directory entry (roll_to): a cut leaves no mark,
    // or an unnamed file, or a headerless newest segment recovery reuses.
    if (Status s = roll_to(next_seq, kSegmentClosed); !s.ok()) return s;
  } else {
    // No record in the last segment: a new one would take its name. Flag
    // its header instead. A torn write leaves an invalid header and no
    // record, which recovery rewrites from the name (not closed): only the
    // synced header makes the close happen.
    char header[kSegmentHeaderSize];
    auto got = last.file->pread(header, sizeof header, 0);
    if (!got.ok()) return got.status();
    const std::uint32_t flags = *got == sizeof header ? segment_header_flags(header) : 0;
    if (Status s = trim_reserve(last); !s.ok()) return s;
    encode_segment_header(header, last.base_seq, flags | kSegmentClosed,
                          last.timed ? kFormatVersion : kUntimedFormatVersion);
    if (Status s = last.file->pwrite(header, sizeof header, 0); !s.ok()) return s;
    ++syncs_;
    if (Status s = last.file->sync(); !s.ok()) return failed_sync(s, last);
  }
  closed.store(true, std::memory_order_release);
  if (waiters > 0) data_cv.notify_all();
  notify.close();  // readers elsewhere, and appenders asleep on the bound
  return Status::Ok();
}

Result<std::uint64_t> Commit::write_batch(std::span<const std::string_view> payloads,
                                          std::size_t bytes) {
  if (!sync_failed_.ok()) return sync_failed_;
  Segment* seg = segs.back().get();
  if (Status s = reserve(*seg, seg->written + bytes, wopt_); !s.ok()) return s;
  const std::uint64_t at = seg->written;
  const std::uint64_t first = next_seq;
  const TimeUs time = seg->timed ? append_time() : 0;  // format 1 records have none
  if (Status s = write_records(*seg, payloads, first, time, bytes, buf_); !s.ok()) return s;
  if (opt.durability == Durability::kPerAppend) {
    ++syncs_;
    if (Status s = seg->file->sync(); !s.ok()) {
      (void)seg->file->truncate(at);  // never reported, never visible: take it back
      seg->written = seg->cap = at;
      return s;
    }
  }
  // Kept: into the sparse index.
  const std::size_t header = record_header_size(seg->timed);
  std::uint64_t off = at;
  for (std::size_t i = 0; i < payloads.size(); ++i) {
    seg->note(first + i, off, time);
    off += header + payloads[i].size();
  }
  next_seq = first + payloads.size();
  appended_ += payloads.size();
  if (opt.durability == Durability::kGroupCommit) {
    ++unsynced_appends_;
    // Only the arrival that completes the group wakes the gathering leader:
    // a wake per arrival cost a context switch each on two vCPUs.
    if (gathering_ && unsynced_appends_ >= last_group_) arrive_cv_.notify_all();
  }
  disk_bytes += bytes;
  dirty_ = true;
  if (opt.durability == Durability::kNone || opt.durability == Durability::kInterval) {
    start_writeback(*seg);
  }
  if (opt.durability == Durability::kPerAppend) mark_synced(next_seq);
  // kGroupCommit publishes in wait_durable, once a sync covered the records.
  if (opt.durability != Durability::kGroupCommit) publish(*seg, seg->written, next_seq);
  return first;
}

// Without a sync per append, the written pages pile up dirty until a sync
// (close, a roll in interval mode, the interval) or the kernel's writeback
// finds them: 100 MB of them made a close take 75-90 ms. Writing each
// finished chunk back as it fills (TopicOptions::writeback_bytes) leaves a
// sync only the last of it. Whole pages only: the next append rewrites the
// last, partial one, which must not wait for a write-back under way.
void Commit::start_writeback(Segment& seg) {
  constexpr std::uint64_t kPage = 4096;
  const std::uint64_t upto = seg.written & ~(kPage - 1);
  if (opt.writeback_bytes == 0 || upto < seg.writeback_from + opt.writeback_bytes) return;
  (void)seg.file->start_writeback(seg.writeback_from, upto - seg.writeback_from);  // a hint
  seg.writeback_from = upto;
}

void Commit::mark_synced(std::uint64_t seq) {
  if (seq <= synced_seq_) return;
  synced_seq_ = seq;
  // Group-commit followers return from here without the lock, maybe while
  // its holder goes on to more I/O (a roll's retention): the stats must
  // have what their appends did (visible, synced) first.
  publish_stats();
  synced_.store(seq, std::memory_order_release);
  bump_epoch();
}

void Commit::bump_epoch() {
  sync_epoch_.fetch_add(1, std::memory_order_release);
  sync_epoch_.notify_all();
}

Status Commit::failed_sync(const Status& s, const Segment& seg) {
  if (sync_failed_.ok()) {
    sync_failed_ = Status(StatusCode::kIOError,
                          std::string(s.message()) + " (syncing " + seg.path +
                              "): records appended since the last successful sync may be lost "
                              "and a later sync cannot tell, so this topic refuses appends and "
                              "syncs: reopen it (recovery keeps what is on disk)");
    sync_failed_seen_.store(true, std::memory_order_release);
    // Appenders asleep at the bound can only fail now: wake them.
    notify.acked();
  }
  return s;
}

Status Commit::wait_durable(std::uint64_t upto) {
  for (;;) {
    if (synced_.load(std::memory_order_acquire) >= upto) return Status::Ok();
    const std::uint32_t epoch = sync_epoch_.load(std::memory_order_acquire);
    MutexLock lk(mu);
    if (synced_seq_ >= upto) return Status::Ok();
    // A sync failed after these records were written: whether they are on
    // disk, no later sync can tell.
    if (!sync_failed_.ok()) return sync_failed_;
    if (syncing_) {
      // A follower: sleep until the running sync ends (it may not cover
      // these records: then look again, and maybe lead the next one).
      lk.unlock();
      sync_epoch_.wait(epoch, std::memory_order_acquire);
      continue;
    }
    // Leader: sync everything written so far (earlier segments were synced
    // when they were sealed), outside the lock so others keep writing.
    syncing_ = true;
    if (last_group_ > 1 && unsynced_appends_ < last_group_) {
      const auto until = std::chrono::steady_clock::now() +
                         std::min<std::chrono::nanoseconds>(sync_time_ / 2, kMaxGather);
      gathering_ = true;
      while (unsynced_appends_ < last_group_ && arrive_cv_.wait_until(mu, until)) {
      }
      gathering_ = false;
    }
    last_group_ = unsynced_appends_;
    unsynced_appends_ = 0;
    const std::shared_ptr<Segment> seg = segs.back();
    const std::uint64_t end = seg->written;
    const std::uint64_t target = next_seq;
    lk.unlock();
    const auto t0 = std::chrono::steady_clock::now();
    const Status s = seg->file->sync();
    const auto took = std::chrono::steady_clock::now() - t0;
    lk.lock();
    sync_time_ = (3 * sync_time_ + took) / 4;
    ++syncs_;
    syncing_ = false;
    if (!s.ok()) {
      bump_epoch();  // followers wake to the failure (sync_failed_)
      return failed_sync(s, *seg);
    }
    if (!sync_failed_.ok()) {
      // A sync beside this one (sync(), a roll) failed on the same segment:
      // only one fdatasync learns of a failed write-back, so this one's 0
      // proves nothing. Look again: ok only if a good sync covered `upto`.
      bump_epoch();
      continue;
    }
    if (target > synced_seq_) {
      publish(*seg, end, target);
      mark_synced(target);
    } else {
      // A roll or sync() got further while we synced: mark_synced would
      // not bump the epoch, yet followers that wrote after that point sleep
      // on it and one of them must lead the next sync.
      bump_epoch();
    }
  }
}

Status Commit::sync_locked() {
  if (!sync_failed_.ok()) return sync_failed_;
  for (const auto& seg : unsynced_) {
    ++syncs_;
    if (Status s = seg->file->sync(); !s.ok()) return failed_sync(s, *seg);
  }
  unsynced_.clear();
  const std::shared_ptr<Segment> last = segs.back();
  ++syncs_;
  if (Status s = last->file->sync(); !s.ok()) return failed_sync(s, *last);
  dirty_ = false;
  publish(*last, last->written, next_seq);  // before mark_synced returns followers
  mark_synced(next_seq);
  return Status::Ok();
}

}  // namespace sluice::log
