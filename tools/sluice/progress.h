// Progress of a long put or get, on stderr while it is a terminal (and not
// --quiet): messages so far, the rate, the queue's depth against its bound,
// and, for put, the time spent waiting at the bound. One line, redrawn four
// times a second by its own thread; the last state stays on screen when the
// command ends. The depth comes from a stat on a thread of its own
// (StatSampler), so a slow stat (a Redis that does not answer) neither
// freezes the line nor holds the command's end: the line shows the depth as
// last known, and its age once it is a second old or more; the last draw
// waits 500 ms at most for a fresh one, and not at all behind a stat asked
// for 500 ms ago or more and still not in.
//
// Thread safety: add() and set_blocked() may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "sluice/store.h"
#include "stat_sampler.h"

namespace sluice::cli {

class Progress {
 public:
  // `stat` samples the queue (any thread; it owns what it uses: a stat in
  // progress at the end finishes alone, see StatSampler); `blocked` says
  // how long puts waited at the bound so far (null for get). Does nothing
  // when !enabled.
  Progress(bool enabled, std::string label, std::function<Result<QueueInfo>()> stat,
           std::function<double()> blocked = nullptr);
  ~Progress();  // finish()
  // Draws the last state, then a newline, and stops: call it before writing
  // anything else to stderr (a message on the line's end read as its tail).
  void finish();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void add(std::uint64_t messages) { done_.fetch_add(messages, std::memory_order_relaxed); }

  // True when stderr is a terminal and --quiet was not given.
  static bool wanted(bool quiet);

 private:
  void draw(bool last);

  const bool enabled_;
  const std::string label_;
  const std::function<double()> blocked_;
  std::unique_ptr<StatSampler> sampler_;          // null when !enabled or without a stat
  std::uint64_t stat_asked_ = 0;                  // the last stat requested (draw's thread)
  StatSampler::Clock::time_point stat_asked_at_;  // ... when
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::atomic<std::uint64_t> done_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool finished_ = false;  // the caller's thread only
  std::thread thread_;
};

// Takes a role (a writer, or a channel's reader) with take(ctx): at once if
// it is free; if another process holds it and --no-wait was not given, says
// on a terminal (unless --quiet) whom it waits for, then waits under ctx.
template <class Take>
auto take_role(bool quiet, std::string_view cmd, bool no_wait, const Context& ctx, Take take) {
  auto r = take(ctx.with_timeout(std::chrono::seconds(0)));
  if (no_wait || r.ok() || r.code() != StatusCode::kInUse) return r;
  if (Progress::wanted(quiet)) {
    std::fprintf(stderr, "sluice %.*s: waiting: %.*s\n", static_cast<int>(cmd.size()), cmd.data(),
                 static_cast<int>(r.status().message().size()), r.status().message().data());
  }
  return take(ctx);
}

}  // namespace sluice::cli
