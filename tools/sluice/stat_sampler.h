// StatSampler: stats of a command's queue taken on a thread of its own, for
// the --metrics server and the progress line, so neither waits for a stat
// that hangs (a stat on a Redis that does not answer takes its 5 s timeout):
// they ask for one, wait for it as long as they choose, and otherwise show
// the queue as last known, with its age.
//
// Thread safety: every member may be called from any thread; `stat` and
//   `on_done` are called on the sampler's thread.
// Blocking: the destructor does not wait for a stat in progress: it leaves
//   that thread to finish it alone (the thread owns the state it touches),
//   so `stat` must own what it uses (the store by shared_ptr, the name by
//   value): it may run after the command, and its object, are gone.
//   `on_done` is never called once the destructor has begun.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "sluice/status.h"
#include "sluice/store.h"

namespace sluice::cli {

// The queue, as the sampler last saw it.
struct StatSample {
  std::optional<QueueInfo> info;  // the last stat that succeeded; none yet: empty
  double age_seconds = 0;         // since that stat began
  bool ok = false;                // the stat for this request succeeded in time
};

class StatSampler {
 public:
  using Clock = std::chrono::steady_clock;
  // `on_done`: called after each stat (null: none).
  explicit StatSampler(std::function<Result<QueueInfo>()> stat,
                       std::function<void()> on_done = nullptr);
  ~StatSampler();
  StatSampler(const StatSampler&) = delete;
  StatSampler& operator=(const StatSampler&) = delete;

  // Asks for a stat that begins after this call; returns the request's
  // number (a stat answers every request made before it began).
  std::uint64_t request();
  // Requests up to this number are answered.
  std::uint64_t answered() const;
  // Waits until request n is answered or `until` passes; whether it was.
  bool wait(std::uint64_t n, Clock::time_point until) const;
  // The queue as last known, aged at `now`; ok: the last stat to finish
  // succeeded and it answered request n.
  StatSample sample(std::uint64_t n, Clock::time_point now) const;

 private:
  struct State;
  static void run(const std::shared_ptr<State>& s);
  std::shared_ptr<State> state_;  // shared with the thread, which may outlive this
};

}  // namespace sluice::cli
