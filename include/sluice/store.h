// QueueStore is a set of named, bounded, durable queues shared by processes:
// the face the `sluice` command and C++ programs share, whatever the backend.
// Two backends implement it and run the same tests: embedded (a directory:
// one Topic per queue, see docs/cli.md "Store layout") and Redis (a
// pressure-protocol queue per queue, shared with the protocol's other
// clients, or a Redis Streams topic made with QueueKind::kStream;
// docs/cli.md "Redis" lists where they differ: roles held only while a call
// waits, readers of a channel compete rather than wait their turn, one
// channel on a pressure queue, kUnavailable when Redis is down).
//
// A queue has one producer role at a time (QueueWriter) and any number of
// named channels, each read by one consumer at a time (QueueReader). Every
// channel sees every message (fan-out); the bound counts the messages put
// and not yet acknowledged by the slowest channel. A queue is created with
// one channel, "default", so the bound holds before any reader has come.
//
// Thread safety: a QueueStore may be used from any number of threads; each
//   QueueWriter and QueueReader from one thread at a time. Roles are
//   exclusive across threads and processes alike (embedded; on Redis they
//   are the pressure protocol's, held only while a call waits).
// Blocking: writer() and reader() wait for the role while another holder
//   has it (retrying with backoff, no spinning); put() waits while the queue
//   is at its bound; get() waits for a message. All three take a Context;
//   an already-expired deadline makes them fail fast. The rest do not wait
//   on other parties (only on the disk).
// Ordering: one queue is FIFO: each channel receives messages in put order.
//   A message is delivered at least once: what a reader got and did not
//   ack() is delivered again to the next reader of that channel.
// Cancellation: a stopped Context ends a wait with kCancelled, a passed
//   deadline with kDeadlineExceeded (kInUse while waiting for a role, which
//   names the holder). A cancelled put has enqueued exactly *done messages.
// Ownership: writers and readers hold their queue's files and locks until
//   destroyed; they may outlive the QueueStore that made them. Messages are
//   copied in and out.
// Errors: kNotFound (no such queue), kAlreadyExists (create), kInvalidArgument
//   (bad queue or channel name, bad location, message too large),
//   kInUse (role held elsewhere, when the wait ends), kClosed (put to a
//   closed queue; get on a closed, drained queue), kIOError (errno text;
//   disk full included), kUnavailable (Redis: the server cannot be reached;
//   the message names host:port).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/context.h"
#include "sluice/message_batch.h"
#include "sluice/status.h"

