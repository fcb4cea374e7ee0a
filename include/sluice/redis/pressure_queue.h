// PressureQueue is a handle on one distributed, bounded FIFO queue kept in
// Redis under the pressure protocol's 12 keys (docs/redis_keys.md). Queues
// written by sluice are readable by the protocol's other clients and the
// other way round, on the same Redis.
//
// Thread safety: one handle is one Redis connection and must be used by one
//   thread at a time (like a hiredis redisContext). Make one handle per
//   thread; handles on the same queue, in any processes, may run
//   concurrently. A Context's stop may be requested from any thread.
// Blocking: put/put_many wait while another producer holds the producer role
//   or the queue is full; get/get_many wait while another consumer holds the
//   consumer role or the queue is empty; close waits for the producer role;
//   destroy waits for both roles. Waiting happens on the server (BLMOVE that
//   moves nothing), in slices of RedisOptions::wait_slice, never inside a
//   script. try_* never wait. Every call needs at least one round trip.
// Roles, as the protocol's other clients hold them (docs/redis_keys.md):
//   - a call that can finish at once takes the role, acts and gives it back
//     in one atomic script: no one ever sees it held;
//   - put/put_many that must wait for room keep the producer role (token
//     popped from :producer_free, id in :producer) from the moment they find
//     the queue full until they return, and get/get_many/get_reliable that
//     must wait for data keep the consumer role the same way. Meanwhile
//     other producers (consumers) get kInUse from try_*, INUSE from the
//     other clients, and wait; close waits for such a put to finish;
//   - the role is given back on every return: done, kCancelled,
//     kDeadlineExceeded, kClosed, kNotFound, kUnavailable (over a new
//     connection). If Redis cannot be reached then, the handle gives it back
//     at its next call or in its destructor;
//   - a client killed while it waits leaves the role taken. A call waiting
//     for that role restores it after about a second if the holder is
//     provably gone (see repair()), and so does repair().
//   try_* and the calls that need no wait never keep a role.
// Ordering: FIFO across all producers and consumers of the queue: messages
//   are LPUSHed and popped from the right. A batch is enqueued in order,
//   never past the bound; a partial batch (bound reached) is a prefix. A
//   batch keeps the role across each wait for room, so no other producer's
//   messages land between its parts on either side of a wait (they may land
//   between its scripts of up to 1024 messages otherwise).
// Cancellation: every waiting call takes a Context; a stop or a deadline
//   ends a wait on the server at once (the client sends CLIENT UNBLOCK from a
//   second connection; docs/redis_keys.md "Waiting") and returns kCancelled
//   or kDeadlineExceeded with nothing half-done and no role kept.
// Ownership: put copies the bytes to Redis; the caller keeps its buffers.
//   get returns owned strings. The handle owns its connection and closes it
//   in the destructor; it starts no threads.
// Errors: kNotFound (no such queue), kAlreadyExists, kClosed (put/close on a
//   closed queue; get on a closed, drained queue), kInUse (try_* while another
//   client holds the role), kWouldBlock (try_* on a full or empty queue),
//   kUnavailable (Redis down, or the connection broke: the next call
//   reconnects; the message names host:port and says "connection refused
//   at", "timed out after X connecting to" or "timed out after X talking
//   to"), kInvalidArgument (bad arguments or settings, including "redis:
//   authentication failed at host:port: ..." and "permission denied at"),
//   kInternal (an unexpected reply). A failed put says what became of its
//   messages (PutResult).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/context.h"
#include "sluice/redis/redis_options.h"
#include "sluice/status.h"

namespace sluice {

// What a put that failed knows about its messages.
enum class Delivery : std::uint8_t {
  kEnqueued,     // in the queue
  kNotEnqueued,  // not in the queue: the caller may retry
  kUnknown,      // the connection broke after the request was sent: it may be either
};

struct [[nodiscard]] PutResult {
  Status status;             // kOk when every message was enqueued
  std::size_t enqueued = 0;  // how many leading messages are certainly enqueued
  std::size_t in_doubt = 0;  // how many after those may or may not be (kUnknown)

