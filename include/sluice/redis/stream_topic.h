// StreamTopic and StreamChannel: the durable log's face (a topic, named
// channels that each see every message, acknowledgement after the work) on
// Redis Streams, for producers and consumers on many machines
// (docs/redis_streams.md). A topic is a stream; a channel is a consumer
// group; the consumers of one channel share its messages (each message goes
// to one of them), and every channel sees every message. The names follow
// the embedded log's Topic and Channel (sluice/log/topic.h, channel.h) where
// the meaning is the same.
//
// Thread safety: a handle is one Redis connection and must be used by one
//   thread at a time (like PressureQueue). Make one handle per thread;
//   handles on the same topic, in any processes, may run concurrently. A
//   Context's stop may be requested from any thread. Moving a handle, or
//   destroying it, needs the same exclusion as any other call. A
//   StreamChannel with keep_alive runs its keep-alive on a thread and a
//   connection of its own, synchronized with the handle's calls inside the
//   handle: the one-thread-at-a-time rule for the handle is unchanged.
// Blocking: append/append_batch wait while the topic is at its bound
//   (StreamTopicOptions::max_unconsumed with BoundPolicy::kBlock), on the
//   server (BLPOP on the topic's wake list, woken by acknowledgements) in
//   slices of RedisOptions::wait_slice (at most io_timeout / 2); next and
//   next_batch wait for a message (XREADGROUP BLOCK) in the same slices.
//   With replicas, an append also waits (WAIT) up to three quarters of
//   io_timeout for them. nack and give_back of a keep-alive handle wait for
//   a keep-alive round in flight (one round trip) to end. Every other call
//   is one round trip or a few, bounded by io_timeout.
// Ordering: the stream's order (ids rise; one append_batch is contiguous
//   unless it waits at the bound or has more than 1024 messages). One
//   consumer reads a channel's new messages in order; messages claimed
//   from a dead consumer, or given back with nack, come back out of order,
//   before new ones.
// Delivery: at least once. A message read and not acknowledged within
//   the channel's visibility timeout (with keep_alive: not kept claimed
//   for that long, as by a consumer that died), or given back (nack), is
//   delivered again to a consumer of the channel (XAUTOCLAIM) with its
//   delivery count raised; past max_deliveries it goes to the topic's
//   dead-letter stream instead, and counts as acknowledged. StreamTopic's
//   seek (replay from an id or a time, or skip ahead) and purge move a
//   channel's position and take its pending messages back from their
//   consumers: what a consumer held then is no longer its own (its ack of
//   it counts nothing, or kInUse once another holds it). peek reads a channel's unacknowledged
//   messages without taking them.
// Bound and retention: appends never pass max_unconsumed messages that the
//   slowest channel has not acknowledged, checked atomically with the XADD
//   (one script). trim() removes only what every channel acknowledged (XTRIM
//   MINID), never a blind MAXLEN; appends call it every 1024 messages. The
//   explicit caps max_retained_messages and max_retained_age do drop
//   unacknowledged messages, and count them (records_dropped,
//   skipped_retention).
// Durability: as the server's (appendonly, appendfsync); an acknowledged
//   append or ack is one the server applied. With replicas = N, an append
//   is acknowledged only once N replicas have it too, so it survives the
//   failover of its primary to one of them (not a partition: see
//   docs/redis_streams.md, "Replicas").
// Cancellation: every waiting call takes a Context; a stop or deadline ends
//   a wait on the server at once (CLIENT UNBLOCK from a second connection,
//   as for PressureQueue) and returns kCancelled/kDeadlineExceeded with
//   nothing half-done (a batch appended in part says how much: *done).
//   Nothing is acknowledged by a cancelled call.
// Ownership: payloads are copied to Redis; next/next_batch return owned
//   strings. A handle owns its connection. A StreamTopic starts no threads;
//   a StreamChannel with keep_alive starts one (and a second connection) at
//   its first read, which a move hands on to the new handle with the ids it
//   holds, and which stops and is joined when the handle that owns it is
//   destroyed or assigned over (at most one keep-alive round, bounded by
//   io_timeout). A StreamChannel made by StreamTopic::channel() has its own
//   connection and does not refer to the topic handle.
// Errors: kUnavailable (Redis down, the connection broke, or the server
//   cannot take the call now: loading, out of memory, busy; messages name
//   host:port; the next call reconnects), kRejected (BoundPolicy::kFail at
//   the bound), kInUse (an ack of messages another consumer holds now),
//   kNotFound (the channel was deleted: the next call of that handle makes
//   it again; or the topic does not exist and
//   create_if_missing is false), kClosed (append to a closed topic; a read
//   once the channel has everything), kAlreadyExists (create),
//   kInvalidArgument (names, settings, authentication, permissions),
//   kInternal (an unexpected reply). After a kUnavailable append, the
//   messages after *done may or may not be in the topic (in_doubt()); the
//   message says so. With replicas, an append that fewer replicas
//   acknowledged is kUnavailable with its messages in doubt, saying how
//   many did.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sluice/bound_policy.h"
#include "sluice/context.h"
#include "sluice/redis/redis_options.h"
#include "sluice/start_from.h"
#include "sluice/status.h"