namespace sluice {

// One channel of a queue, as stat() sees it.
struct ChannelInfo {
  std::string name;
  // Messages put and not yet delivered to this channel's readers.
  std::uint64_t lag = 0;
  // Delivered to a reader and not acknowledged yet (Redis Streams topics;
  // the embedded store does not know it and counts them in lag).
  std::uint64_t pending = 0;
  // Moved to the dead-letter stream after too many deliveries (Redis
  // Streams topics).
  std::uint64_t dead_lettered = 0;
  // Dropped unacknowledged by QueueStore::purge, ever.
  std::uint64_t purged = 0;
};

// What a queue is made of: the backend's own (kDefault: the embedded
// store's log topic, a pressure-protocol queue on Redis), or a Redis
// Streams topic (kStream: named channels, each read by any number of
// competing readers; the embedded store's queues have named channels
// already, so it makes its own kind).
enum class QueueKind : std::uint8_t { kDefault, kStream };

// How a queue is made (QueueStore::create).
struct QueueSpec {
  // At most this many unacknowledged messages (0: unbounded; a Redis
  // pressure queue counts the messages not yet taken by a reader).
  std::uint64_t bound = 0;
  QueueKind kind = QueueKind::kDefault;
  // Retention (0: none): a message older than this is deleted even if a
  // channel has not acknowledged it (a consumer that stopped loses it, and
  // stat counts it for that channel no more), and it no longer counts toward
  // the bound, so a stopped consumer holds producers back for about this
  // long at most. Not a TTL: deletion is approximate. Embedded: whole log
  // segments, in whole seconds (rounded up), a message living at most about
  // 1.5x the age while puts come, nothing deleted while none do
  // (TopicOptions::max_retained_age). Streams topics: by the server's clock
  // at each put (StreamTopicOptions::max_retained_age). Pressure queues
  // keep every message until taken: kInvalidArgument.
  std::chrono::milliseconds max_age{0};
  // Redis Streams topics (0: none): an append is acknowledged only once this
  // many replicas have it (WAIT after each batch; one more round trip),
  // else the batch is in doubt. Recorded by create: every writer obeys it.
  // Other kinds: kInvalidArgument.
  std::uint32_t replicas = 0;
};

struct QueueInfo {
  std::string name;
  std::string kind;                      // "log" (embedded), "pressure" or "stream" (Redis)
  std::uint64_t bound = 0;               // messages put and not acknowledged by the slowest channel
  std::chrono::milliseconds max_age{0};  // QueueSpec::max_age (0: none)
  bool closed = false;                   // no more puts; readers end once drained
  std::uint64_t length = 0;              // produced - consumed: waiting for the slowest channel
  std::uint64_t produced = 0;            // messages ever put
  std::uint64_t consumed = 0;  // acknowledged by the slowest channel (or deleted by max_age)
  std::vector<std::string> channels;
  std::vector<ChannelInfo> channel_info;  // the channels' state, in the same order
  // Payload bytes of the messages counted in produced / consumed, where the
  // backend can know them (empty where it cannot; docs/cli.md says which).
  std::optional<std::uint64_t> produced_bytes;
  std::optional<std::uint64_t> consumed_bytes;
  // Pressure queues, whose length adds both: messages waiting to be taken,
  // and taken by readers and not acknowledged yet. Empty for other kinds.
  std::optional<std::uint64_t> waiting;
  std::optional<std::uint64_t> in_flight;
  std::uint32_t replicas = 0;  // QueueSpec::replicas (Streams)
};

// How the embedded backend makes a put durable (Redis ignores it).
enum class StoreDurability : std::uint8_t {
  kSync,    // put returns once the messages are on disk (fdatasync; concurrent puts share one)
  kNoSync,  // put returns once the OS has them: survives a process crash, not power loss
};

struct StoreOptions {
  StoreDurability durability = StoreDurability::kSync;
  // Redis: the key prefix (the pressure protocol's PRESSURE_PREFIX); empty:
  // "__pressure__". The embedded backend ignores it.
  std::string redis_prefix;
  // Redis: the key prefix of Streams topics (StreamTopicOptions::prefix);
  // empty: "sluice".
  std::string redis_stream_prefix;
  // The embedded store's directory. false: opening makes nothing; a
  // directory that is not a store yet (or does not exist) is an empty store
  // until the first create() makes it (so `sluice ls` with a mistyped
  // --store leaves nothing behind). Redis ignores it.
  bool create_if_missing = true;
};

// The producer role of one queue. At most one exists per queue at a time.
class QueueWriter {
 public:
  virtual ~QueueWriter() = default;
  // Enqueues the batch in order. Returns OK once every message is enqueued
  // (durable per StoreDurability); on an error, *done (if given) is how many
  // of the first messages were enqueued, and the rest were not, except that
  // messages after the *done ones may be in doubt (see in_doubt()). Waits
  // while the queue is at its bound. kInvalidArgument for a message over
  // max_message_bytes() (nothing of the batch from it on is enqueued).
  virtual Status put(std::span<const std::string_view> batch, const Context& ctx,
                     std::size_t* done = nullptr) = 0;
  // After a failed put: how many messages after *done may or may not be
  // enqueued (Redis: a connection that broke after they were sent; the
  // embedded store: written, and their sync failed, so the disk may or may
  // not keep them); the rest were not. 0 after a put that succeeded.
  virtual std::size_t in_doubt() const { return 0; }
  // Marks the end of the stream, durably: later puts return kClosed; readers
  // get kClosed once they have everything. Idempotent.
  virtual Status close() = 0;
  virtual std::size_t max_message_bytes() const = 0;
  // Time put() spent waiting at the bound (backpressure), in seconds, since
  // this writer was made; every backend measures it (Redis: the client's
  // waits for room, slice by slice). Safe to call from another thread while
  // a put waits.
  virtual double blocked_seconds() const { return 0; }
};

// A message as a reader gets it, with what its backend knows about it.
struct StoreMessage {
  std::string data;
  // The embedded store: the log's sequence number. Empty elsewhere.
  std::optional<std::uint64_t> seq;
  // Redis Streams topics: the entry id ("<ms>-<n>"). Empty elsewhere.
  std::string id;
  // When it was put: the embedded store (the record's append time), Streams
  // topics (the id's time, in ms). Empty where the backend does not know it.
  std::optional<std::chrono::system_clock::time_point> time;
  // Deliveries of this message to the channel, this one included (Streams
  // topics). Empty where the backend does not count them.
  std::optional<std::uint32_t> deliveries;
};

// One consumer of one channel of a queue. At most one exists per channel.
class QueueReader {
 public:
  virtual ~QueueReader() = default;
  // Appends 1..max messages to out, waiting for at least one. kClosed once
  // the queue is closed and this channel has had every message.
  virtual Status get(std::vector<StoreMessage>& out, std::size_t max, const Context& ctx) = 0;
  // The same, the messages' bytes only.
  Status get(std::vector<std::string>& out, std::size_t max, const Context& ctx);
  // The same into one buffer: the embedded store fills it without an
  // allocation per message (the others through get()).
  virtual Status get_batch(MessageBatch& out, std::size_t max, const Context& ctx);

