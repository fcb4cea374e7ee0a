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
// it. A raise of the limit (a probe) must pay for itself: judged on the
// window after the one that raised it (that one still holds calls started
// before), its throughput (limit / mean latency) must gain at least half of
// what one more worker gives below the knee, else the limit goes back down
// by one, since a latency still within `tolerance` can be past the knee (9
// calls at 1.19x the latency of 8 serve fewer). Each failed probe costs a
// window's throughput, so the next one waits twice as many windows as the
// last did (up to `max_probe_wait`), and probes below a failed limit go down
// and up in turn (a limit reached by a backoff may itself be past the knee:
// one fewer that serves as much stays); one up that pays climbs on at once.
// For fn of at least tens of microseconds: each call takes a mutex.
struct AdaptiveConcurrency {
  bool enabled = false;
  std::size_t min_width = 1;  // floor, >= 1 (the stage's width is the ceiling)
  std::size_t initial = 0;    // starting limit; 0: min_width
  double tolerance = 1.25;    // > 1
  double backoff = 0.9;       // in (0, 1)
  // Windows between probes of a limit that failed (0: plain AIMD, probes
  // neither judged by throughput nor spaced).
  std::size_t max_probe_wait = 32;
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

  // `ok`: the call succeeded. A failed call's latency measures the service
  // only when it is slower than the baseline (a timeout: overload); a fast
  // failure (refused, rejected) is no sample, or a burst of them would set
  // the baseline to their pace and back every later window off as slow.
  void observe(double seconds, bool ok = true) {
    if (!ok && !(baseline_ > 0 && seconds > baseline_)) return;
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
    const bool slow = mean > a_.tolerance * baseline_;
    if (settling_ && !slow) {
      // The first window after a probe holds calls started before it: the
      // probe is judged on the next one.
      settling_ = false;
      return;
    }
    settling_ = false;
    const int probe = probe_;
    probe_ = 0;
    if (a_.max_probe_wait > 0 && probe != 0 && probe_base_ > 0) {
      // Throughput is limit / mean latency. Up pays if it gains at least half
      // of what one more worker gives below the knee ((L+1)/L); down pays if
      // it loses less than half of what one worker gives there: breaking
      // even is noise, or the knee's edge.
      const auto l = static_cast<double>(limit_);
      const bool paid =
          probe > 0 ? l / mean >= (l - 0.5) / probe_base_ : l / mean >= (l + 0.5) / probe_base_;
      if (paid) {
        failed_at_ = probe > 0 ? 0 : limit_ + 1;  // down: the limit above is worse
        probe_gap_ = 1;
        probe_wait_ = probe > 0 ? 0 : 1;
      } else if (!slow || probe > 0) {  // failed (slow after a step down: a slowdown, below)
        probe_gap_ = (std::min)(probe_gap_ * 2, a_.max_probe_wait);
        probe_wait_ = probe_gap_;
        if (probe > 0) failed_at_ = limit_;
        if (!slow) {  // within tolerance: undo the step
          if (probe > 0) {
            --limit_;
            ++decreases_;
          } else {
            ++limit_;
            ++increases_;
          }
          return;
        }
      }
    }
    if (slow) {
      const auto down = static_cast<std::size_t>(static_cast<double>(limit_) * a_.backoff);
      const std::size_t next = (std::max)(a_.min_width, (std::min)(down, limit_ - 1));
      if (next < limit_) {
        limit_ = next;
        ++decreases_;
      }
      return;
    }
    if (failed_at_ != 0 && limit_ + 1 >= failed_at_) {
      // Held below a limit that failed: probe again once the wait is over,
      // down and up in turn (a limit reached by a backoff may itself be
      // past the knee).
      if (probe_wait_ > 0) {
        --probe_wait_;
        return;
      }
      down_next_ = !down_next_;
      if (down_next_ && limit_ > a_.min_width) {
        start_probe(mean, -1);
        return;
      }
    }
    if (limit_ < ceiling_) start_probe(mean, +1);
  }

 private:
  // Moves the limit one step (+1 or -1) and judges the move later.
  void start_probe(double mean, int direction) {
    probe_base_ = mean;  // what the limit before served
    if (direction > 0) {
      ++limit_;
      ++increases_;
    } else {
      --limit_;
      ++decreases_;
    }
    probe_ = direction;
    settling_ = a_.max_probe_wait > 0;
  }

  const AdaptiveConcurrency a_;
  const std::size_t ceiling_;
  std::size_t limit_;
  std::size_t window_n_ = 0;
  double window_sum_ = 0;       // seconds
  double baseline_ = 0;         // seconds: the lowest window mean, drifting up slowly
  double probe_base_ = 0;       // the mean latency before the last raise (seconds)
  int probe_ = 0;               // the last move to judge: +1 up, -1 down, 0 none
  bool down_next_ = false;      // the next probe below a failed limit goes down
  bool settling_ = false;       // the window after a raise: not judged
  std::size_t failed_at_ = 0;   // the limit whose probe failed last (0: none)
  std::size_t probe_gap_ = 1;   // windows to wait after the next failure / 2
  std::size_t probe_wait_ = 0;  // windows still to wait before the next probe
  std::uint64_t increases_ = 0;
  std::uint64_t decreases_ = 0;
};

}  // namespace detail

}  // namespace sluice