  bool ok() const noexcept { return status.ok(); }
  StatusCode code() const noexcept { return status.code(); }
  // The fate of message i of the call.
  Delivery delivery(std::size_t i = 0) const noexcept {
    if (i < enqueued) return Delivery::kEnqueued;
    if (i < enqueued + in_doubt) return Delivery::kUnknown;
    return Delivery::kNotEnqueued;
  }
};

// A consistent snapshot of a queue's keys (read by one script).
struct PressureStats {
  std::uint64_t bound = 0;  // 0: unbounded
  std::uint64_t length = 0;
  bool closed = false;
  std::uint64_t produced_messages = 0;
  std::uint64_t produced_bytes = 0;
  std::uint64_t consumed_messages = 0;
  std::uint64_t consumed_bytes = 0;
  std::string producer;        // last client that acted as producer ("" if none yet)
  std::string consumer;        // last client that acted as consumer
  bool producer_free = false;  // the producer role is not held right now
  bool consumer_free = false;
  bool not_full = false;  // the :not_full token is present
  // Taken by reliable gets and not yet acknowledged (sluice's own keys).
  // produced_messages == consumed_messages + length + in_flight + purged.
  std::uint64_t in_flight = 0;
  // In in-flight lists taken from an earlier queue of this name (deleted by
  // a client that knows only the protocol's keys, then made again): not
  // this queue's, never requeued; the next touch of such a list drops it.
  std::uint64_t stale_in_flight = 0;
  // Dropped by purge() (sluice's own key, P:N:purged: the protocol's
  // consumed counters do not count them).
  std::uint64_t purged = 0;
};

// The snapshot in the Prometheus text format (sluice/metrics.h), labelled
// name="<name>".
std::string to_prometheus(const PressureStats& stats, std::string_view name);

// What repair() did and what it left alone, one human-readable line each.
struct RepairReport {
  std::vector<std::string> repaired;
  std::vector<std::string> left_alone;
};

class PressureQueue {
 public:
  // Does not connect: the first call does, and every call after a failure.
  PressureQueue(RedisOptions options, std::string name);
  // Closes the connection; first gives back a role that a failed call could
  // not (one round trip, only then).
  ~PressureQueue();
  PressureQueue(PressureQueue&&) noexcept;
  PressureQueue& operator=(PressureQueue&&) noexcept;
  PressureQueue(const PressureQueue&) = delete;
  PressureQueue& operator=(const PressureQueue&) = delete;

  // Create with `bound` (0: unbounded). kAlreadyExists if the queue exists,
  // or if keys of a half-deleted queue remain (the message names them).
  // Removes in-flight lists left by an earlier queue of this name (deleted
  // by a client that does not know them): their messages went with it.
  Status create(std::uint64_t bound = 0);
  Result<bool> exists();
  // kNotFound if the queue does not exist (the protocol's rule).
  Result<std::uint64_t> length();
  Result<bool> closed();
  Result<PressureStats> stats();

  // The head of the queue: up to `max` (>= 1) messages, the next a get
  // would take, in that order, without taking them; after the first `skip`
  // of them (a pager's next page: only that page is read). Takes no role
  // and changes nothing; one atomic read (a snapshot while puts and gets
  // run). Not the messages reliable consumers hold in flight (inflight()).
  Result<std::vector<std::string>> peek(std::size_t max, std::size_t skip = 0);
  // Drops every message waiting in the queue, without deleting it or
  // closing it; how many. Messages reliable consumers hold in flight stay
  // theirs. Counted in sluice's own key (PressureStats::purged), never in
  // the protocol's consumed counters. Producers waiting for room wake, any
  // client's: the :not_full token is made sure of as the protocol's Get
  // does. Takes no role (one atomic step). A pressure queue has no
  // positions: there is no seek.
  Result<std::uint64_t> purge();

  // Enqueue one message (any bytes), waiting for the role and for room;
  // holds the producer role while it waits for room.
  PutResult put(std::string_view message, const Context& ctx = {});
  // Enqueue without waiting: kInUse or kWouldBlock (full) instead.
  PutResult try_put(std::string_view message);
  // Enqueue all, in order, as room allows: one round trip per batch of up to
  // 1024 messages when there is room. Never passes the bound.
  PutResult put_many(std::span<const std::string> messages, const Context& ctx = {});
  // Enqueue the prefix that fits now; kOk if all did, else kWouldBlock/kInUse
  // with `enqueued` telling how many did.
  PutResult try_put_many(std::span<const std::string> messages);

  // Dequeue one message, waiting for the role and for data; holds the
  // consumer role while it waits for data. kClosed once the queue is closed
  // and empty.
  Result<std::string> get(const Context& ctx = {});
  Result<std::string> try_get();
  // Append 1..max messages to `out` in FIFO order, waiting for at least one.
  Status get_many(std::vector<std::string>& out, std::size_t max, const Context& ctx = {});
  Status try_get_many(std::vector<std::string>& out, std::size_t max);