  // Acknowledgement is of a prefix. Number the messages get() has handed
  // out 0, 1, 2, ... in the order it returned them (release() takes back
  // the numbers it gives back). ack_prefix(n) acknowledges messages 0..n-1:
  // they are not delivered again and free room under the bound. Durable on
  // return. n <= acked() does nothing; n > delivered() is kInvalidArgument.
  // Idempotent: after a failure (kUnavailable) the same call may be made
  // again, and a prefix never acknowledges a message twice.
  virtual Status ack_prefix(std::uint64_t n) = 0;
  // Acknowledges every message get() has returned so far.
  Status ack() { return ack_prefix(delivered()); }
  // Messages get() has returned (and release() has not taken back), and of
  // those, the acknowledged prefix. delivered() - acked() are held.
  virtual std::uint64_t delivered() const = 0;
  virtual std::uint64_t acked() const = 0;
  // Messages this reader passed over since it opened because they were
  // damaged on disk (the embedded store: Channel::skipped_corrupt): lost,
  // never delivered; `sluice log verify` says where. 0 on Redis.
  virtual std::uint64_t skipped_damaged() const { return 0; }
  // Gives back every held message: not acknowledged, and not counted as a
  // delivery (a Streams topic's delivery count, toward its dead letters, is
  // left as it was). The channel's next read, this reader's included,
  // delivers them again, before newer messages: embedded, in put order;
  // pressure queue, at the head of the queue in order; Streams, to any
  // reader of the channel, in id order, before new ones. delivered()
  // becomes acked(). A reader destroyed with messages held gives them back
  // the same way (best effort on Redis: if the server cannot be reached,
  // they come back after the visibility timeout, or at the next reader's
  // open on a pressure queue).
  virtual Status release() = 0;

 protected:
  // ack_prefix(n) past delivered(): kInvalidArgument saying so.
  static Status beyond(std::uint64_t n, std::uint64_t delivered);
};

// Where QueueStore::seek moves a channel: the next message it delivers.
struct SeekTarget {
  enum class Kind : std::uint8_t {
    kStart,  // the oldest message still retained
    kEnd,    // after the newest: what is there counts as acknowledged
    kSeq,    // the embedded store: the message with this seq
    kId,     // Redis Streams topics: the first message after this id
    kTime,   // the first message put at or after this time
  };
  Kind kind = Kind::kStart;
  std::uint64_t seq = 0;
  std::string id;
  std::chrono::system_clock::time_point time{};

  static SeekTarget start() { return {}; }
  static SeekTarget end() { return with(Kind::kEnd); }
  static SeekTarget at_seq(std::uint64_t n) {
    SeekTarget t = with(Kind::kSeq);
    t.seq = n;
    return t;
  }
  static SeekTarget after_id(std::string id) {
    SeekTarget t = with(Kind::kId);
    t.id = std::move(id);
    return t;
  }
  static SeekTarget at_time(std::chrono::system_clock::time_point when) {
    SeekTarget t = with(Kind::kTime);
    t.time = when;
    return t;
  }

