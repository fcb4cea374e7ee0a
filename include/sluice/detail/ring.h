// Ring: the bounded, lock-free MPMC buffer under sluice::Queue (capacity >= 1).
//
// Design: Vyukov's bounded queue with crossbeam's stamp encoding, so the
// capacity need not be a power of two and no division is on the hot path.
// A stamp is (lap << lap_shift) | index. Slot i's stamp says what the slot
// waits for: == position p  -> free, ready for the push at p;
//            == p + 1       -> holds the item pushed at p, ready for the pop.
// tail_ also carries the close mark (bit mark_), so a push can never claim a
// position after close: close and the last push are ordered by one RMW word.
//
// Thread safety: all members may run concurrently, except construction and
//   destruction. Blocking: never; callers park on their own WaitLists.
// Ordering: a push's payload write happens-before the matching pop (release
//   store / acquire load of the stamp). Stamp loads and the close RMW are
//   seq_cst so that a waiter's enlist-then-recheck cannot miss a publish; the
//   publisher's side of that pattern is WaitList::publish_and_notify.
// Ownership: items are moved in on push and moved out on pop; items left at
//   destruction are destroyed.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <thread>
#include <type_traits>
#include <utility>

#include "sluice/detail/cpu.h"
#include "sluice/detail/wait_list.h"

namespace sluice::detail {

enum class RingOp : std::uint8_t { kOk, kWouldBlock, kClosed };

template <class T>
class Ring {
 public:
  static constexpr bool kSingleConsumer = false;  // producers may evict (pop) too

  explicit Ring(std::size_t capacity)
      : cap_(capacity),
        mark_(std::uint64_t{1} << bits_for(capacity)),
        one_lap_(mark_ << 1),
        lap_shift_(bits_for(capacity) + 1),
        rows_(rows_for(capacity)),
        slots_(kSplit ? nullptr : new Slot[rows_ * kSlotsPerLine]),
        stamp_lines_(kSplit ? new StampLine[rows_] : nullptr),
        cells_(kSplit ? static_cast<unsigned char*>(
                            ::operator new (capacity * sizeof(T), std::align_val_t{kCellAlign}))
                      : nullptr) {
    for (std::size_t i = 0; i < capacity; ++i) stamp(i).store(i, std::memory_order_relaxed);
  }
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  ~Ring() {
    std::uint64_t head = head_.load(std::memory_order_relaxed);
    const std::uint64_t tail = tail_.load(std::memory_order_relaxed) & ~mark_;
    while (head != tail) {
      item(head & (mark_ - 1))->~T();
      head = advance(head, 1);
    }
    if (cells_ != nullptr) ::operator delete (cells_, std::align_val_t{kCellAlign});
  }

  std::size_t capacity() const noexcept { return cap_; }

  // Moves `item` in on kOk only. On success *claimed is the tail after the push.
  RingOp try_push(T& item, std::uint64_t* claimed) noexcept {
    std::uint64_t tail = tail_.load(std::memory_order_relaxed);
    for (;;) {
      if ((tail & mark_) != 0) return RingOp::kClosed;
      const std::uint64_t index = tail & (mark_ - 1);
      const std::uint64_t st = stamp(index).load(std::memory_order_seq_cst);
      if (st == tail) {
        const std::uint64_t next = advance(tail, 1);
        if (tail_.compare_exchange_weak(tail, next, std::memory_order_relaxed,
                                        std::memory_order_relaxed)) {
          ::new (raw(index)) T(std::move(item));
          stamp(index).store(tail + 1, std::memory_order_release);
          *claimed = next;
          return RingOp::kOk;
        }
      } else if (st + one_lap_ == tail + 1) {
        // The slot still holds last lap's item: full, or a pop is mid-way and
        // will wake us. Not spinning here keeps a preempted popper harmless.
        return RingOp::kWouldBlock;
      } else {
        spin_pause();  // another producer took this position; catch up
        tail = tail_.load(std::memory_order_relaxed);
      }
    }
  }

