// Stage<In, Out>: a fanned-out pipeline stage (../shared/seeds/fan-out-stage.md).
// `width` workers read the input queue, run fn on each item, and write one
// Result<Out> per item to the stage's own bounded output queue, which the last
// worker to exit closes, exactly once.
//
// Thread safety: every member may be called from any thread; fn runs on up
//   to `width` threads at once. Ownership: `input` must outlive the stage; the
//   stage owns its output queue and threads; the destructor stops and joins.
// The full contract (ordering, errors, cancellation, width, channels) is on
// create(). See docs/pipeline.md.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "sluice/context.h"
#include "sluice/detail/cpu.h"
#include "sluice/detail/cv_wait.h"
#include "sluice/limiter.h"
#include "sluice/queue.h"
#include "sluice/status.h"

namespace sluice {

enum class Ordering : std::uint8_t { kUnordered, kStrict, kWindowed, kPerKey };
enum class ErrorMode : std::uint8_t { kContinue, kFailFast, kFirstSuccess };

template <class In>
struct StageOptions {
  std::string name = "stage";
  std::size_t width = 1;  // N >= 1
  Ordering ordering = Ordering::kUnordered;
  std::size_t window = 0;  // W: kWindowed (>= 1); kStrict lag (0: 16 x width)
  ErrorMode errors = ErrorMode::kContinue;
  std::size_t output_capacity = 0;            // 0: max(2 x width, 64)
  std::function<std::size_t(const In&)> key;  // kPerKey: required
  std::stop_token stop;                       // stops the stage when triggered
  AdaptiveConcurrency adaptive;               // off by default: `width` workers run fn
};

struct StageStats {
  std::size_t width = 0;
  std::uint64_t items_in = 0;           // items taken from the input
  std::uint64_t items_out = 0;          // results written to the output
  std::uint64_t errors = 0;             // error results (including thrown)
  std::uint64_t errors_after_stop = 0;  // fail-fast/first-success: results after the stop
  std::uint64_t busy_workers = 0;       // workers inside fn now
  std::uint64_t input_depth = 0;
  std::uint64_t output_depth = 0;
  double blocked_on_input_s = 0;   // summed over workers, waits in progress included
  double blocked_on_output_s = 0;  // likewise, waiting for room in the output
  // Adaptive concurrency: the current limit on workers inside fn (width
  // when off), and how often the limit went up and down.
  std::uint64_t concurrency_limit = 0;
  std::uint64_t limit_increases = 0;
  std::uint64_t limit_decreases = 0;
};

// The snapshot in the Prometheus text format (metrics.h), labelled
// name="<name>".
std::string to_prometheus(const StageStats& stats, std::string_view name);

// Adapts fn(In) -> Result<Out> to a stage fed by another stage's output:
// errors from upstream pass through untouched, values are processed.
template <class Fn>
auto pass_errors(Fn fn) {
  return [fn = std::move(fn)](auto&& r, const Context& ctx) -> decltype(fn(std::move(*r), ctx)) {
    if (!r.ok()) return r.status();
    return fn(std::move(*r), ctx);
  };
}

template <class In, class Out>
class Stage {
 public:
  using Fn = std::function<Result<Out>(In&&, const Context&)>;

