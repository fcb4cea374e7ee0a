// The Redis store's pressure-protocol queues: their writer (put_many) and
// reader (reliable gets under a consumer name of its own; see redis_store.h
// and docs/cli.md, "Redis").
#include <algorithm>
#include <chrono>
#include <iterator>
#include <utility>

#include "sluice/redis/pressure_queue.h"
#include "store/redis_store.h"

namespace sluice::store {
namespace {

class RedisWriter final : public QueueWriter {
 public:
  explicit RedisWriter(PressureQueue q) : q_(std::move(q)) {}

  Status put(std::span<const std::string_view> batch, const Context& ctx,
             std::size_t* done) override {
    std::size_t n = 0;
    in_doubt_ = 0;
    Status s = put_all(batch, ctx, n);
    if (done != nullptr) *done = n;
    return s;
  }
  std::size_t in_doubt() const override { return in_doubt_; }

  Status close() override {
    Status s = q_.close();
    return s.code() == StatusCode::kClosed ? Status::Ok() : s;  // idempotent
  }

  std::size_t max_message_bytes() const override { return kMaxMessageBytes; }
  double blocked_seconds() const override {
    return std::chrono::duration<double>(q_.bound_wait()).count();
  }

 private:
  Status put_all(std::span<const std::string_view> batch, const Context& ctx, std::size_t& n) {
    const auto big = std::find_if(batch.begin(), batch.end(),
                                  [](std::string_view m) { return m.size() > kMaxMessageBytes; });
    buf_.assign(batch.begin(), big);  // put_many takes strings
    if (!buf_.empty()) {
      PutResult r = q_.put_many(buf_, ctx);
      n = r.enqueued;
      if (!r.ok()) {
        in_doubt_ = r.in_doubt;
        if (r.in_doubt == 0) return r.status;
        // *done counts only what is certainly in; say what may be too.
        return {r.code(), std::string(r.status.message()) + "; " + std::to_string(r.in_doubt) +
                              " more messages may or may not have been enqueued (the "
                              "connection broke after they were sent)"};
      }
    }
    if (big == batch.end()) return Status::Ok();
    return {StatusCode::kInvalidArgument, too_large(big->size())};
  }

  PressureQueue q_;
  std::vector<std::string> buf_;
  std::size_t in_doubt_ = 0;  // of the last put
};

class RedisReader final : public QueueReader {
 public:
  RedisReader(PressureQueue q, std::string consumer)
      : q_(std::move(q)), consumer_(std::move(consumer)) {}

  // What was got and not acknowledged goes back to the head of the queue
  // for the next reader, as the embedded backend delivers it again. Best
  // effort: if Redis cannot be reached, the next reader's open recovers it
  // once this process is gone (requeue_orphans).
  ~RedisReader() override {
    // Also once all is acknowledged: an emptied list leaves the registry
    // then, so stat and recovery do not visit every reader that ever ran.
    if (pending_ > 0 || unsure_ != Op::kNone || !taken_.empty() || acked_ > 0) {
      (void)q_.requeue_inflight(consumer_);
    }
  }
  RedisReader(const RedisReader&) = delete;
  RedisReader& operator=(const RedisReader&) = delete;

  using QueueReader::get;
  Status get(std::vector<StoreMessage>& out, std::size_t max, const Context& ctx) override {
    max = std::max<std::size_t>(max, 1);
    if (unsure_ != Op::kNone) {
      if (Status s = resolve(); !s.ok()) return s;
    }
    if (!taken_.empty()) {  // a failed get's messages, in flight: deliver them first
      const std::size_t take = std::min(max, taken_.size());
      for (std::size_t i = 0; i < take; ++i) out.emplace_back().data = std::move(taken_[i]);
      taken_.erase(taken_.begin(), taken_.begin() + static_cast<std::ptrdiff_t>(take));
      pending_ += take;
      return Status::Ok();
    }
    got_.clear();
    Status s = q_.get_many_reliable(consumer_, got_, max, ctx);
    for (std::string& m : got_) out.emplace_back().data = std::move(m);
    pending_ += got_.size();
    unsure_ = maybe_ran(s) ? Op::kGet : Op::kNone;
    return s;
  }

