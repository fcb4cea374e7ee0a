#include "log/retention.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "log/position.h"
#include "log/summary.h"

namespace sluice::log {

namespace {

// The steady clock in ns: a wait's start, summed over the waits under way.
std::uint64_t steady_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

}  // namespace

Retention::Retention(FileSystem& file_system, std::string directory, TopicOptions options,
                     bool read_only)
    : Commit(file_system, std::move(directory), options, read_only) {
  mu.set_on_unlock(&Retention::publish_hook, this);
}

// mu calls it with the lock held (the analysis cannot see through the
// pointer).
void Retention::publish_hook(void* self) { static_cast<Retention*>(self)->publish_stats(); }

// The layers below still lock after this one is gone (Commit::close): no
// one reads the counters then.
Retention::~Retention() { mu.set_on_unlock(nullptr, nullptr); }

// A seqlock without fences (which TSan does not model): every field is
// stored with release and loaded with acquire, so a reader that sees a
// field of a publish under way also sees its odd version at the re-check.
// On x86 these are plain moves.
void Retention::publish_stats() {
  constexpr auto rel = std::memory_order_release;
  const std::uint32_t v = pub_.version.load(std::memory_order_relaxed);
  pub_.version.store(v + 1, std::memory_order_relaxed);
  pub_.first_seq.store(first_seq, rel);
  pub_.next_seq.store(next_seq, rel);
  pub_.visible_seq.store(visible_seq, rel);
  pub_.segments.store(segs.size(), rel);
  pub_.disk_bytes.store(disk_bytes, rel);
  pub_.appended.store(appended(), rel);
  pub_.syncs.store(syncs(), rel);
  pub_.bound_waits.store(bound_waits, rel);
  pub_.bound_wait_ns.store(bound_wait_ns, rel);
  pub_.bound_waiting.store(bound_waiting, rel);
  pub_.bound_waiting_since_ns.store(bound_waiting_since_ns, rel);
  pub_.segments_deleted.store(stats_.segments_deleted, rel);
  pub_.segments_capped.store(stats_.segments_capped, rel);
  pub_.records_dropped.store(stats_.records_dropped, rel);
  pub_.version.store(v + 2, rel);
}

template <class F>
void Retention::read_published(F f) const {
  for (;;) {
    const std::uint32_t v = pub_.version.load(std::memory_order_acquire);
    if ((v & 1) == 0) {
      f(pub_);  // acquire loads: the re-check below stays after them
      if (pub_.version.load(std::memory_order_relaxed) == v) return;
    }
    std::this_thread::yield();  // a publish under way: a few stores, unless preempted
  }
}

RetentionStats Retention::retention_stats() const {
  RetentionStats s;
  read_published([&](const Published& p) {
    constexpr auto r = std::memory_order_acquire;
    s.segments_deleted = p.segments_deleted.load(r);
    s.segments_capped = p.segments_capped.load(r);
    s.records_dropped = p.records_dropped.load(r);
  });
  return s;
}

void Retention::open_positions(std::vector<TopicStats::Position>& out) const {
  std::lock_guard g(channels_mu);
  for (const auto& [name, c] : open_channels) {
    out.push_back({name, c.acked.load(std::memory_order_acquire)});
  }
}

TopicStats Retention::stats() const {
  TopicStats s;
  // The channels first: a position read here was acknowledged under mu
  // after the records it passed were published, so next_seq, read after
  // it, is never below it.
  open_positions(s.channels);
  read_published([&](const Published& p) {
    constexpr auto r = std::memory_order_acquire;
    s.first_seq = p.first_seq.load(r);
    s.next_seq = p.next_seq.load(r);
    s.visible_seq = p.visible_seq.load(r);
    s.segments = p.segments.load(r);
    s.disk_bytes = p.disk_bytes.load(r);
    s.appended = p.appended.load(r);
    s.syncs = p.syncs.load(r);
    s.bound_waits = p.bound_waits.load(r);
    // Waits still under way count up to now.
    const std::uint64_t now = steady_ns();
    const std::uint64_t under_way =
        p.bound_waiting.load(r) * now -
        std::min(p.bound_waiting.load(r) * now, p.bound_waiting_since_ns.load(r));
    s.bound_wait_s = static_cast<double>(p.bound_wait_ns.load(r) + under_way) * 1e-9;
    s.retention.segments_deleted = p.segments_deleted.load(r);
    s.retention.segments_capped = p.segments_capped.load(r);
    s.retention.records_dropped = p.records_dropped.load(r);
  });
  s.closed = closed.load(std::memory_order_acquire);
  return s;
}

Status Retention::trim() {
  MutexLock lk(mu);
  return trim_locked();
}

Result<std::map<std::string, std::uint64_t>> Retention::channel_positions() {
  std::map<std::string, std::uint64_t> pos;
  for (const auto& [name, c] : open_channels) pos[name] = c.acked;
  auto names = fs.list(channel_dir());
  if (!names.ok()) return names.status();
  for (const std::string& file : *names) {
    if (!file.ends_with(".pos")) continue;
    const std::string name = file.substr(0, file.size() - 4);
    if (pos.contains(name)) continue;
    auto f = fs.open(channel_dir() + "/" + file, OpenMode::kRead);
    if (!f.ok()) {
      if (f.status().code() == StatusCode::kNotFound) continue;  // deleted meanwhile
      return f.status();
    }
    auto p = read_position(**f);
    if (!p.ok()) return p.status();
    pos[name] = p->state == PositionState::kValid ? p->slot.next_seq : 0;
  }
  return pos;
}

Status Retention::sync_positions() {
  for (const auto& [name, c] : open_channels) {
    // Durable modes update `acked` only after the position's sync.
    if (!durable_mode() && c.file != nullptr) {
      if (Status s = c.file->sync(); !s.ok()) return s;
    }
  }
  auto names = fs.list(channel_dir());
  if (!names.ok()) return names.status();
  for (const std::string& file : *names) {
    if (!file.ends_with(".pos") || open_channels.contains(file.substr(0, file.size() - 4))) {
      continue;
    }
    auto f = fs.open(channel_dir() + "/" + file, OpenMode::kRead);
    if (!f.ok()) {
      if (f.status().code() == StatusCode::kNotFound) continue;
      return f.status();
    }
    if (Status s = (*f)->sync(); !s.ok()) return s;
  }
  return Status::Ok();
}

bool Retention::over_cap(Segment& oldest, std::uint64_t retained) {
  if (opt.max_retained_bytes > 0 && retained > opt.max_retained_bytes) return true;
  if (opt.max_retained_age.count() <= 0) return false;
  auto sealed_at = oldest.file->modified();  // a sealed segment's last change is its seal
  if (!sealed_at.ok()) return false;
  return std::chrono::system_clock::now() - *sealed_at >
         std::chrono::duration_cast<std::chrono::system_clock::duration>(opt.max_retained_age);
}

Status Retention::trim_locked() {
  if (reader) return Status::Ok();  // the writer's job
  auto positions = channel_positions();
  if (!positions.ok()) return positions.status();
  const std::map<std::string, std::uint64_t>& pos = *positions;
  // A topic without channels keeps everything (unless capped).
  std::uint64_t min = pos.empty() ? 0 : UINT64_MAX;
  for (const auto& [name, p] : pos) min = std::min(min, p);
  // How many of the oldest segments go (never the last one).
  std::size_t n = 0;
  std::uint64_t bytes = disk_bytes;
  while (n + 1 < segs.size()) {
    const std::uint64_t after = segs[n + 1]->base_seq;  // first seq past segs[n]
    const bool passed = !pos.empty() && after <= min;
    if (!passed && !over_cap(*segs[n], bytes)) break;
    bytes -= std::min(bytes, segs[n]->end.load(std::memory_order_relaxed));
    ++n;
  }
  if (n == 0) return Status::Ok();
  // What is deleted now must stay passed after a power cut: the positions
  // are synced before the deletion. The log they point into need not be:
  // the newest segment's header and directory entry were synced at its
  // roll, so the next seq survives, and a position beyond what a cut left
  // makes recovery skip to it (records a mode had not made durable may be
  // lost; seqs are never reused). Syncing the deleted segments' data first
  // would flush whole segments only to delete them.
  if (Status s = sync_positions(); !s.ok()) return s;
  for (std::size_t i = 0; i < n; ++i) {
    const Segment& seg = *segs[i];
    const std::uint64_t after = segs[i + 1]->base_seq;
    if (pos.empty() || after > min) {  // capped: what the slowest channel had not acknowledged
      segs[i]->capped.store(true, std::memory_order_release);
      ++stats_.segments_capped;
      stats_.records_dropped += after - std::max(min, seg.base_seq);
      for (auto& [name, c] : open_channels) {  // closed ones count when they reopen
        // One still opening has no position yet: it counts at its registration.
        if (c.file != nullptr && c.acked < after) {
          c.capped += after - std::max(c.acked.load(), seg.base_seq);
        }
      }
    }
    ++stats_.segments_deleted;
    forget_unsynced(seg);
    (void)fs.remove(
        summary_path(seg.path));  // one left by a crash here: the writer's open removes it
    if (Status s = fs.remove(seg.path); !s.ok() && s.code() != StatusCode::kNotFound) return s;
  }
  disk_bytes = bytes;
  segs.erase(segs.begin(), segs.begin() + static_cast<std::ptrdiff_t>(n));
  first_seq = segs.front()->base_seq;
  return fs.sync_dir(dir);  // readers still holding a segment keep its file open
}

Status Retention::wait_for_room(std::size_t n, const Context& ctx) {
  const std::uint64_t bound = opt.max_unconsumed;
  if (n > bound) {
    return {StatusCode::kInvalidArgument, "a batch of " + std::to_string(n) +
                                              " records can never fit the topic bound of " +
                                              std::to_string(bound)};
  }
  bool waited = false;
  for (;;) {
    if (closing) return {StatusCode::kClosed, "topic " + dir + " is closed"};
    // After a failed segment sync an append can only fail (and acks here
    // make no room): fail now rather than wait for room.
    if (!sync_failure().ok()) return sync_failure();
    const std::uint32_t made = notify.channels_made();
    // As of the last look, unless a channel was made since (it may start
    // behind the slowest one).
    if (made == channels_seen_ && next_seq + n <= floor_ + bound) return Status::Ok();
    std::atomic_ref<std::uint32_t> acked(notify.page()->acked_seq);
    const std::uint32_t seen = acked.load();
    std::atomic_ref<std::uint32_t>(notify.page()->acked_want).store(1);  // then look again
    channels_seen_ = made;
    auto pos = channel_positions();
    if (!pos.ok()) return pos.status();
    // Without channels nobody consumes: look again after `bound` more.
    floor_ = next_seq;
    for (const auto& [name, p] : *pos) floor_ = std::min(floor_, p);
    // What a cap deleted is not waiting for anyone any more.
    floor_ = std::max(floor_, first_seq);
    if (next_seq + n <= floor_ + bound) return Status::Ok();
    if (opt.on_bound == BoundPolicy::kFail) {
      return {StatusCode::kRejected, "topic bound of " + std::to_string(bound) +
                                         " unconsumed records reached (slowest channel at seq " +
                                         std::to_string(floor_) + ", next seq " +
                                         std::to_string(next_seq) + ")"};
    }
    if (StatusCode e = ctx.err(); e != StatusCode::kOk) return e;
    if (!waited) ++bound_waits;
    waited = true;
    const std::uint64_t t0 = steady_ns();
    // With an age cap, a channel that stopped acknowledging holds appends
    // back only until the cap deletes what it has not taken: wake to seal
    // the last segment and apply the cap (a quarter of it at a time).
    const bool capped = opt.max_retained_age.count() > 0;
    const Context slice = capped ? ctx.with_timeout(age_step()) : ctx;
    // Published as the lock goes: stats() counts the wait while it lasts.
    ++bound_waiting;
    bound_waiting_since_ns += t0;
    mu.unlock();
    futex_wait_shared(&notify.page()->acked_seq, seen, slice);
    mu.lock();
    --bound_waiting;
    bound_waiting_since_ns -= t0;
    bound_wait_ns += steady_ns() - t0;
    if (capped && ctx.err() == StatusCode::kOk) {
      if (aged_out()) {
        if (Status s = roll(); !s.ok()) return s;
      }
      if (Status s = trim_locked(); !s.ok()) return s;
    }
  }
}

}  // namespace sluice::log
