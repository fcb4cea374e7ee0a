// The Redis QueueStore over PressureQueue (see redis_store.h).
#include "store/redis_store.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <utility>

#include "sluice/redis/pressure_queue.h"
#include "sluice/redis/stream_topic.h"

namespace sluice::store {
namespace {

using namespace std::chrono_literals;

// The largest message a Redis writer takes: the embedded backend's default,
// so a message fits either backend (Redis itself takes up to 512 MB).
constexpr std::size_t kMaxMessageBytes = std::size_t{16} << 20;

// How long remove() waits for clients inside an operation to leave it.
constexpr auto kRemoveWait = 30s;

// Reliable consumers are named "sluice.<channel>.<client id>_r<N>": unique
// per reader, and recognisable as dead by their client id (requeue_orphans).
std::string consumer_tag(std::string_view channel) {
  return "sluice." + std::string(channel) + ".";
}

std::string too_large(std::size_t size) {
  return "message too large: " + std::to_string(size) + " bytes, limit " +
         std::to_string(kMaxMessageBytes);
}

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

// A pressure-protocol script on Redis Cluster: the protocol's keys share no
// hash tag, so a cluster refuses them. Such a server has no pressure queues.
bool cross_slot(const Status& s) { return s.message().find("CROSSSLOT") != std::string_view::npos; }

// ---- Redis Streams topics (QueueKind::kStream) ----

class StreamWriter final : public QueueWriter {
 public:
  explicit StreamWriter(StreamTopic t) : t_(std::move(t)) {}

  Status put(std::span<const std::string_view> batch, const Context& ctx,
             std::size_t* done) override {
    const auto big = std::find_if(batch.begin(), batch.end(),
                                  [](std::string_view m) { return m.size() > kMaxMessageBytes; });
    std::size_t n = 0;
    Status s = t_.append_batch(batch.first(static_cast<std::size_t>(big - batch.begin())), ctx, &n);
    if (done != nullptr) *done = n;
    if (!s.ok() || big == batch.end()) return s;
    return {StatusCode::kInvalidArgument, too_large(big->size())};
  }
  std::size_t in_doubt() const override { return t_.in_doubt(); }
  Status close() override { return t_.close(); }
  std::size_t max_message_bytes() const override { return kMaxMessageBytes; }

 private:
  StreamTopic t_;
};

// A Streams id's time: its milliseconds part ("<ms>-<n>").
std::optional<std::chrono::system_clock::time_point> id_time(std::string_view id) {
  std::uint64_t ms = 0;
  const auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), ms);
  if (ec != std::errc() || end == id.data()) return std::nullopt;
  return std::chrono::system_clock::time_point(std::chrono::milliseconds(ms));
}

// A competing consumer of one channel. While it lives, its channel handle
// keeps what it holds claimed (StreamTopicOptions::keep_alive), however long
// the program takes. What it got and did not acknowledge is given back
// (without counting a delivery) when it goes, so the channel's next read
// gets it at once; if the process dies instead, another reader claims it
// after the channel's visibility timeout (30 s unless set).
class StreamReader final : public QueueReader {
 public:
  explicit StreamReader(StreamChannel c) : c_(std::move(c)) {}
  ~StreamReader() override {
    if (!held_.empty()) (void)c_.give_back(held_);  // best effort: else the timeout does it
  }
  StreamReader(const StreamReader&) = delete;
  StreamReader& operator=(const StreamReader&) = delete;

  using QueueReader::get;
  Status get(std::vector<StoreMessage>& out, std::size_t max, const Context& ctx) override {
    got_.clear();
    Status s = c_.next_batch(got_, std::max<std::size_t>(max, 1), ctx);
    for (StreamMessage& m : got_) {
      StoreMessage& o = out.emplace_back();
      o.data = std::move(m.payload);
      o.id = m.id;
      o.time = id_time(m.id);
      o.deliveries = m.deliveries;
      held_.push_back(std::move(m.id));
    }
    return s;
  }
  Status ack_prefix(std::uint64_t n) override {
    if (n > delivered()) return beyond(n, delivered());
    if (n <= acked_) return Status::Ok();
    const auto take = static_cast<std::ptrdiff_t>(n - acked_);
    // On failure the next call sends them again: acknowledging twice is harmless.
    if (Status s = c_.ack(std::span(held_).first(static_cast<std::size_t>(take))); !s.ok()) {
      return s;
    }
    held_.erase(held_.begin(), held_.begin() + take);
    acked_ = n;
    return Status::Ok();
  }
  std::uint64_t delivered() const override { return acked_ + held_.size(); }
  std::uint64_t acked() const override { return acked_; }
  Status release() override {
    if (Status s = c_.give_back(held_); !s.ok()) return s;  // again after a failure: harmless
    held_.clear();
    return Status::Ok();
  }