  // The in-flight list holds this reader's messages oldest first, so the
  // prefix is its oldest n - acked_.
  Status ack_prefix(std::uint64_t n) override {
    if (unsure_ != Op::kNone) {
      if (Status s = resolve(); !s.ok()) return s;
    }
    if (n > delivered()) return beyond(n, delivered());
    if (n <= acked_) return Status::Ok();
    const std::size_t take = static_cast<std::size_t>(n - acked_);
    Status s = q_.ack(consumer_, take);
    if (s.ok()) {
      pending_ -= take;
      acked_ = n;
    }
    unsure_ = maybe_ran(s) ? Op::kAck : Op::kNone;
    return s;
  }
  std::uint64_t delivered() const override { return acked_ + pending_; }
  std::uint64_t acked() const override { return acked_; }

  // Back to the head of the queue, in order (requeue_inflight); a pressure
  // queue counts no deliveries.
  Status release() override {
    if (unsure_ != Op::kNone) {
      if (Status s = resolve(); !s.ok()) return s;
    }
    if (pending_ == 0 && taken_.empty()) return Status::Ok();
    auto r = q_.requeue_inflight(consumer_);
    if (!r.ok()) {
      unsure_ = maybe_ran(r.status()) ? Op::kRelease : Op::kNone;
      return r.status();
    }
    pending_ = 0;
    taken_.clear();
    return Status::Ok();
  }

 private:
  // A call that failed with the connection may have run (PressureQueue:
  // kUnavailable after the request was sent); the rest did nothing.
  static bool maybe_ran(const Status& s) {
    return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kInternal;
  }

  // After such a failure the in-flight list says what happened: it holds
  // exactly what this reader got and has not acknowledged, oldest first. A
  // failed ack that ran left fewer than pending_ (those acknowledged are
  // the oldest: the prefix moves on by as many); a failed get that ran left
  // more, which no one has seen yet: they go out with the next get (an ack
  // of pending_ messages would otherwise acknowledge them unseen); a failed
  // release that ran left none (they are back in the queue).
  Status resolve() {
    auto in = q_.inflight(consumer_);
    if (!in.ok()) return in.status();
    const Op op = std::exchange(unsure_, Op::kNone);
    if (op == Op::kRelease) {
      if (in->empty()) {
        pending_ = 0;
        taken_.clear();
      }
      return Status::Ok();
    }
    if (in->size() <= pending_) {
      if (op == Op::kAck) acked_ += pending_ - in->size();
      pending_ = in->size();
      taken_.clear();
    } else {
      taken_.assign(std::make_move_iterator(in->begin() + static_cast<std::ptrdiff_t>(pending_)),
                    std::make_move_iterator(in->end()));
    }
    return Status::Ok();
  }

  // The call whose outcome is unknown (it failed with the connection).
  enum class Op : std::uint8_t { kNone, kGet, kAck, kRelease };

  PressureQueue q_;
  std::string consumer_;
  std::uint64_t acked_ = 0;         // the acknowledged prefix's length
  std::size_t pending_ = 0;         // got, not yet acknowledged (in our in-flight list)
  Op unsure_ = Op::kNone;           // the last call that may or may not have run
  std::vector<std::string> got_;    // one get's messages
  std::vector<std::string> taken_;  // in flight after pending_, not yet returned by get
};

// The head of the waiting list. The protocol has no cursor: each page asks
// for the messages after those shown, counted from the head (a get between
// two pages shifts the list: the next page may repeat or miss messages at
// its edge).
// Shows at most the `length` messages waiting when the peek began: a
// producer that outruns the peek does not keep it going.
class PressurePeek final : public QueuePeek {
 public:
  PressurePeek(PressureQueue q, std::uint64_t length) : q_(std::move(q)), length_(length) {}
  Status next(std::vector<StoreMessage>& out, std::size_t max) override {
    if (shown_ >= length_) return Status::Ok();
    max = static_cast<std::size_t>(std::min<std::uint64_t>(max, length_ - shown_));
    auto page = q_.peek(max, shown_);
    if (!page.ok()) return page.status();
    for (std::string& m : *page) out.emplace_back().data = std::move(m);
    shown_ += page->size();
    return Status::Ok();
  }

 private:
  PressureQueue q_;
  const std::uint64_t length_;
  std::size_t shown_ = 0;
};

}  // namespace

Result<std::unique_ptr<QueuePeek>> pressure_peek(PressureQueue q) {
  auto length = q.length();
  if (!length.ok()) return length.status();
  return std::unique_ptr<QueuePeek>(std::make_unique<PressurePeek>(std::move(q), *length));
}

std::unique_ptr<QueueWriter> pressure_writer(PressureQueue q) {
  return std::make_unique<RedisWriter>(std::move(q));
}

std::unique_ptr<QueueReader> pressure_reader(PressureQueue q, std::string consumer) {
  return std::make_unique<RedisReader>(std::move(q), std::move(consumer));
}

}  // namespace sluice::store
