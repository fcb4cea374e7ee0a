// Selector<T>: waits on several queues at once, like Go's `select` over
// channels: pull from whichever queue has an item first, or push to
// whichever has room first, and say which one it was.
//
//   sluice::Selector<Job> sel({&urgent, &normal, &bulk});
//   for (;;) {
//     auto r = sel.pull(ctx);          // r->index: 0, 1 or 2; r->value: the job
//     if (!r.ok()) break;              // kClosed once all three are closed and drained
//   }
//
// Thread safety: any number of threads may call pull/push on one Selector,
//   and use the queues directly at the same time.
// Blocking: pull waits until some queue has an item, push until some queue
//   has room; a waiter is parked on every queue's wait list at once (no
//   polling, no CPU), after the queues' usual short spin.
// Ordering: each queue keeps its own FIFO order; across queues, none.
//   Fairness: each call starts looking at the queue after the one the
//   previous call started at (round robin), so under load every busy queue
//   is served in turn and none is starved.
// Cancellation: a Context's stop or deadline ends the wait with kCancelled
//   or kDeadlineExceeded, having taken (or pushed) nothing: exactly one
//   outcome, never an item taken and an error returned.
// Close: a closed and drained queue is skipped; pull returns kClosed once
//   every queue is closed and drained; push skips closed queues and returns
//   kClosed once all are closed (the item stays with the caller).
// Ownership: the queues must outlive the Selector, which only points at them.
//   push moves the item only on kOk.
// Errors: create() returns kInvalidArgument for no queues, a null queue, a
//   rendezvous queue (capacity 0), or (for push) a queue whose overflow
//   policy is not kBlock: "room" means nothing to a queue that drops.
#pragma once

#include <atomic>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "sluice/context.h"
#include "sluice/detail/wait_list.h"
#include "sluice/queue.h"
#include "sluice/status.h"

namespace sluice {

// What Selector::pull took, and from which queue (its index in the list).
template <class T>
struct Selected {
  std::size_t index = 0;
  T value;
};

template <class T>
class Selector {
 public:
  static Result<Selector> create(std::vector<Queue<T>*> queues) {
    if (queues.empty()) return invalid("no queues");
    for (std::size_t i = 0; i < queues.size(); ++i) {
      if (queues[i] == nullptr) return invalid("queue " + std::to_string(i) + " is null");
      if (queues[i]->capacity() == 0) {
        return invalid("queue " + std::to_string(i) + " is a rendezvous (capacity 0)");
      }
    }
    return Selector(std::move(queues));
  }
  // For a list known to be valid; a bad one makes every call kInvalidArgument.
  Selector(std::initializer_list<Queue<T>*> queues) : Selector(std::vector<Queue<T>*>(queues)) {
    for (Queue<T>* q : queues_) {
      if (q == nullptr || q->capacity() == 0) valid_ = false;
    }
  }
  Selector(Selector&& o) noexcept
      : queues_(std::move(o.queues_)),
        not_empty_(std::move(o.not_empty_)),
        not_full_(std::move(o.not_full_)),
        valid_(o.valid_),
        cursor_(o.cursor_.load(std::memory_order_relaxed)) {}

  // The oldest item of whichever queue has one first.
  Result<Selected<T>> pull(const Context& ctx = {}) {
    if (!valid_) return invalid("bad queue list");
    if (ctx.stop_requested()) return StatusCode::kCancelled;
    const std::size_t n = queues_.size();
    const std::size_t start = next_start();
    std::vector<bool> done(n, false);  // closed and drained: skipped
    std::optional<Selected<T>> got;
    int taken = -1;
    bool all_closed = false;
    auto attempt = [&] {
      std::size_t closed = 0;
      for (std::size_t k = 0; k < n; ++k) {
        const std::size_t i = (start + k) % n;
        if (done[i]) {
          ++closed;
          continue;
        }
        Result<T> r = queues_[i]->try_pull();
        if (r.ok()) {
          got.emplace(Selected<T>{i, std::move(*r)});
          taken = static_cast<int>(i);
          return detail::Attempt::kDone;
        }
        if (r.code() == StatusCode::kClosed) {
          done[i] = true;
          ++closed;
        }
      }
      all_closed = closed == n;
      return all_closed ? detail::Attempt::kDone : detail::Attempt::kWouldBlock;
    };
    const StatusCode s = detail::await_any(not_empty_, ctx, attempt, taken);
    if (s != StatusCode::kOk) return s;
    if (!got) return StatusCode::kClosed;
    return std::move(*got);
  }

  // Pushes into whichever queue has room first; its index on kOk.
  Result<std::size_t> push(T&& item, const Context& ctx = {}) {
    if (!valid_) return invalid("bad queue list");
    for (Queue<T>* q : queues_) {
      if (q->policy() != OverflowPolicy::kBlock) {
        return invalid("push needs queues with the kBlock policy");
      }
    }
    if (ctx.stop_requested()) return StatusCode::kCancelled;
    const std::size_t n = queues_.size();
    const std::size_t start = next_start();
    std::vector<bool> closed_q(n, false);
    std::size_t index = 0;
    int taken = -1;
    bool pushed = false;
    auto attempt = [&] {
      std::size_t closed = 0;
      for (std::size_t k = 0; k < n; ++k) {
        const std::size_t i = (start + k) % n;
        if (closed_q[i]) {
          ++closed;
          continue;
        }
        const Status s = queues_[i]->try_push(std::move(item));  // moves only on kOk
        if (s.ok()) {
          pushed = true;
          index = i;
          taken = static_cast<int>(i);
          return detail::Attempt::kDone;
        }
        if (s.code() == StatusCode::kClosed) {
          closed_q[i] = true;
          ++closed;
        }
      }
      return closed == n ? detail::Attempt::kDone : detail::Attempt::kWouldBlock;
    };
    const StatusCode s = detail::await_any(not_full_, ctx, attempt, taken);
    if (s != StatusCode::kOk) return s;
    if (!pushed) return StatusCode::kClosed;
    return index;
  }

  std::size_t size() const noexcept { return queues_.size(); }

 private:
  explicit Selector(std::vector<Queue<T>*> queues) : queues_(std::move(queues)) {
    for (Queue<T>* q : queues_) {
      if (q == nullptr) continue;
      not_empty_.push_back(&q->not_empty_);
      not_full_.push_back(&q->not_full_);
    }
    if (not_empty_.size() != queues_.size()) valid_ = false;
  }
  static Status invalid(const std::string& why) {
    return {StatusCode::kInvalidArgument, "selector: " + why};
  }
  std::size_t next_start() noexcept {
    return cursor_.fetch_add(1, std::memory_order_relaxed) % queues_.size();
  }

  std::vector<Queue<T>*> queues_;
  std::vector<detail::WaitList*> not_empty_;
  std::vector<detail::WaitList*> not_full_;
  bool valid_ = true;
  std::atomic<std::size_t> cursor_{0};
};

}  // namespace sluice