  // As try_push, but a full ring does not refuse: the push claims the tail
  // first and then evicts the oldest items (destroyed here, counted in
  // *evicted) until its slot is free. Claiming first orders the push
  // before any close(): evict-then-push would let a close() between the two
  // fail the push after it had thrown away an item owed to the drain.
  // kClosed only before the claim, with nothing evicted. kWouldBlock, with
  // nothing claimed or evicted, while the item in our slot is being popped
  // (a pull held in the item's move could take any time: the caller waits,
  // parked and honouring its context, for the pull's wake-up). Otherwise
  // waits (spinning) for pops and pushes of older positions under way.
  RingOp try_push_evicting(T& item, std::uint64_t* claimed, std::uint64_t* evicted) noexcept {
    std::uint64_t tail = tail_.load(std::memory_order_relaxed);
    for (;;) {
      if ((tail & mark_) != 0) return RingOp::kClosed;
      const std::uint64_t index = tail & (mark_ - 1);
      const std::uint64_t st = stamp(index).load(std::memory_order_seq_cst);
      const bool full = st + one_lap_ == tail + 1;
      if (st != tail && !full) {
        spin_pause();  // another producer took this position; catch up
        tail = tail_.load(std::memory_order_relaxed);
        continue;
      }
      // Our slot's item (pushed at tail - one lap) already taken by a pop
      // that has not finished: do not claim a place we could not leave.
      if (full && head_.load(std::memory_order_seq_cst) > tail - one_lap_) {
        return RingOp::kWouldBlock;
      }
      const std::uint64_t next = advance(tail, 1);
      if (!tail_.compare_exchange_weak(tail, next, std::memory_order_relaxed,
                                       std::memory_order_relaxed)) {
        continue;
      }
      if (full) {
        // Our slot holds the item pushed one lap ago, at `prev`. Pops go in
        // position order, so everything up to `prev` must go: evict from the
        // head while it is at or before `prev` (other evicting pushes that
        // claimed before us may be doing the same; each eviction is of the
        // oldest item, one the order needs gone). Past `prev`: a consumer's
        // pop of our slot's item is under way; wait for its stamp.
        const std::uint64_t prev = tail - one_lap_;
        std::uint64_t mine = 0;  // evicted by this claim
        while (stamp(index).load(std::memory_order_acquire) != tail) {
          std::uint64_t head = head_.load(std::memory_order_relaxed);
          const std::uint64_t at = head & (mark_ - 1);
          if (head <= prev && stamp(at).load(std::memory_order_acquire) == head + 1 &&
              head_.compare_exchange_weak(head, advance(head, 1), std::memory_order_relaxed,
                                          std::memory_order_relaxed)) {
            this->item(at)->~T();  // `item` here is our parameter
            stamp(at).store(head + one_lap_, std::memory_order_release);
            ++*evicted;
            ++mine;
          } else {
            // A pop took our slot's item between our look and our claim:
            // give the place back if nobody claimed after us and we evicted
            // nothing for it (then the push never happened), and wait as
            // above. Otherwise we are bound to the place: spin.
            if (head > prev && mine == 0 && unclaim(tail, next)) return RingOp::kWouldBlock;
            spin_pause();
          }
        }
      }
      ::new (raw(index)) T(std::move(item));
      stamp(index).store(tail + 1, std::memory_order_release);
      *claimed = next;
      return RingOp::kOk;
    }
  }

