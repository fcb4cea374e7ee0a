#include "progress.h"

#include <unistd.h>

#include <cstdio>

namespace sluice::cli {
namespace {

// How long the last draw waits for a stat of the queue at the end.
constexpr std::chrono::milliseconds kLastStatWait{500};

}  // namespace

bool Progress::wanted(bool quiet) { return !quiet && ::isatty(STDERR_FILENO) == 1; }

Progress::Progress(bool enabled, std::string label, std::function<Result<QueueInfo>()> stat,
                   std::function<double()> blocked)
    : enabled_(enabled), label_(std::move(label)), blocked_(std::move(blocked)) {
  if (!enabled_) return;
  if (stat) {
    sampler_ = std::make_unique<StatSampler>(std::move(stat));
    stat_asked_ = sampler_->request();  // in by the first draw, unless slow
    stat_asked_at_ = StatSampler::Clock::now();
  }
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
  sampler_.reset();  // not after a stat in progress
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
  if (sampler_) {
    // The last draw shows the queue at the end if a stat says so in time:
    // 500 ms at most, and no longer than that after a stat still not in
    // (a Redis that does not answer: the end does not wait for it).
    if (last) {
      const auto now = StatSampler::Clock::now();
      const bool late = sampler_->answered() < stat_asked_;
      sampler_->wait(sampler_->request(),
                     late ? stat_asked_at_ + kLastStatWait : now + kLastStatWait);
    }
    const StatSample s = sampler_->sample(0, StatSampler::Clock::now());
    if (s.info) {
      line += ", depth " + std::to_string(s.info->length) + "/" +
              (s.info->bound == 0 ? std::string("unbounded") : std::to_string(s.info->bound));
      // Older than a few redraws: the stats are failing or slow.
      if (s.age_seconds >= 1) {
        std::snprintf(buf, sizeof buf, " (%.0f s ago)", s.age_seconds);
        line += buf;
      }
    }
    // One stat at a time, asked for now to be in by the next draw.
    if (!last && sampler_->answered() >= stat_asked_) {
      stat_asked_ = sampler_->request();
      stat_asked_at_ = StatSampler::Clock::now();
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
