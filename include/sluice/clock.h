// Clock: where time-driven components (the batcher) read the time.
//
// Clock::steady() follows std::chrono::steady_clock; deadlines on it are
// waited on directly. ManualClock moves only when told to, for deterministic
// trigger tests: components subscribe and are called after every advance, so
// they re-check their deadlines instead of waiting on real time.
//
// Thread safety: all members may be called concurrently.
// Blocking: never, except that unsubscribe() waits for a running callback.
// Ownership: a component that subscribes must unsubscribe before it dies;
//   the clock must outlive every component using it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>

namespace sluice {

class Clock {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  using duration = std::chrono::steady_clock::duration;

  virtual ~Clock() = default;
  virtual time_point now() const = 0;
  // True when now() is std::chrono::steady_clock::now(), so its deadlines can
  // be handed to Context directly.
  virtual bool is_steady() const { return false; }
  // Calls fn after each jump of a manual clock (never for a steady one).
  virtual std::uint64_t subscribe(std::function<void()> fn) {
    (void)fn;
    return 0;
  }
  virtual void unsubscribe(std::uint64_t id) { (void)id; }

  // The process-wide steady clock.
  static Clock& steady();
};

class ManualClock final : public Clock {
 public:
  explicit ManualClock(time_point start = time_point{}) : now_(start.time_since_epoch().count()) {}

  time_point now() const override {
    return time_point(duration(now_.load(std::memory_order_acquire)));
  }
  // Moves time forward by d and calls every subscriber.
  void advance(duration d) {
    now_.fetch_add(d.count(), std::memory_order_acq_rel);
    std::lock_guard lock(mu_);
    for (auto& [id, fn] : subs_) fn();
  }
  std::uint64_t subscribe(std::function<void()> fn) override {
    std::lock_guard lock(mu_);
    subs_.emplace(++next_id_, std::move(fn));
    return next_id_;
  }
  void unsubscribe(std::uint64_t id) override {
    std::lock_guard lock(mu_);  // waits for a running advance(): no call after return
    subs_.erase(id);
  }

 private:
  std::atomic<duration::rep> now_;
  std::mutex mu_;
  std::map<std::uint64_t, std::function<void()>> subs_;
  std::uint64_t next_id_ = 0;
};

}  // namespace sluice