  // Pushes up to n items from `items` (moving them) in one claim. Returns the
  // count pushed (0 with *op set to kWouldBlock or kClosed). With all_or_none,
  // pushes all n or none (n <= capacity): one CAS claims every slot, so close
  // cannot split the group.
  std::size_t try_push_many(T* items, std::size_t n, RingOp* op, std::uint64_t* claimed,
                            bool all_or_none = false) noexcept {
    std::uint64_t tail = tail_.load(std::memory_order_relaxed);
    for (;;) {
      if ((tail & mark_) != 0) {
        *op = RingOp::kClosed;
        return 0;
      }
      std::size_t k = 0;
      std::uint64_t pos = tail;
      while (k < n && stamp(pos & (mark_ - 1)).load(std::memory_order_seq_cst) == pos) {
        ++k;
        pos = advance(pos, 1);
      }
      if (k == 0 || (all_or_none && k < n)) {
        // Stopped at `pos`: full (last lap's item still there), or our tail is stale.
        const std::uint64_t st = stamp(pos & (mark_ - 1)).load(std::memory_order_seq_cst);
        if (st + one_lap_ == pos + 1) {
          *op = RingOp::kWouldBlock;
          return 0;
        }
        spin_pause();
        tail = tail_.load(std::memory_order_relaxed);
        continue;
      }
      if (tail_.compare_exchange_weak(tail, pos, std::memory_order_relaxed,
                                      std::memory_order_relaxed)) {
        std::uint64_t p = tail;
        for (std::size_t i = 0; i < k; ++i) {
          const std::uint64_t index = p & (mark_ - 1);
          ::new (raw(index)) T(std::move(items[i]));
          stamp(index).store(p + 1, std::memory_order_release);
          p = advance(p, 1);
        }
        *op = RingOp::kOk;
        *claimed = pos;
        return k;
      }
    }
  }

  // Moves the oldest item into sink(T&&) on kOk; *pos (if given) is set to
  // its position in pop order (0 for the first item ever popped).
  template <class Sink>
  RingOp try_pop(Sink&& sink, std::uint64_t* pos = nullptr, bool /*streaming*/ = false) {
    std::uint64_t head = head_.load(std::memory_order_relaxed);
    for (;;) {
      const std::uint64_t index = head & (mark_ - 1);
      const std::uint64_t st = stamp(index).load(std::memory_order_seq_cst);
      if (st == head + 1) {
        if (head_.compare_exchange_weak(head, advance(head, 1), std::memory_order_relaxed,
                                        std::memory_order_relaxed)) {
          T* p = item(index);
          sink(std::move(*p));
          p->~T();
          stamp(index).store(head + one_lap_, std::memory_order_release);
          if (pos != nullptr) *pos = count_of(head);
          return RingOp::kOk;
        }
      } else if (st == head) {
        // Empty, or a push is mid-way (it will wake us).
        return drained(head) ? RingOp::kClosed : RingOp::kWouldBlock;
      } else {
        spin_pause();
        head = head_.load(std::memory_order_relaxed);
      }
    }
  }

  // Pops up to max items in one claim into sink(T&&). Returns the count;
  // *pos (if given) is set to the first one's position in pop order (the
  // others follow it: one claim).
  template <class Sink>
  std::size_t try_pop_many(Sink&& sink, std::size_t max, RingOp* op,
                           std::uint64_t* pos_out = nullptr) {
    std::uint64_t head = head_.load(std::memory_order_relaxed);
    for (;;) {
      std::size_t k = 0;
      std::uint64_t pos = head;
      while (k < max && stamp(pos & (mark_ - 1)).load(std::memory_order_seq_cst) == pos + 1) {
        ++k;
        pos = advance(pos, 1);
      }
      if (k == 0) {
        const std::uint64_t st = stamp(head & (mark_ - 1)).load(std::memory_order_seq_cst);
        if (st == head) {
          *op = drained(head) ? RingOp::kClosed : RingOp::kWouldBlock;
          return 0;
        }
        spin_pause();
        head = head_.load(std::memory_order_relaxed);
        continue;
      }
      if (head_.compare_exchange_weak(head, pos, std::memory_order_relaxed,
                                      std::memory_order_relaxed)) {
        std::uint64_t p = head;
        for (std::size_t i = 0; i < k; ++i) {
          const std::uint64_t index = p & (mark_ - 1);
          T* it = item(index);
          sink(std::move(*it));
          it->~T();
          stamp(index).store(p + one_lap_, std::memory_order_release);
          p = advance(p, 1);
        }
        if (pos_out != nullptr) *pos_out = count_of(head);
        *op = RingOp::kOk;
        return k;
      }
    }
  }

