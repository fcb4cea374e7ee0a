#include "sluice/log/channel.h"

#include <unistd.h>  // getpid

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <span>
#include <thread>

#include "log/position.h"
#include "log/reader.h"
#include "log/topic_impl.h"
#include "sluice/log/topic.h"

namespace sluice {

using log::MutexLock;

namespace {

// Into m's buffer (reused: no allocation once it is large enough).
void copy_record(const log::RecordView& v, LogMessage& m) {
  m.seq = v.seq;
  m.payload.assign(v.payload);
  if (v.timed) {
    m.time = log::time_of(v.time);
  } else {
    m.time.reset();
  }
}

}  // namespace

struct Channel::Impl {
  explicit Impl(std::shared_ptr<Topic::Impl> t) : topic(t), r(std::move(t)) {}

  std::shared_ptr<Topic::Impl> topic;  // a channel may outlive its Topic object
  std::string name;
  std::string path;
  std::unique_ptr<log::File> file;  // the position file, locked while open
  std::uint64_t generation = 0;
  std::uint64_t acked = 0;  // durable: first seq not acknowledged
  bool durable_positions = true;
  bool registered = false;  // in topic->open_channels (erased with us)

  log::Reader r;  // the read cursor
  // Deleted by a cap before this open.
  std::uint64_t capped_here = 0;

  ~Impl() {
    if (!registered) return;
    MutexLock lk(topic->mu);  // before the file goes: retention may sync it
    std::lock_guard g(topic->channels_mu);
    topic->open_channels.erase(name);
  }

