// Queue<T> is a bounded multi-producer/multi-consumer queue whose overflow
// policy says what a push does when it is full (see overflow_policy.h).
//
// Thread safety: every member except construction, destruction and
//   assignment may be called concurrently from any number of threads.
// Blocking: push/push_many (Block policy, or capacity 0) wait for room;
//   DropOldest/Sample pushes wait only while a pull moves out the item in
//   their slot (docs/queue.md); pull/pull_many wait for an item. Waiting
//   spins for about a microsecond, then sleeps in the kernel: an idle waiter
//   uses no CPU. try_* never wait.
//   Capacity 0 is a rendezvous: a push completes when a pull takes the item.
// Ordering: FIFO per producer as seen by any one consumer; across consumers,
//   processing order is unspecified. A push happens-before the pull that
//   returns its item.
// Cancellation: blocking calls take a Context. A stop requested before the
//   call returns kCancelled without touching the queue; a stop or deadline
//   while waiting wakes only that caller, which returns kCancelled or
//   kDeadlineExceeded. A deadline only bounds waiting: a call that can
//   complete at once does. A push reports exactly one outcome: enqueued (kOk)
//   or not (any other code); never both.
//   close() is idempotent; pushes after it return kClosed; pulls drain what
//   is buffered, then return kClosed. close() wakes every waiter.
// Ownership: push moves from its argument only when it returns kOk (or, in
//   push_many, for the first `count` items); on any other status the caller
//   still owns the item. pull moves the item out. Memory is one array of
//   `capacity` slots allocated at construction; pushes never allocate.
//   The destructor destroys items still buffered; no call may be running.
// Errors: StatusCode values, never exceptions on the hot path. The
//   constructor throws std::invalid_argument for impossible options.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "sluice/context.h"
#include "sluice/detail/cpu.h"
#include "sluice/detail/rendezvous.h"
#include "sluice/detail/ring.h"
#include "sluice/detail/wait_list.h"
#include "sluice/overflow_policy.h"
#include "sluice/queue_options.h"
#include "sluice/queue_stats.h"
#include "sluice/status.h"

namespace sluice {

// Outcome of a bulk call: `count` items moved, then `status` (kOk when all
// were moved, or for pulls when at least one item was returned).
struct BulkResult {
  std::size_t count = 0;
  StatusCode status = StatusCode::kOk;
};

template <class T>
class Producer;
template <class T>
class Selector;

// RingT is internal: detail::Ring (any number of producers and consumers) or
// detail::SpscRing, which SpscQueue<T> (spsc_queue.h) selects.
template <class T, class RingT = detail::Ring<T>>
class Queue {
  static_assert(std::is_nothrow_move_constructible_v<T>,
                "sluice::Queue<T> needs a noexcept move constructor (a move that throws "
                "half-way through a push would lose the item): make T's move noexcept, "
                "or queue std::unique_ptr<T>.");
  static_assert(std::is_nothrow_destructible_v<T>, "sluice::Queue<T> needs a noexcept destructor.");

 public:
  using value_type = T;

  explicit Queue(std::size_t capacity, OverflowPolicy policy = OverflowPolicy::kBlock)
      : Queue(QueueOptions<T>{capacity, policy, 10, nullptr}) {}

  explicit Queue(QueueOptions<T> options)
      : cap_(options.capacity),
        policy_(options.policy),
        sample_every_(options.sample_every),
        store_(std::move(options.spill_store)) {
    validate();
    if (cap_ == 0) {
      rv_ = std::make_unique<detail::Rendezvous<T>>();
    } else {
      ring_ = std::make_unique<RingT>(cap_);
    }
    ring_only_ = ring_ != nullptr && store_ == nullptr;
  }

  Queue(const Queue&) = delete;
  Queue& operator=(const Queue&) = delete;

  // Pushes `item`, applying the overflow policy when full. Blocks (Block
  // policy or capacity 0) until room, close, cancellation or deadline.
  // kOk (moved in), kClosed, kCancelled, kDeadlineExceeded, kDropped,
  // kRejected, kSampledOut, or a spill store's error.
  SLUICE_ALWAYS_INLINE Status push(T&& item, const Context& ctx) { return push_one(item, &ctx); }
  // The same with a context that never ends the wait. (An overload, not a
  // default argument: a Context built per call added stores that, with the
  // two sides on different cores, queued behind the ring's and halved
  // SpscQueue's throughput.)
  SLUICE_ALWAYS_INLINE Status push(T&& item) { return push_one(item, &default_ctx_); }
  // Never waits: kWouldBlock where push would have waited.
  SLUICE_ALWAYS_INLINE Status try_push(T&& item) { return push_one(item, nullptr); }