  // Sets the close mark. Returns true for the call that set it.
  bool close() noexcept {
    const bool first = (tail_.fetch_or(mark_, std::memory_order_seq_cst) & mark_) == 0;
    closed_.store(true, std::memory_order_seq_cst);
    return first;
  }
  bool closed() const noexcept { return closed_.load(std::memory_order_seq_cst); }

  // Positions as item counts since construction.
  std::uint64_t pushed_count() const noexcept {
    return count_of(tail_.load(std::memory_order_acquire) & ~mark_);
  }
  std::uint64_t popped_count() const noexcept {
    return count_of(head_.load(std::memory_order_acquire));
  }
  std::uint64_t count_of(std::uint64_t stamp) const noexcept {
    return (stamp >> lap_shift_) * cap_ + (stamp & (mark_ - 1));
  }

 private:
  // Layout. An item that fits in a line with its stamp lives there (Slot):
  // one line per operation. A bigger one (kSplit) lives in an array of items
  // alone, back to back from a line boundary, and its stamp in a separate
  // array: a 64-byte item then fills exactly one line that no other position
  // shares. (Slots of stamp + 64 bytes straddled lines, so a pusher and a
  // popper one position apart wrote the same line.)
  struct Slot {
    std::atomic<std::uint64_t> stamp{0};
    alignas(T) unsigned char storage[sizeof(T)];
  };
  static constexpr bool kSplit = sizeof(Slot) > kCacheLine;
  static constexpr std::size_t kStampsPerLine = kCacheLine / sizeof(std::atomic<std::uint64_t>);
  struct alignas(kCacheLine) StampLine {
    std::atomic<std::uint64_t> stamp[kStampsPerLine];
  };
  static constexpr std::size_t kCellAlign = alignof(T) > kCacheLine ? alignof(T) : kCacheLine;

  // Consecutive positions' stamps go to different cache lines (as in
  // atomic_queue, but for any capacity): index i lives at column i % K, row
  // i / K, where K slots (or stamps) fill a line. A producer and a consumer a
  // few positions apart then never write the same line. Padding past
  // `capacity` is never used.
  static constexpr std::size_t kSlotsPerLine =
      kSplit ? kStampsPerLine : (sizeof(Slot) < kCacheLine ? kCacheLine / sizeof(Slot) : 1);
  static std::uint64_t rows_for(std::size_t cap) noexcept {
    const std::uint64_t rows = (cap + kSlotsPerLine - 1) / kSlotsPerLine;
    // Split stamps: each column starts a line, so columns never share one.
    return kSplit ? (rows + kStampsPerLine - 1) / kStampsPerLine * kStampsPerLine : rows;
  }
  std::uint64_t spread(std::uint64_t index) const noexcept {
    return kSlotsPerLine == 1 ? index : (index % kSlotsPerLine) * rows_ + index / kSlotsPerLine;
  }
  std::atomic<std::uint64_t>& stamp(std::uint64_t index) const noexcept {
    if constexpr (kSplit) {
      const std::uint64_t at = spread(index);
      return stamp_lines_[at / kStampsPerLine].stamp[at % kStampsPerLine];
    } else {
      return slots_[spread(index)].stamp;
    }
  }
  void* raw(std::uint64_t index) const noexcept {
    if constexpr (kSplit) {
      return cells_ + index * sizeof(T);
    } else {
      return slots_[spread(index)].storage;
    }
  }
  T* item(std::uint64_t index) const noexcept { return std::launder(static_cast<T*>(raw(index))); }

  // Undoes the claim of `tail` (tail_ moved it to `next`, maybe with the close
  // mark since) if tail_ is still there: no later claim depends on it.
  bool unclaim(std::uint64_t tail, std::uint64_t next) noexcept {
    std::uint64_t expected = next;
    if (tail_.compare_exchange_strong(expected, tail, std::memory_order_seq_cst)) return true;
    return expected == (next | mark_) &&
           tail_.compare_exchange_strong(expected, tail | mark_, std::memory_order_seq_cst);
  }

