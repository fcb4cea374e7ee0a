// The Redis QueueStore: a queue is a PressureQueue (the pressure protocol's
// keys, docs/redis_keys.md), so queues made with `sluice` are the protocol's
// queues and its other clients read and write them, or a StreamTopic
// (QueueKind::kStream, docs/redis_streams.md). Three files: this store
// (redis_store.cpp: which kind a name is, create, stat, ...), each kind's
// writer and reader (redis_pressure.cpp, redis_stream.cpp). Location:
// redis://[[user]:password@]host[:port][/db]; the key prefix is
// StoreOptions::redis_prefix (default "__pressure__"). Private.
//
// Where it differs from the embedded backend (docs/cli.md, "Redis"):
//   - roles are the protocol's: a producer or consumer holds one only while
//     a call waits (put at the bound, get on an empty queue). Writers, and
//     readers of the one channel, are not exclusive for their lifetime:
//     several share the queue (competing consumers), and writer()/reader()
//     never return kInUse;
//   - one channel, "default"; others are kInvalidArgument;
//   - the bound counts the messages in the queue: a message a reader has
//     taken (in flight, not yet acknowledged) no longer counts;
//   - kUnavailable when Redis cannot be reached (the message names
//     host:port).
// Thread safety: the store opens one connection per call (a PressureQueue
//   handle), so any thread may use it; each writer and reader owns one
//   connection and is used by one thread at a time.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "sluice/redis/pressure_queue.h"
#include "sluice/redis/redis_options.h"
#include "sluice/redis/stream_topic.h"
#include "sluice/store.h"

namespace sluice::store {

// The largest message a Redis writer takes: the embedded backend's default,
// so a message fits either backend (Redis itself takes up to 512 MB).
inline constexpr std::size_t kMaxMessageBytes = std::size_t{16} << 20;
// "message too large: N bytes, limit M".
std::string too_large(std::size_t size);

// The writer and reader of each kind (redis_pressure.cpp, redis_stream.cpp).
std::unique_ptr<QueueWriter> pressure_writer(PressureQueue q);
// `consumer`: the reliable consumer's name, unique to the reader.
std::unique_ptr<QueueReader> pressure_reader(PressureQueue q, std::string consumer);
std::unique_ptr<QueueWriter> stream_writer(StreamTopic t);
std::unique_ptr<QueueReader> stream_reader(StreamChannel c);
// Peeks (QueueStore::peek): a pressure queue's waiting list, a Streams
// topic's channel from `after_id` (empty: its first unacknowledged message).
// Peeks that end at what was there when they began (QueuePeek).
Result<std::unique_ptr<QueuePeek>> pressure_peek(PressureQueue q);
Result<std::unique_ptr<QueuePeek>> stream_peek(StreamTopic t, std::string channel,
                                               std::string after_id);

class RedisStore final : public QueueStore {
 public:
  // Parses the URL; connects only at the first call.
  static Result<std::unique_ptr<QueueStore>> open(std::string_view url,
                                                  const StoreOptions& options);

  using QueueStore::create;
  Status create(std::string_view name, const QueueSpec& spec) override;
  Result<std::unique_ptr<QueueWriter>> writer(std::string_view name, const Context& ctx) override;
  using QueueStore::reader;
  Result<std::unique_ptr<QueueReader>> reader(std::string_view name, std::string_view channel,
                                              const Context& ctx,
                                              const ReaderOptions& options) override;
  using QueueStore::peek;
  Result<std::unique_ptr<QueuePeek>> peek(std::string_view name, std::string_view channel,
                                          const PeekFrom& from) override;
  Result<SeekResult> seek(std::string_view name, std::string_view channel, const SeekTarget& to,
                          const Context& ctx) override;
  Result<std::uint64_t> purge(std::string_view name, std::string_view channel,
                              const Context& ctx) override;
  Status close(std::string_view name, const Context& ctx) override;
  Status remove(std::string_view name) override;
  Result<std::vector<std::string>> list() override;
  Result<QueueInfo> stat(std::string_view name) override;

 private:
  enum class Kind : std::uint8_t { kPressure, kStream };
  RedisStore(RedisOptions options, std::string stream_prefix)
      : opt_(std::move(options)), stream_prefix_(std::move(stream_prefix)) {}
  StreamTopicOptions stream_options() const;
  struct Found {
    Kind kind = Kind::kPressure;
    PressureStats pressure;  // kPressure
    // kPressure: the handle that read them, connected (a writer or reader
    // made from it holds its connection from the start).
    std::optional<PressureQueue> queue;
    StreamTopicStats stream;  // kStream
  };
  Result<Found> find(std::string_view name);
  RedisOptions opt_;
  std::string stream_prefix_;
};

}  // namespace sluice::store