  // Pulls the oldest item. Blocks until one arrives, or returns kClosed once
  // closed and drained, or kCancelled / kDeadlineExceeded.
  SLUICE_ALWAYS_INLINE Result<T> pull(const Context& ctx) { return pull_one(&ctx); }
  SLUICE_ALWAYS_INLINE Result<T> pull() { return pull_one(&default_ctx_); }
  // Never waits: kWouldBlock when empty (and not closed).
  SLUICE_ALWAYS_INLINE Result<T> try_pull() { return pull_one(nullptr); }

  // Like pull, and sets *position to the item's place in the queue's pull
  // order (0 for the first item ever pulled): consecutive, so a consumer can
  // restore input order after parallel work. Only for capacity >= 1 and the
  // Block, DropNewest and Reject policies (evictions and spills have no
  // place in that order): kInvalidArgument otherwise.
  Result<T> pull_positioned(std::uint64_t* position, const Context& ctx = {}) {
    if (!positions_exact()) {
      return Status(StatusCode::kInvalidArgument,
                    "pull_positioned: queue evicts, spills or has capacity 0");
    }
    return pull_one(&ctx, position);
  }
  Result<T> try_pull_positioned(std::uint64_t* position) {
    if (!positions_exact()) {
      return Status(StatusCode::kInvalidArgument,
                    "pull_positioned: queue evicts, spills or has capacity 0");
    }
    return pull_one(nullptr, position);
  }
  // True if pull_positioned() is available on this queue.
  bool positions_exact() const noexcept {
    return !rv_ && (policy_ == OverflowPolicy::kBlock || policy_ == OverflowPolicy::kDropNewest ||
                    policy_ == OverflowPolicy::kReject);
  }

  // Pushes items in order, several per synchronisation, waiting as push does.
  // Stops at the first item not accepted: the first `count` items were moved
  // from, the rest are untouched; `status` is that item's outcome.
  BulkResult push_many(std::span<T> items, const Context& ctx) { return push_span(items, &ctx); }
  BulkResult push_many(std::span<T> items) { return push_span(items, &default_ctx_); }
  BulkResult try_push_many(std::span<T> items) { return push_span(items, nullptr); }

  // Pushes all of `items` or none, in order, in one claim: a concurrent close
  // or cancellation cannot split them. Waits (Block policy) until that many
  // slots are free at once. kInvalidArgument if items.size() > capacity or
  // capacity is 0; other policies refuse the whole group when it does not fit
  // (kDropped / kRejected, counted per item; DropOldest/Sample/Spill: kRejected).
  Status push_all(std::span<T> items, const Context& ctx) { return push_group(items, &ctx); }
  Status push_all(std::span<T> items) { return push_group(items, &default_ctx_); }
  Status try_push_all(std::span<T> items) { return push_group(items, nullptr); }

  // Waits for at least one item, then moves up to `max` available items to
  // `out` (an output iterator, e.g. std::back_inserter(vec)) in one claim.
  // count > 0 with kOk, or count == 0 with kClosed / kCancelled /
  // kDeadlineExceeded (kWouldBlock for try_pull_many).
  template <class Out>
  BulkResult pull_many(Out out, std::size_t max, const Context& ctx) {
    return pull_span(out, max, &ctx);
  }
  template <class Out>
  BulkResult pull_many(Out out, std::size_t max) {
    return pull_span(out, max, &default_ctx_);
  }
  template <class Out>
  BulkResult try_pull_many(Out out, std::size_t max) {
    return pull_span(out, max, nullptr);
  }

  // Like pull_many, and sets *position to the first item's place in the pull
  // order (the others follow it: one claim). The same queues as
  // pull_positioned; kInvalidArgument on others.
  template <class Out>
  BulkResult pull_many_positioned(Out out, std::size_t max, std::uint64_t* position,
                                  const Context& ctx = {}) {
    if (!positions_exact()) return {0, StatusCode::kInvalidArgument};
    return pull_span(out, max, &ctx, position);
  }
  template <class Out>
  BulkResult try_pull_many_positioned(Out out, std::size_t max, std::uint64_t* position) {
    if (!positions_exact()) return {0, StatusCode::kInvalidArgument};
    return pull_span(out, max, nullptr, position);
  }

  // Marks the queue closed and wakes every waiter. Returns true for the call
  // that closed it; later calls do nothing and return false.
  bool close() {
    bool first = false;
    if (rv_) {
      first = rv_->close();
    } else if (store_) {
      std::lock_guard lock(spill_mu_);  // orders close against a push spilling
      first = ring_->close();
    } else {
      first = ring_->close();
    }
    not_empty_.notify_all();
    not_full_.notify_all();
    return first;
  }
  bool closed() const { return rv_ ? rv_->closed() : ring_->closed(); }

  // A producer handle: the queue closes when the last handle made by
  // producer() (or cloned from one) is released. Make the handles before
  // starting the producers, or clone() from a live one.
  Producer<T> producer();