  // Starts `width` workers reading `input` and applying fn.
  //
  // Ordering: kUnordered (default): results in completion order. kStrict:
  //   input order; workers run at most `window` (default 16 x width) items
  //   ahead of the oldest result not yet written. kWindowed(W): a result is
  //   written once done if it is fewer than W places after the oldest result
  //   not yet written, so none is written W or more places early; W is
  //   separate from the width. kPerKey: results with equal key(item) keep
  //   input order; different keys run in parallel (worker key % width).
  // Errors: kContinue (default): every item yields a Result, value or error.
  //   kFailFast: the first error stops the stage and wait() returns it; later
  //   errors are counted (errors_after_stop); under kStrict no result after
  //   the failing item is written, under kWindowed(W) none W or more places
  //   after it (the window lets those fewer than W after pass it).
  //   kFirstSuccess: the first success is written and stops the rest (ordering does not apply); if
  //   all fail, wait() returns the first error. A fn (or kPerKey's key) that throws yields
  //   kInternal for its item.
  // Cancellation: options.stop, cancel() or the destructor: every blocking
  //   call of a worker wakes at once; fn gets a Context with the stage's stop
  //   token and must honour it for the 10 ms bound. Items in flight are
  //   dropped; the output is still closed exactly once. A consumer that
  //   closes the output before the end stops the stage the same way, and
  //   wait() returns kClosed. What stopped the stage first decides wait().
  // Width: >= 1. For CPU-bound fn, the number of cores. A thread that cannot
  //   start (EAGAIN) makes create() return kUnavailable; those that did are
  //   stopped and joined.
  // Channels: reads `input` until it is closed and drained or the stage
  //   stops; never closes it (its producer does). The stage must be the
  //   input's only consumer; ordered modes need an input of capacity >= 1
  //   that never evicts or spills. The output holds output_capacity results
  //   (default max(2 x width, 64): the seed's N to 2N made workers on two
  //   cores shared with a feeding and a draining thread wait on a full
  //   output whenever the drainer was descheduled, docs/design.md); drain it
  //   or stop the stage, or workers wait on it.
  // Batches: with kContinue (not adaptive, not per key), a worker takes the
  //   items waiting in the input, up to about 200 us of fn by its last batch
  //   (at most 32; kStrict/kWindowed: lag / (2 x width)), in one claim, and
  //   writes their results together: a fn of 200 us or more goes one item at
  //   a time, and a worker never waits for a batch to fill. Under load a
  //   result may so wait up to ~200 us for its batch-mates.
  // Adaptive: with options.adaptive.enabled, at most `limit` workers run fn
  //   at once (see AdaptiveConcurrency); a worker waits for a place before it
  //   takes an item, so no item waits inside the stage for a place.
  // Errors from create(): kInvalidArgument for width 0, kWindowed with window
  //   0, kPerKey without key, no fn, an ordered mode on an unsuitable input,
  //   or bad adaptive settings (min_width 0 or above width, tolerance <= 1,
  //   backoff outside (0, 1), or kPerKey: its workers own their keys).
  static Result<std::unique_ptr<Stage>> create(Queue<In>& input, Fn fn, StageOptions<In> options) {
    if (options.width == 0) return invalid("width must be >= 1");
    if (options.ordering == Ordering::kWindowed && options.window == 0) {
      return invalid("windowed ordering needs window >= 1");
    }
    if (options.ordering == Ordering::kPerKey && !options.key) {
      return invalid("per-key ordering needs a key function");
    }
    if (!fn) return invalid("a function is required");
    if (const AdaptiveConcurrency& a = options.adaptive; a.enabled) {
      if (a.min_width == 0 || a.min_width > options.width) {
        return invalid("adaptive min_width must be in [1, width]");
      }
      if (a.initial > options.width) return invalid("adaptive initial must be <= width");
      if (!(a.tolerance > 1.0)) return invalid("adaptive tolerance must be > 1");
      if (!(a.backoff > 0.0 && a.backoff < 1.0))
        return invalid("adaptive backoff must be in (0, 1)");
      if (options.ordering == Ordering::kPerKey) {
        return invalid("adaptive concurrency does not apply to per-key ordering");
      }
    }
    const bool ordered =
        (options.ordering == Ordering::kStrict || options.ordering == Ordering::kWindowed) &&
        options.errors != ErrorMode::kFirstSuccess;
    if (ordered && !input.positions_exact()) {
      return invalid("ordered stages need an input of capacity >= 1 that never evicts or spills");
    }
    std::unique_ptr<Stage> st(new Stage(input, std::move(fn), std::move(options)));
    if (!st->start_error_.ok()) return st->start_error_;  // the destructor stops and joins
    return st;
  }

  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;

