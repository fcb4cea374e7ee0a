#include "log/retention.h"

#include <algorithm>
#include <chrono>

#include "log/position.h"
#include "log/summary.h"

namespace sluice::log {

Status Retention::trim() {
  MutexLock lk(mu);
  return trim_locked();
}

RetentionStats Retention::retention_stats() const {
  MutexLock lk(mu);
  return stats_;
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
          c.capped += after - std::max(c.acked, seg.base_seq);
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
    const auto t0 = std::chrono::steady_clock::now();
    // With an age cap, a channel that stopped acknowledging holds appends
    // back only until the cap deletes what it has not taken: wake to seal
    // the last segment and apply the cap (a quarter of it at a time).
    const bool capped = opt.max_retained_age.count() > 0;
    const Context slice = capped ? ctx.with_timeout(age_step()) : ctx;
    mu.unlock();
    futex_wait_shared(&notify.page()->acked_seq, seen, slice);
    mu.lock();
    if (capped && ctx.err() == StatusCode::kOk) {
      if (aged_out()) {
        if (Status s = roll(); !s.ok()) return s;
      }
      if (Status s = trim_locked(); !s.ok()) return s;
    }
    bound_wait_ns += static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count());
  }
}

}  // namespace sluice::log