  // Threads parked in pull now (a cheap read; may change at once).
  std::uint32_t waiting_pullers() const noexcept { return rv_ ? 0 : not_empty_.waiters(); }

  std::size_t capacity() const noexcept { return cap_; }
  OverflowPolicy policy() const noexcept { return policy_; }

  // Items held now. May have changed by the time it is read.
  std::uint64_t approx_size() const {
    if (rv_) return 0;
    const std::uint64_t popped = ring_->popped_count();  // first: keeps pushed >= popped
    const std::uint64_t pushed = ring_->pushed_count();
    return (pushed > popped ? pushed - popped : 0) + spill_size();
  }

  QueueStats stats() const {
    QueueStats s;
    s.capacity = cap_;
    s.dropped = dropped_.load(std::memory_order_relaxed);
    s.rejected = rejected_.load(std::memory_order_relaxed);
    s.sampled_out = sampled_out_.load(std::memory_order_relaxed);
    if (rv_) {
      s.pushed = s.pulled = rv_->handoffs();
      std::tie(s.waiting_pushers, s.waiting_pullers) = rv_->waiting();
      return s;
    }
    s.waiting_pushers = not_full_.waiters();
    s.waiting_pullers = not_empty_.waiters();
    s.evicted = evicted_.load(std::memory_order_relaxed);
    s.spilled = spilled_.load(std::memory_order_relaxed);
    s.spill_depth = spill_size();
    const std::uint64_t popped = ring_->popped_count();
    const std::uint64_t pushed = ring_->pushed_count();
    s.pushed = pushed + s.spilled;
    s.pulled = popped - s.evicted + unspilled_.load(std::memory_order_relaxed);
    // An evicting push claims its place before it evicts: cap + 1 for a moment.
    s.depth = std::min<std::uint64_t>(pushed > popped ? pushed - popped : 0, cap_) + s.spill_depth;
    s.high_watermark = high_watermark_.load(std::memory_order_relaxed);
    return s;
  }

  // Range-for support: `for (T& item : queue)` pulls until closed and drained.
  // items(ctx) ends early on cancellation; status() says why it ended.
  class Range;
  class Iterator;
  Range items(const Context& ctx = {}) { return Range(*this, ctx); }
  Iterator begin() { return Iterator(this, &default_ctx_, nullptr); }
  std::default_sentinel_t end() { return {}; }

 private:
  void validate() const {
    auto fail = [](const std::string& why) {
      throw std::invalid_argument("sluice::Queue: " + why);
    };
    if (cap_ == 0 && policy_ != OverflowPolicy::kBlock && policy_ != OverflowPolicy::kDropNewest &&
        policy_ != OverflowPolicy::kReject) {
      fail(std::string("capacity 0 (rendezvous) has no buffer to evict from or spill; policy ") +
           std::string(overflow_policy_name(policy_)) + " needs capacity >= 1");
    }
    if (policy_ == OverflowPolicy::kSample && sample_every_ == 0) fail("sample_every must be >= 1");
    if (policy_ == OverflowPolicy::kSpill && !store_) fail("policy spill needs a spill_store");
    if (policy_ != OverflowPolicy::kSpill && store_)
      fail("a spill_store is only used by policy spill");
    if (RingT::kSingleConsumer && cap_ > 0 &&
        (policy_ == OverflowPolicy::kDropOldest || policy_ == OverflowPolicy::kSample)) {
      fail(std::string("policy ") + std::string(overflow_policy_name(policy_)) +
           " evicts from the producer's thread, a second consumer: use sluice::Queue, not "
           "SpscQueue");
    }
    if (cap_ > (std::size_t{1} << 40)) fail("capacity above 2^40 slots");
  }

  // ---- push ----
  // A push into a ring with room, inline in the caller; the rest out of line.
  // With the two sides on different cores the ring's stores wait for lines
  // the other side holds, and every store on this path (a call, a spilled
  // register) queues behind them: SpscQueue ran at half speed with this path
  // two calls deep.
  SLUICE_ALWAYS_INLINE Status push_one(T& item, const Context* ctx) {
    if (!ring_only_ || (ctx != nullptr && ctx->stop_requested())) [[unlikely]] {
      return push_other(item, ctx);
    }
    std::uint64_t claimed = 0;
    const detail::RingOp op = ring_->try_push(item, &claimed);
    if (op != detail::RingOp::kOk) [[unlikely]]
      return push_failed(op, item, ctx);
    after_push(claimed, 1);
    return StatusCode::kOk;
  }
  SLUICE_NOINLINE Status push_other(T& item, const Context* ctx) {
    if (ctx != nullptr && ctx->stop_requested()) return StatusCode::kCancelled;
    if (rv_) return push_rendezvous(item, ctx);
    return push_spill(item);
  }
  SLUICE_NOINLINE Status push_failed(detail::RingOp op, T& item, const Context* ctx) {
    if (op == detail::RingOp::kClosed) return StatusCode::kClosed;
    return on_full(item, ctx);
  }