  // Closed, and every claimed position popped? Reads the producers' tail_
  // line only once closed_ (read-mostly, its own line) says so, so an empty
  // poll does not pull the producers' line away from them.
  bool drained(std::uint64_t head) const noexcept {
    if (!closed_.load(std::memory_order_seq_cst)) return false;
    return (tail_.load(std::memory_order_seq_cst) & ~mark_) == head;
  }

  static unsigned bits_for(std::size_t cap) noexcept {
    unsigned b = 0;
    while ((std::uint64_t{1} << b) < static_cast<std::uint64_t>(cap) + 1) ++b;
    return b;  // 2^b > cap - 1 holds every index
  }

  // Stamp n positions (n <= cap) after s, wrapping index into the next lap.
  std::uint64_t advance(std::uint64_t s, std::uint64_t n) const noexcept {
    const std::uint64_t index = (s & (mark_ - 1)) + n;
    const std::uint64_t lap = s & ~(one_lap_ - 1);
    return index < cap_ ? lap | index : (lap + one_lap_) | (index - cap_);
  }

  const std::uint64_t cap_;
  const std::uint64_t mark_;     // close bit in tail_, just above the index bits
  const std::uint64_t one_lap_;  // one lap in stamp units
  const unsigned lap_shift_;
  const std::uint64_t rows_;
  const std::unique_ptr<Slot[]> slots_;             // !kSplit
  const std::unique_ptr<StampLine[]> stamp_lines_;  // kSplit
  unsigned char* const cells_;                      // kSplit: capacity items, back to back

  // Producers' and consumers' words on separate pairs of lines (no false
  // sharing, also not through adjacent-line prefetchers).
  alignas(2 * kCacheLine) std::atomic<std::uint64_t> tail_{0};
  alignas(2 * kCacheLine) std::atomic<std::uint64_t> head_{0};
  // Set after the mark in tail_; lets readers skip tail_ until close.
  alignas(2 * kCacheLine) std::atomic<bool> closed_{false};
  char pad_[2 * kCacheLine - sizeof(std::atomic<bool>)];
};

// SpscRing: the buffer under SpscQueue, for one producer and one consumer
// (Lamport's ring with cached indices, as in rigtorp's SPSCQueue). Same
// interface as Ring.
//
// Design: tail_ (items pushed) is written only by the producer and head_
// (items popped) only by the consumer, each on its own line beside that
// side's private copy of the other's index. A push reads head_ only when its
// copy says full, a pop reads tail_ only when its copy says empty, so while
// both sides are busy each index line stays with its writer. No RMW, no
// fence: a push is a plain store of tail_ (release), a pop of head_. Items are
// contiguous, so consecutive pushes fill a cache line before taking the next.
// A consumer that keeps catching up with the producer would read each line
// while it is being written; a blocking pop slips behind instead (slip()).
// Close: a push attempt marks attempt_ odd on entry and even on exit (the
// numbers only rise, so no two attempts share one) and checks closing_ in
// between. close() sets closing_, runs heavy_fence() and waits out an attempt
// in progress, so a push either saw closing_ (kClosed) or is complete in
// tail_ before closed_ is set, and a pop that sees closed_ sees every
// accepted push.
//
// Thread safety: one thread at a time in the push calls and one in the pop
//   calls (a hand-off between threads needs a happens-before, e.g. a join);
//   close(), closed() and the counts from any thread.
// Blocking: never, except that close() waits for a push attempt already in
//   progress (never a waiting one: pushes wait outside the ring) to finish,
//   and a `streaming` pop may spin up to ~2.5 us while items keep arriving.
// Ordering: a push's item happens-before its pop (tail_ release / acquire),
//   and a pop's move-out happens-before the slot's reuse (head_ likewise).
//   The caller's notify check after a push or pop is WaitList's light side.
// Ownership: as Ring.
template <class T>
class SpscRing {
 public:
  static constexpr bool kSingleConsumer = true;  // no eviction by producers

  explicit SpscRing(std::size_t capacity)
      : cap_(capacity),
        cells_(static_cast<unsigned char*>(
            ::operator new (capacity * sizeof(T), std::align_val_t{kAlign}))) {}
  SpscRing(const SpscRing&) = delete;
  SpscRing& operator=(const SpscRing&) = delete;