namespace sluice {

namespace redis {
class Connection;
}

struct StreamTopicOptions {
  // Keys are "<prefix>:{<topic>}:..." (one hash tag: one Cluster shard).
  std::string prefix = "sluice";
  // Most messages the slowest channel may have unacknowledged; 0: no bound.
  // A topic without channels is not bounded.
  std::uint64_t max_unconsumed = 0;
  // At the bound: wait for acknowledgements, or fail at once (kRejected).
  BoundPolicy on_bound = BoundPolicy::kBlock;
  // An explicit cap (0: none): each append keeps the stream at most this
  // long by removing its oldest entries, even those a channel has not
  // acknowledged. Those are counted (StreamTopicStats::records_dropped,
  // StreamChannelStats::skipped_retention), never delivered again, and no
  // longer hold the bound. Meant for channels that may never come back.
  std::uint64_t max_retained_messages = 0;
  // The same by age (0: none): entries older than this by the server's clock
  // are removed, and counted the same way, at each append and trim() (at
  // most 10,000 a call; a topic nobody appends to keeps them until a
  // trim()). Like the log's TopicOptions::max_retained_age.
  std::chrono::milliseconds max_retained_age{0};
  // How long a consumer may hold a message unacknowledged before another
  // consumer of the channel may claim it (> 0), on a channel without a
  // timeout of its own: one recorded for the channel in Redis
  // (StreamChannel::set_visibility_timeout, `sluice get --visibility`) is
  // what every handle uses instead.
  std::chrono::milliseconds visibility_timeout{30000};
  // StreamChannel: while the handle lives, keep every message it holds
  // (read, and not yet acknowledged, nacked or given back) claimed, so that
  // a handler that runs longer than the visibility timeout, or messages
  // still waiting in a batch, are not delivered to another consumer too.
  // Every third of the channel's timeout (at least 10 ms), a thread of the
  // handle's own, on a connection of its own, resets their idle time
  // (XCLAIM ... JUSTID: the delivery count stays). Only a consumer that
  // died (or cannot reach the server for a whole timeout) lets them go, so
  // the thread must run within two thirds of the timeout: keep it well
  // above scheduling pauses (the command refuses less than 1 s; at 5 ms a
  // competing reader took a held message at once).
  bool keep_alive = false;
  // Replicas (0: none) that must have an append before it is acknowledged:
  // after each append script, WAIT N up to three quarters of io_timeout
  // (pipelined with the script: no extra round trip once the handle knows
  // the topic's recorded value). Fewer in time: kUnavailable, the batch in
  // doubt (in_doubt()). create() records it: every append, from any
  // handle, waits for the larger of the recorded value and its own.
  std::uint32_t replicas = 0;
  // Deliveries of one message before it is dead-lettered instead (>= 1).
  std::uint32_t max_deliveries = 5;
  // false: append and join on a topic that does not exist (never made, or
  // destroyed) return kNotFound instead of making it. What a handle on a
  // topic made by create() wants, so a deleted topic is not made again
  // behind its owner's back.
  bool create_if_missing = true;
  // Where a channel this handle makes (join(), or the first read) starts:
  // at the oldest message still retained, or at the next one appended (the
  // messages before it are not its to read, and do not hold the bound for
  // it). A channel that exists keeps its place.
  StartFrom start = StartFrom::kBeginning;
};

// When the entry with this id ("<ms>-<seq>") was appended: its ms part, the
// server's clock (Redis makes ids from it; a clock that went back makes ids
// from the newest one seen). The epoch for a string that is not an id.
std::chrono::system_clock::time_point stream_id_time(std::string_view id) noexcept;

struct StreamMessage {
  std::string id;       // the stream entry id, "ms-seq"
  std::string payload;  // the bytes appended
  // 1 the first time; more once delivered again. From StreamTopic::peek:
  // the deliveries counted so far (0: not delivered yet, or each delivery
  // given back, which does not count).
  std::uint32_t deliveries = 1;