  Status on_full(T& item, const Context* ctx) {
    switch (policy_) {
      case OverflowPolicy::kBlock:
      case OverflowPolicy::kSpill:  // unreachable: spill has its own path
        return push_blocking(item, ctx);
      case OverflowPolicy::kDropNewest:
        dropped_.fetch_add(1, std::memory_order_relaxed);
        return StatusCode::kDropped;
      case OverflowPolicy::kReject:
        rejected_.fetch_add(1, std::memory_order_relaxed);
        return StatusCode::kRejected;
      case OverflowPolicy::kSample:
        if (sample_seq_.fetch_add(1, std::memory_order_relaxed) % sample_every_ != 0) {
          sampled_out_.fetch_add(1, std::memory_order_relaxed);
          return StatusCode::kSampledOut;
        }
        return push_evicting(item, ctx);
      case OverflowPolicy::kDropOldest:
        return push_evicting(item, ctx);
    }
    return StatusCode::kInternal;
  }

  Status push_blocking(T& item, const Context* ctx) {
    if (ctx == nullptr) return StatusCode::kWouldBlock;
    std::uint64_t claimed = 0;
    detail::RingOp op = detail::RingOp::kWouldBlock;
    const StatusCode waited = detail::await(not_full_, *ctx, [&] {
      op = ring_->try_push(item, &claimed);
      return op == detail::RingOp::kWouldBlock ? detail::Attempt::kWouldBlock
                                               : detail::Attempt::kDone;
    });
    if (waited != StatusCode::kOk) return waited;
    if (op == detail::RingOp::kClosed) return StatusCode::kClosed;
    after_push(claimed, 1);
    return StatusCode::kOk;
  }

  // DropOldest / admitted Sample: the push claims its place, then evicts the
  // oldest item if the ring is full (Ring::try_push_evicting: a close()
  // racing the push can no longer cost an item owed to the drain). While a
  // pull is moving out the item in the push's slot, the push waits on
  // not_full_ like a blocked one (the pull wakes it), so its context can end
  // the wait; try_push says kWouldBlock.
  Status push_evicting(T& item, const Context* ctx) {
    if constexpr (RingT::kSingleConsumer) {
      return StatusCode::kInternal;  // refused at construction (validate)
    } else {
      std::uint64_t claimed = 0;
      std::uint64_t evicted = 0;
      auto attempt = [&] {
        const detail::RingOp r = ring_->try_push_evicting(item, &claimed, &evicted);
        // A place given back after a close: pullers that saw it claimed
        // may now find the queue drained.
        if (r == detail::RingOp::kWouldBlock && ring_->closed()) not_empty_.notify_all();
        return r;
      };
      detail::RingOp op = attempt();
      if (op == detail::RingOp::kWouldBlock) {
        if (ctx == nullptr) return StatusCode::kWouldBlock;
        const StatusCode waited = detail::await(not_full_, *ctx, [&] {
          op = attempt();
          return op == detail::RingOp::kWouldBlock ? detail::Attempt::kWouldBlock
                                                   : detail::Attempt::kDone;
        });
        if (waited != StatusCode::kOk) return waited;  // nothing claimed, nothing evicted
      }
      if (evicted != 0) evicted_.fetch_add(evicted, std::memory_order_relaxed);
      if (op == detail::RingOp::kClosed) return StatusCode::kClosed;
      after_push(claimed, 1);
      // Pushes waiting for a pull to leave their slot all wait for the same
      // place (the tail); ours moved it, so let the next one look. (Pulls
      // wake them; an eviction frees a place without a pull.)
      if (not_full_.has_waiters()) not_full_.notify_one();
      return StatusCode::kOk;
    }
  }

  Status push_rendezvous(T& item, const Context* ctx) {
    const bool may_wait = policy_ == OverflowPolicy::kBlock && ctx != nullptr;
    const StatusCode s = rv_->push(item, may_wait ? ctx : nullptr);
    if (s != StatusCode::kWouldBlock || policy_ == OverflowPolicy::kBlock) return s;
    if (policy_ == OverflowPolicy::kDropNewest) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return StatusCode::kDropped;
    }
    rejected_.fetch_add(1, std::memory_order_relaxed);
    return StatusCode::kRejected;
  }

