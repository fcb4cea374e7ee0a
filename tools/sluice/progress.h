// Progress of a long put or get, on stderr while it is a terminal (and not
// --quiet): messages so far, the rate, the queue's depth against its bound
// (a stat from a second store handle), and, for put, the time spent waiting
// at the bound. One line, redrawn four times a second by its own thread;
// the last state stays on screen when the command ends.
//
// Thread safety: add() and set_blocked() may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "sluice/store.h"

namespace sluice::cli {

class Progress {
 public:
  // `stat` samples the queue (any thread); `blocked` says how long puts
  // waited at the bound so far (null for get). Does nothing when !enabled.
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
  const std::function<Result<QueueInfo>()> stat_;
  const std::function<double()> blocked_;
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