  // Stops the stage and joins its threads.
  ~Stage() {
    stop_.request_stop();
    for (auto& t : threads_) t.join();
  }

  // The stage's bounded output: one Result per input item (kContinue).
  Queue<Result<Out>>& output() { return output_; }

  // Stops the workers (they wake at once) and closes the output; wait() then
  // returns kCancelled.
  void cancel() {
    external_stop_.store(true, std::memory_order_relaxed);
    stop_.request_stop();
  }

  // Waits until every worker has exited and the output is closed. kOk after
  // a clean run; the fail-fast error; for first-success, kOk if a success was
  // written, else the first error; kCancelled if stopped from outside;
  // kClosed if the output's consumer closed it before the end.
  Status wait(const Context& ctx = {}) {
    std::unique_lock lock(done_mu_);
    const bool done = detail::wait_for(done_cv_, lock, ctx, [&] { return done_; });
    if (!done) return ctx.err();
    return result_;
  }

  StageStats stats() const {
    StageStats s;
    s.width = opt_.width;
    const std::int64_t now = now_ns();
    auto ongoing = [now](const std::atomic<std::int64_t>& since) {
      const std::int64_t t = since.load(std::memory_order_relaxed);
      return t != 0 && now > t ? static_cast<double>(now - t) * 1e-9 : 0.0;
    };
    // Every `out` before any `in`, so that out <= in: a result's `out` is
    // counted (release) after its item's `in` (by the same worker, or by
    // the one that took it, through the reorder lock or a per-key queue),
    // so an `out` read here (acquire) brings that `in` with it. Read the
    // other way round, items taken and written between the two reads show
    // up in `out` only.
    for (const auto& w : workers_) s.items_out += w.out.load(std::memory_order_acquire);
    for (const auto& w : workers_) {
      s.blocked_on_input_s += ongoing(w.in_since);
      s.blocked_on_output_s += ongoing(w.out_since);
      s.items_in += w.in.load(std::memory_order_relaxed);
      s.errors += w.errors.load(std::memory_order_relaxed);
      s.busy_workers += w.busy.load(std::memory_order_relaxed) ? 1 : 0;
      s.blocked_on_input_s +=
          static_cast<double>(w.blocked_in_ns.load(std::memory_order_relaxed)) * 1e-9;
      s.blocked_on_output_s +=
          static_cast<double>(w.blocked_out_ns.load(std::memory_order_relaxed)) * 1e-9;
    }
    s.errors_after_stop = errors_after_stop_.load(std::memory_order_relaxed);
    if (opt_.adaptive.enabled) {
      std::lock_guard lock(gate_mu_);
      s.concurrency_limit = aimd_->limit();
      s.limit_increases = aimd_->increases();
      s.limit_decreases = aimd_->decreases();
    } else {
      s.concurrency_limit = opt_.width;
    }
    s.input_depth = input_.approx_size();
    s.output_depth = output_.approx_size();
    return s;
  }

 private:
  struct alignas(detail::kCacheLine) WorkerCounters {  // each written by one thread
    std::atomic<std::uint64_t> in{0}, out{0}, errors{0}, blocked_in_ns{0}, blocked_out_ns{0};
    // Start of the wait in progress (steady-clock ns), 0 when not waiting, so
    // that stats() shows a stall while it lasts.
    std::atomic<std::int64_t> in_since{0}, out_since{0};
    std::atomic<bool> busy{false};
  };

  static std::int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
        .count();
  }
  // Runs a blocking call, adding its duration to `total` (visible while it waits).
  template <class F>
  static auto timed(std::atomic<std::uint64_t>& total, std::atomic<std::int64_t>& since, F&& f) {
    const std::int64_t t0 = now_ns();
    since.store(t0, std::memory_order_relaxed);
    auto r = f();
    since.store(0, std::memory_order_relaxed);
    total.fetch_add(static_cast<std::uint64_t>(now_ns() - t0), std::memory_order_relaxed);
    return r;
  }
  using Clock = std::chrono::steady_clock;