  // Spill: memory first; once the store holds anything, the store, so that
  // pulls (memory first, then store) see FIFO order.
  Status push_spill(T& item) {
    std::uint64_t claimed = 0;
    if (!spill_active_.load(std::memory_order_acquire)) {
      const detail::RingOp op = ring_->try_push(item, &claimed);
      if (op == detail::RingOp::kOk) {
        after_push(claimed, 1);
        return StatusCode::kOk;
      }
      if (op == detail::RingOp::kClosed) return StatusCode::kClosed;
    }
    std::unique_lock lock(spill_mu_);
    if (ring_->closed()) return StatusCode::kClosed;
    if (!spill_active_.load(std::memory_order_relaxed)) {
      if (ring_->try_push(item, &claimed) == detail::RingOp::kOk) {
        lock.unlock();
        after_push(claimed, 1);
        return StatusCode::kOk;
      }
    }
    Status st = store_->put(item);
    if (st.ok()) {
      spill_active_.store(true, std::memory_order_release);
      spilled_.fetch_add(1, std::memory_order_relaxed);
      lock.unlock();
      not_empty_.publish_and_notify(1);
    } else if (st.code() == StatusCode::kRejected) {
      rejected_.fetch_add(1, std::memory_order_relaxed);
    }
    return st;
  }

  void after_push(std::uint64_t claimed, std::size_t n) {
    not_empty_.publish_and_notify(n);
    note_depth(claimed);
    // Room remains and pushers wait: a wake-up may have been spent on a slot
    // whose pop was still mid-way (the pusher found it full and parked
    // again), so pass one on (as after_pull does for pullers).
    if constexpr (!RingT::kSingleConsumer) {
      if (policy_ == OverflowPolicy::kBlock && not_full_.has_waiters()) {
        const std::uint64_t popped = ring_->popped_count();  // first: pushed >= popped
        if (ring_->pushed_count() - popped < cap_) not_full_.notify_one();
      }
    }
  }

  // Raises the high watermark to the depth this push left, with the consumer
  // position read just after it. Skips the read of the consumers' cache line
  // when the depth cannot exceed the mark already recorded.
  void note_depth(std::uint64_t claimed) {
    const std::uint64_t mark = high_watermark_.load(std::memory_order_relaxed);
    if (mark >= cap_) return;
    const std::uint64_t pushed = ring_->count_of(claimed);
    if (pushed - popped_hint_.load(std::memory_order_relaxed) <= mark) return;
    raise_mark(pushed, mark);
  }
  SLUICE_NOINLINE void raise_mark(std::uint64_t pushed, std::uint64_t mark) {
    const std::uint64_t popped = ring_->popped_count();
    popped_hint_.store(popped, std::memory_order_relaxed);
    const std::uint64_t depth = pushed > popped ? pushed - popped : 0;
    std::uint64_t cur = mark;
    while (depth > cur &&
           !high_watermark_.compare_exchange_weak(cur, depth, std::memory_order_relaxed)) {
    }
  }

  BulkResult push_span(std::span<T> items, const Context* ctx) {
    if (ctx != nullptr && ctx->stop_requested()) return {0, StatusCode::kCancelled};
    std::size_t done = 0;
    if (rv_ || policy_ != OverflowPolicy::kBlock) {
      for (; done < items.size(); ++done) {
        Status s = push_one(items[done], ctx);
        if (!s.ok()) return {done, s.code()};
      }
      return {done, StatusCode::kOk};
    }
    while (done < items.size()) {
      detail::RingOp op = detail::RingOp::kWouldBlock;
      std::uint64_t claimed = 0;
      std::size_t n = ring_->try_push_many(items.data() + done, items.size() - done, &op, &claimed);
      if (n == 0 && op == detail::RingOp::kWouldBlock) {
        if (ctx == nullptr) return {done, StatusCode::kWouldBlock};
        const StatusCode waited = detail::await(not_full_, *ctx, [&] {
          n = ring_->try_push_many(items.data() + done, items.size() - done, &op, &claimed);
          return n == 0 && op == detail::RingOp::kWouldBlock ? detail::Attempt::kWouldBlock
                                                             : detail::Attempt::kDone;
        });
        if (waited != StatusCode::kOk) return {done, waited};
      }
      if (op == detail::RingOp::kClosed) return {done, StatusCode::kClosed};
      after_push(claimed, n);
      done += n;
    }
    return {done, StatusCode::kOk};
  }

