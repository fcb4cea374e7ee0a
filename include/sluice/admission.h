// Admission: one bound on the items in flight across a whole pipeline,
// whatever its stages' own capacities. The aggregate a pipeline holds is the
// sum of its queues and workers (push-pull-queue.md); when total memory must
// be capped, the source takes a Permit per item and the item carries it to
// the sink. A Permit gives its place back when destroyed, so an item a stage
// fails, a queue drops or a cancelled pipeline discards frees its place with
// no bookkeeping: the bound cannot leak and cannot deadlock on a failure.
//
//   sluice::Admission admit(64);
//   auto p = admit.acquire(ctx);                // waits while 64 are in flight
//   input.push(sluice::Admitted<Job>{std::move(*p), job}, ctx);
//   ... Stage<Admitted<Job>, Admitted<Out>>::create(input, sluice::carry_permit(fn), ...)
//   ... the sink lets the Admitted<Out> go: its place is free again.
//
// run_pipeline takes one too (PipelineOptions::admission).
//
// Thread safety: every member may be called from any thread; a Permit from
//   one thread at a time (it is a move-only value).
// Blocking: acquire waits while `bound` permits are out, parked (no CPU),
//   until one is released or its Context ends; try_acquire never waits.
// Ordering: none among waiters: a released place goes to whichever waiter
//   wakes first (no FIFO hand-off: it would cost a wake-up per release).
// Cancellation: as Queue's. A stop requested before acquire returns
//   kCancelled holding nothing, even with a place free; a stop or deadline
//   while waiting returns kCancelled / kDeadlineExceeded holding nothing. A
//   deadline only bounds waiting: a place free now is taken even if the
//   deadline has passed (docs/design.md, "Cancellation at entry").
// Ownership: the Admission must outlive its Permits.
// Errors: kInvalidArgument for a bound of 0 (create), kWouldBlock from
//   try_acquire when full.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "sluice/context.h"
#include "sluice/detail/cv_wait.h"
#include "sluice/status.h"

namespace sluice {

class Admission;

// One place under an Admission bound, released when destroyed (or by
// release()). Empty when default-constructed or moved from.
class [[nodiscard]] Permit {
 public:
  Permit() = default;
  Permit(Permit&& o) noexcept : owner_(std::exchange(o.owner_, nullptr)) {}
  Permit& operator=(Permit&& o) noexcept {
    if (this != &o) {
      release();
      owner_ = std::exchange(o.owner_, nullptr);
    }
    return *this;
  }
  Permit(const Permit&) = delete;
  Permit& operator=(const Permit&) = delete;
  ~Permit() { release(); }

  inline void release() noexcept;
  bool held() const noexcept { return owner_ != nullptr; }

 private:
  friend class Admission;
  explicit Permit(Admission* owner) : owner_(owner) {}
  Admission* owner_ = nullptr;
};

struct AdmissionStats {
  std::uint64_t bound = 0;
  std::uint64_t in_flight = 0;  // permits out now
  std::uint64_t peak = 0;       // most permits ever out at once (never above bound)
  std::uint64_t admitted = 0;   // permits ever given
  std::uint64_t waits = 0;      // acquires that found the bound reached
  std::uint64_t refused = 0;    // try_acquire on a full bound; acquires whose Context ended
  double waited_s = 0;          // time acquires spent waiting, summed (waits in progress not)
};

// The snapshot in the Prometheus text format (metrics.h), labelled
// name="<name>": sluice_admission_*.
std::string to_prometheus(const AdmissionStats& stats, std::string_view name);

class Admission {
 public:
  static Result<std::unique_ptr<Admission>> create(std::uint64_t bound) {
    if (bound == 0) return Status(StatusCode::kInvalidArgument, "admission: bound must be >= 1");
    return std::make_unique<Admission>(bound);
  }
  // Prefer create(), which checks the bound; a bound of 0 here is taken as 1.
  explicit Admission(std::uint64_t bound) : bound_(bound == 0 ? 1 : bound) {}
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;

  // A place, waiting while the bound is reached.
  Result<Permit> acquire(const Context& ctx = {}) {
    // A stopped worker takes no place, even a free one (as Queue's push).
    if (ctx.stop_requested()) return refuse(ctx);
    if (try_take()) return Permit(this);
    if (ctx.stop_requested() || ctx.expired()) return refuse(ctx);
    const auto t0 = std::chrono::steady_clock::now();
    waits_.fetch_add(1, std::memory_order_relaxed);
    std::unique_lock lock(mu_);
    // Seen by release() before or after its decrement: see release_one().
    waiters_.fetch_add(1, std::memory_order_seq_cst);
    // A Context that ended wins over a place freed meanwhile (the wait
    // returns pred() once the token fires): look at it before taking.
    const bool got = detail::wait_for(cv_, lock, ctx,
                                      [&] { return ctx.err() == StatusCode::kOk && try_take(); });
    waiters_.fetch_sub(1, std::memory_order_relaxed);
    // A notify_one that chose us, now leaving empty-handed, is passed on.
    if (!got && in_flight_.load(std::memory_order_seq_cst) < bound_) cv_.notify_one();
    waited_ns_ += static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count());
    lock.unlock();
    if (!got) return refuse(ctx);
    return Permit(this);
  }