 private:
  static SeekTarget with(Kind k) {
    SeekTarget t;
    t.kind = k;
    return t;
  }
};

// How a reader reads (QueueStore::reader).
struct ReaderOptions {
  // Redis Streams topics: how long a message may be held unacknowledged
  // before another reader of the channel may take it. Set for the channel
  // (recorded in Redis): every reader of it obeys it from its next read.
  // 0: the channel's recorded timeout (30 s if none was set). While a reader
  // lives it keeps every message it holds claimed, so only a reader that
  // died gives messages up this way. The embedded store and pressure queues
  // never hand a held message to another reader: kInvalidArgument if set.
  // At least 1 s (kInvalidArgument below): the reader renews its claims
  // every third of it, and must do so before a scheduling pause ends it.
  std::chrono::milliseconds visibility{0};
  // For a channel that does not exist yet: where it starts (empty: at the
  // oldest message still retained). SeekTarget's places: kStart, kEnd (the
  // next message put), kSeq (embedded), kId (Streams), kTime; before the
  // oldest retained message it starts at that one. A channel that exists
  // keeps its position (QueueStore::seek moves it). Streams: made at the
  // oldest retained message, then moved there (QueueStore::seek's way), so
  // a competing reader that read in between sees its messages taken back.
  // Pressure queues have no positions: kInvalidArgument if set.
  std::optional<SeekTarget> start;
};

// Reads a channel's messages without taking them (QueueStore::peek): no
// role, acknowledgement, position, delivery count or bound changes.
// Thread safety: one thread at a time. Blocking: never waits for messages.
class QueuePeek {
 public:
  virtual ~QueuePeek() = default;
  // Appends 0..max messages, in the order the channel would deliver them,
  // and moves past them. OK with none appended: nothing more now.
  virtual Status next(std::vector<StoreMessage>& out, std::size_t max) = 0;
  // The embedded store: damaged messages passed without being shown, so
  // far (as QueueReader::skipped_damaged).
  virtual std::uint64_t skipped_damaged() const { return 0; }
};

// Where QueueStore::peek starts (default: the channel's first
// unacknowledged message, those a running reader holds included).
struct PeekFrom {
  // The embedded store: from this seq (before the oldest retained message:
  // from that one; past the next seq: kInvalidArgument, as for seek).
  std::optional<std::uint64_t> seq;
  // Redis Streams topics: the messages after this id.
  std::string after_id;
};

struct SeekResult {
  // Where the channel now is: "seq N" (its next message), or "after ID".
  std::string position;
  // The place asked for was before the oldest message retention kept: the
  // channel stopped at that message instead.
  bool clamped = false;
  // The channel's messages not acknowledged now (they count toward the
  // bound), before and after.
  std::uint64_t unacknowledged_before = 0;
  std::uint64_t unacknowledged = 0;
};

class QueueStore {
 public:
  virtual ~QueueStore() = default;

  // Opens a store. `location`: a directory path, or "file:PATH" (the
  // embedded backend; the directory is created if missing), or
  // "redis://[[user]:password@]host[:port][/db]" (user and password may be
  // %XX-escaped; connects at the first call). "rediss://" (TLS) is
  // kInvalidArgument, and so is redis:// in a build without Redis.
  static Result<std::unique_ptr<QueueStore>> open(std::string_view location,
                                                  const StoreOptions& options = {});