  Status push_group(std::span<T> items, const Context* ctx) {
    if (ctx != nullptr && ctx->stop_requested()) return StatusCode::kCancelled;
    if (items.empty()) return StatusCode::kOk;
    if (rv_ || items.size() > cap_) {
      return {StatusCode::kInvalidArgument, "push_all: more items than the queue's capacity"};
    }
    detail::RingOp op = detail::RingOp::kWouldBlock;
    std::uint64_t claimed = 0;
    auto attempt = [&] {
      return ring_->try_push_many(items.data(), items.size(), &op, &claimed, true) != 0;
    };
    if (!(store_ && spill_active_.load(std::memory_order_acquire)) && attempt()) {
      after_push(claimed, items.size());
      return StatusCode::kOk;
    }
    // A spilling queue skips the attempt: its close shows only in the ring.
    if (op == detail::RingOp::kClosed || ring_->closed()) return StatusCode::kClosed;
    if (policy_ != OverflowPolicy::kBlock) {
      auto& counter = policy_ == OverflowPolicy::kDropNewest ? dropped_ : rejected_;
      counter.fetch_add(items.size(), std::memory_order_relaxed);
      return policy_ == OverflowPolicy::kDropNewest ? StatusCode::kDropped : StatusCode::kRejected;
    }
    if (ctx == nullptr) return StatusCode::kWouldBlock;
    // A woken group waiter that still lacks room hands its wake-up to a
    // waiter needing less and re-enlists at the tail of the FIFO, so single
    // pushers behind it get the wake-ups they can use: no starvation, and no
    // single push left waiting beside a free slot.
    const StatusCode waited = detail::await(
        not_full_, *ctx,
        [&] {
          return attempt() || op == detail::RingOp::kClosed ? detail::Attempt::kDone
                                                            : detail::Attempt::kWouldBlock;
        },
        items.size());
    if (waited != StatusCode::kOk) return waited;
    if (op == detail::RingOp::kClosed) return StatusCode::kClosed;
    after_push(claimed, items.size());
    return StatusCode::kOk;
  }

  // ---- pull ----
  // An item from the ring, inline in the caller (as push_one); the rest,
  // including every wait, out of line.
  SLUICE_ALWAYS_INLINE Result<T> pull_one(const Context* ctx, std::uint64_t* pos = nullptr) {
    if (ring_only_ && (ctx == nullptr || !ctx->stop_requested())) [[likely]] {
      std::optional<T> out;
      auto sink = [&out](T&& v) { out.emplace(std::move(v)); };
      if (ring_->try_pop(sink, pos, /*streaming=*/ctx != nullptr) == detail::RingOp::kOk)
          [[likely]] {
        after_pull(1);
        return std::move(*out);
      }
    }
    return pull_other(ctx, pos);
  }
  SLUICE_NOINLINE Result<T> pull_other(const Context* ctx, std::uint64_t* pos) {
    if (ctx != nullptr && ctx->stop_requested()) return StatusCode::kCancelled;
    std::optional<T> out;
    StatusCode s = StatusCode::kOk;
    if (rv_) {
      s = rv_->pull(out, ctx);
    } else {
      auto sink = [&out](T&& v) { out.emplace(std::move(v)); };
      s = pull_ring_or_wait(sink, 1, pos, ctx);
    }
    if (s != StatusCode::kOk) return s;
    return std::move(*out);
  }

  template <class Out>
  BulkResult pull_span(Out out, std::size_t max, const Context* ctx, std::uint64_t* pos = nullptr) {
    if (ctx != nullptr && ctx->stop_requested()) return {0, StatusCode::kCancelled};
    if (max == 0) return {0, StatusCode::kOk};
    std::size_t n = 0;
    auto sink = [&out, &n](T&& v) {
      *out = std::move(v);
      ++out;
      ++n;
    };
    if (rv_) {
      // Take the first (waiting if allowed), then whatever else is on offer.
      std::optional<T> item;
      StatusCode s = rv_->pull(item, ctx);
      while (s == StatusCode::kOk) {
        sink(std::move(*item));
        item.reset();
        if (n == max) break;
        s = rv_->pull(item, nullptr);
      }
      return {n, n > 0 ? StatusCode::kOk : s};
    }
    const StatusCode s = pull_ring_or_wait(sink, max, pos, ctx);
    return {n, n > 0 ? StatusCode::kOk : s};
  }

  // Tries once; if the queue would block and ctx allows, waits and retries.
  template <class Sink>
  StatusCode pull_ring_or_wait(Sink& sink, std::size_t max, std::uint64_t* pos,
                               const Context* ctx) {
    StatusCode s = pull_attempt(sink, max, pos);
    if (s != StatusCode::kWouldBlock || ctx == nullptr) return s;
    const StatusCode waited = detail::await(not_empty_, *ctx, [&] {
      s = pull_attempt(sink, max, pos);
      return s == StatusCode::kWouldBlock ? detail::Attempt::kWouldBlock : detail::Attempt::kDone;
    });
    return waited != StatusCode::kOk ? waited : s;
  }