 private:
  StreamChannel c_;
  std::vector<StreamMessage> got_;
  std::vector<std::string> held_;  // ids got and not acknowledged, oldest first
  std::uint64_t acked_ = 0;        // the acknowledged prefix's length
};

}  // namespace

// Store handles never make a topic (a deleted one must stay deleted) and
// take the bound create() recorded.
StreamTopicOptions RedisStore::stream_options() const {
  StreamTopicOptions o;
  o.prefix = stream_prefix_;
  o.create_if_missing = false;
  return o;
}

// Which kind the queue `name` is, with its stats: one round trip for a
// pressure queue, two for a Streams topic; kNotFound if neither.
Result<RedisStore::Found> RedisStore::find(std::string_view name) {
  Found f;
  PressureQueue q(opt_, std::string(name));
  auto p = q.stats();
  if (p.ok()) {
    f.kind = Kind::kPressure;
    f.pressure = *p;
    f.queue.emplace(std::move(q));
    return f;
  }
  if (p.status().code() != StatusCode::kNotFound && !cross_slot(p.status())) return p.status();
  auto st = StreamTopic(opt_, std::string(name), stream_options()).stats();
  if (!st.ok()) return st.status();
  if (!st->exists) {
    return Status(StatusCode::kNotFound, "no queue '" + std::string(name) + "' at " + opt_.host +
                                             ":" + std::to_string(opt_.port));
  }
  f.kind = Kind::kStream;
  f.stream = std::move(*st);
  return f;
}

Result<std::unique_ptr<QueueStore>> RedisStore::open(std::string_view url,
                                                     const StoreOptions& options) {
  if (url.starts_with("rediss://")) {
    // (The URL is not repeated: it may hold a password.)
    return Status(StatusCode::kInvalidArgument,
                  "rediss:// (TLS) is not supported; use redis:// (through a TLS tunnel such as "
                  "stunnel if the server requires TLS)");
  }
  RedisOptions base;
  if (!options.redis_prefix.empty()) base.prefix = options.redis_prefix;
  auto o = RedisOptions::from_url(url, base);
  if (!o.ok()) return o.status();
  return std::unique_ptr<QueueStore>(new RedisStore(
      std::move(*o), options.redis_stream_prefix.empty() ? "sluice" : options.redis_stream_prefix));
}

Status RedisStore::create(std::string_view name, const QueueSpec& spec) {
  if (Status s = validate_queue_name(name); !s.ok()) return s;
  if (spec.max_age.count() < 0) {
    return {StatusCode::kInvalidArgument, "max_age must not be negative"};
  }
  if (spec.kind == QueueKind::kDefault && spec.replicas != 0) {
    return {StatusCode::kInvalidArgument,
            "waiting for replicas needs a Redis Streams topic (sluice create --stream, "
            "QueueKind::kStream): a pressure-protocol queue's puts are the protocol's scripts, "
            "acknowledged by the primary alone"};
  }
  if (spec.kind == QueueKind::kDefault && spec.max_age.count() > 0) {
    return {StatusCode::kInvalidArgument,
            "a pressure-protocol queue keeps every message until a reader takes it: a maximum "
            "age needs a Redis Streams topic (sluice create --stream, QueueKind::kStream)"};
  }
  // The name is taken by a queue of the other kind too.
  auto other = find(name);
  if (other.ok()) {
    return {StatusCode::kAlreadyExists,
            "queue '" + std::string(name) + "' already exists (a " +
                (other->kind == Kind::kStream ? "Streams topic" : "pressure queue") + ")"};
  }
  if (other.status().code() != StatusCode::kNotFound) return other.status();
  if (spec.kind == QueueKind::kDefault) {
    Status s = PressureQueue(opt_, std::string(name)).create(spec.bound);
    if (!cross_slot(s)) return s;
    return {StatusCode::kInvalidArgument,
            "redis at " + opt_.host + ":" + std::to_string(opt_.port) +
                " is a Redis Cluster, which cannot hold pressure-protocol queues (their keys "
                "share no hash tag); make a Redis Streams topic instead (sluice create --stream, "
                "QueueKind::kStream)"};
  }
  StreamTopicOptions o = stream_options();
  o.max_unconsumed = spec.bound;
  o.max_retained_age = spec.max_age;
  o.replicas = spec.replicas;
  const std::string channels[] = {std::string(kDefaultChannel)};
  return StreamTopic(opt_, std::string(name), o).create(channels);
}