  // When it was appended (stream_id_time(id)).
  std::chrono::system_clock::time_point time() const noexcept { return stream_id_time(id); }
};

// Where StreamTopic::seek moved a channel.
struct StreamSeekResult {
  // The channel's position (its consumer group's last-delivered id): its
  // next read delivers the first entry after it.
  std::string position;
  // That entry's id; empty if there is none yet (at the end).
  std::string next_id;
  // The seek asked for a place before the oldest retained entry, and some
  // messages after that place are gone (retention or a cap removed them):
  // it stopped at the oldest retained one instead.
  bool clamped = false;
  // Delivered, unacknowledged messages the seek took back from their
  // consumers (they come again if they are after the new position).
  std::uint64_t dropped_pending = 0;
  // The channel's unacknowledged messages (toward the bound) before the
  // seek and now: the entries after its position.
  std::uint64_t unacknowledged_before = 0;
  std::uint64_t unacknowledged = 0;
};

struct StreamChannelStats {
  std::string name;
  std::uint64_t unacknowledged = 0;  // appended and not acknowledged (nor dead-lettered, dropped)
  std::uint64_t pending = 0;         // of those, delivered to a consumer (held)
  std::uint64_t dead_lettered = 0;   // moved to the dead-letter stream
  // Messages the cap (max_retained_messages) removed before this channel
  // acknowledged them (as Channel::skipped_retention()).
  std::uint64_t skipped_retention = 0;
  // Its own visibility timeout (set_visibility_timeout; 0: none, each
  // handle goes by its options').
  std::chrono::milliseconds visibility_timeout{0};
  // Messages dropped unacknowledged by StreamTopic::purge.
  std::uint64_t purged = 0;
};

struct StreamTopicStats {
  std::uint64_t appended = 0;  // messages ever appended
  // Their payload bytes; empty for a topic an older sluice appended to
  // (which kept no count).
  std::optional<std::uint64_t> appended_bytes;
  std::uint64_t retained = 0;  // in the stream now
  std::uint64_t trimmed = 0;   // removed once every channel had acknowledged them
  // Removed by the cap before some channel acknowledged them; in a topic
  // without channels, every message the cap removed (as
  // RetentionStats::records_dropped).
  std::uint64_t records_dropped = 0;
  std::uint64_t dead_letters = 0;                 // entries in the dead-letter stream
  std::vector<StreamChannelStats> channels;       // by name
  std::uint64_t bound = 0;                        // recorded by create() (0: none)
  std::uint64_t max_retained_messages = 0;        // likewise
  std::chrono::milliseconds max_retained_age{0};  // likewise
  std::uint32_t replicas = 0;                     // likewise
  bool closed = false;                            // close() was called
  bool exists = false;  // made (create, an append, a join) and not destroyed
};

// The snapshot in the Prometheus text format (sluice/metrics.h), labelled
// name="<name>" (and channel="<channel>" for each channel's):
// sluice_stream_*, sluice_stream_channel_*.
std::string to_prometheus(const StreamTopicStats& stats, std::string_view name);

class StreamChannel;

class StreamTopic {
 public:
  // Connects lazily; the topic exists once something is appended or a
  // channel joins. kInvalidArgument from calls if `name` or options are bad.
  StreamTopic(RedisOptions redis, std::string name, StreamTopicOptions options = {});
  ~StreamTopic();
  StreamTopic(StreamTopic&&) noexcept;
  StreamTopic& operator=(StreamTopic&&) noexcept;

