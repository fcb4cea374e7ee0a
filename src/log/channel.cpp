#include "sluice/log/channel.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <span>
#include <thread>

#include "log/position.h"
#include "log/topic_impl.h"
#include "sluice/log/topic.h"

namespace sluice {

using log::kRecordHeaderSize;
using log::kSegmentHeaderSize;
using log::MutexLock;

struct Channel::Impl {
  std::shared_ptr<Topic::Impl> topic;  // a channel may outlive its Topic object
  std::string name;
  std::string path;
  std::unique_ptr<log::File> file;  // the position file, locked while open
  std::uint64_t generation = 0;
  std::uint64_t acked = 0;  // durable: first seq not acknowledged
  bool durable_positions = true;

  // Read cursor: the record at (seg, off) has seq next_seq.
  std::shared_ptr<log::Segment> seg;
  std::uint64_t off = kSegmentHeaderSize;
  std::uint64_t next_seq = 0;
  // Records lost to corruption, each counted once even if a nack rewinds
  // over them.
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
  Lost corrupt;
  // Deleted by a cap before this open, or (read-only topic) skipped since.
  std::uint64_t capped_here = 0;

  std::string buf;  // bytes of buf_seg from buf_off
  std::shared_ptr<log::Segment> buf_seg;
  std::uint64_t buf_off = 0;

  ~Impl() {
    MutexLock lk(topic->mu);  // before the file goes: retention may sync it
    topic->open_channels.erase(name);
  }

  void seek(std::uint64_t seq) {
    seg = topic->segment_for(seq);
    off = kSegmentHeaderSize;
    next_seq = seg->base_seq;
    LogMessage m;
    while (next_seq < seq) {
      bool have = false;
      if (!read_one(m, have).ok() || !have) break;
    }
  }

  // Makes [at, at + n) of seg available in buf (n <= end - at).
  Status fill(std::uint64_t at, std::size_t n) {
    if (buf_seg == seg && at >= buf_off && at + n <= buf_off + buf.size()) return Status::Ok();
    const std::uint64_t end = seg->end.load(std::memory_order_acquire);
    const std::size_t want = static_cast<std::size_t>(
        std::min<std::uint64_t>(std::max<std::size_t>(n, 256 * 1024), end - at));
    buf.resize(want);
    auto got = seg->file->pread(buf.data(), want, at);
    if (!got.ok()) return got.status();
    buf.resize(*got);
    buf_seg = seg;
    buf_off = at;
    if (*got < n) return {StatusCode::kIOError, "short read in " + seg->path};
    return Status::Ok();
  }

  // Reads the record at the cursor into m and advances (have = true), or
  // finds nothing new yet (have = false).
  Status read_one(LogMessage& m, bool& have) {
    have = false;
    for (;;) {
      if (seg->capped.load(std::memory_order_acquire)) {
        // Deleted by a cap under us: the rest of it was counted as skipped.
        auto next = topic->segment_after(seg.get());
        if (!next) return Status::Ok();  // cannot be: the last segment is never deleted
        seg = std::move(next);
        off = kSegmentHeaderSize;
        next_seq = seg->base_seq;
        continue;
      }
      for (const log::Skip& s : seg->skips) {
        if (off == s.from) {  // recovery found this range corrupt: never delivered
          off = s.to;
          corrupt.add(next_seq, next_seq + s.lost);
          next_seq += s.lost;
        }
      }
      const std::uint64_t end = seg->end.load(std::memory_order_acquire);
      if (off >= end) {
        // Caught up: without a later segment there is nothing more (no lock).
        if (!seg->sealed.load(std::memory_order_acquire)) return Status::Ok();
        std::uint64_t first = 0;
        auto next = topic->segment_after(seg.get(), &first);
        if (!next || seg->end.load(std::memory_order_acquire) > off) return Status::Ok();
        // A gap: segments a cap deleted (the writer counts those for its
        // channels; a reader in another process counts here), or ones
        // recovery found damaged.
        if (next->base_seq > first) {
          corrupt.add(next_seq, next->base_seq);
        } else if (topic->reader && next->base_seq > next_seq) {
          capped_here += next->base_seq - next_seq;
        }
        seg = std::move(next);
        off = kSegmentHeaderSize;
        next_seq = seg->base_seq;
        continue;
      }
      const char* at = nullptr;
      if (seg->map != nullptr && end <= seg->map_len) {
        at = seg->map + off;  // the writer's map: complete records below end
      } else {
        if (Status s = fill(off, kRecordHeaderSize); !s.ok()) return s;
        const std::size_t len = log::get32(buf.data() + (off - buf_off));
        const std::size_t size = kRecordHeaderSize + std::min<std::size_t>(len, end - off);
        if (off + size > end) {
          return {StatusCode::kCorruption, "record past the end in " + seg->path};
        }
        if (Status s = fill(off, size); !s.ok()) return s;
        at = buf.data() + (off - buf_off);
      }
      const log::RecordView v =
          log::decode_record(at, end - off, topic->opt.max_message_bytes, next_seq);
      if (v.kind != log::RecordView::kValid) {
        // Damaged after recovery (another writer, the disk): stop this
        // segment here rather than deliver it.
        return {StatusCode::kCorruption, "damaged record at " + seg->path + " offset " +
                                             std::to_string(off) + " (seq " +
                                             std::to_string(next_seq) + ")"};
      }
      m.seq = v.seq;
      m.payload.assign(v.payload);
      off += v.size;
      ++next_seq;
      have = true;
      return Status::Ok();
    }
  }