Result<std::unique_ptr<QueueWriter>> RedisStore::writer(std::string_view name, const Context& ctx) {
  if (Status s = validate_queue_name(name); !s.ok()) return s;
  if (ctx.stop_requested()) return Status(StatusCode::kCancelled);
  auto found = find(name);
  if (!found.ok()) return found.status();
  const bool stream = found->kind == Kind::kStream;
  if (stream ? found->stream.closed : found->pressure.closed) {
    return Status(StatusCode::kClosed, "queue '" + std::string(name) + "' is closed");
  }
  if (stream) {
    return std::unique_ptr<QueueWriter>(
        new StreamWriter(StreamTopic(opt_, std::string(name), stream_options())));
  }
  return std::unique_ptr<QueueWriter>(new RedisWriter(std::move(*found->queue)));
}

Result<std::unique_ptr<QueueReader>> RedisStore::reader(std::string_view name,
                                                        std::string_view channel,
                                                        const Context& ctx,
                                                        const ReaderOptions& options) {
  if (Status s = validate_queue_name(name); !s.ok()) return s;
  if (options.visibility.count() < 0) {
    return Status(StatusCode::kInvalidArgument, "a visibility timeout must not be negative");
  }
  if (Status s = validate_queue_name(channel); !s.ok()) return s;
  if (ctx.stop_requested()) return Status(StatusCode::kCancelled);
  auto found = find(name);
  if (!found.ok()) return found.status();
  if (found->kind == Kind::kStream) {
    StreamTopicOptions o = stream_options();
    o.keep_alive = true;  // a job or a slow pipe may hold a message for longer than the timeout
    StreamChannel c(opt_, std::string(name), std::string(channel), o);
    if (Status s = c.join(); !s.ok()) return s;
    if (options.visibility.count() > 0) {
      if (Status s = c.set_visibility_timeout(options.visibility); !s.ok()) return s;
    }
    return std::unique_ptr<QueueReader>(new StreamReader(std::move(c)));
  }
  if (options.visibility.count() != 0) {
    return Status(StatusCode::kInvalidArgument,
                  "a visibility timeout needs a Redis Streams topic (sluice create --stream): "
                  "queue '" +
                      std::string(name) +
                      "' is a pressure queue, which gives a reader's messages to another only "
                      "once that reader is gone");
  }
  if (channel != kDefaultChannel) {
    return Status(StatusCode::kInvalidArgument,
                  "channel '" + std::string(channel) + "': queue '" + std::string(name) +
                      "' is a pressure queue, which has one channel, 'default'; for named "
                      "channels make it a Redis Streams topic (sluice create --stream)");
  }
  PressureQueue q = std::move(*found->queue);
  // A reader killed before it acknowledged left its messages in flight:
  // put them back first, in order, so this reader gets them. (Lists of an
  // earlier queue of this name are dropped on the way, never put back.)
  const std::string tag = consumer_tag(channel);
  if (found->pressure.in_flight > 0 || found->pressure.stale_in_flight > 0) {
    if (auto n = q.requeue_orphans(tag); !n.ok()) return n.status();
  }
  static std::atomic<std::uint64_t> next{0};
  std::string consumer = tag + q.client_id() + "_r" + std::to_string(next++);
  return std::unique_ptr<QueueReader>(new RedisReader(std::move(q), std::move(consumer)));
}