  // One non-blocking try: memory first, then the spill store.
  template <class Sink>
  StatusCode pull_attempt(Sink& sink, std::size_t max, std::uint64_t* pos = nullptr) {
    const StatusCode s = pull_ring(sink, max, pos);
    // seq_cst: a waiter's enlist-then-recheck must see a spill (wait_list.h).
    if (s == StatusCode::kOk || !store_ || !spill_active_.load(std::memory_order_seq_cst)) return s;
    std::unique_lock lock(spill_mu_);
    // Memory first, again: a producer spills only after its earlier pushes to
    // memory completed, and this lock orders its spill before us, so they are
    // visible now (we may have looked before they landed). A push still in
    // progress in memory comes first too: wait for it (it will wake us).
    // Otherwise a spilled item could overtake an older one from its producer.
    if (pull_ring(sink, max, nullptr) == StatusCode::kOk) return StatusCode::kOk;
    if (ring_->pushed_count() != ring_->popped_count()) return StatusCode::kWouldBlock;
    std::optional<T> item;
    if (store_->size() > 0) {
      // The store's error is the pull's: the item is still there, so neither
      // "nothing yet" nor "closed and drained" would be true.
      if (Status ts = store_->take(item); !ts.ok() && ts.code() != StatusCode::kWouldBlock) {
        return ts.code();
      }
    }
    if (item) {
      unspilled_.fetch_add(1, std::memory_order_relaxed);
      // Emptied: pushes may use memory again at once (the ring is empty:
      // pulls take from it first, and pushes went to the store meanwhile).
      if (store_->size() == 0) spill_active_.store(false, std::memory_order_release);
      lock.unlock();
      sink(std::move(*item));
      if constexpr (!RingT::kSingleConsumer) {
        if (not_empty_.has_waiters()) pass_on_to_pullers();
      }
      return StatusCode::kOk;
    }
    if (store_->size() == 0) spill_active_.store(false, std::memory_order_release);
    lock.unlock();
    // The ring may have taken pushes while we looked: recheck before closing.
    return pull_ring(sink, max, nullptr);
  }

  // One non-blocking try on the in-memory ring.
  template <class Sink>
  StatusCode pull_ring(Sink& sink, std::size_t max, std::uint64_t* pos) {
    detail::RingOp op = detail::RingOp::kWouldBlock;
    std::size_t n = 0;
    if (max == 1) {
      op = ring_->try_pop(sink, pos);
      n = op == detail::RingOp::kOk ? 1 : 0;
    } else {
      n = ring_->try_pop_many(sink, max, &op, pos);
    }
    if (n == 0)
      return op == detail::RingOp::kClosed ? StatusCode::kClosed : StatusCode::kWouldBlock;
    after_pull(n);
    return StatusCode::kOk;
  }

  void after_pull(std::size_t n) {
    not_full_.publish_and_notify(n);
    // Waiters that slept on a claimed-but-unpublished slot after close must
    // learn that the queue is now drained. (With one consumer, nobody else
    // pulls: skip the load.)
    if constexpr (!RingT::kSingleConsumer) {
      if (not_empty_.has_waiters()) pass_on_to_pullers();
    }
  }

  // After a pull, with pullers parked.
  SLUICE_NOINLINE void pass_on_to_pullers() {
    if (ring_->closed()) {
      not_empty_.notify_all();
    } else if (ring_->pushed_count() != ring_->popped_count() ||
               (store_ && spill_active_.load(std::memory_order_seq_cst))) {
      // Items remain: a wake-up may have been spent on a slot whose push
      // was still mid-way (the puller found the head unpublished, or, with
      // a spill store, waited for that push before the store's items, and
      // parked again), so pass one on; a spurious one costs a look. The
      // store's items count too: those spilled while nobody waited sent
      // their wake-ups to nobody, and the mid-way push sends only one.
      not_empty_.notify_one();
    }
  }

  std::uint64_t spill_size() const {
    if (!store_) return 0;
    std::lock_guard lock(spill_mu_);
    return store_->size();
  }

  friend class Producer<T>;
  friend class Selector<T>;  // parks on not_empty_ / not_full_ of several queues at once
  void add_producer() { producers_.fetch_add(1, std::memory_order_relaxed); }
  void release_producer() {
    if (producers_.fetch_sub(1, std::memory_order_acq_rel) == 1) close();
  }

  const std::size_t cap_;
  const OverflowPolicy policy_;
  const std::uint32_t sample_every_;
  const std::shared_ptr<SpillStore<T>> store_;
  std::unique_ptr<RingT> ring_;                // capacity >= 1
  std::unique_ptr<detail::Rendezvous<T>> rv_;  // capacity == 0
  bool ring_only_ = false;                     // a ring and no spill store: the inline paths
  const Context default_ctx_{};                // never ends a wait; read-only

  // Each on its own line: parking writes them, and every push and pull reads
  // the members above (read-only after construction).
  alignas(detail::kCacheLine) detail::WaitList not_empty_;  // pullers wait here
  alignas(detail::kCacheLine) detail::WaitList not_full_;   // Block-policy pushers wait here

