// Channel is one named reader of a Topic with its own persisted position:
// at-least-once delivery. Messages are delivered in seq order; a position
// moves (durably) only when the consumer acknowledges.
//
// Thread safety: one thread at a time per Channel (it is a cursor); different
//   channels, and the topic's appenders, run concurrently.
// Blocking: next/next_batch/consume wait for new records (a condition
//   variable signalled by appends, or for a read_only topic the topic's
//   shared futex page: no polling, no CPU while idle); ack waits for the
//   position's fdatasync.
// End of stream: once the topic is closed (Topic::close, here or by the
//   writer in another process) and this channel has delivered every record,
//   next/next_batch/consume return kClosed instead of waiting (a sleeping
//   one is woken). Records not delivered yet come first; after nack() they
//   are delivered again before kClosed.
// Ordering: seq order; after nack() or a reopen, delivery restarts at the
//   oldest unacknowledged message; after seek(), at the seq it moved to.
// Cancellation: waiting calls take a Context and return kCancelled or
//   kDeadlineExceeded; nothing is acknowledged by a cancelled call.
// Ownership: the Channel shares its topic's files: it may outlive the Topic
//   object (it reads what is there; the topic takes no appends). Messages
//   are copied out.
// Errors: kIOError (position file), kCorruption is never returned for a
//   record: damaged ranges are skipped and counted (skipped_corrupt());
//   kInvalidArgument for an ack of what was not delivered, a seek past the
//   end, and a seek back in a read-only topic.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sluice/context.h"
#include "sluice/message_batch.h"
#include "sluice/start_from.h"
#include "sluice/status.h"

namespace sluice {

class Topic;

struct ChannelOptions {
  StartFrom start = StartFrom::kBeginning;  // for a channel that does not exist yet
  // For a channel that does not exist yet, instead of `start`: the first seq
  // it delivers (e.g. Topic::seq_at_time of a time). Before the oldest
  // retained record it starts there; past Topic::next_seq() the open fails
  // with kInvalidArgument. Unlike Channel::seek back, a read-only topic takes it
  // (a new channel's first position is written and synced before the open
  // returns, as with `start`). Ignored for a channel that exists.
  std::optional<std::uint64_t> start_seq = std::nullopt;
  // false: ack() keeps the position in memory only (no fdatasync); after a
  // crash the channel restarts from its last durable position. For stores
  // that do not outlive the process (the queue's spill store).
  bool durable_positions = true;
};

struct LogMessage {
  std::uint64_t seq = 0;
  std::string payload;
  // When it was appended: the writer's wall clock, in whole microseconds,
  // never earlier than the record before it (a clock stepped back repeats
  // the last time). Empty for records of segments written by a sluice
  // before the append time was recorded (docs/log_format.md, format 1).
  std::optional<std::chrono::system_clock::time_point> time = std::nullopt;
};

class Channel {
 public:
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  // The next undelivered message, waiting for one.
  Result<LogMessage> next(const Context& ctx = {});
  // Appends 1..max messages to out, waiting for at least one.
  Status next_batch(std::vector<LogMessage>& out, std::size_t max, const Context& ctx = {});
  // The same into one buffer (no allocation per message once it has grown):
  // each entry has its seq, and its time where the record has one.
  Status next_batch(MessageBatch& out, std::size_t max, const Context& ctx = {});
  // Acknowledges every message up to and including seq (delivered ones
  // only). Returns once the position is as durable as the topic's records:
  // fdatasynced under kPerAppend/kGroupCommit; written (surviving a process
  // crash, not power loss) under kNone/kInterval.
  Status ack(std::uint64_t seq);
  // Forget deliveries not acknowledged: they are delivered again.
  void nack();
  // Moves the channel's acknowledged position to `seq`, the next record to
  // deliver: back to replay (the records from seq on are unacknowledged
  // again), forward to skip a backlog (they count as acknowledged). A purge
  // (drop everything not acknowledged) is seek(topic.next_seq()). Returns
  // where it went: `seq`, or, if seq is before the oldest retained record,
  // that record (a retention cap or acknowledgements deleted the rest:
  // compare to see it clamped). Deliveries not acknowledged are forgotten
  // (as nack); delivery continues at the returned seq.
  // - Durable when it returns, in every durability mode (the position file
  //   is fdatasynced; in kPerAppend/kGroupCommit the records before it were
  //   synced first, so it never points past what a power cut keeps).
  // - The topic bound counts from the slowest position: after a move back,
  //   the replayed records count toward max_unconsumed again, so appends
  //   wait (or fail, per on_bound) until this channel catches up. Retention
  //   keeps what the channel now needs (it can only move back to what is
  //   still retained). A move forward frees room: appenders waiting at the
  //   bound, in any process, are woken, and segments every channel passed
  //   are deleted.
  // - Back needs the writer: kInvalidArgument in a read-only topic
  //   (retention and the bound live with the writer). Forward works there
  //   too, as an ack does (the position synced, waiting appenders woken). kInvalidArgument past
  //   Topic::next_seq(); kIOError if the position cannot be written (then
  //   the position on disk is the old one or seq).
  Result<std::uint64_t> seek(std::uint64_t seq);
  // Loop: take a batch, run handler on each message in order, ack the batch
  // after the last success. A handler error stops the loop: messages from
  // the failed one on are redelivered (nack) and the error is returned.
  // Returns when ctx ends (kCancelled/kDeadlineExceeded).
  Status consume(const std::function<Status(const LogMessage&)>& handler, const Context& ctx,
                 std::size_t batch = 1024);

  const std::string& name() const;
  std::uint64_t acked() const;            // first seq not durably acknowledged
  std::uint64_t delivered() const;        // first seq not yet delivered
  std::uint64_t skipped_corrupt() const;  // records lost to corruption, skipped
  // Records a retention cap (TopicOptions::max_retained_*) deleted before
  // this channel acknowledged them: counted at open for what went while it
  // was away, and as segments go while it is open (in a read-only topic, as
  // it jumps the gap). They cannot be delivered again (a nack does not
  // bring them back).
  std::uint64_t skipped_retention() const;

  struct Impl;

 private:
  friend class Topic;
  explicit Channel(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
