// WaitList: where threads blocked on one condition ("queue not empty", "queue
// not full") park, so that a notifier wakes exactly as many of them as it has
// made progress possible for, and a cancelled waiter wakes alone.
//
// Thread safety: all members may be called concurrently.
// Blocking: park() sleeps in the kernel (futex) until notified, until the
//   context's stop token fires, or until its deadline; notify_* never block
//   on anything but the list's short internal mutex.
// Ordering: Dekker's pattern. A waiter enlists (seq_cst RMW) and re-checks
//   its condition; a notifier makes the condition true and then reads the
//   waiter count, with light_fence() (or a seq_cst RMW/store) between the
//   two. With a light fence both may miss each other, so await() sleeps only
//   briefly after enlisting, then runs heavy_fence() and re-checks before it
//   sleeps for good: no wake-up is lost; one may come up to kRaceBound late.
//   See light_fence() for why the cost sits on the waiter.
// Cancellation: a stop callback wakes only the waiter it belongs to.
// Ownership: Waiter objects live on the waiting thread's stack; a notifier
//   touches a Waiter only under mu_, and a waiter always delists under mu_
//   before its Waiter dies, so no notifier can touch a dead Waiter.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <thread>

#include "sluice/context.h"
#include "sluice/detail/cpu.h"

namespace sluice::detail {

// ---- Asymmetric store-load barrier ----
// Dekker's pattern needs a store-load barrier on both sides. On the hot side
// (a push or pull that must check for sleepers) a fence is costly: it waits
// until the store it orders owns its cache line, which the other side often
// holds. So the hot side runs light_fence(), a compiler barrier only, and the
// rare side (a waiter not woken within kRaceBound, or SpscQueue's close) runs
// heavy_fence(): membarrier(2), which makes every CPU running one of our
// threads execute a full barrier. Either the hot side's load runs after that barrier (and sees
// the rare side's store), or its store ran before it (and is visible to the
// rare side's load after the call). Where membarrier is missing (old kernel,
// seccomp), both sides use a seq_cst fence. Under TSan both are no-ops and
// callers use seq_cst RMWs/stores instead (TSan models neither).
inline std::atomic<int> g_fence_mode{0};  // 0: not yet known; 1: membarrier; 2: fences
int init_fence_mode() noexcept;           // registers with membarrier; returns 1 or 2

inline bool asymmetric_fences() noexcept {
  const int mode = g_fence_mode.load(std::memory_order_relaxed);  // same answer for every thread
  return (mode != 0 ? mode : init_fence_mode()) == 1;
}

// The hot side: orders this thread's earlier stores before its later loads,
// given that the other side runs heavy_fence().
inline void light_fence() noexcept {
#if !SLUICE_TSAN
  if (asymmetric_fences()) {
    std::atomic_signal_fence(std::memory_order_seq_cst);  // the compiler must not reorder
  } else {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
#endif
}

// The rare side: a full barrier on every CPU running this process's threads.
// A system call: 2-5 us, ~70 us on this VM when it must interrupt a busy CPU.
void heavy_fence() noexcept;

struct Waiter {
  // 0: parked; 1: notified; 2: woken by its stop token. The futex word.
  std::atomic<std::uint32_t> word{0};
  Waiter* prev = nullptr;
  Waiter* next = nullptr;
  bool linked = false;  // guarded by the owning WaitList's mutex
  // A thread waiting on several lists at once (await_any) enlists one Waiter
  // in each, all pointing at the first one's word: whichever list notifies
  // wakes the one thread. Null: this Waiter's own word.
  Waiter* shared = nullptr;
  // How much of the condition it needs (a group push: its size). A group
  // woken for less passes the wake-up to a waiter needing less.
  std::size_t need = 1;

  std::atomic<std::uint32_t>& futex_word() noexcept {
    return shared != nullptr ? shared->word : word;
  }
};

class WaitList {
 public:
  WaitList() = default;
  WaitList(const WaitList&) = delete;
  WaitList& operator=(const WaitList&) = delete;

  bool has_waiters() const noexcept { return count_.load(std::memory_order_seq_cst) != 0; }
  std::uint32_t waiters() const noexcept { return count_.load(std::memory_order_relaxed); }

  // Registers w (FIFO). Call before re-checking the condition.
  void enlist(Waiter& w);
  // Removes w if it is still listed. Returns false if a notifier already took it
  // (that notification is then the caller's to use or to pass on).
  bool delist(Waiter& w);

  void notify_one() {
    if (has_waiters()) notify_slow(1);
  }
  void notify(std::size_t n) {
    if (n != 0 && has_waiters()) notify_slow(n);
  }
  // For a notifier that made the condition true with plain release stores:
  // orders those stores before the waiter check (the store-load barrier of
  // Dekker's pattern), then wakes up to n waiters. When nobody sleeps this is
  // one load of a line that only enlisting waiters write: no fence, no RMW.
  void publish_and_notify(std::size_t n) {
#if SLUICE_TSAN
    // TSan cannot model fences; an RMW on count_ gives the same guarantee (the
    // waiter's enlist RMW either precedes it, or reads from it and so sees our
    // stores). Costs a shared-line RMW, so only under TSan.
    if (count_.fetch_add(0, std::memory_order_seq_cst) != 0) notify_slow(n);
#else
    light_fence();  // our stores before the count check; enlist() pays the heavy side
    if (count_.load(std::memory_order_relaxed) != 0) notify_slow(n);
#endif
  }
  void notify_all() {
    if (has_waiters()) notify_slow((std::numeric_limits<std::size_t>::max)());
  }
  // Wakes the first waiter (FIFO) that needs less than `need`, if any: a
  // group waiter's hand-on of a wake-up it could not use. Strictly less, so
  // hand-ons end (two groups never pass one wake-up back and forth).
  void notify_first_below(std::size_t need);

  // Sets w's word to `value` and wakes its thread. The caller must keep w
  // alive for the call (e.g. by holding the lock its owner takes before leaving).
  static void wake(Waiter& w, std::uint32_t value = 1);

  // Sleeps until w is notified, ctx's token stops, or ctx's deadline (or
  // `until`, if given) passes. May return spuriously; callers re-check their
  // condition.
  static void park(Waiter& w, const Context& ctx,
                   const Context::Clock::time_point* until = nullptr);

 private:
  void notify_slow(std::size_t n);
  // With mu_ held: takes w (listed) out; and wakes it.
  void unlink_locked(Waiter& w);
  void notify_locked(Waiter& w);

  std::atomic<std::uint32_t> count_{0};
  std::mutex mu_;
  Waiter* head_ = nullptr;
  Waiter* tail_ = nullptr;
};

enum class Attempt : std::uint8_t { kDone, kWouldBlock };

// Spin phase before parking: a few pauses (a partner on another core answers
// within ~1 us), then yields for a bounded time, 10 us unless SLUICE_YIELD_NS
// says otherwise (a partner that shares our core gets to run), then park.
// Bounded by time, not count: 240 yields stole so much CPU from compute
// threads sharing the cores that a 2-worker stage scaled 1.07x, not 1.9x.
inline constexpr int kSpinPauses = 16;
// How long a newly parked waiter sleeps before it runs heavy_fence() and
// looks again. Only a notifier that raced with the enlist (each missed the
// other's store) and whose store then stayed unseen past kSettle leaves it
// asleep that long; any other notifier wakes it at once. A waiter woken
// earlier never pays for the fence: on this VM a membarrier that must
// interrupt the other CPU took ~70 us, and paying it on every park cost
// pinned SPSC a third of its throughput. 1 ms, not 50 us: pipeline threads
// that wait 50 us-1 ms between batches paid one per wait (a Stage of one
// worker at 20 us an item: ~1.2 per batch of 8, 22.7 -> 21.3 us an item).
inline constexpr std::chrono::microseconds kRaceBound{1000};
// How long a newly enlisted waiter keeps looking before that brief sleep.
inline constexpr std::chrono::microseconds kSettle{2};
inline std::chrono::nanoseconds yield_budget() {
  static const std::chrono::nanoseconds budget = [] {
    const char* e = std::getenv("SLUICE_YIELD_NS");
    return std::chrono::nanoseconds(e != nullptr ? std::atoll(e) : 10000);
  }();
  return budget;
}

// Runs `attempt` until it stops returning kWouldBlock: first a short spin,
// then parking on `wl`. Returns kOk when attempt returned kDone, otherwise the
// context's error. A stop already requested at entry is the caller's to check.
// `need` > 1: a group waiter (see Waiter::need); woken for room it cannot
// use, it hands the wake-up on before it waits again.
template <class F>
StatusCode await(WaitList& wl, const Context& ctx, F&& attempt, std::size_t need = 1) {
  for (int i = 0; i < kSpinPauses; ++i) {
    if (attempt() == Attempt::kDone) return StatusCode::kOk;
    spin_pause();
  }
  const auto yield_until = std::chrono::steady_clock::now() + yield_budget();
  for (;;) {
    // Also after the last yield: it may have lasted a time slice, and the
    // partner ran meanwhile. Parking costs system calls.
    if (attempt() == Attempt::kDone) return StatusCode::kOk;
    if (std::chrono::steady_clock::now() >= yield_until) break;
    std::this_thread::yield();
  }
  for (;;) {
    if (StatusCode e = ctx.err(); e != StatusCode::kOk) return e;
    Waiter w;
    w.need = need;
    wl.enlist(w);
    if (attempt() == Attempt::kDone) {
      // A notification we may have absorbed was meant for someone: pass it on.
      if (!wl.delist(w)) wl.notify_one();
      return StatusCode::kOk;
    }
    if (asymmetric_fences()) {
      // A notifier that raced with the enlist has its store in flight; it
      // lands within a microsecond unless that thread is descheduled (which
      // drains it too). Wait that long (on our own word: a notifier that saw
      // us ends it at once), then look once more: without this, such races
      // cost the round trip a 50 us p99. Looking on every pause instead
      // re-read the other side's line and slowed it.
      const auto settle_until = std::chrono::steady_clock::now() + kSettle;
      while (w.word.load(std::memory_order_acquire) == 0 &&
             std::chrono::steady_clock::now() < settle_until) {
        spin_pause();
      }
      if (attempt() == Attempt::kDone) {
        if (!wl.delist(w)) wl.notify_one();
        return StatusCode::kOk;
      }
      const auto brief = std::chrono::steady_clock::now() + kRaceBound;
      WaitList::park(w, ctx, &brief);
      if (w.word.load(std::memory_order_acquire) == 0 && ctx.err() == StatusCode::kOk) {
        // Not woken: perhaps a notifier read the count before our enlist
        // and we re-checked before its store landed. The fence settles it.
        heavy_fence();
        if (attempt() == Attempt::kDone) {
          if (!wl.delist(w)) wl.notify_one();
          return StatusCode::kOk;
        }
        WaitList::park(w, ctx);
      }
    } else {
      WaitList::park(w, ctx);  // notifiers fence (or RMW): there is no race to settle
    }
    const bool notified = !wl.delist(w);
    if (StatusCode e = ctx.err(); e != StatusCode::kOk) {
      if (notified) wl.notify_one();
      return e;
    }
    if (attempt() == Attempt::kDone) return StatusCode::kOk;
    // Woken for room a group cannot use (one slot, it needs more): the
    // wake-up was someone's behind it, e.g. a single push, which would
    // otherwise wait with a slot free until the next pull.
    if (notified && need > 1) wl.notify_first_below(need);
  }
}

// await() over several lists: runs `attempt` until it returns kDone, parked
// on every list in `lists` at once between tries. `attempt` sets *taken to
// the index of the list whose condition it consumed (or leaves it -1 for an
// outcome that consumed none, e.g. all closed). Same spin, settle and fence
// protocol as await(), and the same rule for notifications: one that may
// have come after a look (while still listed) is passed on, whatever the
// look found, since it was meant for a later item; one received before a
// look that took from another list is passed on; one received before a look
// that found nothing is not (passing those on made two idle selectors
// bounce a wake-up between them). So after a park it delists from every
// list before its look, as await() does: a notification then cannot land
// between the look and the delist, where it would be lost.
template <class F>
StatusCode await_any(std::span<WaitList* const> lists, const Context& ctx, F&& attempt,
                     const int& taken) {
  for (int i = 0; i < kSpinPauses; ++i) {
    if (attempt() == Attempt::kDone) return StatusCode::kOk;
    spin_pause();
  }
  const auto yield_until = std::chrono::steady_clock::now() + yield_budget();
  for (;;) {
    if (attempt() == Attempt::kDone) return StatusCode::kOk;
    if (std::chrono::steady_clock::now() >= yield_until) break;
    std::this_thread::yield();
  }
  const std::size_t n = lists.size();
  std::unique_ptr<Waiter[]> ws(new Waiter[n]);
  for (std::size_t i = 1; i < n; ++i) ws[i].shared = &ws[0];
  std::unique_ptr<bool[]> notified(new bool[n]());
  Waiter& head = ws[0];
  // Off every list; notified[i]: list i's notification came to us.
  auto delist_all = [&] {
    for (std::size_t i = 0; i < n; ++i) notified[i] = !lists[i]->delist(ws[i]);
  };
  // Passes on the notifications received, except list `used`'s.
  auto pass_on = [&](int used) {
    for (std::size_t i = 0; i < n; ++i) {
      if (notified[i] && used != static_cast<int>(i)) lists[i]->notify_one();
    }
  };
  // After a look made while listed: any notification may have come after it.
  auto leave = [&] {
    delist_all();
    pass_on(-1);
  };
  for (;;) {
    if (StatusCode e = ctx.err(); e != StatusCode::kOk) return e;
    head.word.store(0, std::memory_order_relaxed);
    for (std::size_t i = 0; i < n; ++i) lists[i]->enlist(ws[i]);
    if (attempt() == Attempt::kDone) {
      leave();
      return StatusCode::kOk;
    }
    if (asymmetric_fences()) {
      const auto settle_until = std::chrono::steady_clock::now() + kSettle;
      while (head.word.load(std::memory_order_acquire) == 0 &&
             std::chrono::steady_clock::now() < settle_until) {
        spin_pause();
      }
      // Notified during the settle: look after delisting, as after a park
      // (below), so that a notification used for the item taken is not
      // passed on as a spurious wake-up.
      if (head.word.load(std::memory_order_acquire) == 0) {
        if (attempt() == Attempt::kDone) {
          leave();
          return StatusCode::kOk;
        }
        const auto brief = std::chrono::steady_clock::now() + kRaceBound;
        WaitList::park(head, ctx, &brief);
        if (head.word.load(std::memory_order_acquire) == 0 && ctx.err() == StatusCode::kOk) {
          heavy_fence();
          if (attempt() == Attempt::kDone) {
            leave();
            return StatusCode::kOk;
          }
          WaitList::park(head, ctx);
        }
      }
    } else {
      WaitList::park(head, ctx);
    }
    delist_all();  // before the look: nothing can come after it unseen
    if (StatusCode e = ctx.err(); e != StatusCode::kOk) {
      pass_on(-1);
      return e;
    }
    if (attempt() == Attempt::kDone) {
      pass_on(taken);
      return StatusCode::kOk;
    }
    // Nothing to take: whatever woke us was consumed by someone else (as in
    // await(), a wake-up found unusable is not passed on; passing it on made
    // two idle selectors bounce it between them).
  }
}

}  // namespace sluice::detail