  // Batches. A wake-up of a parked thread costs its waker 2-4 us on a VM
  // (an inter-processor interrupt); one per item was 10% of a 20 us fn on
  // two cores shared with the feeding and the draining thread. So a worker
  // takes up to batch_cap_ waiting items in one claim (never waiting for
  // more than one: no latency when items trickle in), as many as take about
  // kBatchWork in fn, judged by its last batch: a slow fn is taken one at a
  // time, so the load stays balanced. Only with kContinue (the other modes
  // stop on a result, and items taken with it would be dropped), not with
  // adaptive concurrency (a place per item) nor per key (its own queues).
  static constexpr std::size_t kMaxBatch = 32;
  static constexpr std::chrono::microseconds kBatchWork{200};
  // The default strict lag leaves room for two batches per worker.
  static constexpr std::size_t kStrictLagPerWorker = 16;
  static std::size_t batch_cap(const StageOptions<In>& o, bool ordered, std::uint64_t lag) {
    if (o.errors != ErrorMode::kContinue || o.adaptive.enabled || o.ordering == Ordering::kPerKey) {
      return 1;
    }
    if (!ordered) return kMaxBatch;
    return static_cast<std::size_t>(std::clamp<std::uint64_t>(lag / (2 * o.width), 1, kMaxBatch));
  }

  static Status invalid(const char* why) {
    return {StatusCode::kInvalidArgument, std::string("stage: ") + why};
  }

  Stage(Queue<In>& input, Fn fn, StageOptions<In> o)
      : opt_(std::move(o)),
        fn_(std::move(fn)),
        input_(input),
        output_(opt_.output_capacity != 0 ? opt_.output_capacity
                                          : std::max<std::size_t>(2 * opt_.width, 64)),
        ordered_((opt_.ordering == Ordering::kStrict || opt_.ordering == Ordering::kWindowed) &&
                 opt_.errors != ErrorMode::kFirstSuccess),
        window_(opt_.ordering == Ordering::kStrict ? 1 : opt_.window),
        lag_(opt_.ordering == Ordering::kStrict
                 ? (opt_.window != 0 ? opt_.window : kStrictLagPerWorker * opt_.width)
                 : opt_.window + opt_.width),
        batch_cap_(batch_cap(opt_, ordered_, lag_)),
        // Per key, one more for the dispatcher.
        workers_(opt_.width + (opt_.ordering == Ordering::kPerKey ? 1 : 0)) {
    if (ordered_) {
      slots_.resize(lag_);
      emitted_.assign(lag_, false);
      base_ = input_.stats().pulled;  // the stage must be the input's only consumer
    }
    if (opt_.stop.stop_possible()) {
      on_external_stop_.emplace(opt_.stop, ExternalStop{this});
    }
    if (opt_.adaptive.enabled) aimd_.emplace(opt_.adaptive, opt_.width);
    if (opt_.ordering == Ordering::kPerKey) {
      for (std::size_t i = 0; i < opt_.width; ++i) parts_.push_back(std::make_unique<Queue<In>>(4));
    }
    // live_ counts the threads that will run exit_thread(); a thread that
    // cannot start (EAGAIN) is taken off it, and the stage stops: create()
    // returns the error and the destructor joins those that did start.
    const std::size_t total = opt_.width + (opt_.ordering == Ordering::kPerKey ? 1 : 0);
    live_ = total;
    for (std::size_t i = 0; i < total; ++i) {
      try {
        if (opt_.ordering == Ordering::kPerKey && i == 0) {
          threads_.emplace_back([this] { dispatch(); });
        } else {
          const std::size_t id = opt_.ordering == Ordering::kPerKey ? i - 1 : i;
          threads_.emplace_back([this, id] { work(id); });
        }
      } catch (const std::exception& e) {
        start_error_ = Status(StatusCode::kUnavailable,
                              std::string("stage: could not start a thread: ") + e.what());
        external_stop_.store(true, std::memory_order_relaxed);
        stop_.request_stop();
        for (std::size_t k = i; k < total; ++k) exit_thread();  // never started
        break;
      }
    }
  }
  Status start_error_;