  // Makes the topic now with these channels, each of which sees every
  // message, and records options().max_unconsumed, max_retained_messages and
  // max_retained_age as the topic's own: every append (and trim), from any
  // handle, keeps the tighter of each and its own options' (0: none); and
  // options().replicas, of which every append waits for the larger.
  // Atomic. kAlreadyExists if the topic exists.
  Status create(std::span<const std::string> channels = {});
  // Appends one message; its id. Waits at the bound (kBlock) or kRejected.
  // kClosed once the topic is closed.
  Result<std::string> append(std::string_view payload, const Context& ctx = {});
  // Appends in order, waiting at the bound between parts (or kRejected);
  // *done (if given) is how many of the first messages are in the topic.
  Status append_batch(std::span<const std::string_view> batch, const Context& ctx = {},
                      std::size_t* done = nullptr);
  // After a failed append or append_batch: how many messages after *done
  // may or may not be in the topic (the connection broke after they were
  // sent); 0 after a success.
  std::size_t in_doubt() const noexcept { return in_doubt_; }
  // Time this handle's appends have waited for room at the bound
  // (backpressure) since it was made; a wait adds at the end of each of its
  // slices (RedisOptions::wait_slice). Safe to call from any thread, also
  // while an append waits (a progress line, a metrics scrape).
  std::chrono::nanoseconds bound_wait() const noexcept {
    return std::chrono::nanoseconds(bound_wait_ns_ ? bound_wait_ns_->load(std::memory_order_relaxed)
                                                   : 0);
  }
  // Marks the end of the topic: appends return kClosed (those waiting at
  // the bound too, within one wait slice); a channel's consumers get
  // kClosed once they have had everything. Idempotent. kNotFound if
  // the topic does not exist.
  Status close();
  // Applies max_retained_age, then removes what every channel has
  // acknowledged; how many entries went.
  Result<std::uint64_t> trim();
  Result<StreamTopicStats> stats();

  // A consumer of channel `name` (one more connection), the channel made
  // if new (StreamChannel::join): from now on it sees every message.
  Result<StreamChannel> channel(std::string_view name);
  // The channels' names, sorted.
  Result<std::vector<std::string>> channels();
  // Deletes a channel: its messages held by consumers are forgotten, and it
  // no longer holds the bound or retention. kNotFound if there is none.
  Status delete_channel(std::string_view name);
  // Deletes the topic's keys (stream, channels, counters, dead letters).
  Status destroy();

  // Looking without taking, going back, dropping (docs/redis_streams.md,
  // "Peek, seek, purge"). Each is one script: atomic against every other
  // call on the topic, from any handle.
  //
  // Up to `max` (>= 1) of the channel's unacknowledged messages, in id
  // order, without delivering, acknowledging or claiming them, and without
  // changing a position, a delivery count, a consumer or the bound.
  // `after_id` empty: from the channel's first unacknowledged message: its
  // pending ones (delivered and held by any consumer, `deliveries` as
  // counted so far) merged in id order with those after its position (not
  // delivered yet: `deliveries` 0); acknowledged ones between them do not
  // show. Else only those after `after_id` (an id "ms-seq" or "ms"): page
  // with the last id of the previous page. Each call is a snapshot
  // (appends, reads and acks run before or after it, never in between);
  // an empty result means nothing after `after_id`, a short one does not.
  // kNotFound if the topic or the channel does not exist. With `until_id`
  // (an id), only those up to it: a pager that stops at newest_id() as it
  // began shows what the channel held then, however fast appends come.
  Result<std::vector<StreamMessage>> peek(std::string_view channel, std::string_view after_id,
                                          std::size_t max, std::string_view until_id = {});
  // The id of the newest entry in the topic's stream ("0-0" when empty).
  Result<std::string> newest_id();
  // Moves channel `channel` so that its next read delivers the first entry
  // after `id` ("ms-seq" or "ms"; "0-0" or "0": the oldest retained; "$", or
  // any id past the newest: the end, after the newest), and drops its
  // pending messages: whoever held them holds them no longer (its
  // keep-alive no longer renews them, its nack or give_back of them is
  // ignored, and its ack of one counts nothing, or, once the message has
  // been delivered again to another consumer (replayed), is refused with
  // kInUse: see ack). Live consumers read from the
  // new position at their next read (one blocked in a read: within one
  // wait slice). The channel's
  // unacknowledged messages are then exactly those after the position:
  // moving back makes them count toward the bound again (producers wait
  // until the channel catches up); moving forward frees room (appends
  // waiting at the bound are woken). An `id` before the oldest retained
  // entry, with messages after it gone (retention, a cap), stops at the
  // oldest retained one: where->clamped says so. `where` (if given) says
  // where it went. Costs nothing to the start or the end; elsewhere the
  // script counts the entries after the position from the nearest
  // checkpoint (appends leave one every 1024 messages): a few pages. A
  // topic without checkpoints (appended to by an older sluice or another
  // client, or Redis before 7.0) is counted from the nearer end, ~1.5 us
  // per entry with the server blocked (1.3 s for the middle of a million;
  // past io_timeout: kUnavailable, outcome unknown; seeking again lands at
  // the same place). kNotFound if the topic or the channel does not exist;
  // kInvalidArgument for a bad id.
  Status seek(std::string_view channel, std::string_view id, StreamSeekResult* where = nullptr);
  // seek() to the first message appended at or after `t` (by the ids' ms
  // part, the server's clock): the position is the last id of the
  // millisecond before it.
  Status seek_time(std::string_view channel, std::chrono::system_clock::time_point t,
                   StreamSeekResult* where = nullptr);
  // Drops every message channel `channel` has not acknowledged, pending
  // and not yet delivered (seek to the end), without touching the other
  // channels or the topic; how many. Counted in the channel's stats
  // (StreamChannelStats::purged); the room it frees wakes appends waiting
  // at the bound. What a consumer held then is as after a seek. kNotFound
  // if the topic or the channel does not exist.
  Result<std::uint64_t> purge(std::string_view channel);