  // Reads 1..max messages into slot(0), slot(1), ... (reusing their
  // buffers), waiting for the first; got = how many.
  template <class Slot>
  Status fill_batch(std::size_t max, Slot&& slot, std::size_t& got, const Context& ctx) {
    got = 0;
    if (max == 0) return {StatusCode::kInvalidArgument, "next_batch: max must be at least 1"};
    if (ctx.stop_requested()) return StatusCode::kCancelled;
    for (;;) {
      while (got < max) {
        bool have = false;
        if (Status s = read_one(slot(got), have); !s.ok()) return got > 0 ? Status::Ok() : s;
        if (!have) break;
        ++got;
      }
      if (got > 0) return Status::Ok();
      if (at_closed_end()) return {StatusCode::kClosed, "topic " + topic->dir + " is closed"};
      if (topic->reader) {
        if (Status s = wait_for_writer(ctx); !s.ok()) return s;
        continue;
      }
      // Nothing new. A busy producer is usually microseconds away: yield
      // for a few microseconds before sleeping (a sleep and wake-up per
      // record would cost more than the record).
      const std::uint64_t seen_end = seg->end.load(std::memory_order_acquire);
      const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
      bool moved = false;
      while (!moved && std::chrono::steady_clock::now() < spin_until) {
        std::this_thread::yield();
        moved = seg->end.load(std::memory_order_acquire) != seen_end;
      }
      if (moved) continue;
      // Sleep until an append becomes visible (no polling).
      MutexLock lk(topic->mu);
      const std::uint64_t seen = next_seq;
      ++topic->waiters;
      const bool woke = topic->data_cv.wait(topic->mu, ctx, [&] {
        topic->mu.assert_held();
        return topic->visible_seq > seen || topic->closed.load(std::memory_order_relaxed);
      });
      --topic->waiters;
      if (!woke) return ctx.err() != StatusCode::kOk ? ctx.err() : StatusCode::kCancelled;
    }
  }

  // The topic is closed and this channel delivered every record before the
  // mark (records not delivered yet come first).
  bool at_closed_end() const {
    if (!topic->closed.load(std::memory_order_acquire)) return false;
    MutexLock lk(topic->mu);
    return next_seq >= topic->visible_seq;
  }

  // Read-only topic (the writer may be another process): look for new
  // records; if none, sleep on the topic's shared wake-up page until the
  // writer publishes, the stop token fires, or the deadline passes. No
  // polling: CPU ~0 while idle.
  Status wait_for_writer(const Context& ctx) {
    log::NotifyPage* np = topic->notify.page();
    std::atomic_ref<std::uint32_t> seq(np->seq);
    const std::uint32_t seen = seq.load();
    // Announce, then look once more: an append after this look finds `want`
    // set and changes `seq`, so the sleep below returns at once.
    std::atomic_ref<std::uint32_t>(np->want).store(1);
    const std::uint64_t before = next_seq_of_topic();
    topic->refresh();
    if (next_seq_of_topic() != before || next_seq < next_seq_of_topic()) return Status::Ok();
    if (topic->closed.load(std::memory_order_acquire)) return Status::Ok();  // found the mark
    log::futex_wait_shared(&np->seq, seen, ctx);
    if (StatusCode e = ctx.err(); e != StatusCode::kOk) return e;
    return Status::Ok();
  }

