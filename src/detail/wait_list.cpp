#include "sluice/detail/wait_list.h"

#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <stop_token>

namespace sluice::detail {
namespace {

void futex_wake(std::atomic<std::uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE_PRIVATE, 1, nullptr,
          nullptr, 0);
}

// Waits while *word == expected, until an absolute CLOCK_MONOTONIC deadline
// (steady_clock is CLOCK_MONOTONIC on Linux), or forever when deadline is null.
void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                const Context::Clock::time_point* deadline) {
  timespec ts{};
  const timespec* tsp = nullptr;
  if (deadline != nullptr) {
    const auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(deadline->time_since_epoch()).count();
    ts.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
    ts.tv_nsec = static_cast<long>(ns % 1'000'000'000);
    tsp = &ts;
  }
  // FUTEX_WAIT_BITSET takes an absolute timeout, so spurious returns do not stretch the wait.
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT_BITSET_PRIVATE, expected,
          tsp, nullptr, FUTEX_BITSET_MATCH_ANY);
}

struct WakeOnStop {
  Waiter* w;
  void operator()() const noexcept {
    w->futex_word().store(2, std::memory_order_release);
    futex_wake(&w->futex_word());
  }
};

[[maybe_unused]] long membarrier(int cmd) { return syscall(SYS_membarrier, cmd, 0U, 0); }

}  // namespace

int init_fence_mode() noexcept {
  int mode = 2;
#if !SLUICE_TSAN
  // SLUICE_MEMBARRIER=0 keeps plain fences (to compare, or where the
  // interprocessor interrupts of membarrier are unwelcome).
  const char* env = std::getenv("SLUICE_MEMBARRIER");
  const bool allowed = env == nullptr || std::strcmp(env, "0") != 0;
  const long cmds = allowed ? membarrier(MEMBARRIER_CMD_QUERY) : 0;
  if (cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0 &&
      membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0) {
    mode = 1;
  }
#endif
  // Racing initialisers compute the same mode. Registration happens before
  // the store, so a heavy_fence() that reads 1 may use the command.
  g_fence_mode.store(mode, std::memory_order_relaxed);
  return mode;
}

void heavy_fence() noexcept {
#if !SLUICE_TSAN
  if (!asymmetric_fences()) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return;
  }
  if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return;
  // A fork()ed child starts unregistered (the registration belongs to the
  // address space). Register again; anything else means the light sides are
  // unprotected, and continuing could lose wake-ups silently.
  if (errno == EPERM && membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0 &&
      membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) {
    return;
  }
  std::abort();
#endif
}

void WaitList::enlist(Waiter& w) {
  {
    std::lock_guard lock(mu_);
    w.prev = tail_;
    w.next = nullptr;
    if (tail_ != nullptr) {
      tail_->next = &w;
    } else {
      head_ = &w;
    }
    tail_ = &w;
    w.linked = true;
    count_.fetch_add(1, std::memory_order_seq_cst);  // Dekker: before the caller's re-check
  }
}

bool WaitList::delist(Waiter& w) {
  std::lock_guard lock(mu_);
  if (!w.linked) return false;
  unlink_locked(w);
  return true;
}

void WaitList::unlink_locked(Waiter& w) {
  (w.prev != nullptr ? w.prev->next : head_) = w.next;
  (w.next != nullptr ? w.next->prev : tail_) = w.prev;
  w.linked = false;
  count_.fetch_sub(1, std::memory_order_relaxed);
}

void WaitList::notify_locked(Waiter& w) {
  unlink_locked(w);
  std::atomic<std::uint32_t>& word = w.futex_word();
  word.store(1, std::memory_order_release);
  futex_wake(&word);  // under mu_: the waiter's delist() waits for us, so w is alive
}

void WaitList::notify_slow(std::size_t n) {
  std::lock_guard lock(mu_);
  while (n-- > 0 && head_ != nullptr) notify_locked(*head_);
}

void WaitList::notify_first_below(std::size_t need) {
  if (!has_waiters()) return;
  std::lock_guard lock(mu_);
  for (Waiter* w = head_; w != nullptr; w = w->next) {
    if (w->need < need) {
      notify_locked(*w);
      return;
    }
  }
}

void WaitList::wake(Waiter& w, std::uint32_t value) {
  w.futex_word().store(value, std::memory_order_release);
  futex_wake(&w.futex_word());
}

void WaitList::park(Waiter& w, const Context& ctx, const Context::Clock::time_point* until) {
  const auto* deadline = ctx.deadline() ? &*ctx.deadline() : nullptr;
  if (until != nullptr && (deadline == nullptr || *until < *deadline)) deadline = until;
  if (ctx.token().stop_possible()) {
    std::stop_callback<WakeOnStop> on_stop(ctx.token(), WakeOnStop{&w});
    if (w.word.load(std::memory_order_acquire) == 0) futex_wait(&w.word, 0, deadline);
  } else {
    if (w.word.load(std::memory_order_acquire) == 0) futex_wait(&w.word, 0, deadline);
  }
}

}  // namespace sluice::detail
