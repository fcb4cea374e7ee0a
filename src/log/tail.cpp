// A topic opened read-only follows a writer in another process: it picks up
// complete records below the writer's high watermark (NOTIFY's
// visible_seq), and a new segment once the old one is final.
#include <algorithm>
#include <optional>

#include "log/topic_impl.h"

namespace sluice {

using log::kSegmentHeaderSize;
using log::kUntimedRecordHeaderSize;

void Topic::Impl::refresh() {
  log::MutexLock lk(mu);
  // The writer publishes its last records before it says closed: read in
  // the other order, so that a closed writer's limit is final.
  const bool writer_closed = notify.closed();
  const std::uint64_t limit = notify.visible();
  char header[kSegmentHeaderSize];
  log::ReadBuffer& buf = tail_buf_;  // file bytes from buf_at on: one pread serves many records
  for (;;) {
    auto seg = segs.back();
    std::uint64_t end = seg->end.load(std::memory_order_relaxed);
    bool advanced = false;
    std::uint64_t buf_at = end;
    std::size_t have = 0;
    std::size_t per_record = kUntimedRecordHeaderSize + 128;  // a guess, then what we saw
    std::optional<std::uint64_t> file_size;  // looked up for a record longer than a read
    while (next_seq < limit) {               // records the writer completed since we looked
      log::RecordView v;
      for (int tries = 0;; ++tries) {
        const std::size_t pos = static_cast<std::size_t>(end - buf_at);
        v = log::decode_record(buf.data() + pos, have - pos, next_seq, seg->timed,
                               log::RecordCheck::kFraming);
        if (v.kind != log::RecordView::kIncomplete || tries == 2) break;
        // Read what the writer says it completed (limit - next_seq records),
        // at least this record's declared size, capped: a reader catching up
        // on many records pays one system call per megabyte, not two per
        // record; one that keeps up reads a few kilobytes.
        std::size_t want = static_cast<std::size_t>(
            std::min<std::uint64_t>(limit - next_seq, 1u << 20) * per_record);
        want = std::clamp<std::size_t>(want, 4096, std::size_t{1} << 20);
        if (have - pos >= kUntimedRecordHeaderSize) {  // never less than this record
          // Whatever its length (the writer's max_message_bytes may be
          // larger than ours), but within the file: a record the writer
          // completed does not run past its end, a damaged length may.
          const std::size_t len = log::get32(buf.data() + pos);
          if (len > (std::size_t{1} << 20)) {
            if (!file_size) {
              auto size = seg->file->size();
              if (!size.ok()) break;
              file_size = *size;
            }
            if (*file_size < end || *file_size - end < kUntimedRecordHeaderSize + len) break;
          }
          want = std::max(want, kUntimedRecordHeaderSize + len);
        }
        auto got = seg->file->pread(buf.take(want), want, end);
        buf_at = end;
        have = got.ok() ? *got : 0;
        buf.shrink(have);
        tail_seg_ = seg;  // for take_tail
        tail_at_ = buf_at;
        tail_have_ = have;
      }
      if (v.kind != log::RecordView::kValid) break;  // not complete yet
      seg->note(next_seq, end, v.time);
      end += v.size;
      per_record = std::max<std::size_t>(v.size, kUntimedRecordHeaderSize + 16);
      ++next_seq;
      advanced = true;
    }
    if (advanced) {
      seg->end.store(end, std::memory_order_release);
      visible_seq = next_seq;
    }
    // A next segment exists only once this one is final (and the writer
    // rolls only non-empty segments): take it, after one more look at this
    // one (it may have grown since).
    if (next_seq >= limit && writer_closed && !closed.load(std::memory_order_relaxed)) {
      find_closed_mark(*seg);
    }
    if (next_seq >= limit) return;
    // The writer completed records from next_seq on, and the framing of the
    // one at `end` (length, seq) is broken: damaged, unless the writer rolled
    // past it (then the next segment starts at next_seq). A segment holds at
    // least one record. (A bad CRC under sound framing is read_one's find.)
    std::uint64_t base = next_seq;
    std::string next_path = dir + "/" + log::segment_name(base);
    auto f = fs.open(next_path, log::OpenMode::kRead);
    // The writer's recovery may have gone on after a loss (a power cut) in
    // a segment flagged `after gap`: the records between are gone, not
    // damaged. Else damage, said only beside a live writer, whose count is
    // current: without one the page may be from before a power cut (it is
    // never synced), so wait for the writer's recovery rather than stop
    // for good.
    const std::uint64_t missing = next_seq;
    const auto damaged_unless_after_gap = [&]() -> bool {
      if (auto g = after_gap_segment(missing)) {
        base = *g;
        next_path = dir + "/" + log::segment_name(base);
        f = fs.open(next_path, log::OpenMode::kRead);
        return false;
      }
      if (log::live_writer(fs, dir) != 0) seg->damaged_at.store(end, std::memory_order_release);
      return true;
    };
    if (next_seq == seg->base_seq && damaged_unless_after_gap()) return;
    bool look_again = false;
    for (int look = 0; !f.ok() && f.status().code() == StatusCode::kNotFound; ++look) {
      if (advanced) {  // look at the old one again first
        look_again = true;
        break;
      }
      // Not there. A cap deletes the oldest segments first, ours before the
      // next: ours still there now, after the next was found missing, means
      // the writer rolled past a record of ours that does not read back.
      // Stop at it rather than jump over the rest of ours.
      if (fs.exists(seg->path)) {
        if (damaged_unless_after_gap()) return;
        continue;
      }
      // Ours is gone too: a cap deleted both, and more. Go on at the oldest
      // one left (a listing races with the deletions: a later one may go
      // before we open it, so look again).
      const std::optional<std::uint64_t> later = oldest_segment_after(next_seq);
      if (!later || look == 16) break;
      base = *later;
      next_path = dir + "/" + log::segment_name(base);
      f = fs.open(next_path, log::OpenMode::kRead);
    }
    if (look_again) continue;
    if (!f.ok()) {
      if (f.status().code() == StatusCode::kNotFound && log::live_writer(fs, dir) != 0) {
        seg->damaged_at.store(end, std::memory_order_release);
      }
      return;
    }
    auto got = (*f)->pread(header, sizeof header, 0);
    if (!got.ok() || *got != sizeof header ||
        log::decode_segment_header(header) != std::optional<std::uint64_t>(base)) {
      return;  // being created: the header is not written yet
    }
    if (advanced) continue;  // look at the old one again first
    auto nseg = std::make_shared<log::Segment>();
    nseg->base_seq = base;
    nseg->timed = log::segment_header_version(header) != log::kUntimedFormatVersion;
    nseg->path = next_path;
    nseg->file = std::move(*f);
    segs.push_back(std::move(nseg));
    if (base > next_seq) first_seq = next_seq = visible_seq = base;  // the rest is gone
    seg->sealed.store(true, std::memory_order_release);
    forget_deleted_segments();
  }
}

bool Topic::Impl::take_tail(const log::Segment* seg, std::uint64_t at, std::size_t n,
                            log::ReadBuffer& buf, std::uint64_t* buf_off) {
  log::MutexLock lk(mu);
  if (at < tail_at_ || tail_seg_.lock().get() != seg) return false;
  // Complete records below the readable end only: past it the writer may
  // still be writing what the buffer caught half done.
  const std::uint64_t end =
      std::min<std::uint64_t>(tail_at_ + tail_have_, seg->end.load(std::memory_order_acquire));
  if (at + n > end) return false;
  std::swap(buf, tail_buf_);
  buf.shrink(static_cast<std::size_t>(end - tail_at_));
  *buf_off = tail_at_;
  tail_seg_.reset();
  return true;
}

std::optional<std::uint64_t> Topic::Impl::oldest_segment_after(std::uint64_t after) {
  std::optional<std::uint64_t> next;
  if (auto names = fs.list(dir); names.ok()) {
    for (const auto& name : *names) {
      const auto b = log::parse_segment_name(name);
      if (b && *b > after && (!next || *b < *next)) next = b;
    }
  }
  return next;
}

std::optional<std::uint64_t> Topic::Impl::after_gap_segment(std::uint64_t after) {
  const std::optional<std::uint64_t> next = oldest_segment_after(after);
  if (!next) return std::nullopt;
  auto f = fs.open(dir + "/" + log::segment_name(*next), log::OpenMode::kRead);
  if (!f.ok()) return std::nullopt;
  char header[kSegmentHeaderSize];
  auto got = (*f)->pread(header, sizeof header, 0);
  if (!got.ok() || *got != sizeof header ||
      log::decode_segment_header(header) != std::optional<std::uint64_t>(*next) ||
      (log::segment_header_flags(header) & log::kSegmentAfterGap) == 0) {
    return std::nullopt;
  }
  return next;
}

void Topic::Impl::forget_deleted_segments() {
  // The writer's retention deletes the oldest segments first. A reader
  // process that kept them listed kept their files open: their disk space
  // was never freed while it ran, and it ran out of descriptors. A channel
  // still reading one holds it until it moves on; later ones start at the
  // first listed (what lies before counts as dropped, as in the writer).
  std::size_t n = 0;
  while (n + 1 < segs.size() && segs[n]->sealed.load(std::memory_order_acquire) &&
         !fs.exists(segs[n]->path)) {
    ++n;
  }
  if (n == 0) return;
  segs.erase(segs.begin(), segs.begin() + static_cast<std::ptrdiff_t>(n));
  first_seq = segs.front()->base_seq;
}

void Topic::Impl::find_closed_mark(log::Segment& last) {
  // The mark is the segment named after our end (a new one, or the empty
  // segment we are in, flagged in place). Its base being our next seq means
  // every record before it was read.
  char header[kSegmentHeaderSize];
  std::unique_ptr<log::File> other;
  log::File* f = last.file.get();
  if (last.base_seq != next_seq) {
    auto opened = fs.open(dir + "/" + log::segment_name(next_seq), log::OpenMode::kRead);
    if (!opened.ok()) return;
    other = std::move(*opened);
    f = other.get();
  }
  auto got = f->pread(header, sizeof header, 0);
  if (!got.ok() || *got != sizeof header ||
      log::decode_segment_header(header) != std::optional<std::uint64_t>(next_seq)) {
    return;
  }
  if ((log::segment_header_flags(header) & log::kSegmentClosed) != 0) {
    closed.store(true, std::memory_order_release);
  }
}

}  // namespace sluice
