#include "progress.h"

#include <unistd.h>

#include <cstdio>

namespace sluice::cli {

bool Progress::wanted(bool quiet) { return !quiet && ::isatty(STDERR_FILENO) == 1; }

Progress::Progress(bool enabled, std::string label, std::function<Result<QueueInfo>()> stat,
                   std::function<double()> blocked)
    : enabled_(enabled),
      label_(std::move(label)),
      stat_(std::move(stat)),
      blocked_(std::move(blocked)) {
  if (!enabled_) return;
  thread_ = std::thread([this] {
    std::unique_lock lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(250), [&] { return stop_; })) {
      lock.unlock();
      draw(false);
      lock.lock();
    }
  });
}

Progress::~Progress() { finish(); }

void Progress::finish() {
  if (!enabled_ || finished_) return;
  finished_ = true;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  draw(true);
}

void Progress::draw(bool last) {
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const std::uint64_t n = done_.load(std::memory_order_relaxed);
  std::string line = label_ + ": " + std::to_string(n) + " messages";
  char buf[160];
  std::snprintf(buf, sizeof buf, ", %.0f/s, %.1f s", secs > 0 ? static_cast<double>(n) / secs : 0.0,
                secs);
  line += buf;
  if (stat_) {
    if (auto info = stat_(); info.ok()) {
      line += ", depth " + std::to_string(info->length) + "/" +
              (info->bound == 0 ? std::string("unbounded") : std::to_string(info->bound));
    }
  }
  if (blocked_) {
    std::snprintf(buf, sizeof buf, ", waited at the bound %.1f s", blocked_());
    line += buf;
  }
  // \r and "erase to the end of the line": redraw in place on a terminal.
  std::fprintf(stderr, "\r\033[K%s%s", line.c_str(), last ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace sluice::cli