  // A new empty queue as `spec` says. kAlreadyExists if the name is taken
  // (by either kind); kInvalidArgument for a spec the backend cannot keep.
  // Atomic: the queue exists whole or not.
  virtual Status create(std::string_view name, const QueueSpec& spec) = 0;
  Status create(std::string_view name, std::uint64_t bound, QueueKind kind) {
    return create(name, QueueSpec{.bound = bound, .kind = kind});
  }
  Status create(std::string_view name, std::uint64_t bound) {
    return create(name, QueueSpec{.bound = bound});
  }
  // The producer role, waiting while another writer (or a close) holds it.
  // kClosed if the queue is closed.
  virtual Result<std::unique_ptr<QueueWriter>> writer(std::string_view name,
                                                      const Context& ctx) = 0;
  // A consumer of `channel` (created at the first message still retained if
  // new), waiting while another reader holds that channel.
  virtual Result<std::unique_ptr<QueueReader>> reader(std::string_view name,
                                                      std::string_view channel, const Context& ctx,
                                                      const ReaderOptions& options) = 0;
  Result<std::unique_ptr<QueueReader>> reader(std::string_view name, std::string_view channel,
                                              const Context& ctx) {
    return reader(name, channel, ctx, ReaderOptions{});
  }
  // Closes the queue (see QueueWriter::close); takes the writer role to do
  // it, so it waits for a writer that holds it. Idempotent. A put blocked
  // at the bound in this process returns kClosed.
  virtual Status close(std::string_view name, const Context& ctx) = 0;
  // Deletes the queue and its messages. It disappears at once (atomically).
  // Never waits. Embedded: kInUse (naming the holder's PID) while a writer
  // or reader has it open, which would otherwise go on putting into (or
  // acknowledging in) files nobody can reach. Redis: the queue is closed,
  // remove waits up to 30 s for a client inside an operation, then deletes;
  // a writer or reader still open gets kNotFound at its next call, and so
  // does one waiting in put() or get() (not the kClosed of a close).
  virtual Status remove(std::string_view name) = 0;
  // Reads `channel`'s messages from `from` without taking them (QueuePeek).
  // What it sees is a prefix of the channel while puts and gets run, up to
  // what was there when the peek was made (later puts are not shown). The
  // embedded store reads the log (seq and time given); a Streams topic its
  // unacknowledged messages (id, time, deliveries counted so far: 0 for
  // those not yet delivered or only given back); a pressure queue the head
  // of its waiting list (messages readers have taken are theirs: not
  // shown). kNotFound for no such queue or channel.
  virtual Result<std::unique_ptr<QueuePeek>> peek(std::string_view name, std::string_view channel,
                                                  const PeekFrom& from) = 0;
  Result<std::unique_ptr<QueuePeek>> peek(std::string_view name, std::string_view channel) {
    return peek(name, channel, PeekFrom{});
  }
  // Moves `channel`'s position to `to`: back to replay (the messages from
  // there on are unacknowledged again and count toward the bound, so puts
  // wait until the channel catches up), forward to skip (room freed: puts
  // waiting at the bound go on). Embedded: takes the channel's role
  // (waiting for a running get of it as reader() does, under ctx: kInUse
  // naming the holder when it ends), and to move back the writer role too
  // (retention and the bound live with the writer: it waits for a running
  // put); forward is an acknowledgement, so a put waiting at the bound goes
  // on. Durable on return. Streams: the channel's held messages are taken back from their
  // readers (docs/cli.md, "seek"). Pressure queues have no positions:
  // kInvalidArgument, as for a target the backend has no such thing as
  // (kSeq on Streams, kId on the embedded store). kNotFound for no such
  // queue or channel.
  virtual Result<SeekResult> seek(std::string_view name, std::string_view channel,
                                  const SeekTarget& to, const Context& ctx) = 0;
  // Drops every message `channel` has not acknowledged (a pressure queue:
  // every waiting message; those readers have taken stay theirs), without
  // deleting the queue; how many. Counted in ChannelInfo::purged. Takes
  // the roles a forward seek() takes. Puts waiting at the bound go on if
  // the channel was the slowest.
  virtual Result<std::uint64_t> purge(std::string_view name, std::string_view channel,
                                      const Context& ctx) = 0;
  // Queue names, sorted.
  virtual Result<std::vector<std::string>> list() = 0;
  virtual Result<QueueInfo> stat(std::string_view name) = 0;
};

// The channel a reader uses when none is named.
inline constexpr std::string_view kDefaultChannel = "default";

// OK if `name` can name a queue or channel: 1-200 of [A-Za-z0-9._-], not
// "." or ".."; else kInvalidArgument saying so.
Status validate_queue_name(std::string_view name);
// As validate_queue_name, and not starting with '.' (the embedded store keeps
// files beside a channel's; every backend refuses the same names).
Status validate_channel_name(std::string_view name);

}  // namespace sluice