  std::uint64_t next_seq_of_topic() const {
    MutexLock lk(topic->mu);
    return topic->next_seq;
  }

  Status write_position(std::uint64_t seq) {
    if (!durable_positions) {
      acked = seq;
      return Status::Ok();
    }
    const std::uint64_t gen = generation + 1;
    if (Status s = log::write_position(*file, gen, seq); !s.ok()) return s;
    // As durable as the log it points into: synced in the modes whose
    // appends are durable on return; written (surviving a process crash)
    // otherwise, and synced by retention before it deletes on its strength.
    if (topic->durable_mode()) {
      if (Status s = file->sync(); !s.ok()) return s;
    }
    generation = gen;
    acked = seq;
    return Status::Ok();
  }
};

Channel::Channel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Channel::~Channel() = default;

const std::string& Channel::name() const { return impl_->name; }
std::uint64_t Channel::acked() const { return impl_->acked; }
std::uint64_t Channel::delivered() const { return impl_->next_seq; }
std::uint64_t Channel::skipped_corrupt() const { return impl_->corrupt.count; }
std::uint64_t Channel::skipped_retention() const {
  MutexLock lk(impl_->topic->mu);
  const auto it = impl_->topic->open_channels.find(impl_->name);
  return impl_->capped_here + (it == impl_->topic->open_channels.end() ? 0 : it->second.capped);
}

Status Channel::next_batch(std::vector<LogMessage>& out, std::size_t max, const Context& ctx) {
  const std::size_t base = out.size();
  std::size_t got = 0;
  // Grows one message at a time: a small batch does not pay for `max`.
  Status s = impl_->fill_batch(
      max,
      [&](std::size_t i) -> LogMessage& {
        if (out.size() == base + i) out.emplace_back();
        return out[base + i];
      },
      got, ctx);
  out.resize(base + got);
  return s;
}

Result<LogMessage> Channel::next(const Context& ctx) {
  std::vector<LogMessage> out;
  if (Status s = next_batch(out, 1, ctx); !s.ok()) return s;
  return std::move(out.front());
}

Status Channel::ack(std::uint64_t seq) {
  Impl& c = *impl_;
  if (seq >= c.next_seq) {
    return {StatusCode::kInvalidArgument, "ack of seq " + std::to_string(seq) +
                                              ", which was not delivered (next is " +
                                              std::to_string(c.next_seq) + ")"};
  }
  if (seq + 1 <= c.acked) return Status::Ok();
  if (Status s = c.write_position(seq + 1); !s.ok()) return s;
  // Retention: once this position is durable, segments before it may go.
  bool crossed = false;
  {
    MutexLock lk(c.topic->mu);
    c.topic->open_channels.find(c.name)->second.acked = c.acked;
    crossed = c.topic->segs.size() > 1 && c.acked >= c.topic->segs[1]->base_seq;
  }
  // An appender waiting for room under the topic bound (in any process).
  c.topic->notify.acked();
  return crossed ? c.topic->trim() : Status::Ok();
}

void Channel::nack() { impl_->seek(impl_->acked); }

Status Channel::consume(const std::function<Status(const LogMessage&)>& handler, const Context& ctx,
                        std::size_t batch) {
  if (batch == 0) return {StatusCode::kInvalidArgument, "consume: batch must be at least 1"};
  // The messages' buffers are reused from batch to batch: no allocation per
  // message once warm.
  std::vector<LogMessage> msgs(batch);
  for (;;) {
    std::size_t n = 0;
    Status got = impl_->fill_batch(
        batch, [&](std::size_t i) -> LogMessage& { return msgs[i]; }, n, ctx);
    if (!got.ok()) return got;
    for (std::size_t i = 0; i < n; ++i) {
      Status st;
      try {
        st = handler(msgs[i]);
      } catch (const std::exception& e) {
        st = Status(StatusCode::kInternal, std::string("handler threw: ") + e.what());
      }
      if (!st.ok()) {
        if (i > 0) {
          if (Status s = ack(msgs[i - 1].seq); !s.ok()) return s;
        }
        nack();
        return st;
      }
    }
    if (Status s = ack(msgs[n - 1].seq); !s.ok()) return s;
  }
}

namespace {

bool valid_name(std::string_view n) {
  if (n.empty() || n.size() > 200 || n[0] == '.') return false;
  return std::all_of(n.begin(), n.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) != 0 || ch == '-' || ch == '_' || ch == '.';
  });
}

}  // namespace