  // Slow-path counters: touched only when the queue is full or spilling.
  alignas(detail::kCacheLine) std::atomic<std::uint64_t> dropped_{0};
  std::atomic<std::uint64_t> rejected_{0};
  std::atomic<std::uint64_t> sampled_out_{0};
  std::atomic<std::uint64_t> sample_seq_{0};
  std::atomic<std::uint64_t> evicted_{0};
  std::atomic<std::uint64_t> spilled_{0};
  std::atomic<std::uint64_t> unspilled_{0};
  std::atomic<std::uint32_t> producers_{0};
  // Written by pushes only while the mark is below capacity.
  alignas(detail::kCacheLine) std::atomic<std::uint64_t> high_watermark_{0};
  std::atomic<std::uint64_t> popped_hint_{0};

  mutable std::mutex spill_mu_;
  std::atomic<bool> spill_active_{false};
};

// Producer<T>: a counted producer handle. The queue closes when the last
// handle is released (destroyed, or done() called). Move-only; thread-safe
// like the queue itself, but one handle should belong to one producer.
// A handle that is released, moved from or default-constructed refuses
// every push with kClosed and leaves the item with the caller. The queue
// must outlive its handles.
template <class T>
class Producer {
 public:
  Producer() = default;
  Producer(Producer&& o) noexcept : q_(std::exchange(o.q_, nullptr)) {}
  Producer& operator=(Producer&& o) noexcept {
    if (this != &o) {
      done();
      q_ = std::exchange(o.q_, nullptr);
    }
    return *this;
  }
  Producer(const Producer&) = delete;
  Producer& operator=(const Producer&) = delete;
  ~Producer() { done(); }

  // Another handle on the same queue; safe while this one is live.
  Producer clone() const { return q_ != nullptr ? Producer(q_) : Producer(); }

  Status push(T&& item, const Context& ctx = {}) {
    if (q_ == nullptr) return released();
    return q_->push(std::move(item), ctx);
  }
  Status try_push(T&& item) {
    if (q_ == nullptr) return released();
    return q_->try_push(std::move(item));
  }
  BulkResult push_many(std::span<T> items, const Context& ctx = {}) {
    if (q_ == nullptr) return {0, StatusCode::kClosed};
    return q_->push_many(items, ctx);
  }

  // Releases this handle; the last release closes the queue. Idempotent.
  void done() {
    if (q_ != nullptr) std::exchange(q_, nullptr)->release_producer();
  }
  bool live() const noexcept { return q_ != nullptr; }

 private:
  friend class Queue<T>;
  explicit Producer(Queue<T>* q) : q_(q) { q_->add_producer(); }
  // Not the queue's own kClosed: says why, since the queue may still be open.
  static Status released() {
    return {StatusCode::kClosed, "producer handle released (done(), moved from, or empty)"};
  }
  Queue<T>* q_ = nullptr;
};

template <class T, class RingT>
Producer<T> Queue<T, RingT>::producer() {
  static_assert(std::is_same_v<RingT, detail::Ring<T>>,
                "SpscQueue has one producer: it has no producer handles; call close() when done");
  return Producer<T>(this);
}

// Input iterator that pulls on increment; equal to end once a pull fails.
template <class T, class RingT>
class Queue<T, RingT>::Iterator {
 public:
  using value_type = T;
  using difference_type = std::ptrdiff_t;

  Iterator() = default;
  Iterator(Queue* q, const Context* ctx, StatusCode* status) : q_(q), ctx_(ctx), status_(status) {
    advance();
  }
  T& operator*() const { return *cur_; }
  T* operator->() const { return &*cur_; }
  Iterator& operator++() {
    advance();
    return *this;
  }
  void operator++(int) { advance(); }
  friend bool operator==(const Iterator& it, std::default_sentinel_t) { return !it.cur_; }

 private:
  void advance() {
    if (q_ == nullptr) {  // a default-constructed iterator is already at the end
      cur_.reset();
      return;
    }
    Result<T> r = q_->pull(*ctx_);
    if (r.ok()) {
      cur_.emplace(std::move(*r));
    } else {
      cur_.reset();
      if (status_ != nullptr) *status_ = r.code();
    }
  }
  Queue* q_ = nullptr;
  const Context* ctx_ = nullptr;
  StatusCode* status_ = nullptr;
  mutable std::optional<T> cur_;
};

template <class T, class RingT>
class Queue<T, RingT>::Range {
 public:
  Range(Queue& q, Context ctx) : q_(&q), ctx_(std::move(ctx)) {}
  Iterator begin() { return Iterator(q_, &ctx_, &status_); }
  std::default_sentinel_t end() { return {}; }
  // Why iteration ended: kClosed (drained), kCancelled or kDeadlineExceeded.
  StatusCode status() const { return status_; }

 private:
  Queue* q_;
  Context ctx_;
  StatusCode status_ = StatusCode::kOk;
};

}  // namespace sluice
