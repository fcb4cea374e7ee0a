#include "stat_sampler.h"

#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>

namespace sluice::cli {

struct StatSampler::State {
  State(std::function<Result<QueueInfo>()> f, std::function<void()> g)
      : stat(std::move(f)), on_done(std::move(g)) {}

  const std::function<Result<QueueInfo>()> stat;
  const std::function<void()> on_done;
  std::thread thread;  // joined, or detached in a stat (the destructor)

  mutable std::mutex mu;                    // guards what follows
  std::condition_variable wanted_cv;        // a request, or the stop
  mutable std::condition_variable done_cv;  // a stat finished
  bool stop = false;
  bool busy = false;              // in a stat, mu released
  std::uint64_t wanted = 0;       // requests made
  std::uint64_t done = 0;         // of those, answered by a stat that began after them
  std::optional<QueueInfo> last;  // the last stat that succeeded
  Clock::time_point last_at;      // when it began
  bool last_ok = false;           // the last stat to finish succeeded
};

StatSampler::StatSampler(std::function<Result<QueueInfo>()> stat, std::function<void()> on_done)
    : state_(std::make_shared<State>(std::move(stat), std::move(on_done))) {
  // The thread holds the state too: a stat in progress at the destructor
  // ends on it, with nothing of this object's left to touch.
  state_->thread = std::thread([s = state_] { run(s); });
}

StatSampler::~StatSampler() {
  bool busy = false;
  {
    std::lock_guard lock(state_->mu);
    state_->stop = true;
    busy = state_->busy;
  }
  state_->wanted_cv.notify_all();
  // Not in a stat: it sees the stop at once. In one (say on a Redis that
  // does not answer): no one waits for it.
  if (busy) {
    state_->thread.detach();
  } else {
    state_->thread.join();
  }
}

void StatSampler::run(const std::shared_ptr<State>& s) {
  std::unique_lock lock(s->mu);
  for (;;) {
    s->wanted_cv.wait(lock, [&] { return s->stop || s->done < s->wanted; });
    if (s->stop) return;
    const std::uint64_t wanted = s->wanted;  // the requests this stat answers
    s->busy = true;
    lock.unlock();
    const auto began = Clock::now();
    auto info = s->stat();
    lock.lock();
    s->busy = false;
    if (s->stop) return;  // left alone: no one reads it
    if (info.ok()) {
      s->last = std::move(*info);
      s->last_at = began;
    }
    s->last_ok = info.ok();
    s->done = wanted;
    if (s->on_done) s->on_done();  // under mu: never after the destructor's stop
    s->done_cv.notify_all();
  }
}

std::uint64_t StatSampler::request() {
  std::uint64_t n = 0;
  {
    std::lock_guard lock(state_->mu);
    n = ++state_->wanted;
  }
  state_->wanted_cv.notify_one();
  return n;
}

std::uint64_t StatSampler::answered() const {
  std::lock_guard lock(state_->mu);
  return state_->done;
}

bool StatSampler::wait(std::uint64_t n, Clock::time_point until) const {
  std::unique_lock lock(state_->mu);
  return state_->done_cv.wait_until(lock, until, [&] { return state_->done >= n; });
}

StatSample StatSampler::sample(std::uint64_t n, Clock::time_point now) const {
  std::lock_guard lock(state_->mu);
  StatSample s;
  s.info = state_->last;
  if (state_->last) s.age_seconds = std::chrono::duration<double>(now - state_->last_at).count();
  s.ok = state_->last_ok && state_->done >= n;
  return s;
}

}  // namespace sluice::cli
