// Concurrency limiters: how many calls of a stage's fn may run at once,
// moved by the latency the stage observes (Stage's StageOptions::adaptive;
// docs/pipeline.md, "Adaptive concurrency"). One limiter per class here; a
// stage picks one by its options.
//
// Thread safety: a limiter is not thread-safe; its stage calls it under its
//   gate mutex. Blocking: none. Ownership: plain values.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace sluice {

// Adaptive concurrency (fan-out-stage.md, non-normative): the stage runs
// fn on at most `limit` workers at once and moves the limit between
// min_width and the stage's width (the ceiling) from the latency of fn it
// observes: AIMD over windows of about `limit` calls. A window whose mean
// latency stays within `tolerance` x the baseline (the lowest window mean
// seen; it follows a slower service only at the floor) adds one; a slower window
// multiplies the limit by `backoff`. So a stage calling a remote service
// finds the service's concurrency knee instead of queueing requests inside
// it. For fn of at least tens of microseconds: each call takes a mutex.
struct AdaptiveConcurrency {
  bool enabled = false;
  std::size_t min_width = 1;  // floor, >= 1 (the stage's width is the ceiling)
  std::size_t initial = 0;    // starting limit; 0: min_width
  double tolerance = 1.25;    // > 1
  double backoff = 0.9;       // in (0, 1)
};

namespace detail {

// The limit of AdaptiveConcurrency, fed one latency per call. Not
// thread-safe (the stage calls it under its gate mutex).
class AimdLimit {
 public:
  AimdLimit(const AdaptiveConcurrency& a, std::size_t ceiling)
      : a_(a),
        ceiling_(ceiling),
        limit_(std::clamp<std::size_t>(a.initial != 0 ? a.initial : a.min_width, a.min_width,
                                       ceiling)) {}

  std::size_t limit() const noexcept { return limit_; }
  std::uint64_t increases() const noexcept { return increases_; }
  std::uint64_t decreases() const noexcept { return decreases_; }
  double baseline() const noexcept { return baseline_; }

  void observe(double seconds) {
    window_sum_ += seconds;
    // About one call per worker in a window: the window spans one round.
    if (++window_n_ < (std::max<std::size_t>)(limit_, 8)) return;
    const double mean = window_sum_ / static_cast<double>(window_n_);
    window_sum_ = 0;
    window_n_ = 0;
    if (baseline_ <= 0 || mean < baseline_) {
      baseline_ = mean;
    } else if (limit_ == a_.min_width) {
      // Slow even at the floor: that is the service's own pace, not our
      // load; follow it (slowly). Above the floor the baseline only falls,
      // or an overload that grows a little per step would creep past it.
      baseline_ += (mean - baseline_) * 0.05;
    }
    if (mean > a_.tolerance * baseline_) {
      const auto down = static_cast<std::size_t>(static_cast<double>(limit_) * a_.backoff);
      const std::size_t next = (std::max)(a_.min_width, (std::min)(down, limit_ - 1));
      if (next < limit_) {
        limit_ = next;
        ++decreases_;
      }
    } else if (limit_ < ceiling_) {
      ++limit_;
      ++increases_;
    }
  }

 private:
  const AdaptiveConcurrency a_;
  const std::size_t ceiling_;
  std::size_t limit_;
  std::size_t window_n_ = 0;
  double window_sum_ = 0;  // seconds
  double baseline_ = 0;    // seconds: the lowest window mean, drifting up slowly
  std::uint64_t increases_ = 0;
  std::uint64_t decreases_ = 0;
};

}  // namespace detail

}  // namespace sluice
