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

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

#include "sluice/detail/cpu.h"

namespace sluice::detail {

enum class RingOp : std::uint8_t { kOk, kWouldBlock, kClosed };

template <class T>
class Ring {
 public:
  explicit Ring(std::size_t capacity)
      : cap_(capacity),
        mark_(std::uint64_t{1} << bits_for(capacity)),
        one_lap_(mark_ << 1),
        lap_shift_(bits_for(capacity) + 1),
        rows_((capacity + kSlotsPerLine - 1) / kSlotsPerLine),
        slots_(new Slot[rows_ * kSlotsPerLine]) {
    for (std::size_t i = 0; i < capacity; ++i) slot(i).stamp.store(i, std::memory_order_relaxed);
  }
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  ~Ring() {
    std::uint64_t head = head_.load(std::memory_order_relaxed);
    const std::uint64_t tail = tail_.load(std::memory_order_relaxed) & ~mark_;
    while (head != tail) {
      slot(head & (mark_ - 1)).ptr()->~T();
      head = advance(head, 1);
    }
  }

  std::size_t capacity() const noexcept { return cap_; }

  // Moves `item` in on kOk only. On success *claimed is the tail after the push.
  RingOp try_push(T& item, std::uint64_t* claimed) noexcept {
    std::uint64_t tail = tail_.load(std::memory_order_relaxed);
    for (;;) {
      if ((tail & mark_) != 0) return RingOp::kClosed;
      Slot& sl = slot(tail & (mark_ - 1));
      const std::uint64_t stamp = sl.stamp.load(std::memory_order_seq_cst);
      if (stamp == tail) {
        const std::uint64_t next = advance(tail, 1);
        if (tail_.compare_exchange_weak(tail, next, std::memory_order_relaxed,
                                        std::memory_order_relaxed)) {
          ::new (sl.raw()) T(std::move(item));
          sl.stamp.store(tail + 1, std::memory_order_release);
          *claimed = next;
          return RingOp::kOk;
        }
      } else if (stamp + one_lap_ == tail + 1) {
        // The slot still holds last lap's item: full, or a pop is mid-way and
        // will wake us. Not spinning here keeps a preempted popper harmless.
        return RingOp::kWouldBlock;
      } else {
        spin_pause();  // another producer took this position; catch up
        tail = tail_.load(std::memory_order_relaxed);
      }
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
      while (k < n && slot(pos & (mark_ - 1)).stamp.load(std::memory_order_seq_cst) == pos) {
        ++k;
        pos = advance(pos, 1);
      }
      if (k == 0 || (all_or_none && k < n)) {
        // Stopped at `pos`: full (last lap's item still there), or our tail is stale.
        const std::uint64_t stamp = slot(pos & (mark_ - 1)).stamp.load(std::memory_order_seq_cst);
        if (stamp + one_lap_ == pos + 1) {
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
          Slot& sl = slot(p & (mark_ - 1));
          ::new (sl.raw()) T(std::move(items[i]));
          sl.stamp.store(p + 1, std::memory_order_release);
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
  RingOp try_pop(Sink&& sink, std::uint64_t* pos = nullptr) {
    std::uint64_t head = head_.load(std::memory_order_relaxed);
    for (;;) {
      Slot& sl = slot(head & (mark_ - 1));
      const std::uint64_t stamp = sl.stamp.load(std::memory_order_seq_cst);
      if (stamp == head + 1) {
        if (head_.compare_exchange_weak(head, advance(head, 1), std::memory_order_relaxed,
                                        std::memory_order_relaxed)) {
          T* p = sl.ptr();
          sink(std::move(*p));
          p->~T();
          sl.stamp.store(head + one_lap_, std::memory_order_release);
          if (pos != nullptr) *pos = count_of(head);
          return RingOp::kOk;
        }
      } else if (stamp == head) {
        // Empty, or a push is mid-way (it will wake us).
        return drained(head) ? RingOp::kClosed : RingOp::kWouldBlock;
      } else {
        spin_pause();
        head = head_.load(std::memory_order_relaxed);
      }
    }
  }

  // Pops up to max items in one claim into sink(T&&). Returns the count.
  template <class Sink>
  std::size_t try_pop_many(Sink&& sink, std::size_t max, RingOp* op) {
    std::uint64_t head = head_.load(std::memory_order_relaxed);
    for (;;) {
      std::size_t k = 0;
      std::uint64_t pos = head;
      while (k < max && slot(pos & (mark_ - 1)).stamp.load(std::memory_order_seq_cst) == pos + 1) {
        ++k;
        pos = advance(pos, 1);
      }
      if (k == 0) {
        const std::uint64_t stamp = slot(head & (mark_ - 1)).stamp.load(std::memory_order_seq_cst);
        if (stamp == head) {
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
          Slot& sl = slot(p & (mark_ - 1));
          T* item = sl.ptr();
          sink(std::move(*item));
          item->~T();
          sl.stamp.store(p + one_lap_, std::memory_order_release);
          p = advance(p, 1);
        }
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
  struct Slot {
    std::atomic<std::uint64_t> stamp{0};
    alignas(T) unsigned char storage[sizeof(T)];
    void* raw() noexcept { return storage; }
    T* ptr() noexcept { return std::launder(reinterpret_cast<T*>(storage)); }
  };

  // Consecutive positions go to different cache lines (as in atomic_queue,
  // but for any capacity): index i lives at column i % K, row i / K, where K
  // slots fill a line. A producer and a consumer a few positions apart then
  // never write the same line. Padding slots past `capacity` are never used.
  static constexpr std::size_t kSlotsPerLine =
      sizeof(Slot) < kCacheLine ? kCacheLine / sizeof(Slot) : 1;
  Slot& slot(std::uint64_t index) const noexcept {
    if constexpr (kSlotsPerLine == 1) {
      return slots_[index];
    } else {
      return slots_[(index % kSlotsPerLine) * rows_ + index / kSlotsPerLine];
    }
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
  const std::unique_ptr<Slot[]> slots_;

  // Producers' and consumers' words on separate lines (no false sharing).
  alignas(kCacheLine) std::atomic<std::uint64_t> tail_{0};
  alignas(kCacheLine) std::atomic<std::uint64_t> head_{0};
  // Set after the mark in tail_; lets readers skip tail_ until close.
  alignas(kCacheLine) std::atomic<bool> closed_{false};
  char pad_[kCacheLine - sizeof(std::atomic<bool>)];
};

}  // namespace sluice::detail