  struct ExternalStop {
    Stage* s;
    void operator()() const noexcept {
      s->external_stop_.store(true, std::memory_order_relaxed);
      s->stop_.request_stop();
    }
  };

  // Per-key: route each item to its worker's queue, in input order.
  // Its counters are the last of workers_: items taken from the input, and
  // the key errors it writes.
  void dispatch() {
    const Context ctx(stop_.get_token());
    const std::size_t self = opt_.width;
    WorkerCounters& c = workers_[self];
    for (;;) {
      Result<In> r = input_.pull(ctx);
      if (!r.ok()) break;
      c.in.fetch_add(1, std::memory_order_relaxed);
      std::size_t k = 0;
      try {
        k = opt_.key(*r) % opt_.width;
      } catch (...) {
        // No worker owns an item without a key: its result is the error,
        // written here.
        c.errors.fetch_add(1, std::memory_order_relaxed);
        Result<Out> err = Status(StatusCode::kInternal, "stage key " + thrown_what());
        if (!apply_error_mode(err)) continue;
        if (!emit(std::move(err), ctx, self)) break;
        continue;
      }
      if (!parts_[k]->push(std::move(*r), ctx).ok()) break;
    }
    for (auto& p : parts_) p->close();
    exit_thread();
  }

  // "threw: <what>" for the exception being handled.
  static std::string thrown_what() {
    try {
      throw;
    } catch (const std::exception& e) {
      return std::string("threw: ") + e.what();
    } catch (...) {
      return "threw a non-std exception";
    }
  }

  // Takes up to `want` items in one claim (waiting for the first, not for
  // more); in ordered modes with the first one's sequence number (the rest
  // follow it), waiting while the last would be lag_ or more items ahead of
  // the oldest result not yet written.
  bool take(std::size_t id, const Context& ctx, std::vector<In>& batch, std::size_t want,
            std::uint64_t& seq) {
    WorkerCounters& c = workers_[id];
    Queue<In>& q = opt_.ordering == Ordering::kPerKey ? *parts_[id] : input_;
    std::uint64_t pos = 0;
    // Stopped (e.g. by fail-fast after this worker's last item): read no more.
    if (ctx.stop_requested()) return false;
    auto out = std::back_inserter(batch);
    // Ordered modes number items by their place in the input's pull order:
    // no lock between taking items and numbering them.
    BulkResult r =
        ordered_ ? q.try_pull_many_positioned(out, want, &pos) : q.try_pull_many(out, want);
    if (r.status == StatusCode::kWouldBlock) {
      r = timed(c.blocked_in_ns, c.in_since, [&] {
        return ordered_ ? q.pull_many_positioned(out, want, &pos, ctx)
                        : q.pull_many(out, want, ctx);
      });
    }
    if (r.count == 0) return false;
    // Per key, the dispatcher counted the item when it took it from the input.
    if (opt_.ordering != Ordering::kPerKey) c.in.fetch_add(r.count, std::memory_order_relaxed);
    if (ordered_) {
      seq = pos - base_;
      const std::uint64_t last = seq + r.count - 1;
      // Too far ahead of the oldest result not yet written: wait, so that the
      // reorder buffer stays bounded (lag_ slots; batch_cap_ <= lag_, so the
      // workers holding the older items can always let it move).
      if (last - oldest_.load(std::memory_order_acquire) >= lag_) {
        std::unique_lock lock(lag_mu_);
        if (!lag_cv_.wait(lock, ctx.token(),
                          [&] { return last - oldest_.load(std::memory_order_acquire) < lag_; })) {
          return false;  // stopped: the items are dropped
        }
      }
    }
    return true;
  }