Status RedisStore::close(std::string_view name, const Context& ctx) {
  if (Status s = validate_queue_name(name); !s.ok()) return s;
  auto found = find(name);
  if (!found.ok()) return found.status();
  if (found->kind == Kind::kStream) {
    return StreamTopic(opt_, std::string(name), stream_options()).close();
  }
  Status s = PressureQueue(opt_, std::string(name)).close(ctx);
  if (s.code() == StatusCode::kClosed) return Status::Ok();  // idempotent
  if (s.code() == StatusCode::kDeadlineExceeded) {
    // The wait that ran out is for the producer role.
    return {StatusCode::kInUse,
            "queue '" + std::string(name) + "': a producer holds it (a put waiting for room)"};
  }
  return s;
}

Status RedisStore::remove(std::string_view name) {
  if (Status s = validate_queue_name(name); !s.ok()) return s;
  auto found = find(name);
  if (!found.ok()) return found.status();
  if (found->kind == Kind::kStream) {
    // Handles still open get kNotFound next (they never make it again).
    return StreamTopic(opt_, std::string(name), stream_options()).destroy();
  }
  auto r = PressureQueue(opt_, std::string(name)).destroy(with_timeout(kRemoveWait));
  if (r.code() == StatusCode::kDeadlineExceeded) {
    return {StatusCode::kInUse, "queue '" + std::string(name) +
                                    "' is closed, but a client stayed inside an operation for " +
                                    std::to_string(kRemoveWait.count()) + " s; not deleted yet"};
  }
  return r.status();
}

Result<std::vector<std::string>> RedisStore::list() {
  auto names = PressureQueue::list(opt_);
  if (!names.ok()) return names.status();
  auto topics = StreamTopic::list(opt_, stream_prefix_);
  if (!topics.ok()) return topics.status();
  names->insert(names->end(), topics->begin(), topics->end());
  std::sort(names->begin(), names->end());
  names->erase(std::unique(names->begin(), names->end()), names->end());
  // The protocol's other clients may use names the store cannot address.
  std::erase_if(*names, [](const std::string& n) { return !validate_queue_name(n).ok(); });
  return names;
}

Result<QueueInfo> RedisStore::stat(std::string_view name) {
  if (Status s = validate_queue_name(name); !s.ok()) return s;
  auto found = find(name);
  if (!found.ok()) return found.status();
  QueueInfo info;
  info.name = std::string(name);
  if (found->kind == Kind::kPressure) {
    const PressureStats& st = found->pressure;
    info.kind = "pressure";
    info.bound = st.bound;
    info.closed = st.closed;
    info.length = st.length + st.in_flight;  // produced - consumed
    info.waiting = st.length;                // may pass the bound: a dead reader's went back
    info.in_flight = st.in_flight;
    info.produced = st.produced_messages;
    info.consumed = st.consumed_messages;
    // The protocol's counters; its clients "may" skip the bytes (docs/cli.md).
    info.produced_bytes = st.produced_bytes;
    info.consumed_bytes = st.consumed_bytes;
    info.channels = {std::string(kDefaultChannel)};
    info.channel_info = {{.name = std::string(kDefaultChannel),
                          .lag = st.length,
                          .pending = st.in_flight,
                          .dead_lettered = 0}};
    return info;
  }
  const StreamTopicStats& st = found->stream;
  info.kind = "stream";
  info.bound = st.bound;
  info.max_age = st.max_retained_age;
  info.replicas = st.replicas;
  info.closed = st.closed;
  info.produced = st.appended;
  info.produced_bytes = st.appended_bytes;
  std::uint64_t behind = 0;
  for (const StreamChannelStats& c : st.channels) {
    behind = std::max(behind, c.unacknowledged);
    info.channels.push_back(c.name);
    info.channel_info.push_back({.name = c.name,
                                 .lag = c.unacknowledged - std::min(c.pending, c.unacknowledged),
                                 .pending = c.pending,
                                 .dead_lettered = c.dead_lettered});
  }
  info.length = behind;
  info.consumed = info.produced - std::min(behind, info.produced);
  return info;
}

}  // namespace sluice::store
