// run_pipeline: serial source -> parallel fn -> serial sink, run by `width`
// threads (the caller and width - 1 helpers) with no queue and no hand-off
// between them: the shape of oneTBB's parallel_pipeline. Each thread takes an
// item from the source, runs fn on it, and sinks whatever results are next.
// Use it when both ends are plain functions; when an end is another thread
// or another stage, use Stage and its queues (stage.h).
//
//   source: std::optional<T>() - the next item, or nullopt at the end.
//   fn:     Result<U>(T&&, const Context&) - any number at once.
//   sink:   Status(Result<U>&&) - a non-ok status stops the pipeline.
//
// Thread safety: source is called by one thread at a time, and so is sink
//   (each under its own lock or flag); fn runs on up to `width` threads.
// Blocking: run_pipeline returns once the source is exhausted and every
//   result is sunk, or after a stop or an error, always with every helper
//   joined (a helper that cannot start, EAGAIN: kUnavailable, the others
//   stopped and joined). A thread waits only when `tokens` items are in
//   flight (kStrict: the oldest is still in fn).
// Ordering: kStrict (default): the sink sees results in source order; at
//   most `tokens` items (default 16 x width) are between source and sink, so
//   memory is bounded. kUnordered: completion order. Other orderings are
//   kInvalidArgument (use Stage).
// Batching: while fn takes under 2 us an item, a thread takes up to 16 items
//   per visit to the source (kStrict: up to tokens / (2 x width)), so cheap
//   work pays less for the shared source; costly work goes one at a time.
// Errors: fn's error results, and its exceptions (as kInternal), go to the
//   sink like values: nothing is skipped. A source or sink that throws, or a
//   sink that returns an error, stops the pipeline: no new item is taken,
//   results in flight are not sunk, and run_pipeline returns that error.
// Cancellation: ctx's stop token or deadline stops taking items (fn gets
//   ctx and should honour it); run_pipeline then returns kCancelled or
//   kDeadlineExceeded, and results in flight are not sunk.
// Admission: with options.admission, each item holds a place under that
//   bound from before the source makes it until its result is sunk (or
//   dropped by a stop), so pipelines and stages sharing one Admission are
//   capped together. A thread waits for a place only while it holds no
//   item, so a bound below the width cannot deadlock; the wait counts in the
//   Admission's stats (waited_s).
// Ownership: the callables are borrowed for the call; items and results are
//   moved through. The Admission, if any, must outlive the call.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "sluice/admission.h"
#include "sluice/context.h"
#include "sluice/detail/cpu.h"
#include "sluice/stage.h"
#include "sluice/status.h"

namespace sluice {

struct PipelineOptions {
  std::size_t width = 1;                  // threads, >= 1 (the caller is one)
  Ordering ordering = Ordering::kStrict;  // kStrict or kUnordered
  std::size_t tokens = 0;                 // kStrict: items in flight; 0: 16 x width
  Admission* admission = nullptr;         // optional cap on items in flight, shareable
};

struct PipelineStats {
  std::uint64_t items = 0;   // taken from the source
  std::uint64_t sunk = 0;    // given to the sink
  std::uint64_t errors = 0;  // error results among them (fn failed or threw)
};

// The result in the Prometheus text format (metrics.h), labelled name="<name>".
std::string to_prometheus(const PipelineStats& stats, std::string_view name);

namespace detail {

template <class U>
class PipelineRun {
 public:
  PipelineRun(const PipelineOptions& o, const Context& ctx)
      : strict_(o.ordering == Ordering::kStrict),
        tokens_(strict_ ? (o.tokens == 0 ? 16 * o.width : o.tokens) : o.width),
        // Half the tokens a thread's share allows, so that others find room.
        max_batch_(strict_ ? std::clamp<std::size_t>(tokens_ / (2 * o.width), 1, 16) : 16),
        slots_(strict_ ? tokens_ : 0),
        admission_(o.admission),
        ctx_(ctx) {}