  ~SpscRing() {
    std::uint64_t head = head_.load(std::memory_order_relaxed);
    const std::uint64_t tail = tail_.load(std::memory_order_relaxed);
    for (std::uint64_t i = head_index_; head != tail; ++head, i = next(i)) cell(i)->~T();
    ::operator delete (cells_, std::align_val_t{kAlign});
  }

  std::size_t capacity() const noexcept { return cap_; }

  // Moves `item` in on kOk only. On success *claimed is the tail after the push.
  SLUICE_ALWAYS_INLINE RingOp try_push(T& item, std::uint64_t* claimed) noexcept {
    const std::uint64_t tail = tail_.load(std::memory_order_relaxed);  // only we write it
    const std::uint64_t attempt = tail + failed_;                      // this attempt's number
    if (!enter_push(attempt)) return RingOp::kClosed;
    // Full by our copy of head_: only then read the consumer's line.
    if (tail - head_cache_ == cap_ && room(tail) == 0) {
      leave_failed(attempt);
      return RingOp::kWouldBlock;
    }
    const std::uint64_t index = tail_index_;  // in a register: the item's store may alias
    ::new (cell(index)) T(std::move(item));
    tail_index_ = next(index);
    tail_.store(tail + 1, std::memory_order_release);              // publishes the item
    attempt_.store(2 * (attempt + 1), std::memory_order_release);  // done (see leave_failed)
    *claimed = tail + 1;
    return RingOp::kOk;
  }

  // As Ring::try_push_many.
  std::size_t try_push_many(T* items, std::size_t n, RingOp* op, std::uint64_t* claimed,
                            bool all_or_none = false) noexcept {
    const std::uint64_t tail = tail_.load(std::memory_order_relaxed);
    const std::uint64_t attempt = tail + failed_;
    if (!enter_push(attempt)) {
      *op = RingOp::kClosed;
      return 0;
    }
    std::size_t k = cap_ - static_cast<std::size_t>(tail - head_cache_);
    if (k < n) k = room(tail);  // our copy is short: look at the real head_
    if (k > n) k = n;
    if (k == 0 || (all_or_none && k < n)) {
      leave_failed(attempt);
      *op = RingOp::kWouldBlock;
      return 0;
    }
    std::uint64_t i = tail_index_;
    for (std::size_t j = 0; j < k; ++j, i = next(i)) ::new (cell(i)) T(std::move(items[j]));
    tail_index_ = i;
    tail_.store(tail + k, std::memory_order_release);              // publishes all k at once
    attempt_.store(2 * (attempt + k), std::memory_order_release);  // done
    *op = RingOp::kOk;
    *claimed = tail + k;
    return k;
  }

  // Moves the oldest item into sink(T&&) on kOk; *pos (if given) is set to
  // its position in pop order. `streaming`: a blocking pop that has not
  // waited yet, which may let a busy producer get ahead first (slip()).
  template <class Sink>
  SLUICE_ALWAYS_INLINE RingOp try_pop(Sink&& sink, std::uint64_t* pos = nullptr,
                                      bool streaming = false) {
    const std::uint64_t head = head_.load(std::memory_order_relaxed);  // only we write it
    // Empty by our copy of tail_: only then read the producer's line.
    if (head == tail_cache_) {
      const std::size_t k = available(head);
      if (k == 0) return drained(head) ? RingOp::kClosed : RingOp::kWouldBlock;
      if (streaming && k < slip_) slip(head, k);
    }
    const std::uint64_t index = head_index_;  // in a register: the sink's stores may alias
    T* p = cell(index);
    sink(std::move(*p));
    p->~T();
    head_index_ = next(index);
    head_.store(head + 1, std::memory_order_release);  // the slot is the producer's again
    if (pos != nullptr) *pos = head;
    return RingOp::kOk;
  }