Result<std::unique_ptr<Channel>> Topic::channel(std::string_view name,
                                                const ChannelOptions& options) {
  Impl& t = *impl_;
  if (t.reader) t.refresh();  // a new channel's start (tail) is the writer's latest
  if (!valid_name(name)) {
    return Status(StatusCode::kInvalidArgument,
                  "channel name '" + std::string(name) +
                      "': use 1-200 of [A-Za-z0-9._-], not starting with '.'");
  }
  {
    MutexLock lk(t.mu);
    if (!t.open_channels.try_emplace(std::string(name)).second) {
      return Status(StatusCode::kInUse,
                    "channel '" + std::string(name) + "' is already open in this process");
    }
  }
  auto c = std::make_unique<Channel::Impl>();  // its destructor unregisters
  c->topic = impl_;
  c->name = std::string(name);
  c->path = t.channel_path(name);
  c->durable_positions = options.durable_positions;
  auto created = t.fs.open(c->path, log::OpenMode::kCreateNew);
  const bool fresh = created.ok();
  if (!fresh && created.status().code() != StatusCode::kAlreadyExists) return created.status();
  auto f = fresh ? std::move(created) : t.fs.open(c->path, log::OpenMode::kReadWrite);
  if (!f.ok()) return f.status();
  c->file = std::move(*f);
  if (Status s = c->file->lock("channel '" + std::string(name) + "' is in use"); !s.ok()) {
    return s;
  }
  std::uint64_t start = 0;
  if (fresh) {
    if (!t.reader) {
      // The start position is durable with the log it points into, in
      // every mode: a power cut must not leave it past the log's end.
      MutexLock lk(t.mu);
      if (Status s = t.sync_locked(); !s.ok()) return s;
    }
    start = options.start == StartFrom::kTail ? next_seq() : first_seq();
    if (Status s = log::write_position(*c->file, 1, start); !s.ok()) return s;
    if (Status s = c->file->sync(); !s.ok()) return s;
    if (Status s = t.fs.sync_dir(t.channel_dir()); !s.ok()) return s;  // the new file
    c->generation = 1;
    c->acked = start;
  } else {
    auto p = log::read_position(*c->file);
    if (!p.ok()) return p.status();
    if (p->state == log::PositionState::kDamaged) {
      return Status(StatusCode::kCorruption,
                    "position file " + c->path +
                        " is damaged (both slots invalid); delete_channel() and recreate it");
    }
    // Unset: its first position never reached the disk (a power cut while
    // it was created): deliver from the oldest record, never lose one.
    const std::uint64_t stored =
        p->state == log::PositionState::kValid ? p->slot.next_seq : first_seq();
    c->generation = p->state == log::PositionState::kValid ? p->slot.generation : 0;
    // A retention cap may have removed what is before first_seq; a lost
    // tail (kNone/kInterval power cut) is skipped by open, never reused.
    start = std::clamp(stored, first_seq(), next_seq());
    if (stored < start) c->capped_here = start - stored;  // a cap deleted them
    c->acked = start;
  }
  if (t.reader) t.refresh();
  c->seek(start);
  {
    MutexLock lk(t.mu);
    auto& reg = t.open_channels.find(c->name)->second;
    reg.acked = c->acked;
    reg.file = c->file.get();
  }
  return std::unique_ptr<Channel>(new Channel(std::move(c)));
}

}  // namespace sluice