  template <class Source, class Fn, class Sink>
  void work(Source& source, Fn& fn, Sink& sink) {
    using T = typename std::invoke_result_t<Source&>::value_type;
    std::vector<T> items;
    std::vector<Permit> permits;     // with an admission: one per item
    std::vector<Result<U>> results;  // kUnordered: sunk under one lock per batch
    std::size_t want = 1;
    for (;;) {
      std::uint64_t first = 0;
      items.clear();
      permits.clear();
      if (!take(source, items, permits, want, first)) return;
      const auto t0 = std::chrono::steady_clock::now();
      for (std::size_t i = 0; i < items.size(); ++i) {
        Result<U> r = apply(fn, std::move(items[i]));
        if (!strict_) {
          results.push_back(std::move(r));
          continue;
        }
        const std::uint64_t seq = first + i;
        Slot& s = slots_[seq % tokens_];
        if (admission_ != nullptr) s.permit = std::move(permits[i]);
        s.value.emplace(std::move(r));
        s.ready.store(true, std::memory_order_seq_cst);
        // Not next in order: whoever sinks seq - 1 then looks at this slot
        // (it stores sunk_ and then loads ready, we the reverse: seq_cst).
        if (sunk_.load(std::memory_order_seq_cst) == seq) drain(sink);
      }
      if (!strict_) {
        std::lock_guard lk(sink_mu_);
        for (auto& r : results) give(sink, std::move(r));
        results.clear();
        permits.clear();  // their results are sunk: give the places back
      }
      // Cheap fn: take several items per visit to the source (fewer shared
      // cache lines per item); costly fn: one at a time, for balance.
      const auto per_item = (std::chrono::steady_clock::now() - t0) / items.size();
      want = per_item < kCheapItem ? (std::min)(want * 2, max_batch_)
                                   : std::max<std::size_t>(1, want / 2);
    }
  }

  // Stops the run with `st` (from outside the workers).
  void fail(Status st) {
    std::lock_guard lk(in_mu_);
    fail_locked(std::move(st));
  }

  // After every thread is done.
  Result<PipelineStats> finish() {
    std::lock_guard lk(in_mu_);
    if (!error_.ok()) return error_;
    stats_.sunk = sunk_count_;
    stats_.errors = errors_;
    if (!exhausted_ || stats_.sunk < stats_.items) {  // stopped before the end
      const StatusCode e = ctx_.err();
      return e != StatusCode::kOk ? e : StatusCode::kCancelled;
    }
    return stats_;
  }

 private:
  struct alignas(detail::kCacheLine) Slot {
    std::atomic<bool> ready{false};
    std::optional<Result<U>> value;
    Permit permit;  // with an admission: released once the value is sunk
  };

  // Appends 1..want items to out (first gets the first one's seq), each
  // with a permit in `permits` under an admission, or returns false once the
  // run is over.
  template <class Source, class T>
  bool take(Source& source, std::vector<T>& out, std::vector<Permit>& permits, std::size_t want,
            std::uint64_t& first) {
    if (admission_ != nullptr) {
      // The only wait for a place: this thread holds no item now, and it
      // waits outside the source's lock.
      auto p = admission_->acquire(ctx_);
      if (!p.ok()) return false;
      permits.push_back(std::move(*p));
    }
    std::unique_lock lk(in_mu_);
    std::uint64_t room = want;
    for (;;) {
      if (exhausted_ || !error_.ok() || ctx_.err() != StatusCode::kOk) return false;
      // kStrict: seq's slot is free once seq - tokens was sunk.
      if (!strict_) break;
      room = sunk_.load(std::memory_order_acquire) + tokens_ - next_in_;
      if (room > 0) break;
      room_waiters_.fetch_add(1, std::memory_order_seq_cst);
      if (next_in_ >= sunk_.load(std::memory_order_seq_cst) + tokens_) {
        detail::wait_for(room_cv_, lk, ctx_, [&] {
          return next_in_ < sunk_.load(std::memory_order_acquire) + tokens_ || !error_.ok();
        });
      }
      room_waiters_.fetch_sub(1, std::memory_order_relaxed);
    }
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(want, room));
    try {
      while (out.size() < n) {
        if (admission_ != nullptr && permits.size() == out.size()) {
          auto p = admission_->try_acquire();  // more of a batch only if places are free
          if (!p.ok()) break;
          permits.push_back(std::move(*p));
        }
        auto item = source();
        if (!item) {
          exhausted_ = true;
          room_cv_.notify_all();
          break;
        }
        out.push_back(std::move(*item));
      }
    } catch (const std::exception& e) {
      fail_locked(Status(StatusCode::kInternal, std::string("pipeline source threw: ") + e.what()));
      return false;
    } catch (...) {
      fail_locked(Status(StatusCode::kInternal, "pipeline source threw"));
      return false;
    }
    if (permits.size() > out.size()) permits.resize(out.size());  // the source ended
    first = next_in_;
    next_in_ += out.size();
    stats_.items += out.size();
    return !out.empty();
  }

  template <class Fn, class T>
  Result<U> apply(Fn& fn, T&& item) {
    try {
      return fn(std::forward<T>(item), ctx_);
    } catch (const std::exception& e) {
      return Status(StatusCode::kInternal, std::string("pipeline fn threw: ") + e.what());
    } catch (...) {
      return Status(StatusCode::kInternal, "pipeline fn threw a non-std exception");
    }
  }

