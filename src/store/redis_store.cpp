// The Redis QueueStore: which kind a name is, and the store operations on
// either (redis_store.h). The kinds' writers and readers live in
// redis_pressure.cpp and redis_stream.cpp.
#include "store/redis_store.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <utility>

#include "sluice/redis/pressure_queue.h"
#include "sluice/redis/stream_topic.h"

namespace sluice::store {
namespace {

using namespace std::chrono_literals;

// How long remove() waits for clients inside an operation to leave it.
constexpr auto kRemoveWait = 30s;

// Reliable consumers are named "sluice.<channel>.<client id>_r<N>": unique
// per reader, and recognisable as dead by their client id (requeue_orphans).
std::string consumer_tag(std::string_view channel) {
  return "sluice." + std::string(channel) + ".";
}

// A pressure-protocol script on Redis Cluster: the protocol's keys share no
// hash tag, so a cluster refuses them. Such a server has no pressure queues.
bool cross_slot(const Status& s) { return s.message().find("CROSSSLOT") != std::string_view::npos; }

}  // namespace

std::string too_large(std::size_t size) {
  return "message too large: " + std::to_string(size) + " bytes, limit " +
         std::to_string(kMaxMessageBytes);
}

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
    return stream_writer(StreamTopic(opt_, std::string(name), stream_options()));
  }
  return pressure_writer(std::move(*found->queue));
}

namespace {

Status stream_has_no_seqs() {
  return {StatusCode::kInvalidArgument,
          "a Streams topic's messages have ids, not seqs: give an id, a time, the start or the "
          "end"};
}

// A Streams topic's channel moved to `to` (QueueStore::seek's places).
Status seek_stream(StreamTopic& t, std::string_view channel, const SeekTarget& to,
                   StreamSeekResult* where) {
  switch (to.kind) {
    case SeekTarget::Kind::kStart:
      return t.seek(channel, "0-0", where);
    case SeekTarget::Kind::kEnd:
      return t.seek(channel, "$", where);
    case SeekTarget::Kind::kId:
      return t.seek(channel, to.id, where);
    case SeekTarget::Kind::kTime:
      return t.seek_time(channel, to.time, where);
    case SeekTarget::Kind::kSeq:
      break;
  }
  return stream_has_no_seqs();
}

}  // namespace