  // A place if one is free now; kWouldBlock otherwise.
  Result<Permit> try_acquire() {
    if (try_take()) return Permit(this);
    refused_.fetch_add(1, std::memory_order_relaxed);
    return Status(StatusCode::kWouldBlock);
  }

  AdmissionStats stats() const {
    AdmissionStats s;
    s.bound = bound_;
    s.in_flight = in_flight_.load(std::memory_order_relaxed);
    s.peak = peak_.load(std::memory_order_relaxed);
    s.admitted = admitted_.load(std::memory_order_relaxed);
    s.waits = waits_.load(std::memory_order_relaxed);
    s.refused = refused_.load(std::memory_order_relaxed);
    std::lock_guard lock(mu_);
    s.waited_s = static_cast<double>(waited_ns_) * 1e-9;
    return s;
  }

  std::uint64_t bound() const noexcept { return bound_; }

 private:
  friend class Permit;

  bool try_take() {
    std::uint64_t n = in_flight_.load(std::memory_order_relaxed);
    do {
      if (n >= bound_) return false;
    } while (!in_flight_.compare_exchange_weak(n, n + 1, std::memory_order_seq_cst,
                                               std::memory_order_relaxed));
    admitted_.fetch_add(1, std::memory_order_relaxed);
    std::uint64_t p = peak_.load(std::memory_order_relaxed);
    while (n + 1 > p && !peak_.compare_exchange_weak(p, n + 1, std::memory_order_relaxed)) {
    }
    return true;
  }

  // The decrement and the waiter's registration are both seq_cst: either
  // the waiter's next look sees the free place, or this sees the waiter and
  // notifies under the lock (a waiter between its look and its sleep holds
  // the lock, so the notify cannot fall in between).
  void release_one() noexcept {
    in_flight_.fetch_sub(1, std::memory_order_seq_cst);
    if (waiters_.load(std::memory_order_seq_cst) == 0) return;
    std::lock_guard lock(mu_);
    cv_.notify_one();
  }

  Status refuse(const Context& ctx) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    return ctx.err();
  }

  const std::uint64_t bound_;
  std::atomic<std::uint64_t> in_flight_{0};
  std::atomic<std::uint64_t> waiters_{0};
  std::atomic<std::uint64_t> peak_{0};
  std::atomic<std::uint64_t> admitted_{0};
  std::atomic<std::uint64_t> waits_{0};
  std::atomic<std::uint64_t> refused_{0};
  mutable std::mutex mu_;
  std::condition_variable_any cv_;
  std::uint64_t waited_ns_ = 0;  // guarded by mu_
};

inline void Permit::release() noexcept {
  if (owner_ != nullptr) std::exchange(owner_, nullptr)->release_one();
}

// An item and its place under an Admission bound. The permit is declared
// first so that it is released last: the value is gone before its place is
// given to the next item.
template <class T>
struct Admitted {
  Permit permit;
  T value;
};

namespace detail {
template <class R>
struct ResultValue;
template <class U>
struct ResultValue<Result<U>> {
  using type = U;
};
template <class A>
struct IsResult : std::false_type {};
template <class U>
struct IsResult<Result<U>> : std::true_type {};
}  // namespace detail

// Adapts a stage function fn(T&&, ctx) -> Result<U> to items that carry
// their permit: Admitted<T> (or Result<Admitted<T>> from an upstream stage)
// in, Result<Admitted<U>> out. The permit moves to the result; an error
// (fn's, or upstream's, passed through) carries none, so a failed item gives
// its place back at once.
template <class Fn>
auto carry_permit(Fn fn) {
  return [fn = std::move(fn)]<class A>(A&& in, const Context& ctx) {
    if constexpr (detail::IsResult<std::remove_cvref_t<A>>::value) {
      using T = decltype(std::declval<std::remove_cvref_t<A>&>()->value);
      using U = typename detail::ResultValue<decltype(fn(std::declval<T&&>(), ctx))>::type;
      if (!in.ok()) return Result<Admitted<U>>(in.status());
      Admitted<T>& a = *in;
      Result<U> r = fn(std::move(a.value), ctx);
      if (!r.ok()) return Result<Admitted<U>>(r.status());
      return Result<Admitted<U>>(Admitted<U>{std::move(a.permit), std::move(*r)});
    } else {
      using T = decltype(in.value);
      using U = typename detail::ResultValue<decltype(fn(std::declval<T&&>(), ctx))>::type;
      Result<U> r = fn(std::move(in.value), ctx);
      if (!r.ok()) return Result<Admitted<U>>(r.status());
      return Result<Admitted<U>>(Admitted<U>{std::move(in.permit), std::move(*r)});
    }
  };
}

}  // namespace sluice