  // The names of the topics under `prefix` on that server, sorted (SCAN:
  // the server is not stalled).
  static Result<std::vector<std::string>> list(const RedisOptions& redis,
                                               std::string_view prefix = "sluice");

  const std::string& name() const noexcept { return name_; }
  const StreamTopicOptions& options() const noexcept { return opt_; }

 private:
  friend class StreamChannel;
  Status append_impl(std::span<const std::string_view> batch, const Context& ctx, std::size_t* done,
                     std::string* first_id);
  Status seek_impl(std::string_view channel, const std::string& id, StreamSeekResult* where);
  Status validate() const;

  std::string name_;
  StreamTopicOptions opt_;
  std::vector<std::string> keys_;
  std::unique_ptr<redis::Connection> conn_;
  std::uint64_t since_trim_ = 0;
  std::size_t in_doubt_ = 0;
  // Read by other threads (bound_wait()); on the heap so the handle moves.
  std::unique_ptr<std::atomic<std::int64_t>> bound_wait_ns_ =
      std::make_unique<std::atomic<std::int64_t>>(0);
  // The replicas create() recorded, as the last append's reply said: the
  // next append pipelines its WAIT for them.
  std::uint32_t recorded_replicas_ = 0;
};

class StreamChannel {
 public:
  // A consumer of `channel` of `topic`, under a consumer name unique to this
  // handle. Connects lazily; the channel is made at join() or at the first
  // next/next_batch/ack/nack.
  StreamChannel(RedisOptions redis, std::string topic, std::string channel,
                StreamTopicOptions options = {});
  ~StreamChannel();
  StreamChannel(StreamChannel&&) noexcept;
  StreamChannel& operator=(StreamChannel&&) noexcept;