  // The next batch: as many items as take about kBatchWork in fn, judged by
  // the last batch, within [1, batch_cap_].
  std::size_t next_want(Clock::duration took, std::size_t n) const {
    const auto per_item = took / static_cast<Clock::rep>(n);
    if (per_item <= Clock::duration::zero()) return batch_cap_;
    const auto k = static_cast<std::size_t>(kBatchWork / per_item);
    return std::clamp<std::size_t>(k, 1, batch_cap_);
  }

  Result<Out> invoke(In&& item, const Context& ctx) {
    try {
      return fn_(std::move(item), ctx);
    } catch (...) {
      return Status(StatusCode::kInternal, "stage fn " + thrown_what());
    }
  }

  // Adaptive: a place under the limit, waiting while `limit_` workers hold one.
  bool enter(const Context& ctx) {
    std::unique_lock lock(gate_mu_);
    // wait() returns pred() once the token has fired: a free place must not
    // let a stopped worker in.
    if (!gate_cv_.wait(lock, ctx.token(), [&] { return active_ < aimd_->limit(); }) ||
        ctx.stop_requested()) {
      return false;
    }
    ++active_;
    return true;
  }
  // Gives the place back; with a latency sample, feeds the limit (AIMD);
  // `ok`: the call succeeded (a fast failure is no sample, AimdLimit::observe).
  void leave(std::optional<Clock::duration> took, bool ok = true) {
    std::lock_guard lock(gate_mu_);
    --active_;
    const std::size_t before = aimd_->limit();
    if (took) aimd_->observe(std::chrono::duration<double>(*took).count(), ok);
    // Wake only as many as there are places: up to `width` workers wait
    // here, and waking them all per call swamped the cores.
    if (active_ < aimd_->limit()) gate_cv_.notify_one();
    if (aimd_->limit() > before && active_ + 1 < aimd_->limit()) gate_cv_.notify_one();
  }
  void work(std::size_t id) {
    const Context ctx(stop_.get_token());
    WorkerCounters& c = workers_[id];
    std::vector<In> batch;
    std::vector<Result<Out>> results;
    batch.reserve(batch_cap_);
    results.reserve(batch_cap_);
    std::size_t want = 1;  // the first batch measures fn
    std::uint64_t seq = 0;
    const bool adaptive = opt_.adaptive.enabled;
    const bool timing = adaptive || batch_cap_ > 1;
    for (;;) {
      if (adaptive && !enter(ctx)) break;
      if (!take(id, ctx, batch, want, seq)) {
        if (adaptive) leave(std::nullopt);
        break;
      }
      c.busy.store(true, std::memory_order_relaxed);
      const auto t0 = timing ? Clock::now() : Clock::time_point{};
      bool stopped = false;
      bool all_ok = true;  // adaptive: one item, whose latency may be a sample
      // batch_cap_ > 1 only with kContinue: no result is skipped below.
      for (std::size_t i = 0; i < batch.size(); ++i) {
        Result<Out> res = invoke(std::move(batch[i]), ctx);
        if (ctx.stop_requested()) {  // stopped while it ran: the results are dropped
          stopped = true;
          break;
        }
        if (!res.ok()) {
          c.errors.fetch_add(1, std::memory_order_relaxed);
          all_ok = false;
        }
        // Filtered in an ordered mode only once fail-fast has stopped the
        // stage: its place stays unwritten, so nothing after it is written.
        if (!apply_error_mode(res)) continue;
        results.push_back(std::move(res));
      }
      const auto took = timing ? Clock::now() - t0 : Clock::duration{};
      if (adaptive) leave(took, all_ok);
      c.busy.store(false, std::memory_order_relaxed);
      const std::size_t n = batch.size();
      batch.clear();
      if (stopped) break;
      if (batch_cap_ > 1) want = next_want(took, n);
      bool written = true;
      if (!results.empty()) {
        written = ordered_ ? emit_ordered(seq, results, ctx, id) : emit_all(results, ctx, id);
      }
      // First-success: results holds only the success this worker claimed.
      // Only its writer stops the stage, once it is written: a stop while
      // it waited for room in the output would drop it.
      const bool success_written =
          opt_.errors == ErrorMode::kFirstSuccess && written && !results.empty();
      results.clear();
      if (!written) break;
      if (success_written) {
        first_success_written_.store(true, std::memory_order_relaxed);
        stop_.request_stop();
        break;
      }
      // Another worker claimed the success: take no more items.
      if (opt_.errors == ErrorMode::kFirstSuccess &&
          success_claimed_.load(std::memory_order_relaxed)) {
        break;
      }
    }
    exit_thread();
  }