  // Reliable consumption, for a consumer named `consumer` (stable across
  // restarts, unlike the client id). get_reliable moves the message into
  // ${prefix}:${name}:inflight:${consumer} in the same atomic step, so a
  // consumer that dies before ack() loses nothing: on restart, inflight()
  // shows what it had taken and requeue_inflight() puts it back at the head
  // of the queue in order. A message counts as consumed (stats) when acked.
  // The in-flight list is a 13th key, outside the protocol: other clients
  // never see it, and see a taken message as gone from the queue.
  // A list taken from an earlier queue of this name (deleted by a client
  // that knows only the protocol's keys, then made again; see
  // docs/redis_keys.md for what cannot be told) is never mixed with this
  // queue's messages: get_reliable, ack and requeue_inflight drop it and
  // return kNotFound saying how many messages went with the old queue.
  Result<std::string> get_reliable(std::string_view consumer, const Context& ctx = {});
  Status get_many_reliable(std::string_view consumer, std::vector<std::string>& out,
                           std::size_t max, const Context& ctx = {});
  // Acknowledge the `n` oldest in-flight messages. kNotFound if none. Not
  // idempotent: kUnavailable saying "acknowledged is unknown" when the
  // connection broke after the request was sent; check inflight() before a
  // retry, which would acknowledge n more if the first one ran.
  Status ack(std::string_view consumer, std::size_t n = 1);
  // The consumer's in-flight messages, oldest first.
  Result<std::vector<std::string>> inflight(std::string_view consumer);
  // Put them back at the head of the queue (they will be delivered first,
  // in their order); returns how many. May exceed the bound; drops nothing.
  Result<std::uint64_t> requeue_inflight(std::string_view consumer);
  // requeue_inflight() for every consumer named `tag` + a client id
  // ("<host>_pid<N>_tid<M>", anything after) whose process is provably gone
  // (the rules of repair(): same host, its pid does not exist; another host,
  // no connection carries its process's name). For consumers named after
  // the client that runs them, so a restarted one recovers a dead one's
  // messages without taking a live one's. A consumer of a longer tag that
  // starts with `tag` is left alone while the process its name ends with is
  // alive (its name cannot be told from `tag` + another host's id).
  // Returns how many were put back; lists of an earlier queue of this name
  // are dropped, not put back.
  Result<std::uint64_t> requeue_orphans(std::string_view tag);

  // Names of the queues under options.prefix (SCAN for their :bound keys),
  // sorted. One connection, closed on return.
  static Result<std::vector<std::string>> list(const RedisOptions& options);

  // Close for good (as producer): puts fail from now on, gets drain.
  // kClosed if it was already closed. Waits while a put waits for room.
  Status close(const Context& ctx = {});
  // The protocol's Delete (as consumer): closes the queue, wakes blocked
  // clients (a waiting sluice put or get then returns kNotFound, "is being
  // deleted", giving its role back: the close is marked as a delete's,
  // docs/redis_keys.md), waits until no one holds a role, then removes all
  // 12 keys in one step, then the queue's in-flight lists. Returns how many
  // messages were still queued or in flight and are now gone. If `ctx` ends
  // first, the queue stays, closed (and unmarked), with the wait's status.
  Result<std::uint64_t> destroy(const Context& ctx = {});

  // Restores role tokens left taken by clients that died, only when the
  // recorded holder is provably gone (same host: its process is gone; a
  // sluice client on another host: no connection carries its process's
  // name). `force` restores them anyway. The restorer is then recorded as
  // holder. Also restores a missing :not_full token when there is room, and
  // trims duplicated tokens. Never touches the data.
  Result<RepairReport> repair(bool force = false);

  const std::string& name() const noexcept;
  // This handle's id for the calling thread: "<hostname>_pid<pid>_tid<tid>".
  std::string client_id() const;
  // Round trips this handle has made (for tests and benchmarks).
  std::uint64_t round_trips() const noexcept;
  // Time this handle's puts have waited for room at the bound (backpressure)
  // since it was made; a wait adds at the end of each of its slices
  // (RedisOptions::wait_slice). Safe to call from any thread, also while a
  // put waits (a progress line, a metrics scrape): the one member that is.
  std::chrono::nanoseconds bound_wait() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
