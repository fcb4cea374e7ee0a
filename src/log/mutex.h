// A mutex the compiler can reason about: Clang's thread-safety analysis
// (-Wthread-safety, the "thread-safety" preset) checks that every member
// marked SLUICE_GUARDED_BY(mu) is touched only with mu held, and that
// functions marked SLUICE_REQUIRES(mu) are called with it. Other compilers
// see plain std::mutex. Private to the log module (cf. leveldb's
// port/thread_annotations.h).
#pragma once

#include <condition_variable>
#include <mutex>

#include "sluice/context.h"

#if defined(__clang__)
#define SLUICE_TSA(x) __attribute__((x))
#else
#define SLUICE_TSA(x)
#endif

#define SLUICE_CAPABILITY(x) SLUICE_TSA(capability(x))
#define SLUICE_SCOPED_CAPABILITY SLUICE_TSA(scoped_lockable)
#define SLUICE_GUARDED_BY(x) SLUICE_TSA(guarded_by(x))
#define SLUICE_PT_GUARDED_BY(x) SLUICE_TSA(pt_guarded_by(x))
#define SLUICE_REQUIRES(...) SLUICE_TSA(requires_capability(__VA_ARGS__))
#define SLUICE_EXCLUDES(...) SLUICE_TSA(locks_excluded(__VA_ARGS__))
#define SLUICE_ACQUIRE(...) SLUICE_TSA(acquire_capability(__VA_ARGS__))
#define SLUICE_RELEASE(...) SLUICE_TSA(release_capability(__VA_ARGS__))
#define SLUICE_ASSERT_HELD(x) SLUICE_TSA(assert_capability(x))
#define SLUICE_NO_TSA SLUICE_TSA(no_thread_safety_analysis)

namespace sluice::log {

class SLUICE_CAPABILITY("mutex") Mutex {
 public:
  void lock() SLUICE_ACQUIRE() { mu_.lock(); }
  void unlock() SLUICE_RELEASE() {
    if (on_unlock_ != nullptr) on_unlock_(on_unlock_arg_);
    mu_.unlock();
  }
  // Runs f(arg) with the lock held just before every release (also a
  // CondVar's): the topic publishes its counters there, for Topic::stats to
  // read without the lock. Set and cleared while no other thread uses it.
  void set_on_unlock(void (*f)(void*), void* arg) {
    on_unlock_ = f;
    on_unlock_arg_ = arg;
  }
  // For lambdas run under the lock (e.g. a condition's predicate): tells the
  // analysis what the caller holds; no run-time cost.
  void assert_held() const SLUICE_ASSERT_HELD(this) {}

 private:
  std::mutex mu_;
  void (*on_unlock_)(void*) = nullptr;
  void* on_unlock_arg_ = nullptr;
};

// RAII holder that may let go and take the lock again while it lives (a
// group-commit leader syncs outside the lock).
class SLUICE_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) SLUICE_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() SLUICE_RELEASE() {
    if (held_) mu_.unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;
  void unlock() SLUICE_RELEASE() {
    mu_.unlock();
    held_ = false;
  }
  void lock() SLUICE_ACQUIRE() {
    mu_.lock();
    held_ = true;
  }

 private:
  Mutex& mu_;
  bool held_ = true;
};

// A condition variable over Mutex. wait() is called with the lock held and
// returns with it held (the analysis sees no change).
class CondVar {
 public:
  void wait(Mutex& mu) SLUICE_REQUIRES(mu) { cv_.wait(mu); }
  // Until pred() holds, ctx's stop, or its deadline; returns pred().
  template <class Pred>
  bool wait(Mutex& mu, const Context& ctx, Pred pred) SLUICE_REQUIRES(mu) {
    if (ctx.deadline()) return cv_.wait_until(mu, ctx.token(), *ctx.deadline(), pred);
    return cv_.wait(mu, ctx.token(), pred);
  }
  template <class Duration>
  void wait_for(Mutex& mu, Duration d) SLUICE_REQUIRES(mu) {
    cv_.wait_for(mu, d);
  }
  // false once `until` passed.
  template <class TimePoint>
  bool wait_until(Mutex& mu, TimePoint until) SLUICE_REQUIRES(mu) {
    return cv_.wait_until(mu, until) == std::cv_status::no_timeout;
  }
  void notify_all() { cv_.notify_all(); }

 private:
  std::condition_variable_any cv_;
};

}  // namespace sluice::log