  // kStrict: sinks every ready result in seq order. One drainer at a time
  // (the `draining_` flag); a result placed while another thread drains is
  // seen by that thread's re-check after it lets go (Dekker: both sides use
  // seq_cst on `ready` and `draining_`).
  template <class Sink>
  void drain(Sink& sink) {
    for (;;) {
      if (draining_.exchange(true, std::memory_order_seq_cst)) return;
      std::uint64_t next = sunk_.load(std::memory_order_relaxed);
      for (;;) {
        Slot& s = slots_[next % tokens_];
        if (!s.ready.load(std::memory_order_seq_cst)) break;
        Result<U> r = std::move(*s.value);
        s.value.reset();
        Permit p = std::move(s.permit);
        s.ready.store(false, std::memory_order_relaxed);
        give(sink, std::move(r));
        p.release();
        sunk_.store(++next, std::memory_order_seq_cst);
        if (room_waiters_.load(std::memory_order_seq_cst) > 0) {
          std::lock_guard lk(in_mu_);  // the waiter is between its check and its sleep, or asleep
          room_cv_.notify_all();
        }
      }
      draining_.store(false, std::memory_order_seq_cst);
      if (!slots_[next % tokens_].ready.load(std::memory_order_seq_cst)) return;
    }
  }

  // Sinks one result (the caller holds the sink's lock or flag).
  template <class Sink>
  void give(Sink& sink, Result<U>&& r) {
    // After an error or a stop, results in flight are not sunk.
    if (stopped_.load(std::memory_order_acquire) || ctx_.err() != StatusCode::kOk) return;
    const bool error = !r.ok();
    Status st;
    try {
      st = sink(std::move(r));
    } catch (const std::exception& e) {
      st = Status(StatusCode::kInternal, std::string("pipeline sink threw: ") + e.what());
    } catch (...) {
      st = Status(StatusCode::kInternal, "pipeline sink threw");
    }
    ++sunk_count_;
    if (error) ++errors_;
    if (!st.ok()) {
      std::lock_guard lk(in_mu_);
      fail_locked(std::move(st));
    }
  }

  void fail_locked(Status st) {
    if (error_.ok()) error_ = std::move(st);
    stopped_.store(true, std::memory_order_release);
    room_cv_.notify_all();
  }

  // Below this per item, fn is cheap enough to batch visits to the source.
  static constexpr std::chrono::nanoseconds kCheapItem{2000};

  const bool strict_;
  const std::size_t tokens_;
  const std::size_t max_batch_;
  std::vector<Slot> slots_;
  Admission* const admission_;
  const Context& ctx_;

  std::mutex in_mu_;  // source, next_in_, stats_, error_
  std::condition_variable_any room_cv_;
  std::uint64_t next_in_ = 0;
  bool exhausted_ = false;
  Status error_;
  PipelineStats stats_;
  std::atomic<bool> stopped_{false};

  alignas(detail::kCacheLine) std::atomic<std::uint64_t> sunk_{0};  // kStrict: results sunk
  std::atomic<bool> draining_{false};
  std::uint64_t sunk_count_ = 0;  // under the sink's lock or flag
  std::uint64_t errors_ = 0;      // likewise
  std::atomic<int> room_waiters_{0};
  std::mutex sink_mu_;  // kUnordered
};

}  // namespace detail

template <class Source, class Fn, class Sink>
auto run_pipeline(Source&& source, Fn&& fn, Sink&& sink, const PipelineOptions& options,
                  const Context& ctx = {}) -> Result<PipelineStats> {
  using Item = typename std::invoke_result_t<Source&>::value_type;
  using R = std::invoke_result_t<Fn&, Item&&, const Context&>;
  using U = std::remove_cvref_t<decltype(*std::declval<R&>())>;
  if (options.width == 0)
    return Status(StatusCode::kInvalidArgument, "pipeline: width must be >= 1");
  if (options.ordering != Ordering::kStrict && options.ordering != Ordering::kUnordered) {
    return Status(StatusCode::kInvalidArgument,
                  "pipeline: ordering must be kStrict or kUnordered (use Stage for the others)");
  }
  detail::PipelineRun<U> run(options, ctx);
  std::vector<std::thread> helpers;
  helpers.reserve(options.width - 1);
  for (std::size_t i = 1; i < options.width; ++i) {
    try {
      helpers.emplace_back([&] { run.work(source, fn, sink); });
    } catch (const std::exception& e) {
      // A helper could not start (EAGAIN): stop those that did, join them,
      // and say why; a joinable std::thread destroyed by the unwinding
      // would call std::terminate.
      run.fail(Status(StatusCode::kUnavailable,
                      std::string("pipeline: could not start a helper thread: ") + e.what()));
      for (auto& t : helpers) t.join();
      return run.finish();
    }
  }
  run.work(source, fn, sink);
  for (auto& t : helpers) t.join();
  return run.finish();
}

}  // namespace sluice