  // Reads 1..max records, handing each to take(view) (the view is valid
  // during the call only), waiting for the first; got = how many.
  template <class Take>
  Status fill_batch(std::size_t max, Take&& take, std::size_t& got, const Context& ctx) {
    got = 0;
    if (max == 0) return {StatusCode::kInvalidArgument, "next_batch: max must be at least 1"};
    if (ctx.stop_requested()) return StatusCode::kCancelled;
    for (;;) {
      while (got < max) {
        bool have = false;
        log::RecordView v;
        if (Status s = r.read_record(&v, have); !s.ok()) return got > 0 ? Status::Ok() : s;
        if (!have) break;
        take(got, v);
        ++got;
        r.read_more(max - got, [&](const log::RecordView& w) {
          take(got, w);
          ++got;
        });
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
      const std::uint64_t seen_end = r.segment_end();
      const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
      bool moved = false;
      while (!moved && std::chrono::steady_clock::now() < spin_until) {
        std::this_thread::yield();
        moved = r.segment_end() != seen_end;
      }
      if (moved) continue;
      // Sleep until an append becomes visible (no polling).
      MutexLock lk(topic->mu);
      const std::uint64_t seen = r.next_seq();
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
    return r.next_seq() >= topic->visible_seq;
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
    if (next_seq_of_topic() != before || r.next_seq() < next_seq_of_topic()) return Status::Ok();
    if (r.at_damage()) return Status::Ok();  // read_one says what it found
    if (topic->closed.load(std::memory_order_acquire)) return Status::Ok();  // found the mark
    log::futex_wait_shared(&np->seq, seen, ctx);
    if (StatusCode e = ctx.err(); e != StatusCode::kOk) return e;
    return Status::Ok();
  }

  std::uint64_t next_seq_of_topic() const {
    MutexLock lk(topic->mu);
    return topic->next_seq;
  }

  // Channel::seek in a read-only topic: forward only, which is what an ack
  // does (and a reader in another process acks): the position file, synced,
  // then the wake-up of appenders waiting at the bound. Back needs the
  // writer: retention and the bound's slowest position live with it.
  Result<std::uint64_t> seek_forward(std::uint64_t seq) {
    topic->refresh();
    std::uint64_t first = 0, end = 0;
    {
      MutexLock lk(topic->mu);
      first = topic->first_seq;
      end = topic->next_seq;  // what the writer has published
    }
    if (seq > end) {
      return Status(StatusCode::kInvalidArgument,
                    "seek of channel '" + name + "' to seq " + std::to_string(seq) +
                        ", past the end of the topic (next seq " + std::to_string(end) + ")");
    }
    const std::uint64_t to = std::max(seq, first);
    if (to < acked) {
      return Status(StatusCode::kInvalidArgument,
                    "seek of channel '" + name + "' back to seq " + std::to_string(to) +
                        ": topic " + topic->dir +
                        " was opened read-only, and moving back needs the writer (retention and "
                        "the topic bound follow it)");
    }
    if (to > acked) {
      if (Status s = write_position(to, /*sync=*/true); !s.ok()) return s;
      MutexLock lk(topic->mu);
      topic->open_channels.find(name)->second.acked.store(acked, std::memory_order_release);
    }
    r.seek(to);
    topic->notify.acked();  // room, maybe, for an appender in the writer's process
    return to;
  }

  Status write_position(std::uint64_t seq, bool sync) {
    if (!durable_positions) {
      acked = seq;
      return Status::Ok();
    }
    const std::uint64_t gen = generation + 1;
    if (Status s = log::write_position(*file, gen, seq); !s.ok()) return s;
    if (sync) {
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
std::uint64_t Channel::delivered() const { return impl_->r.next_seq(); }
std::uint64_t Channel::skipped_corrupt() const { return impl_->r.corrupt(); }
std::uint64_t Channel::skipped_retention() const {
  MutexLock lk(impl_->topic->mu);
  const auto it = impl_->topic->open_channels.find(impl_->name);
  return impl_->capped_here + impl_->r.gaps() +
         (it == impl_->topic->open_channels.end() ? 0 : it->second.capped);
}

Status Channel::next_batch(std::vector<LogMessage>& out, std::size_t max, const Context& ctx) {
  const std::size_t base = out.size();
  std::size_t got = 0;
  // Grows one message at a time (a small batch does not pay for `max`),
  // reusing the buffers of messages already there.
  Status s = impl_->fill_batch(
      max,
      [&](std::size_t i, const log::RecordView& v) {
        if (out.size() == base + i) out.emplace_back();
        copy_record(v, out[base + i]);
      },
      got, ctx);
  out.resize(base + got);
  return s;
}

Status Channel::next_batch(MessageBatch& out, std::size_t max, const Context& ctx) {
  std::size_t got = 0;
  return impl_->fill_batch(
      max,
      [&](std::size_t, const log::RecordView& v) {
        MessageBatch::Entry& e = out.add(v.payload);
        e.seq = v.seq;
        if (v.timed) e.time = log::time_of(v.time);
      },
      got, ctx);
}

Result<LogMessage> Channel::next(const Context& ctx) {
  std::vector<LogMessage> out;
  if (Status s = next_batch(out, 1, ctx); !s.ok()) return s;
  return std::move(out.front());
}

Status Channel::ack(std::uint64_t seq) {
  Impl& c = *impl_;
  if (seq >= c.r.next_seq()) {
    return {StatusCode::kInvalidArgument, "ack of seq " + std::to_string(seq) +
                                              ", which was not delivered (next is " +
                                              std::to_string(c.r.next_seq()) + ")"};
  }
  if (seq + 1 <= c.acked) return Status::Ok();
  if (c.topic->sync_failed()) {
    // After a failed segment sync the records since the last good one are
    // in doubt: no position moves past them until the topic is reopened.
    MutexLock lk(c.topic->mu);
    return c.topic->sync_failure();
  }
  // As durable as the log it points into: synced in the modes whose appends
  // are durable on return; written (surviving a process crash) otherwise,
  // and synced by retention before it deletes on its strength.
  if (Status s = c.write_position(seq + 1, c.topic->durable_mode()); !s.ok()) return s;
  // Retention: once this position is durable, segments before it may go.
  bool crossed = false;
  {
    MutexLock lk(c.topic->mu);
    c.topic->open_channels.find(c.name)->second.acked.store(c.acked, std::memory_order_release);
    crossed = c.topic->segs.size() > 1 && c.acked >= c.topic->segs[1]->base_seq;
  }
  // An appender waiting for room under the topic bound (in any process).
  c.topic->notify.acked();
  return crossed ? c.topic->trim() : Status::Ok();
}

void Channel::nack() { impl_->r.seek(impl_->acked); }

Result<std::uint64_t> Channel::seek(std::uint64_t seq) {
  Impl& c = *impl_;
  Topic::Impl& t = *c.topic;
  if (t.reader) return c.seek_forward(seq);
  std::uint64_t to = 0;
  {
    MutexLock lk(t.mu);
    if (seq > t.next_seq) {
      return Status(StatusCode::kInvalidArgument, "seek of channel '" + c.name + "' to seq " +
                                                      std::to_string(seq) +
                                                      ", past the end of the topic (next seq " +
                                                      std::to_string(t.next_seq) + ")");
    }
    // Below the oldest retained record there is nothing to replay. Checked
    // and published under the lock retention deletes under, so nothing at
    // or after `to` goes from here on.
    to = std::max(seq, t.first_seq);
    // Forward acknowledges what it skips: after a failed sync, as ack(), no
    // position moves past the records in doubt until the topic is reopened.
    if (to > c.acked && t.sync_failed()) return t.sync_failure();
    // The position must never pass records a power cut could take back (in
    // the durable modes, those not synced yet).
    if (to > t.visible_seq) {
      if (Status s = t.sync_locked(); !s.ok()) return s;
    }
    // Moving back: retention and the bound see the lower position before
    // the file holds it (a cut in between leaves the file at the old
    // position, which this call did not promise to change).
    auto& reg = t.open_channels.find(c.name)->second;
    reg.acked.store(std::min(reg.acked.load(std::memory_order_relaxed), to),
                    std::memory_order_release);
    t.position_moved_back(to);
  }
  // Moving forward: the file first (synced, in every mode), then what
  // retention reads, so that nothing is deleted on a position a power cut
  // could take back.
  if (Status s = c.write_position(to, /*sync=*/true); !s.ok()) return s;
  bool crossed = false;
  {
    MutexLock lk(t.mu);
    t.open_channels.find(c.name)->second.acked.store(c.acked, std::memory_order_release);
    crossed = t.segs.size() > 1 && c.acked >= t.segs[1]->base_seq;
  }
  c.r.seek(to);
  // Room, maybe: appenders waiting at the bound, in any process.
  t.notify.acked();
  if (crossed) {
    if (Status s = t.trim(); !s.ok()) return s;
  }
  return to;
}

Result<std::uint64_t> Topic::channel_position(std::string_view name) const {
  Impl& t = *impl_;
  if (t.reader) t.refresh();
  {
    MutexLock lk(t.mu);
    auto it = t.open_channels.find(name);
    if (it != t.open_channels.end() && it->second.file != nullptr) {
      return std::clamp(it->second.acked.load(), t.first_seq, t.next_seq);
    }
  }
  auto f = t.fs.open(t.channel_path(name), log::OpenMode::kRead);
  if (!f.ok()) {
    if (f.code() == StatusCode::kNotFound) {
      return Status(StatusCode::kNotFound, "no channel '" + std::string(name) + "'");
    }
    return f.status();
  }
  auto p = log::read_position(**f);
  if (!p.ok()) return p.status();
  if (p->state == log::PositionState::kDamaged) {
    return Status(StatusCode::kCorruption,
                  "position file " + t.channel_path(name) + " is damaged (both slots invalid)");
  }
  MutexLock lk(t.mu);
  // Unset: its first position never reached the disk; it starts at the
  // oldest record.
  const std::uint64_t stored =
      p->state == log::PositionState::kValid ? p->slot.next_seq : t.first_seq;
  return std::clamp(stored, t.first_seq, t.next_seq);
}

Status Channel::consume(const std::function<Status(const LogMessage&)>& handler, const Context& ctx,
                        std::size_t batch) {
  if (batch == 0) return {StatusCode::kInvalidArgument, "consume: batch must be at least 1"};
  // The messages' buffers are reused from batch to batch: no allocation per
  // message once warm.
  std::vector<LogMessage> msgs(batch);
  for (;;) {
    std::size_t n = 0;
    Status got = impl_->fill_batch(
        batch, [&](std::size_t i, const log::RecordView& v) { copy_record(v, msgs[i]); }, n, ctx);
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
    std::lock_guard g(t.channels_mu);
    if (!t.open_channels.try_emplace(std::string(name)).second) {
      return Status(StatusCode::kInUse,
                    "channel '" + std::string(name) + "' is already open in this process");
    }
  }
  auto c = std::make_unique<Channel::Impl>(impl_);  // its destructor unregisters
  c->registered = true;
  c->name = std::string(name);
  c->path = t.channel_path(name);
  c->durable_positions = options.durable_positions;
  bool fresh = false;
  for (int attempt = 0;; ++attempt) {
    auto created = t.fs.open(c->path, log::OpenMode::kCreateNew);
    fresh = created.ok();
    if (!fresh && created.status().code() != StatusCode::kAlreadyExists) return created.status();
    auto f = fresh ? std::move(created) : t.fs.open(c->path, log::OpenMode::kReadWrite);
    if (!f.ok()) return f.status();
    c->file = std::move(*f);
    if (Status s = c->file->lock("channel '" + std::string(name) + "' is in use"); !s.ok()) {
      return s;
    }
    // The name may have gone between our open and our lock (delete_channel,
    // repair's move to the quarantine hold the lock while they remove it):
    // our lock would then be on a file nobody reaches, and a later opener
    // would make a fresh one beside us (two consumers). The file at the
    // name now must be the one we locked: held by this process.
    auto at_name = t.fs.open(c->path, log::OpenMode::kRead);
    if (!at_name.ok() && at_name.code() != StatusCode::kNotFound) return at_name.status();
    Result<int> holder = at_name.ok() ? (*at_name)->lock_holder() : Result<int>(0);
    if (!holder.ok()) return holder.status();
    if (*holder == static_cast<int>(::getpid())) break;
    if (attempt == 8) {
      return Status(StatusCode::kInUse, "channel '" + std::string(name) +
                                            "' is being deleted and made again meanwhile");
    }
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
    if (options.start_seq) {
      if (*options.start_seq > next_seq()) {
        (void)t.fs.remove(c->path);  // not created after all
        return Status(StatusCode::kInvalidArgument, "channel '" + std::string(name) +
                                                        "' to start at seq " +
                                                        std::to_string(*options.start_seq) +
                                                        ", past the end of the topic (next seq " +
                                                        std::to_string(next_seq()) + ")");
      }
      start = std::max(*options.start_seq, first_seq());
    }
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
  c->r.seek(start);
  {
    MutexLock lk(t.mu);
    auto& reg = t.open_channels.find(c->name)->second;
    // A cap that deleted records from `start` on while this channel was
    // opening did not charge it (it had no position yet): charge it now. In
    // a read-only topic, the refresh above forgot the segments a cap deleted
    // since `start` was taken: the seek starts past them, uncounted else.
    if (c->acked < t.first_seq) c->capped_here += t.first_seq - c->acked;
    reg.acked.store(c->acked, std::memory_order_release);
    reg.file = c->file.get();
    if (!t.reader) t.position_moved_back(c->acked);
  }
  // The bound: a new channel may start behind the slowest one (the writer
  // must look again), and an appender that looked while this one was
  // opening saw it at 0 (wake it).
  if (fresh) t.notify.channel_made();
  t.notify.acked();
  return std::unique_ptr<Channel>(new Channel(std::move(c)));
}

}  // namespace sluice