  // Pops up to max items into sink(T&&). Returns the count; *pos (if given)
  // is set to the first one's position in pop order.
  template <class Sink>
  std::size_t try_pop_many(Sink&& sink, std::size_t max, RingOp* op, std::uint64_t* pos = nullptr) {
    const std::uint64_t head = head_.load(std::memory_order_relaxed);
    std::size_t k = static_cast<std::size_t>(tail_cache_ - head);
    if (k < max) k = available(head);
    if (k == 0) {
      *op = drained(head) ? RingOp::kClosed : RingOp::kWouldBlock;
      return 0;
    }
    if (k > max) k = max;
    std::uint64_t i = head_index_;
    for (std::size_t j = 0; j < k; ++j, i = next(i)) {
      T* p = cell(i);
      sink(std::move(*p));
      p->~T();
    }
    head_index_ = i;
    head_.store(head + k, std::memory_order_release);  // frees all k slots at once
    if (pos != nullptr) *pos = head;
    *op = RingOp::kOk;
    return k;
  }

  // Refuses later pushes and waits for one in progress. Returns true for the
  // call that closed the ring.
  bool close() noexcept {
    const bool first = !closing_.exchange(true, std::memory_order_seq_cst);
    heavy_fence();  // an attempt that then misses closing_ shows up in attempt_
    const std::uint64_t seen = attempt_.load(std::memory_order_seq_cst);
    // Odd: wait for that attempt to end. Any later one will see closing_.
    if ((seen & 1) != 0) {
      while (attempt_.load(std::memory_order_acquire) == seen) std::this_thread::yield();
    }
    closed_.store(true, std::memory_order_seq_cst);  // every accepted push is in tail_
    return first;
  }
  bool closed() const noexcept { return closing_.load(std::memory_order_seq_cst); }

  std::uint64_t pushed_count() const noexcept { return tail_.load(std::memory_order_acquire); }
  std::uint64_t popped_count() const noexcept { return head_.load(std::memory_order_acquire); }
  std::uint64_t count_of(std::uint64_t claimed) const noexcept { return claimed; }

 private:
#if SLUICE_TSAN
  // TSan models neither fence: seq_cst store and load make the Dekker pair.
  static constexpr std::memory_order kEnterStore = std::memory_order_seq_cst;
#else
  // Release, so that close() reading a later attempt's number also sees the
  // tail_ store of the attempt it waited for (a plain store on x86).
  static constexpr std::memory_order kEnterStore = std::memory_order_release;
#endif
  static constexpr std::size_t kAlign = alignof(T) > kCacheLine ? alignof(T) : kCacheLine;
  static constexpr std::size_t kPairOfLines = 2 * kCacheLine;

  // Attempt numbers: tail_ + failed_ at entry. attempt_ is 2a + 1 while
  // attempt a runs; a success of k items ends it with 2(a + k), a failure
  // with 2(a + 1) and failed_ + 1. Either way the next attempt's number is
  // above, and the fast path keeps no counter of its own (no store-load
  // chain from one push to the next).
  // Start of attempt a: false if the ring is closing.
  bool enter_push(std::uint64_t a) noexcept {
    attempt_.store(2 * a + 1, kEnterStore);  // odd: in progress
    light_fence();  // attempt_ before closing_: close() pays the heavy side
    if (closing_.load(std::memory_order_seq_cst)) {
      leave_failed(a);
      return false;
    }
    return true;
  }
  // Release: close() reading an even attempt_ also sees our tail_ store.
  void leave_failed(std::uint64_t a) noexcept {
    ++failed_;
    attempt_.store(2 * (a + 1), std::memory_order_release);
  }