Result<std::unique_ptr<QueueReader>> RedisStore::reader(std::string_view name,
                                                        std::string_view channel,
                                                        const Context& ctx,
                                                        const ReaderOptions& options) {
  if (Status s = validate_queue_name(name); !s.ok()) return s;
  if (options.visibility.count() < 0) {
    return Status(StatusCode::kInvalidArgument, "a visibility timeout must not be negative");
  }
  if (Status s = validate_channel_name(channel); !s.ok()) return s;
  if (options.visibility.count() > 0 && options.visibility < std::chrono::seconds(1)) {
    // Its reader keeps what it holds claimed, renewing every third of the
    // timeout: below a second a scheduling pause lets another reader take a
    // message still held (at 5 ms, at once).
    return Status(StatusCode::kInvalidArgument,
                  "a visibility timeout must be at least 1 s (it was " +
                      std::to_string(options.visibility.count()) + " ms)");
  }
  if (ctx.stop_requested()) return Status(StatusCode::kCancelled);
  auto found = find(name);
  if (!found.ok()) return found.status();
  if (found->kind == Kind::kStream) {
    StreamTopicOptions o = stream_options();
    o.keep_alive = true;  // a job or a slow pipe may hold a message for longer than the timeout
    using K = SeekTarget::Kind;
    const K start = options.start ? options.start->kind : K::kStart;
    if (start == K::kSeq) return stream_has_no_seqs();
    if (start == K::kEnd) o.start = StartFrom::kTail;
    StreamChannel c(opt_, std::string(name), std::string(channel), o);
    if (Status s = c.join(); !s.ok()) return s;
    if (c.made() && (start == K::kId || start == K::kTime)) {
      // Made at the oldest retained message; moved before anyone reads
      // (a competing reader that read in between has them taken back).
      StreamTopic t(opt_, std::string(name), stream_options());
      if (Status s = seek_stream(t, channel, *options.start, nullptr); !s.ok()) return s;
    }
    if (options.visibility.count() > 0) {
      if (Status s = c.set_visibility_timeout(options.visibility); !s.ok()) return s;
    }
    return stream_reader(std::move(c));
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
  if (options.start) {
    return Status(StatusCode::kInvalidArgument,
                  "queue '" + std::string(name) +
                      "' is a pressure queue: it keeps no history and no positions, so a reader "
                      "starts at its head (for a start place make it a Redis Streams topic: "
                      "sluice create --stream)");
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
  return pressure_reader(std::move(q), std::move(consumer));
}

namespace {

// A Streams topic's script answers NOGROUP for a channel it does not have
// (a topic that is gone is NOTOPIC): said as the embedded store says it, not
// as the transport's "deleted?", which the command would follow with a hint
// to create the queue that exists.
Status stream_no_channel(Status s, std::string_view name, std::string_view channel) {
  if (s.code() != StatusCode::kNotFound || s.message().find("NOGROUP") == std::string_view::npos) {
    return s;
  }
  return {StatusCode::kNotFound, "queue '" + std::string(name) + "' has no channel '" +
                                     std::string(channel) + "' (sluice stat lists them)"};
}

Status pressure_has_one_channel(std::string_view name, std::string_view channel) {
  return {StatusCode::kInvalidArgument,
          "channel '" + std::string(channel) + "': queue '" + std::string(name) +
              "' is a pressure queue, which has one channel, 'default'"};
}

}  // namespace

Result<std::unique_ptr<QueuePeek>> RedisStore::peek(std::string_view name, std::string_view channel,
                                                    const PeekFrom& from) {
  if (Status s = validate_queue_name(name); !s.ok()) return s;
  if (Status s = validate_channel_name(channel); !s.ok()) return s;
  auto found = find(name);
  if (!found.ok()) return found.status();
  if (from.seq) {
    return Status(StatusCode::kInvalidArgument,
                  "Redis messages have no seqs: peek a Streams topic from an id (after_id)");
  }
  if (found->kind == Kind::kStream) {
    StreamTopic t(opt_, std::string(name), stream_options());
    // Not found now rather than at the first page.
    auto page = t.peek(channel, from.after_id.empty() ? "" : from.after_id, 1);
    if (!page.ok()) return stream_no_channel(page.status(), name, channel);
    return stream_peek(std::move(t), std::string(channel), from.after_id);
  }
  if (channel != kDefaultChannel) return pressure_has_one_channel(name, channel);
  if (!from.after_id.empty()) {
    return Status(StatusCode::kInvalidArgument,
                  "a pressure queue has no ids: peek shows the head of its waiting list");
  }
  return pressure_peek(std::move(*found->queue));
}

Result<SeekResult> RedisStore::seek(std::string_view name, std::string_view channel,
                                    const SeekTarget& to, const Context& ctx) {
  if (Status s = validate_queue_name(name); !s.ok()) return s;
  if (Status s = validate_channel_name(channel); !s.ok()) return s;
  if (ctx.stop_requested()) return Status(StatusCode::kCancelled);
  auto found = find(name);
  if (!found.ok()) return found.status();
  if (found->kind != Kind::kStream) {
    return Status(StatusCode::kInvalidArgument,
                  "queue '" + std::string(name) +
                      "' is a pressure queue: it keeps no history and no positions, so there is "
                      "nothing to seek (purge drops what waits)");
  }
  StreamTopic t(opt_, std::string(name), stream_options());
  StreamSeekResult where;
  if (Status s = seek_stream(t, channel, to, &where); !s.ok()) {
    return stream_no_channel(s, name, channel);
  }
  SeekResult r;
  r.position = "after " + where.position;
  r.clamped =
      where.clamped && to.kind != SeekTarget::Kind::kStart;  // the oldest retained: asked for
  r.unacknowledged_before = where.unacknowledged_before;
  r.unacknowledged = where.unacknowledged;
  return r;
}

Result<std::uint64_t> RedisStore::purge(std::string_view name, std::string_view channel,
                                        const Context& ctx) {
  if (Status s = validate_queue_name(name); !s.ok()) return s;
  if (Status s = validate_channel_name(channel); !s.ok()) return s;
  if (ctx.stop_requested()) return Status(StatusCode::kCancelled);
  auto found = find(name);
  if (!found.ok()) return found.status();
  if (found->kind == Kind::kStream) {
    auto n = StreamTopic(opt_, std::string(name), stream_options()).purge(channel);
    if (!n.ok()) return stream_no_channel(n.status(), name, channel);
    return n;
  }
  if (channel != kDefaultChannel) return pressure_has_one_channel(name, channel);
  return found->queue->purge();
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
    // Purged messages left the queue unread: like the other backends, count
    // them as consumed (the protocol's own counter stays the protocol's).
    info.consumed = st.consumed_messages + st.purged;
    // The protocol's counters; its clients "may" skip the bytes (docs/cli.md).
    info.produced_bytes = st.produced_bytes;
    info.consumed_bytes = st.consumed_bytes;
    info.channels = {std::string(kDefaultChannel)};
    info.channel_info = {{.name = std::string(kDefaultChannel),
                          .lag = st.length,
                          .pending = st.in_flight,
                          .dead_lettered = 0,
                          .purged = st.purged}};
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
                                 .dead_lettered = c.dead_lettered,
                                 .purged = c.purged});
  }
  info.length = behind;
  info.consumed = info.produced - std::min(behind, info.produced);
  return info;
}

}  // namespace sluice::store
