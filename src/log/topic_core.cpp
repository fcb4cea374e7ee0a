#include "log/topic_core.h"

#include <algorithm>

#include "log/recovery.h"

namespace sluice::log {

std::shared_ptr<Segment> TopicCore::segment_after(const Segment* s, std::uint64_t* first) const {
  MutexLock lk(mu);
  if (first != nullptr) *first = first_seq;
  for (const auto& seg : segs) {
    if (seg->base_seq > s->base_seq) return seg;
  }
  return nullptr;
}

Place TopicCore::locate(std::uint64_t seq) const {
  MutexLock lk(mu);
  Place p;
  if (segs.empty()) return p;
  p.seg = segs.front();
  for (const auto& s : segs) {
    if (s->base_seq <= seq) p.seg = s;
  }
  p.seq = p.seg->base_seq;
  const std::vector<IndexEntry>& index = p.seg->index;
  auto it = std::upper_bound(index.begin(), index.end(), seq,
                             [](std::uint64_t v, const IndexEntry& e) { return v < e.seq; });
  if (it != index.begin()) {
    --it;
    p.off = it->off;
    p.seq = it->seq;
  }
  return p;
}

namespace {

constexpr std::uint64_t kNone = ~std::uint64_t{0};

// The seq of the first record at or after `from` (an index entry) and
// before byte `stop` whose time is at least `want`; kNone if none.
Result<std::uint64_t> first_at_time(const Segment& seg, const IndexEntry& from, std::uint64_t stop,
                                    TimeUs want) {
  const std::size_t n = static_cast<std::size_t>(stop - from.off);
  std::string buf;
  const char* data = nullptr;
  if (seg.map != nullptr && stop <= seg.map_len) {
    data = seg.map + from.off;  // the writer's own map: records below `written`
  } else {
    buf.resize(n);
    auto got = seg.file->pread(buf.data(), n, from.off);
    if (!got.ok()) return got.status();
    if (*got < n) return Status(StatusCode::kIOError, "short read in " + seg.path);
    data = buf.data();
  }
  std::uint64_t off = from.off;
  std::uint64_t seq = from.seq;
  while (off < stop) {
    bool skipped = false;
    if (seg.verified.load(std::memory_order_acquire)) {
      for (const Skip& s : seg.skips) {
        if (off >= s.from && off < s.to) {  // found corrupt
          off = s.to;
          seq = s.next;
          skipped = true;
        }
      }
    }
    if (skipped) continue;
    const RecordView v = decode_record(data + (off - from.off),
                                       static_cast<std::size_t>(stop - off), seq, seg.timed);
    if (v.kind != RecordView::kValid) {
      return Status(StatusCode::kCorruption, "damaged record at " + seg.path + " offset " +
                                                 std::to_string(off) + " (seq " +
                                                 std::to_string(seq) + ")");
    }
    if (v.time >= want) return seq;
    off += v.size;
    ++seq;
  }
  return kNone;
}

}  // namespace

Result<std::uint64_t> TopicCore::seq_at_time(std::chrono::system_clock::time_point t) const {
  // A record's time is in whole microseconds: at or after t means at or
  // after t rounded up to one.
  const TimeUs want = std::chrono::ceil<std::chrono::microseconds>(t.time_since_epoch()).count();
  MutexLock lk(mu);
  // Segments in seq order: the first whose latest time is at or after want
  // holds the answer (the format 1 ones count by their files' times).
  for (const auto& sp : segs) {
    const Segment& seg = *sp;
    if (seg.index.empty()) continue;  // no record
    const std::uint64_t first = std::max(seg.index.front().seq, first_seq);
    if (!seg.timed) {
      // Format 1: no times. Its records count as appended when the file was
      // last changed (an upper bound: its seal, or its last append), so a
      // search never lands after a record appended at or after t (it may
      // land before records appended earlier).
      auto changed = seg.file->modified();
      if (!changed.ok() || *changed >= t) return first;
      continue;
    }
    if (!seg.has_time || seg.max_time < want) continue;
    // Every record of earlier segments is older than want; this segment has
    // one at or after it. Entries hold running maxima: the first such record
    // lies after the last entry below want and at or before the next one.
    // (The writer never lets times go back, but this holds either way.)
    const auto& index = seg.index;
    auto it = std::partition_point(index.begin(), index.end(),
                                   [&](const IndexEntry& e) { return e.time < want; });
    if (it == index.begin()) return first;
    const std::uint64_t limit = reader ? seg.end.load(std::memory_order_acquire) : seg.written;
    const std::uint64_t stop = it == index.end() ? limit : it->off;
    auto found = first_at_time(seg, *(it - 1), stop, want);
    if (!found.ok() && found.status().code() == StatusCode::kCorruption &&
        !seg.verified.load(std::memory_order_acquire)) {
      // Opened from its summary: read it now, as recovery would have.
      if (Status s = verify_segment(*sp); !s.ok()) return s;
      found = first_at_time(seg, *(it - 1), stop, want);
    }
    if (!found.ok()) return found.status();
    if (*found != kNone) return std::max(*found, first_seq);
    if (it != index.end()) return std::max(it->seq, first_seq);
  }
  return next_seq;
}

Status TopicCore::verify_segment(Segment& seg) const {
  std::lock_guard g(seg.verify_mu);
  if (seg.verified.load(std::memory_order_acquire)) return Status::Ok();
  auto skips =
      find_damage(fs, seg.path, seg.base_seq, seg.timed, seg.end.load(std::memory_order_acquire));
  if (!skips.ok()) return skips.status();
  seg.skips = std::move(*skips);
  seg.verified.store(true, std::memory_order_release);
  return Status::Ok();
}

void TopicCore::publish(Segment& seg, std::uint64_t end, std::uint64_t seq) {
  if (end > seg.end.load(std::memory_order_relaxed)) {
    seg.end.store(end, std::memory_order_release);
  }
  if (seq <= visible_seq) return;
  visible_seq = seq;
  if (waiters > 0) data_cv.notify_all();
  notify.publish(seq);
}

}  // namespace sluice::log
