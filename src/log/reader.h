// A read position in a topic's segments, shared by Channel (which adds a
// persisted position) and LogCursor (which has none): reads complete,
// visible records in seq order, skipping ranges recovery found corrupt and
// segments a retention cap deleted, and counting what it skips. Private.
//
// Thread safety: one thread at a time per Reader; any number of Readers
// run beside the topic's appenders (they read below each segment's `end`,
// take the topic lock only to look for the next segment or to locate a seq).
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>

#include "log/read_buffer.h"
#include "log/segment.h"
#include "log/topic_impl.h"
#include "sluice/log/channel.h"

namespace sluice::log {

class Reader {
 public:
  explicit Reader(std::shared_ptr<Topic::Impl> topic) : topic_(std::move(topic)) {}

  // Moves to `seq` (the oldest retained record if seq is before it): to the
  // segment index entry at or before it; the next read passes over the
  // records below seq (kIndexSpacing bytes at most, or records that were not
  // visible yet, when they come).
  void seek(std::uint64_t seq);
  // Reads the record at the position into *m (nullptr: passes over it) and
  // advances (have = true), or finds nothing new yet (have = false).
  // kCorruption for a record damaged after recovery; kIOError.
  Status read_one(LogMessage* m, bool& have);
  // read_one without the copy: *v views the record where the reader holds
  // it, valid until the reader's next call (copy what is kept).
  Status read_record(RecordView* v, bool& have);

  // After a read_record that handed out a record: up to `max` more that lie
  // whole in the bytes the reader holds (its buffer, or the writer's map),
  // below the segment's end and before any damaged range, each checked as
  // read_record checks it; take(view) for each (the view is valid until the
  // reader's next call). Stops where the next record needs read_record (a
  // new fill, a segment's end, damage, a cap): what it did not take, the next
  // read_record reads. One check of the segment per batch, not per record
  // (only its `capped` is looked at before each): read_record's were a
  // fifth of a reader's CPU on 100-byte records.
  template <class Take>
  void read_more(std::size_t max, Take&& take);

  Topic::Impl& topic() const { return *topic_; }
  const std::shared_ptr<Topic::Impl>& topic_ptr() const { return topic_; }
  // The seq of the next record it returns.
  std::uint64_t next_seq() const { return std::max(next_seq_, min_seq_); }
  // The readable end of the segment it is in (no lock): it moves when
  // records there become visible.
  std::uint64_t segment_end() const { return seg_->end.load(std::memory_order_acquire); }

  // Records lost to corruption, each counted once even if a seek rewinds
  // over them.
  std::uint64_t corrupt() const { return corrupt_.count; }
  // Gaps jumped in a read-only topic: segments a cap deleted (or the
  // writer's recovery found damaged) before this reader got there.
  std::uint64_t gaps() const { return gaps_.count; }
  // Records jumped in the writer's process because a cap deleted the
  // segment being read (the writer counted them for open channels).
  std::uint64_t capped() const { return capped_; }
  // Caught up at a record a read-only topic's refresh found damaged.
  bool at_damage() const { return seg_->damaged_at.load(std::memory_order_acquire) == off_; }

 private:
  // Makes [at, at + n) of seg_ available in buf_ (n <= end - at).
  Status fill(std::uint64_t at, std::size_t n);
  bool unverified() const { return !seg_->verified.load(std::memory_order_acquire); }

  struct Lost {
    std::uint64_t count = 0;
    std::uint64_t counted_to = 0;  // seqs below this are counted already
    void add(std::uint64_t from, std::uint64_t to) {
      from = std::max(from, counted_to);
      if (to <= from) return;
      count += to - from;
      counted_to = to;
    }
  };

  std::shared_ptr<Topic::Impl> topic_;  // a reader may outlive its Topic object
  // The record at (seg_, off_) has seq next_seq_.
  std::shared_ptr<Segment> seg_;
  std::uint64_t off_ = kSegmentHeaderSize;
  std::uint64_t next_seq_ = 0;
  std::uint64_t min_seq_ = 0;  // records below it are passed over
  Lost corrupt_;
  Lost gaps_;  // once each, however often a rewind crosses them
  std::uint64_t capped_ = 0;

  ReadBuffer buf_;  // bytes of buf_seg_ from buf_off_
  std::shared_ptr<Segment> buf_seg_;
  std::uint64_t buf_off_ = 0;
};

template <class Take>
void Reader::read_more(std::size_t max, Take&& take) {
  if (max == 0 || seg_->capped.load(std::memory_order_acquire)) return;
  std::uint64_t lim = seg_->end.load(std::memory_order_acquire);
  const char* bytes = nullptr;  // bytes[i] is the segment's byte from + i
  std::uint64_t from = 0;
  if (seg_->map != nullptr && lim <= seg_->map_len) {
    bytes = seg_->map;
  } else if (buf_seg_ == seg_ && off_ >= buf_off_) {
    bytes = buf_.data();
    from = buf_off_;
    lim = std::min<std::uint64_t>(lim, buf_off_ + buf_.size());
  } else {
    return;
  }
  if (seg_->verified.load(std::memory_order_acquire)) {
    for (const Skip& s : seg_->skips) {
      if (off_ >= s.from && off_ < s.to) return;
      if (s.from >= off_) lim = std::min(lim, s.from);
    }
  }
  const bool timed = seg_->timed;
  RecordView v[32];
  while (max > 0 && off_ < lim) {
    const std::size_t want = std::min<std::size_t>(max, std::size(v));
    const std::size_t n =
        decode_records(bytes + (off_ - from), lim - off_, next_seq_, timed, v, want);
    for (std::size_t i = 0; i < n; ++i) {
      // A cap may delete the segment under the batch (a take may even
      // append): its rest is counted as lost, so stop as read_record would.
      if (seg_->capped.load(std::memory_order_acquire)) return;
      off_ += v[i].size;
      ++next_seq_;
      if (v[i].seq < min_seq_) continue;
      take(v[i]);
      --max;
    }
    if (n < want) return;  // read_record decides the next
  }
}

}  // namespace sluice::log
