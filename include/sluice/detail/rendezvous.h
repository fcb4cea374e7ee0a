// Rendezvous: the capacity-0 form of sluice::Queue. A push completes only when
// a pull takes its item, directly from the pusher's object.
//
// Thread safety: all members may run concurrently (one mutex; no allocation).
// Blocking: push/pull with wait=true park until matched, closed, cancelled or
//   past the deadline; wait=false never parks.
// Cancellation race: a matched pusher's item was moved out under the mutex
//   before it could withdraw, so a push is either taken (kOk) or withdrawn
//   (kCancelled/kDeadlineExceeded/kClosed, item untouched): never both.
// Ownership: waiting nodes live on their threads' stacks; a node is touched by
//   others only under mu_, and its owner takes mu_ before leaving.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <utility>

#include "sluice/context.h"
#include "sluice/detail/wait_list.h"

namespace sluice::detail {

template <class T>
class Rendezvous {
 public:
  // Hands `item` to a waiting puller, or (wait) waits for one.
  StatusCode push(T& item, const Context* ctx) {
    std::unique_lock lock(mu_);
    if (closed_) return StatusCode::kClosed;
    if (Node* p = pullers_.pop()) {
      p->out->emplace(std::move(item));
      finish(*p, kTaken);
      ++handoffs_;
      return StatusCode::kOk;
    }
    if (ctx == nullptr) return StatusCode::kWouldBlock;
    Node self;
    self.item = &item;
    pushers_.push(&self);
    return wait(self, lock, *ctx, pushers_);
  }

  // Takes an item from a waiting pusher, or (wait) waits for one.
  StatusCode pull(std::optional<T>& out, const Context* ctx) {
    std::unique_lock lock(mu_);
    if (Node* p = pushers_.pop()) {
      out.emplace(std::move(*p->item));
      finish(*p, kTaken);
      ++handoffs_;
      return StatusCode::kOk;
    }
    if (closed_) return StatusCode::kClosed;
    if (ctx == nullptr) return StatusCode::kWouldBlock;
    Node self;
    self.out = &out;
    pullers_.push(&self);
    return wait(self, lock, *ctx, pullers_);
  }

  bool close() {
    std::lock_guard lock(mu_);
    if (closed_) return false;
    closed_ = true;
    while (Node* n = pushers_.pop()) finish(*n, kClosedOut);
    while (Node* n = pullers_.pop()) finish(*n, kClosedOut);
    return true;
  }

  bool closed() const {
    std::lock_guard lock(mu_);
    return closed_;
  }
  // Threads waiting now, as (pushers, pullers).
  std::pair<std::uint64_t, std::uint64_t> waiting() const {
    std::lock_guard lock(mu_);
    return {pushers_.size, pullers_.size};
  }
  std::uint64_t handoffs() const {
    std::lock_guard lock(mu_);
    return handoffs_;
  }

 private:
  enum : std::uint8_t { kWaiting, kTaken, kClosedOut };

  struct Node {
    Waiter waiter;
    T* item = nullptr;                // pusher's item
    std::optional<T>* out = nullptr;  // puller's destination
    std::uint8_t state = kWaiting;    // guarded by mu_
    Node* next = nullptr;
    Node* prev = nullptr;
  };

  // FIFO of waiting nodes; intrusive so that waiting allocates nothing.
  struct List {
    Node* head = nullptr;
    Node* tail = nullptr;
    std::uint64_t size = 0;
    void push(Node* n) {
      ++size;
      n->prev = tail;
      n->next = nullptr;
      (tail != nullptr ? tail->next : head) = n;
      tail = n;
    }
    Node* pop() {
      Node* n = head;
      if (n != nullptr) remove(n);
      return n;
    }
    void remove(Node* n) {
      --size;
      (n->prev != nullptr ? n->prev->next : head) = n->next;
      (n->next != nullptr ? n->next->prev : tail) = n->prev;
      n->next = n->prev = nullptr;
    }
  };

  static void finish(Node& n, std::uint8_t state) {
    n.state = state;
    WaitList::wake(n.waiter);  // under mu_, which n's owner takes before leaving
  }

  StatusCode wait(Node& self, std::unique_lock<std::mutex>& lock, const Context& ctx, List& list) {
    for (;;) {
      lock.unlock();
      WaitList::park(self.waiter, ctx);
      lock.lock();
      if (self.state == kTaken) return StatusCode::kOk;
      if (self.state == kClosedOut) return StatusCode::kClosed;
      if (StatusCode e = ctx.err(); e != StatusCode::kOk) {
        list.remove(&self);
        return e;
      }
      self.waiter.word.store(0, std::memory_order_relaxed);  // spurious wake: park again
    }
  }

  mutable std::mutex mu_;
  List pushers_;
  List pullers_;
  bool closed_ = false;
  std::uint64_t handoffs_ = 0;
};

}  // namespace sluice::detail