  // Returns false if the result must not be written.
  bool apply_error_mode(const Result<Out>& res) {
    if (opt_.errors == ErrorMode::kContinue) return true;
    std::lock_guard lock(result_mu_);
    if (stopped_by_mode_) {
      errors_after_stop_.fetch_add(res.ok() ? 0 : 1, std::memory_order_relaxed);
      return false;
    }
    if (opt_.errors == ErrorMode::kFailFast) {
      if (res.ok()) return true;
      stopped_by_mode_ = true;
      mode_status_ = res.status();
      stop_.request_stop();
      return false;
    }
    // kFirstSuccess
    if (!res.ok()) {
      if (mode_status_.ok()) mode_status_ = res.status();
      return false;
    }
    // Claimed: the caller writes it, then stops the stage. mode_status_
    // keeps the first error: wait()'s answer should the write fail.
    stopped_by_mode_ = true;
    success_claimed_.store(true, std::memory_order_relaxed);
    return true;
  }

  bool emit(Result<Out>&& res, const Context& ctx, std::size_t id) {
    Status s = output_.try_push(std::move(res));
    if (s.code() == StatusCode::kWouldBlock) {
      s = timed(workers_[id].blocked_out_ns, workers_[id].out_since,
                [&] { return output_.push(std::move(res), ctx); });
    }
    if (!s.ok()) {
      if (s.code() == StatusCode::kClosed) {
        // Closed by its consumer (the stage closes it only once every
        // thread is out): stop, rather than run fn for results nobody reads
        // or leave others waiting on the lag or a per-key queue.
        output_closed_.store(true, std::memory_order_relaxed);
        stop_.request_stop();
      }
      return false;
    }
    // Release: stats() reading this also sees the item's `in` (see there).
    workers_[id].out.fetch_add(1, std::memory_order_release);
    return true;
  }

  bool emit_all(std::vector<Result<Out>>& results, const Context& ctx, std::size_t id) {
    for (auto& r : results) {
      if (!emit(std::move(r), ctx, id)) return false;
    }
    return true;
  }

  // Ordered modes: park the results (seq, seq + 1, ...) in the reorder
  // buffer, then write every result the window allows, in sequence order.
  // Writers hold reorder_mu_ so that writes happen in that order.
  bool emit_ordered(std::uint64_t seq, std::vector<Result<Out>>& results, const Context& ctx,
                    std::size_t id) {
    std::lock_guard lock(reorder_mu_);
    for (auto& r : results) slots_[seq++ % lag_].emplace(std::move(r));
    return drain_window(ctx, id);
  }