  // Free slots for the push at `tail`, after refreshing our copy of head_
  // (acquire: the consumer's move-out of a slot happens-before we reuse it).
  std::size_t room(std::uint64_t tail) noexcept {
    head_cache_ = head_.load(std::memory_order_acquire);
    return cap_ - static_cast<std::size_t>(tail - head_cache_);
  }
  // Temporal slipping (FastForward, Giacomoni et al., PPoPP 2008). A
  // consumer that keeps catching up with a busy producer reads each line of
  // items while the producer is still writing it, and reads tail_ every few
  // items: the two cores then pass the same lines back and forth for every
  // item. SpscQueue fell into that state in about half the runs on a 2-vCPU
  // VM and then ran 3x slower (and 0.5x boost's spsc_queue). So a blocking
  // pop that finds only k < slip_ items ready lets the producer get slip_
  // items ahead first: it looks again after gaps that double (4 pauses,
  // ~80 ns here, up to 64), at most kSlipLooks times (~2.5 us in all), and
  // stops at the first gap in which no item arrived. A producer that pushed
  // a few items and stopped costs the pop one ~80 ns gap; a pop that had to
  // wait for its item does not slip at all (try_pop's `streaming` is false
  // then), so a request/response round trip is not slowed.
  static constexpr int kSlipFirstGap = 4;  // pauses
  static constexpr int kSlipLooks = 5;
  SLUICE_NOINLINE void slip(std::uint64_t head, std::size_t k) noexcept {
    int gap = kSlipFirstGap;
    for (int look = 0; look < kSlipLooks; ++look, gap *= 2) {
      for (int i = 0; i < gap; ++i) spin_pause();
      const std::size_t now = available(head);
      if (now == k || now >= slip_) return;
      k = now;
    }
  }
  // Items ready for the pop at `head`, after refreshing our copy of tail_
  // (acquire: the items' construction happens-before we read them).
  std::size_t available(std::uint64_t head) noexcept {
    tail_cache_ = tail_.load(std::memory_order_acquire);
    return static_cast<std::size_t>(tail_cache_ - head);
  }

  // Closed, and every accepted push popped? closed_ is set only once no push
  // can still land, so tail_ read after it is final.
  bool drained(std::uint64_t head) const noexcept {
    return closed_.load(std::memory_order_acquire) && tail_.load(std::memory_order_acquire) == head;
  }

  T* cell(std::uint64_t index) const noexcept {
    return std::launder(reinterpret_cast<T*>(cells_ + index * sizeof(T)));
  }
  std::uint64_t next(std::uint64_t index) const noexcept {
    return index + 1 == cap_ ? 0 : index + 1;  // no division on the hot path
  }

  const std::uint64_t cap_;
  unsigned char* const cells_;  // cap_ items, back to back
  // How far ahead slip() lets the producer get: 512 bytes of items (eight
  // lines; four were not enough), at most half the ring.
  const std::size_t slip_ =
      std::min<std::size_t>(cap_ / 2, std::max<std::size_t>(1, 512 / sizeof(T)));

  // Four groups, each alone on its pair of lines (adjacent-line prefetchers
  // move lines in pairs): what each side publishes, and what each side
  // keeps for itself. A private group is never read by the other side, so
  // writing it every push or pop never sends a line across. (tail_index_ and
  // attempt_ beside tail_ cost 2.5x throughput with the two sides pinned
  // apart: the consumer's polls of tail_ took the line before each store.)
  // Written by the producer once per push; read by the consumer when its
  // copy runs out.
  alignas(kPairOfLines) std::atomic<std::uint64_t> tail_{0};
  // The producer's own; attempt_ is read by close() only.
  alignas(kPairOfLines) std::uint64_t tail_index_ = 0;  // tail_ % cap_
  std::uint64_t head_cache_ = 0;                        // head_ as last read; <= head_
  std::uint64_t failed_ = 0;                            // push attempts that moved nothing
  std::atomic<std::uint64_t> attempt_{0};               // odd while a push attempt runs
  // Written by the consumer once per pop; read by the producer when full.
  alignas(kPairOfLines) std::atomic<std::uint64_t> head_{0};
  // The consumer's own.
  alignas(kPairOfLines) std::uint64_t head_index_ = 0;  // head_ % cap_
  std::uint64_t tail_cache_ = 0;                        // tail_ as last read; <= tail_
  // Read on every push, written once.
  alignas(kPairOfLines) std::atomic<bool> closing_{false};
  std::atomic<bool> closed_{false};  // set after closing_, once no push is in progress
  char pad_[kPairOfLines - 2 * sizeof(std::atomic<bool>)];
};

}  // namespace sluice::detail
