// Context: the cancellation and deadline argument of every blocking call in
// sluice (the C++ form of a Go context.Context).
//
// A Context is a std::stop_token plus an optional deadline on the steady
// clock. A default Context never cancels and never expires. Contexts are small
// values: copy them freely; derive a tighter one with with_timeout().
//
// Thread safety: const methods may be called concurrently; the stop_source
// that feeds the token may be triggered from any thread.
// Blocking: none; it is only inspected by blocking calls, which wake promptly
// when the token is triggered and return at the deadline.
// Cancellation: a stopped token yields StatusCode::kCancelled, a passed
// deadline StatusCode::kDeadlineExceeded (cancellation wins if both hold).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <ratio>
#include <stop_token>
#include <type_traits>

#include "sluice/status.h"

namespace sluice {

class Context {
 public:
  using Clock = std::chrono::steady_clock;

  Context() = default;
  explicit Context(std::stop_token token) : token_(std::move(token)) {}
  Context(std::stop_token token, Clock::time_point deadline)
      : token_(std::move(token)), deadline_(deadline) {}

  // A child with the same token and the earlier of the two deadlines.
  template <class Rep, class Period>
  Context with_timeout(std::chrono::duration<Rep, Period> timeout) const {
    return with_deadline(deadline_in(timeout));
  }
  Context with_deadline(Clock::time_point deadline) const {
    return Context(token_, deadline_ && *deadline_ < deadline ? *deadline_ : deadline);
  }

  const std::stop_token& token() const noexcept { return token_; }
  const std::optional<Clock::time_point>& deadline() const noexcept { return deadline_; }

  // now + timeout, saturated: a timeout too long for the clock (hours::max(),
  // 1e300 s) is a deadline that never comes, not an overflow into the past;
  // a negative or NaN one has already passed.
  template <class Rep, class Period>
  static Clock::time_point deadline_in(std::chrono::duration<Rep, Period> timeout,
                                       Clock::time_point now = Clock::now()) noexcept {
    const Clock::duration room = (Clock::time_point::max)() - now;
    if constexpr (std::is_floating_point_v<Rep> || std::ratio_less_v<Period, Clock::period>) {
      const double t = std::chrono::duration<double>(timeout).count();
      if (!(t > 0)) return now;  // also NaN
      // Compared in double, a second short of the end: rounding never overflows.
      if (t >= std::chrono::duration<double>(room).count() - 1) return (Clock::time_point::max)();
    } else {
      if (timeout.count() <= 0) return now;
      // In the timeout's units: the cast only divides, so it cannot overflow.
      if (timeout >=
          std::chrono::duration_cast<std::chrono::duration<std::intmax_t, Period>>(room)) {
        return (Clock::time_point::max)();
      }
    }
    return now + std::chrono::ceil<Clock::duration>(timeout);
  }

  bool stop_requested() const noexcept { return token_.stop_requested(); }
  bool expired(Clock::time_point now = Clock::now()) const noexcept {
    return deadline_ && now >= *deadline_;
  }
  // True if this context can ever end a wait (a stoppable token or a deadline).
  bool can_end() const noexcept { return token_.stop_possible() || deadline_.has_value(); }

  // kOk while live; kCancelled or kDeadlineExceeded once done.
  StatusCode err() const noexcept {
    if (token_.stop_requested()) return StatusCode::kCancelled;
    if (deadline_ && Clock::now() >= *deadline_) return StatusCode::kDeadlineExceeded;
    return StatusCode::kOk;
  }

 private:
  std::stop_token token_;
  std::optional<Clock::time_point> deadline_;
};

// A context that expires `timeout` from now (optionally also stoppable).
template <class Rep, class Period>
Context with_timeout(std::chrono::duration<Rep, Period> timeout, std::stop_token token = {}) {
  return Context(std::move(token), Context::deadline_in(timeout));
}
inline Context with_deadline(Context::Clock::time_point deadline, std::stop_token token = {}) {
  return Context(std::move(token), deadline);
}

}  // namespace sluice