  bool drain_window(const Context& ctx, std::size_t id) {
    const std::uint64_t old_oldest = oldest_.load(std::memory_order_relaxed);
    std::uint64_t oldest = old_oldest;
    bool ok = true;
    // Slots past the last taken number are empty, so the window bound suffices.
    for (std::uint64_t s = oldest; s < oldest + window_; ++s) {
      auto& slot = slots_[s % lag_];
      if (slot && !emitted_[s % lag_]) {
        if (!emit(std::move(*slot), ctx, id)) {
          ok = false;
          break;
        }
        slot.reset();
        emitted_[s % lag_] = true;
      }
      if (s == oldest && emitted_[s % lag_]) {
        emitted_[s % lag_] = false;
        ++oldest;  // the window slides: the loop bound moves with it
      }
    }
    if (oldest != old_oldest) {
      {
        std::lock_guard lag_lock(lag_mu_);  // no lost wake-up for a taker checking the lag
        oldest_.store(oldest, std::memory_order_release);
      }
      lag_cv_.notify_all();
    }
    return ok;
  }

  void exit_thread() {
    std::lock_guard lock(done_mu_);
    if (--live_ == 0) {
      output_.close();  // the single closer: the last thread out
      {
        std::lock_guard rl(result_mu_);
        // What stopped the stage first decides; first-success's error counts
        // only once every item failed (nothing else stopped it).
        // First-success: a claimed success decides only once written (a
        // stop from outside or a closed output can fail its write).
        const bool first_success = opt_.errors == ErrorMode::kFirstSuccess;
        if (stopped_by_mode_ &&
            (!first_success || first_success_written_.load(std::memory_order_relaxed))) {
          result_ = first_success ? Status::Ok() : mode_status_;
        } else if (external_stop_.load(std::memory_order_relaxed)) {
          result_ = StatusCode::kCancelled;
        } else if (output_closed_.load(std::memory_order_relaxed)) {
          result_ = Status(
              StatusCode::kClosed,
              "stage " + opt_.name + ": its output was closed before every result was written");
        } else if (first_success && !mode_status_.ok()) {
          result_ = mode_status_;
        }
      }
      done_ = true;
      done_cv_.notify_all();
    }
  }

  const StageOptions<In> opt_;
  const Fn fn_;
  Queue<In>& input_;
  Queue<Result<Out>> output_;
  const bool ordered_;
  const std::uint64_t window_;   // results may be written this far past the oldest
  const std::uint64_t lag_;      // workers may take this far past the oldest
  const std::size_t batch_cap_;  // the most items a worker takes at once
  std::vector<WorkerCounters> workers_;
  std::vector<std::unique_ptr<Queue<In>>> parts_;  // kPerKey

  std::stop_source stop_;
  std::atomic<bool> external_stop_{false};
  std::atomic<bool> output_closed_{false};  // by its consumer, before the stage was done
  std::optional<std::stop_callback<ExternalStop>> on_external_stop_;

  std::uint64_t base_ = 0;  // ordered: the input's pull position when the stage started
  std::mutex lag_mu_;
  std::condition_variable_any lag_cv_;
  std::atomic<std::uint64_t> oldest_{0};  // oldest result not yet written; stored under lag_mu_

  std::mutex reorder_mu_;
  std::vector<std::optional<Result<Out>>> slots_;  // guarded by reorder_mu_
  std::vector<bool> emitted_;                      // guarded by reorder_mu_

  std::mutex result_mu_;
  bool stopped_by_mode_ = false;                    // guarded by result_mu_
  Status mode_status_;                              // guarded by result_mu_
  std::atomic<bool> success_claimed_{false};        // first-success: a worker writes one
  std::atomic<bool> first_success_written_{false};  // ... and it is in the output
  std::atomic<std::uint64_t> errors_after_stop_{0};

  std::mutex done_mu_;
  std::condition_variable_any done_cv_;
  std::size_t live_ = 0;
  bool done_ = false;
  Status result_;

  // Adaptive concurrency (opt_.adaptive.enabled); guarded by gate_mu_.
  mutable std::mutex gate_mu_;
  std::condition_variable_any gate_cv_;
  std::optional<detail::AimdLimit> aimd_;
  std::size_t active_ = 0;

  std::vector<std::thread> threads_;
};

}  // namespace sluice
