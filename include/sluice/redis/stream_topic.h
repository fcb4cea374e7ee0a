// StreamTopic and StreamChannel: the durable log's face (a topic, named
// channels that each see every message, acknowledgement after the work) on
// Redis Streams, for producers and consumers on many machines
// (docs/redis_streams.md). A topic is a stream; a channel is a consumer
// group; the consumers of one channel share its messages (each message goes
// to one of them), and every channel sees every message.
//
// Thread safety: a handle is one Redis connection and must be used by one
//   thread at a time (like PressureQueue). Make one handle per thread;
//   handles on the same topic, in any processes, may run concurrently. A
//   Context's stop may be requested from any thread.
// Blocking: append/append_batch wait while the topic is at its bound
//   (StreamTopicOptions::max_unconsumed, kBlock), on the server (BLPOP on
//   the topic's wake list, woken by acknowledgements) in slices of
//   RedisOptions::wait_slice; read waits for a message (XREADGROUP BLOCK) in
//   the same slices. Every other call is one round trip or a few.
// Ordering: the stream's order (ids rise). One consumer reads a channel's
//   new messages in order; messages claimed from a dead consumer come back
//   out of order, before new ones.
// Delivery: at least once. A message read and not acknowledged within
//   visibility_timeout may be claimed by another consumer of the channel
//   (XAUTOCLAIM); after max_deliveries deliveries it goes to the topic's
//   dead-letter stream instead, and counts as acknowledged.
// Bound and retention: appends never pass max_unconsumed messages that the
//   slowest channel has not acknowledged, checked atomically with the XADD
//   (one script). trim() removes only what every channel acknowledged (XTRIM
//   MINID), never a blind MAXLEN; appends call it every 1024 messages.
// Cancellation: every waiting call takes a Context; a stop or deadline is
//   seen within one wait slice and returns kCancelled/kDeadlineExceeded with
//   nothing half-done (a batch appended in part says how much: *done).
// Ownership: payloads are copied to Redis; read returns owned strings. The
//   handle owns its connection; it starts no threads.
// Errors: kUnavailable (Redis down or the connection broke; messages name
//   host:port; the next call reconnects), kRejected (kFail at the bound),
//   kInvalidArgument (names, settings, authentication), kInternal (an
//   unexpected reply). After a kUnavailable append, the messages after
//   *done may or may not be in the topic.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/context.h"
#include "sluice/redis/redis_options.h"
#include "sluice/status.h"

namespace sluice {

namespace redis {
class Connection;
}

struct StreamTopicOptions {
  // Keys are "<prefix>:{<topic>}:..." (one hash tag: one Cluster shard).
  std::string prefix = "sluice";
  // Most messages the slowest channel may have unacknowledged; 0: no bound.
  std::uint64_t max_unconsumed = 0;
  // At the bound: wait for acknowledgements (true) or fail at once with
  // kRejected (false).
  bool block_at_bound = true;
  // How long a consumer may hold a message unacknowledged before another
  // consumer of the channel may claim it.
  std::chrono::milliseconds visibility_timeout{30000};
  // Deliveries of one message before it is dead-lettered instead (>= 1).
  std::uint32_t max_deliveries = 5;
};

struct StreamMessage {
  std::string id;                // the stream entry id, "ms-seq"
  std::string payload;           // the bytes appended
  std::uint32_t deliveries = 1;  // 1 the first time; more once claimed again
};

struct StreamChannelStats {
  std::string name;
  std::uint64_t unacknowledged = 0;  // appended and not acknowledged (or dead-lettered)
  std::uint64_t pending = 0;         // delivered to a consumer and not acknowledged
  std::uint64_t dead_lettered = 0;
};

struct StreamTopicStats {
  std::uint64_t appended = 0;      // messages ever appended
  std::uint64_t retained = 0;      // in the stream now
  std::uint64_t trimmed = 0;       // removed by retention (every channel had them)
  std::uint64_t dead_letters = 0;  // entries in the dead-letter stream
  std::vector<StreamChannelStats> channels;
};

class StreamTopic {
 public:
  // Connects lazily; the topic exists once something is appended or a
  // channel joins. kInvalidArgument from calls if `name` or options are bad.
  StreamTopic(RedisOptions redis, std::string name, StreamTopicOptions options = {});
  ~StreamTopic();
  StreamTopic(StreamTopic&&) noexcept;
  StreamTopic& operator=(StreamTopic&&) noexcept;

  // Appends one message; its id.
  Result<std::string> append(std::string_view payload, const Context& ctx = {});
  // Appends in order, waiting at the bound between parts; *done (if given)
  // is how many of the first messages are in the topic.
  Status append_batch(std::span<const std::string_view> batch, const Context& ctx = {},
                      std::size_t* done = nullptr);
  // Removes what every channel has acknowledged; how many entries.
  Result<std::uint64_t> trim();
  Result<StreamTopicStats> stats();
  // Deletes the topic's keys (stream, channels, counters, dead letters).
  Status destroy();

  const std::string& name() const noexcept { return name_; }

 private:
  friend class StreamChannel;
  Status append_impl(std::span<const std::string_view> batch, const Context& ctx, std::size_t* done,
                     std::string* first_id);
  std::string name_;
  StreamTopicOptions opt_;
  std::vector<std::string> keys_;
  std::unique_ptr<redis::Connection> conn_;
  std::uint64_t since_trim_ = 0;
};

class StreamChannel {
 public:
  // A consumer of `channel` of `topic`, under a name unique to this handle.
  // The channel (consumer group) is made at the first read or ack if new,
  // starting at the oldest message still retained.
  StreamChannel(RedisOptions redis, std::string topic, std::string channel,
                StreamTopicOptions options = {});
  ~StreamChannel();
  StreamChannel(StreamChannel&&) noexcept;
  StreamChannel& operator=(StreamChannel&&) noexcept;

  // Appends 1..max messages to out, waiting for at least one: first those
  // claimed from consumers that held them past the visibility timeout, then
  // new ones.
  Status read(std::vector<StreamMessage>& out, std::size_t max, const Context& ctx = {});
  // Acknowledges messages by id: not delivered again, and room under the
  // bound. Ids already acknowledged are ignored.
  Status ack(std::span<const std::string> ids);
  Status ack(const StreamMessage& m) { return ack(std::span<const std::string>(&m.id, 1)); }

  const std::string& consumer() const noexcept { return consumer_; }
  // Messages this handle moved to the dead-letter stream.
  std::uint64_t dead_lettered() const noexcept { return dead_lettered_; }

 private:
  Status join();
  Status claim(std::vector<StreamMessage>& out, std::size_t max);

  StreamTopic topic_;
  std::string channel_;
  std::string consumer_;
  bool joined_ = false;
  std::string cursor_ = "0-0";
  std::chrono::steady_clock::time_point next_claim_{};
  std::uint64_t dead_lettered_ = 0;
};

}  // namespace sluice