  // Makes the channel (consumer group) if new, starting at the oldest
  // message still retained; from then on every message appended is kept for
  // it until it acknowledges it. One round trip the first time, none after.
  Status join();
  // Whether this handle's join() made the channel (it did not exist).
  bool made() const noexcept { return made_; }
  // The next message, waiting for one.
  Result<StreamMessage> next(const Context& ctx = {});
  // Appends 1..max messages to out, waiting for at least one: first those
  // that can be delivered again (held past the visibility timeout by a
  // consumer, or given back with nack), then new ones. kClosed once the
  // topic is closed and this consumer has had every message of the channel
  // (while another consumer holds some, it waits: they may come back).
  Status next_batch(std::vector<StreamMessage>& out, std::size_t max, const Context& ctx = {});
  // Acknowledges messages by id: not delivered again, and room under the
  // bound. Ids not held by the channel (already acknowledged, dropped) are
  // ignored. Only this consumer's own deliveries: an id another consumer
  // holds now (claimed after this one held it past the visibility timeout,
  // or replayed to it after a seek) is left alone, that consumer's ack or
  // nack decides it (nothing is lost if it fails), and the call returns
  // kInUse naming it and its holder once it acknowledged the rest (a retry
  // says the same). One script per 1024 ids; while other consumers of the
  // channel hold messages, it reads this consumer's pending list between
  // the smallest id and the largest.
  Status ack(std::span<const std::string> ids);
  Status ack(const StreamMessage& m) { return ack(std::span<const std::string>(&m.id, 1)); }
  // Gives messages this consumer holds back to the channel, unacknowledged:
  // they are delivered again (to this consumer's next read at once, to the
  // channel's other consumers within visibility_timeout / 2), each counting
  // as a failed delivery toward max_deliveries, once. Ids it does not hold
  // are ignored. nack() gives back everything it holds (not what it gave
  // back already and has not had again: a delay stays, a count too).
  // nack(ids) of messages it gave back and no one has had since: those
  // given back with give_back count the failure after all; those nacked
  // already take the new delay (still counted once). Redis tells these
  // apart (they wait under the consumer names <consumer>~back and
  // <consumer>~nack until claimed), so it holds across handles and for a
  // call whose reply was lost.
  Status nack(std::span<const std::string> ids);
  Status nack(const StreamMessage& m) { return nack(std::span<const std::string>(&m.id, 1)); }
  Status nack();
  // nack with a delay: the messages come again no sooner than retry_after
  // (a back-off for a failing downstream). kInvalidArgument if retry_after is
  // longer than visibility_timeout (the longest a message can be held back).
  Status nack(std::span<const std::string> ids, std::chrono::milliseconds retry_after);
  Status nack(const StreamMessage& m, std::chrono::milliseconds retry_after) {
    return nack(std::span<const std::string>(&m.id, 1), retry_after);
  }
  // Gives messages back as nack does, but not as a failed delivery: their
  // delivery count is left as it was (the next delivery does not raise it),
  // so they come no closer to the dead letters. For messages this consumer
  // never handed on (a reader that stops before its program took them).
  // give_back() gives back everything it holds. Giving back what was given
  // back already (a retry) or nacked (also by a nack whose reply was lost)
  // changes nothing: a failure stays counted, a delay stays. A message held
  // past the visibility timeout (claimable by then) is given back as it is:
  // the claim that delivers it again counts that delivery.
  Status give_back(std::span<const std::string> ids);
  Status give_back();
  // Loop: read up to `batch` messages, run handler on each in order, then
  // acknowledge the batch's successes in one call and give its failures
  // back (nack): a failed message comes again (to this consumer or another)
  // and, past max_deliveries, goes to the dead letters. A handler that
  // throws has failed that message. Unlike the log's Channel::consume (one
  // reader, in order, so a failure stops it there), a failure does not end
  // the loop: the dead letters take a message that never succeeds, and the
  // others flow on. Returns kClosed once the topic is closed and the channel
  // has had everything (the normal end); kCancelled/kDeadlineExceeded when
  // ctx ends, checked before each message (what was handled is
  // acknowledged, the rest of the batch given back); or a Redis error (what
  // was handled and not acknowledged comes again after the visibility
  // timeout: at least once).
  Status consume(const std::function<Status(const StreamMessage&)>& handler,
                 const Context& ctx = {}, std::size_t batch = 64);

  // Sets the channel's visibility timeout (> 0), recorded in Redis: every
  // consumer of the channel, in any process, goes by it instead of its
  // options' from its next read (claims) or keep-alive round. Makes the
  // channel if new. A keep-alive handle holding messages when a shorter
  // one is set learns it at its next round (within a third of the old
  // one): set it before readers start.
  Status set_visibility_timeout(std::chrono::milliseconds timeout);
  // The timeout this handle goes by: the channel's, as of its last read or
  // set_visibility_timeout, else its options'.
  std::chrono::milliseconds visibility_timeout() const noexcept { return visibility_; }

  const std::string& name() const noexcept { return channel_; }
  const std::string& topic() const noexcept { return topic_.name(); }
  const std::string& consumer() const noexcept { return consumer_; }
  // Messages this handle moved to the dead-letter stream.
  std::uint64_t dead_lettered() const noexcept { return dead_lettered_; }

 private:
  Status claim(std::vector<StreamMessage>& out, std::size_t max);
  Status read_batch(std::vector<StreamMessage>& out, std::size_t max, const Context& ctx);
  Status release(std::span<const std::string> ids, std::chrono::milliseconds delay = {},
                 bool counted = true);
  // OK while this consumer may get more; kClosed once the topic is closed
  // and it has had everything.
  Status drained();
  // The keep_alive facility (stream_topic.cpp): the ids this handle holds,
  // and the thread that keeps them claimed.
  class KeepAlive;
  struct KeepAliveDeleter {
    void operator()(KeepAlive* k) const noexcept;
  };

  StreamTopic topic_;
  std::string channel_;
  std::string consumer_;
  bool joined_ = false;
  bool made_ = false;  // join() made the channel
  std::string cursor_ = "0-0";
  std::chrono::steady_clock::time_point next_claim_{};
  // When the messages this handle gave back with a delay are due (each
  // dropped once a complete claim scan after it has run).
  std::vector<std::chrono::steady_clock::time_point> retry_due_;
  std::uint64_t dead_lettered_ = 0;
  std::chrono::milliseconds visibility_;
  // With keep_alive, once this handle first holds a message.
  std::unique_ptr<KeepAlive, KeepAliveDeleter> keep_alive_;
};

}  // namespace sluice
