#include "log/reader.h"

#include <algorithm>
#include <chrono>

namespace sluice::log {

void Reader::seek(std::uint64_t seq) {
  const Place p = topic_->locate(seq);
  seg_ = p.seg;
  off_ = p.off;
  next_seq_ = p.seq;
  // The records from the index entry up to seq are passed over as they are
  // read (kIndexSpacing bytes at most); what is skipped below seq is not
  // counted.
  min_seq_ = seq;
}

Status Reader::fill(std::uint64_t at, std::size_t n) {
  if (buf_seg_ == seg_ && at >= buf_off_ && at + n <= buf_off_ + buf_.size()) return Status::Ok();
  if (topic_->reader && topic_->take_tail(seg_.get(), at, n, buf_, &buf_off_)) {
    buf_seg_ = seg_;
    return Status::Ok();
  }
  const std::uint64_t end = seg_->end.load(std::memory_order_acquire);
  const std::size_t want = static_cast<std::size_t>(
      std::min<std::uint64_t>(std::max<std::size_t>(n, 256 * 1024), end - at));
  auto got = seg_->file->pread(buf_.take(want), want, at);
  if (!got.ok()) {
    buf_seg_.reset();
    return got.status();
  }
  buf_.shrink(*got);
  buf_seg_ = seg_;
  buf_off_ = at;
  if (*got < n) return {StatusCode::kIOError, "short read in " + seg_->path};
  return Status::Ok();
}

Status Reader::read_one(LogMessage* m, bool& have) {
  RecordView v;
  if (Status s = read_record(&v, have); !s.ok() || !have || m == nullptr) return s;
  m->seq = v.seq;
  m->payload.assign(v.payload);
  if (v.timed) {
    m->time = time_of(v.time);
  } else {
    m->time.reset();
  }
  return Status::Ok();
}

Status Reader::read_record(RecordView* out, bool& have) {
  have = false;
  Topic::Impl& t = *topic_;
  for (;;) {
    if (seg_->capped.load(std::memory_order_acquire)) {
      // Deleted by a cap under us: the rest of it was counted as skipped.
      auto next = t.segment_after(seg_.get());
      if (!next) return Status::Ok();  // cannot be: the last segment is never deleted
      const std::uint64_t from = std::max(next_seq_, min_seq_);
      if (next->base_seq > from) capped_ += next->base_seq - from;
      seg_ = std::move(next);
      off_ = kSegmentHeaderSize;
      next_seq_ = seg_->base_seq;
      continue;
    }
    if (seg_->verified.load(std::memory_order_acquire)) {
      for (const Skip& s : seg_->skips) {
        // Found corrupt: never delivered. (A seek may land inside the range:
        // an index entry from a summary written before the damage.)
        if (off_ >= s.from && off_ < s.to) {
          corrupt_.add(std::max(next_seq_, min_seq_), s.next);
          off_ = s.to;
          next_seq_ = s.next;
        }
      }
    }
    const std::uint64_t end = seg_->end.load(std::memory_order_acquire);
    if (off_ >= end) {
      // Caught up: without a later segment there is nothing more (no lock),
      // unless the writer completed more and the next record is damaged.
      if (!seg_->sealed.load(std::memory_order_acquire)) {
        if (seg_->damaged_at.load(std::memory_order_acquire) != off_) return Status::Ok();
        return {StatusCode::kCorruption,
                "damaged record at " + seg_->path + " offset " + std::to_string(off_) + " (seq " +
                    std::to_string(next_seq_) +
                    "): the writer wrote it whole, it does not read back (reopening the topic "
                    "skips it and counts it as corrupt)"};
      }
      std::uint64_t first = 0;
      auto next = t.segment_after(seg_.get(), &first);
      if (!next || seg_->end.load(std::memory_order_acquire) > off_) return Status::Ok();
      // A gap: segments a cap deleted (the writer counts those for its
      // channels; a reader in another process counts here), or ones
      // recovery found damaged. In the writer's process a cap may have
      // deleted seg_ and those after it since the look above found seg_ not
      // capped: counted as that look would have.
      const std::uint64_t from = std::max(next_seq_, min_seq_);
      if (next->base_seq > first) {
        corrupt_.add(from, next->base_seq);
      } else if (next->base_seq > from) {
        if (t.reader) {
          gaps_.add(from, next->base_seq);
        } else {
          capped_ += next->base_seq - from;
        }
      }
      seg_ = std::move(next);
      off_ = kSegmentHeaderSize;
      next_seq_ = seg_->base_seq;
      continue;
    }
    const char* at = nullptr;
    if (seg_->map != nullptr && end <= seg_->map_len) {
      at = seg_->map + off_;  // the writer's map: complete records below end
    } else {
      if (Status s = fill(off_, kUntimedRecordHeaderSize); !s.ok()) return s;
      const std::size_t len = get32(buf_.data() + (off_ - buf_off_));
      const std::size_t size = kUntimedRecordHeaderSize + std::min<std::size_t>(len, end - off_);
      if (off_ + size > end) {
        if (unverified()) {
          if (Status s = t.verify_segment(*seg_); !s.ok()) return s;
          continue;  // its skips now say where the damage ends
        }
        return {StatusCode::kCorruption, "record past the end in " + seg_->path};
      }
      if (Status s = fill(off_, size); !s.ok()) return s;
      at = buf_.data() + (off_ - buf_off_);
    }
    const RecordView v = decode_record(at, end - off_, next_seq_, seg_->timed);
    if (v.kind != RecordView::kValid) {
      if (unverified()) {  // opened from its summary: read it now, as recovery would have
        if (Status s = t.verify_segment(*seg_); !s.ok()) return s;
        continue;
      }
      // Damaged after recovery (another writer, the disk): stop this
      // segment here rather than deliver it.
      return {StatusCode::kCorruption, "damaged record at " + seg_->path + " offset " +
                                           std::to_string(off_) + " (seq " +
                                           std::to_string(next_seq_) + ")"};
    }
    // A cap may have deleted the segment since the look at the top (its
    // file and map stay readable): it counted this record as lost too, so
    // jump it there rather than deliver it, as read_more does.
    if (seg_->capped.load(std::memory_order_acquire)) continue;
    off_ += v.size;
    ++next_seq_;
    if (v.seq < min_seq_) continue;
    *out = v;
    have = true;
    return Status::Ok();
  }
}

}  // namespace sluice::log
