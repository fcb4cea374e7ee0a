// Batcher<T> groups items into batches for a sink: a flush happens when the
// batch reaches max_batch_size items or max_batch_bytes bytes, when
// max_batch_delay has passed since its first item was added, on flush(),
// or on shutdown. Each flush has exactly one reason. Spec: ../shared/seeds/batcher.md.
//
// Thread safety: add*, try_add, flush, shutdown and stats may be called from
//   any number of threads. The sink is called from one thread at a time when
//   flushers == 1 (the default), or from up to `flushers` threads at once.
// Blocking: add/add_batch/add_with_ack wait while the bounded input is full
//   (B2); flush waits for its flush; shutdown waits for the drain. All take a
//   Context; try_add never waits.
// Ordering: items of a batch are in add order (O1). With one flusher, an item
//   added before another is written no later than it (O2); with several,
//   batches are dispatched in order but may complete out of order (O3).
// Cancellation: a Context ending while add waits returns kCancelled /
//   kDeadlineExceeded and leaves the item with the caller (B3). When the
//   shutdown deadline passes, sink calls in progress see their Context's stop
//   token fire, and every item not yet handed to the sink is dropped and
//   counted (dropped_on_shutdown), so shutdown never waits past its deadline.
// Ownership: add moves the item in only on kOk. Each batch is a fresh vector,
//   handed to the sink by rvalue: the sink owns it during the call (I3, I4).
//   The batcher owns one run-loop thread (plus `flushers` threads when > 1);
//   the destructor shuts down without a deadline (drains) and joins them.
//   After a shutdown whose Context ended, the destructor returns at once:
//   sink calls still running are abandoned, their items count as dropped,
//   and their threads, detached, own the batcher's state (the sink and any
//   items left) until the sink returns. Such a sink must own what it uses.
//   A supplied Clock must outlive the Batcher object.
// Errors: Status codes. A sink that throws is a failed attempt (F1), caught
//   and counted; nothing escapes into any thread. A failed attempt is retried
//   up to max_attempts (default 1: no retry), then the flush has failed.
//   Bad options: create() returns kInvalidArgument (C1-C5, E3).
// Observability: a sink may take a FlushInfo (why, sequence, attempt, oldest
//   wait); an optional logger hears of sink errors, slow flushes and items
//   dropped on shutdown. Neither is on the add path: the logger runs on the
//   thread that ran the sink (or that called shutdown), outside every lock.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "sluice/clock.h"
#include "sluice/context.h"
#include "sluice/detail/cv_wait.h"
#include "sluice/metrics.h"
#include "sluice/queue.h"
#include "sluice/status.h"

namespace sluice {

enum class FlushReason : std::uint8_t { kSize, kBytes, kTime, kShutdown, kManual };
inline constexpr std::size_t kFlushReasonCount = 5;
std::string_view flush_reason_name(FlushReason reason) noexcept;

// The sink: writes one batch. ctx carries the batcher's abort token (fires
// when a shutdown deadline passes) and a deadline of now + flush_timeout.
template <class T>
using BatchSink = std::function<Status(std::vector<T>&& batch, const Context& ctx)>;

// What a sink may know of the batch it writes (batcher.md v1.2, "per-flush
// metadata").
struct FlushInfo {
  FlushReason reason = FlushReason::kSize;
  std::uint64_t seq = 0;          // 1, 2, ... in dispatch order: retries keep theirs
  std::uint32_t attempt = 1;      // 1 on the first call, up to max_attempts
  std::size_t items = 0;          // in this batch
  std::size_t bytes = 0;          // by item_bytes; 0 without max_batch_bytes
  Clock::duration oldest_wait{};  // from the add of its first item to the flush (batcher's clock)
};

// A sink that wants the metadata. Each attempt gets a fresh copy of the batch
// (retries need the items back), so a retrying batcher copies: T must be
// copyable when max_attempts > 1.
template <class T>
using BatchSinkWithInfo =
    std::function<Status(std::vector<T>&& batch, const FlushInfo& info, const Context& ctx)>;

// What a logger hears. Never called on the add path.
struct BatcherEvent {
  enum class Kind : std::uint8_t {
    kSinkError,  // an attempt failed (status); retried if attempt < max_attempts
    kSlowFlush,  // an attempt took longer than slow_flush (status: its result)
    kDropped,    // items were dropped on shutdown (items: how many)
    // item_bytes threw for an item (status says what): it was taken as
    // max_batch_bytes, so flushed alone; nothing is lost.
    kItemBytesFailed,
  };
  Kind kind = Kind::kSinkError;
  std::string_view name;                 // BatcherOptions::name
  FlushInfo flush;                       // kSinkError, kSlowFlush
  Status status;                         // kSinkError, kSlowFlush, kItemBytesFailed
  std::chrono::duration<double> took{};  // kSinkError, kSlowFlush: the attempt's duration
  std::uint64_t items = 0;               // kDropped
};
using BatcherLogger = std::function<void(const BatcherEvent&)>;

template <class T>
struct BatcherOptions {
  std::string name = "batcher";                                     // metrics label
  std::size_t max_batch_size = 512;                                 // > 0 (C1)
  Clock::duration max_batch_delay = std::chrono::milliseconds(10);  // > 0 (C2)
  // Byte trigger, off when 0. A batch is flushed before an item would take it
  // past max_batch_bytes; an item larger than the limit is flushed alone.
  std::size_t max_batch_bytes = 0;
  // Required with max_batch_bytes. One that throws for an item takes it as
  // max_batch_bytes (flushed alone) and tells the logger (kItemBytesFailed).
  std::function<std::size_t(const T&)> item_bytes;
  std::size_t queue_depth = 1024;                           // bounded input; 0 -> 1024 (C3)
  Clock::duration flush_timeout = std::chrono::seconds(5);  // <= 0 -> 5 s (C4)
  std::size_t flushers = 1;                                 // sink calls in flight (O3 when > 1)
  BatchSink<T> sink;  // this or sink_with_info is required (C5), not both
  BatchSinkWithInfo<T> sink_with_info;
  // Sink calls per batch: a failed attempt (error or throw) is retried at
  // once with a copy of the batch while attempts remain and the flush's
  // Context has not ended. Needs a copyable T when > 1.
  std::uint32_t max_attempts = 1;
  BatcherLogger logger;                                  // optional; must not block for long
  Clock::duration slow_flush = Clock::duration::zero();  // log attempts slower; 0: never
  Clock* clock = nullptr;                                // nullptr: Clock::steady()
};

// Counters of a Batcher. Conservation (M2) holds in every snapshot:
//   enqueued == flushed_ok + flushed_fail + dropped_on_shutdown + in_flight,
//   in_flight == queued + buffered + flushing.
struct BatcherStats {
  std::uint64_t enqueued = 0;             // items accepted (add, add_batch, add_with_ack, try_add)
  std::uint64_t flushed_ok = 0;           // items in flushes whose sink returned kOk
  std::uint64_t flushed_fail = 0;         // items in flushes whose sink failed or threw
  std::uint64_t dropped_on_shutdown = 0;  // items never handed to the sink (shutdown deadline)
  std::uint64_t in_flight = 0;
  std::uint64_t queued = 0;           // in the bounded input (queue depth gauge)
  std::uint64_t buffered = 0;         // in the batch being built
  std::uint64_t flushing = 0;         // inside sink calls
  std::uint64_t try_add_refused = 0;  // try_add calls that found the input full or closed
  // Per flush (a sink call, counted as it starts; a batch dropped before one
  // is none): once no sink call runs, they sum to flushes_ok + flushes_failed.
  std::array<std::uint64_t, kFlushReasonCount> flushes_by_reason{};
  std::uint64_t flushes_ok = 0;
  std::uint64_t flushes_failed = 0;
  std::uint64_t sink_exceptions = 0;  // failed attempts whose sink threw
  std::uint64_t retries = 0;          // sink calls after a batch's first (max_attempts > 1)
  Histogram batch_size{{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}};
  Histogram flush_seconds_ok{{1e-5, 1e-4, 5e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1, 0.5, 1, 5, 10}};
  Histogram flush_seconds_fail{{1e-5, 1e-4, 5e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1, 0.5, 1, 5, 10}};
};

// The M1 metric set in the Prometheus text format, labelled name="<name>".
std::string to_prometheus(const BatcherStats& stats, std::string_view name);

namespace detail {

// The state every batcher thread touches, shared by the Batcher handle and
// its threads: a sink call the destructor abandons (it ignored cancellation)
// finishes against live state, and the last thread out frees it.
template <class T>
class BatcherCore {
 public:
  explicit BatcherCore(BatcherOptions<T> o)
      : opt_(std::move(o)),
        clock_(opt_.clock != nullptr ? opt_.clock : &Clock::steady()),
        steady_(clock_->is_steady()),
        input_(opt_.queue_depth) {
    live_threads_ = 1 + (opt_.flushers > 1 ? opt_.flushers : 0);
    if (opt_.flushers > 1) {
      jobs_ = std::make_unique<Queue<Batch>>(0);  // rendezvous: at most `flushers` in flight
    }
  }

  BatcherCore(const BatcherCore&) = delete;
  BatcherCore& operator=(const BatcherCore&) = delete;

  bool steady() const noexcept { return steady_; }
  const BatcherOptions<T>& options() const { return opt_; }

  Status add(T&& item, const Context& ctx) {
    const Clock::duration::rep stamp = note_add_if_idle();
    Entry e{std::move(item), nullptr};
    Status s = input_.push(std::move(e), ctx);
    if (!s.ok()) {
      withdraw_add_hint(stamp);
      item = std::move(e.item);
    }
    return s;
  }

  Status try_add(T&& item) {
    const Clock::duration::rep stamp = note_add_if_idle();
    Entry e{std::move(item), nullptr};
    Status s = input_.try_push(std::move(e));
    if (!s.ok()) {
      withdraw_add_hint(stamp);
      item = std::move(e.item);
      try_add_refused_.fetch_add(1, std::memory_order_relaxed);
    }
    return s;
  }

  Status add_batch(std::span<T> items, const Context& ctx) {
    if (items.size() > opt_.queue_depth) {
      return {StatusCode::kInvalidArgument, "add_batch: more items than queue_depth"};
    }
    // No item, no add time: a hint left by an accepted empty group would
    // start the next batch's clock (a time flush with none of its delay).
    if (items.empty()) return input_.closed() ? StatusCode::kClosed : StatusCode::kOk;
    std::vector<Entry> entries;
    entries.reserve(items.size());
    for (T& item : items) entries.push_back(Entry{std::move(item), nullptr});
    const Clock::duration::rep stamp = note_add_if_idle();
    Status s = input_.push_all(std::span<Entry>(entries), ctx);
    if (!s.ok()) {
      withdraw_add_hint(stamp);
      for (std::size_t i = 0; i < items.size(); ++i) items[i] = std::move(entries[i].item);
    }
    return s;
  }

  Result<std::future<Status>> add_with_ack(T&& item, const Context& ctx) {
    auto ack = std::make_unique<Ack>(this);
    std::future<Status> future = ack->promise.get_future();
    link(*ack);  // before the loop can see it: abandon() must find every pending ack
    const Clock::duration::rep stamp = note_add_if_idle();
    Entry e{std::move(item), std::move(ack)};
    Status s = input_.push(std::move(e), ctx);
    if (!s.ok()) {
      withdraw_add_hint(stamp);
      item = std::move(e.item);
      return s;  // e's ack settles unseen as it goes
    }
    return future;
  }

  std::stop_token shutdown_token() const { return shut_.get_token(); }

  Status flush(const Context& ctx) {
    if (ctx.stop_requested()) return StatusCode::kCancelled;
    if (shutdown_started_.load(std::memory_order_acquire)) return StatusCode::kClosed;
    auto req = std::make_shared<FlushRequest>();
    {
      std::lock_guard lock(wake_mu_);
      // The run loop took its last requests: none would answer this one
      // (a shutdown between the check above and here waited for ever).
      if (requests_closed_) return StatusCode::kClosed;
      {
        // From now on it hears of every batch that fails, the batch in
        // flight included: its items were added before this call.
        std::lock_guard fence_lock(fence_mu_);
        fence_watchers_.push_back(req);
      }
      flush_requests_.push_back(req);
      wake_.request_stop();
    }
    std::unique_lock lock(req->mu);
    if (!detail::wait_for(req->cv, lock, ctx, [&] { return req->done; })) return ctx.err();
    return req->status;
  }

  Status shutdown(const Context& ctx) {
    // Every caller closes (it is idempotent): one whose deadline has passed
    // must not abort() while another caller has yet to close the input, or
    // adds accepted meanwhile would be dropped uncounted.
    shutdown_started_.store(true, std::memory_order_release);
    input_.close();
    shut_.request_stop();  // after the close: a waiter it wakes sees kClosed on its next add
    wake();
    std::unique_lock lock(done_mu_);
    if (detail::wait_for(done_cv_, lock, ctx, [&] { return finished_; })) {
      lock.unlock();
      // kOk says every accepted item reached the sink (I6): not if another
      // shutdown's deadline dropped some, before this call or during it.
      std::lock_guard stats_lock(stats_mu_);
      if (aborted_ && stats_.dropped_on_shutdown > 0) return abort_status_;
      return StatusCode::kOk;
    }
    lock.unlock();
    const Status err = ctx.err();
    abort(err);
    return err;
  }

  BatcherStats stats() const {
    std::lock_guard lock(stats_mu_);
    BatcherStats s = stats_;
    const std::uint64_t pushed = input_.stats().pushed;
    s.enqueued = pushed;
    s.queued = pushed - taken_;
    s.in_flight = s.queued + s.buffered + s.flushing;
    s.try_add_refused = try_add_refused_.load(std::memory_order_relaxed);
    return s;
  }

  void wake() {
    std::lock_guard lock(wake_mu_);
    wake_.request_stop();
  }

  // The destructor, after a shutdown whose Context ended: if threads still
  // run (a sink ignores its stop token), stop reading the user's clock,
  // count what sink calls hold as dropped, resolve every pending ack, and
  // return true: the caller detaches the threads, which own this state.
  bool abandon() {
    {
      std::lock_guard lock(stats_mu_);
      if (!aborted_) return false;
    }
    {
      std::lock_guard lock(done_mu_);
      if (finished_) return false;  // every thread is out: joins are immediate
    }
    {
      std::lock_guard lock(clock_mu_);
      clock_ = nullptr;
    }
    std::uint64_t dropped = 0;
    {
      std::lock_guard lock(stats_mu_);
      abandoned_ = true;  // later sink returns change no counter
      dropped = stats_.flushing;
      stats_.dropped_on_shutdown += dropped;
      stats_.flushing = 0;
    }
    log_dropped(dropped);
    std::lock_guard lock(acks_mu_);
    while (acks_ != nullptr) {
      Ack& a = *acks_;
      settle_locked(a, a.in_sink ? abandoned_status() : dropped_status());
    }
    return true;
  }

  // ---- threads ----
  void run_flusher() {
    for (Batch& b : *jobs_) run_sink(b);
    thread_exit();
  }

  // The run loop: owns the batch being built (I1).
  void run() {
    Batch cur = fresh_batch();
    std::vector<Entry> staging;
    staging.reserve(reserve_size());
    bool closed = false;
    while (!closed) {
      std::vector<std::shared_ptr<FlushRequest>> requests;
      std::stop_token wake_token;
      {
        std::lock_guard lock(wake_mu_);
        requests.swap(flush_requests_);
        if (wake_.stop_requested()) wake_ = std::stop_source();
        wake_token = wake_.get_token();
      }
      if (!requests.empty()) {
        manual_flush(cur, staging, closed);
        complete(requests, nullptr);
        continue;
      }
      if (cur.first && now() - *cur.first >= opt_.max_batch_delay) {
        flush(cur, FlushReason::kTime);
      }
      Context ctx(wake_token);
      if (cur.first && steady_) ctx = Context(wake_token, *cur.first + opt_.max_batch_delay);
      staging.clear();
      const BulkResult r = input_.pull_many(std::back_inserter(staging),
                                            opt_.max_batch_size - cur.items.size(), ctx);
      absorb(cur, staging);
      if (r.status == StatusCode::kClosed) closed = true;
    }
    flush(cur, FlushReason::kShutdown);
    if (jobs_) {
      jobs_->close();
      wait_idle();
    }
    std::vector<std::shared_ptr<FlushRequest>> requests;
    {
      std::lock_guard lock(wake_mu_);
      requests.swap(flush_requests_);
      requests_closed_ = true;
    }
    const Status closed_status(StatusCode::kClosed);
    complete(requests, &closed_status);
    thread_exit();
  }

 private:
  // One per add_with_ack. Linked in acks_ (under acks_mu_) until settled, so
  // abandon() can resolve what threads it leaves behind still hold. Settled
  // at the latest when destroyed: no future is left pending.
  struct Ack {
    explicit Ack(BatcherCore* o) : owner(o) {}
    Ack(const Ack&) = delete;
    Ack& operator=(const Ack&) = delete;
    ~Ack() { owner->settle_dropped(*this); }
    BatcherCore* owner;
    std::promise<Status> promise;
    Ack* prev = nullptr;  // acks_ list, guarded by acks_mu_
    Ack* next = nullptr;
    bool linked = false;
    bool in_sink = false;  // its batch was handed to the sink
  };
  using AckPtr = std::unique_ptr<Ack>;

  struct Entry {
    T item;
    AckPtr ack;  // null for plain adds
  };
  struct Batch {
    std::vector<T> items;
    std::vector<AckPtr> acks;
    std::size_t bytes = 0;
    std::optional<Clock::time_point> first;  // when its first item was added
    FlushInfo info;                          // set when flushed
  };
  struct FlushRequest {
    std::mutex mu;
    std::condition_variable_any cv;
    bool done = false;
    Status status;
    Status error;  // the first sink error since it was made; guarded by fence_mu_
  };

  // The time on the batcher's clock. A manual clock is read under clock_mu_,
  // so that abandon() can stop all reads before the clock may go away.
  Clock::time_point now() {
    if (steady_) return std::chrono::steady_clock::now();
    std::lock_guard lock(clock_mu_);
    if (clock_ != nullptr) last_now_ = clock_->now();
    return last_now_;
  }

  // The run loop is parked, so it will see this item only after a futex
  // wake-up, which can take milliseconds on a busy host: record the add time
  // so the wake-up does not delay the time trigger. A busy loop costs the
  // producer one relaxed load and no clock read. Returns the time it left,
  // or 0.
  Clock::duration::rep note_add_if_idle() {
    if (input_.waiting_pullers() == 0) return 0;
    Clock::duration::rep expected = 0;
    Clock::duration::rep t = now().time_since_epoch().count();
    if (t == 0) t = 1;
    return idle_add_hint_.compare_exchange_strong(expected, t, std::memory_order_acq_rel) ? t : 0;
  }
  // The add that left `stamp` was refused: its time is no item's, and left
  // behind it would start the next batch's clock early (a time flush with
  // none of the delay passed). Unless the loop has taken it meanwhile.
  void withdraw_add_hint(Clock::duration::rep stamp) {
    if (stamp != 0) {
      idle_add_hint_.compare_exchange_strong(stamp, 0, std::memory_order_acq_rel);
    }
  }

  // Shutdown deadline passed: everything not yet handed to the sink is dropped.
  void abort(const Status& why) {
    std::uint64_t dropped = 0;
    {
      std::lock_guard lock(stats_mu_);
      if (!aborted_) {
        aborted_ = true;
        abort_status_ = Status(why.code(),
                               "a shutdown's deadline cut the drain short: items not yet handed "
                               "to the sink were dropped (dropped_on_shutdown)");
        const std::uint64_t pushed = input_.stats().pushed;  // final: input is closed
        dropped = (pushed - taken_) + stats_.buffered;
        stats_.dropped_on_shutdown += dropped;
        taken_ = pushed;
        stats_.buffered = 0;
      }
    }
    abort_.request_stop();
    wake();
    log_dropped(dropped);
  }

  // Moves pulled entries into the batch, flushing on size and bytes.
  void absorb(Batch& cur, std::vector<Entry>& staging) {
    if (staging.empty()) return;
    // The batch's clock starts at the add of its first item: the hint if a
    // producer left one (the loop was parked), else now (the loop was awake,
    // so it is taking the items as they come). Read before `buffered` shows
    // the items, so that anyone who sees them sees a stamp no later.
    const Clock::time_point t = now();
    const Clock::duration::rep hint = idle_add_hint_.exchange(0, std::memory_order_acq_rel);
    const Clock::time_point start =
        hint != 0 ? (std::min)(t, Clock::time_point(Clock::duration(hint))) : t;
    {
      std::lock_guard lock(stats_mu_);
      if (aborted_) {
        drop(staging);  // already counted by abort()
        return;
      }
      taken_ += staging.size();
      stats_.buffered += staging.size();
    }
    for (Entry& e : staging) {
      if (opt_.max_batch_bytes > 0) {
        const std::size_t b = item_size(e.item);
        if (!cur.items.empty() && cur.bytes + b > opt_.max_batch_bytes)
          flush(cur, FlushReason::kBytes);
        cur.bytes += b;
      }
      if (cur.items.empty()) cur.first = &e == &staging.front() ? start : t;
      cur.items.push_back(std::move(e.item));
      if (e.ack) cur.acks.push_back(std::move(e.ack));
      if (cur.items.size() >= opt_.max_batch_size) {
        flush(cur, FlushReason::kSize);
      } else if (opt_.max_batch_bytes > 0 && cur.bytes >= opt_.max_batch_bytes) {
        flush(cur, FlushReason::kBytes);
      }
    }
    staging.clear();
  }

  // Flush(): take what was queued when it was called, flush it with the
  // batch, wait for every batch in flight. Each request has heard of the
  // errors (finish_dispatch).
  void manual_flush(Batch& cur, std::vector<Entry>& staging, bool& closed) {
    std::uint64_t limit = input_.approx_size();
    while (limit > 0) {
      staging.clear();
      const BulkResult r = input_.try_pull_many(
          std::back_inserter(staging),
          std::min<std::uint64_t>(limit, opt_.max_batch_size - cur.items.size()));
      if (r.count == 0) {
        closed = r.status == StatusCode::kClosed;
        break;
      }
      limit -= r.count;
      absorb(cur, staging);
    }
    flush(cur, FlushReason::kManual);
    wait_idle();
  }

  Batch fresh_batch() const {
    Batch b;
    b.items.reserve(reserve_size());  // I4: a fresh allocation per batch
    return b;
  }
  // One pull takes at most queue_depth items, and max_batch_size may be set
  // out of reach (no size trigger): reserving it would throw on the loop's
  // thread (length_error, bad_alloc) and terminate.
  std::size_t reserve_size() const { return (std::min)(opt_.max_batch_size, opt_.queue_depth); }

  void flush(Batch& cur, FlushReason reason) {
    const std::size_t n = cur.items.size();
    if (n == 0) return;
    bool aborted = false;
    {
      std::lock_guard lock(stats_mu_);
      aborted = aborted_;
      if (!aborted) {
        stats_.buffered -= n;
        stats_.flushing += n;
      }
    }
    if (aborted) {
      resolve(cur.acks, dropped_status());  // counted by abort()
      cur = fresh_batch();
      return;
    }
    {
      std::lock_guard lock(fence_mu_);
      ++outstanding_;
    }
    cur.info.reason = reason;
    cur.info.seq = ++flush_seq_;
    cur.info.items = n;
    cur.info.bytes = cur.bytes;
    if (cur.first) cur.info.oldest_wait = (std::max)(Clock::duration::zero(), now() - *cur.first);
    Batch out = std::exchange(cur, fresh_batch());
    if (jobs_) {
      // Waits for a free flusher (backpressure), but not past the shutdown
      // deadline: flushers stuck in a sink must not hold the loop.
      if (!jobs_->push(std::move(out), Context(abort_.get_token())).ok()) drop_dispatched(out);
    } else {
      run_sink(out);
    }
  }

  void run_sink(Batch& b) {
    bool aborted = false;
    {
      std::lock_guard lock(stats_mu_);
      aborted = aborted_;
      if (!aborted) {  // a flush is a sink call: a batch dropped before one is none
        ++stats_.flushes_by_reason[static_cast<std::size_t>(b.info.reason)];
        stats_.batch_size.observe(static_cast<double>(b.items.size()));
      }
    }
    if (aborted) {  // the deadline passed before the sink got it
      drop_dispatched(b);
      return;
    }
    if (!b.acks.empty()) {
      std::lock_guard lock(acks_mu_);
      for (auto& a : b.acks) a->in_sink = true;
    }
    const std::size_t n = b.items.size();
    const Context ctx(abort_.get_token(), std::chrono::steady_clock::now() + opt_.flush_timeout);
    const auto t0 = std::chrono::steady_clock::now();
    Status st;
    for (std::uint32_t attempt = 1;; ++attempt) {
      b.info.attempt = attempt;
      const bool last = attempt >= opt_.max_attempts;
      const auto ta = std::chrono::steady_clock::now();
      bool threw = false;
      if (last) {
        st = call_sink(std::move(b.items), b.info, ctx, threw);
      } else {
        std::vector<T> copy;
        st = copy_items(b.items, copy);  // a copy that throws fails this attempt only
        if (st.ok()) st = call_sink(std::move(copy), b.info, ctx, threw);
      }
      const std::chrono::duration<double> took = std::chrono::steady_clock::now() - ta;
      const bool retry = !st.ok() && !last && !ctx.stop_requested() && !ctx.expired();
      if (threw || retry) {  // the common success takes no extra lock
        std::lock_guard lock(stats_mu_);
        if (!abandoned_) {
          if (threw) ++stats_.sink_exceptions;
          if (retry) ++stats_.retries;
        }
      }
      if (opt_.logger) {
        if (!st.ok()) log_flush(BatcherEvent::Kind::kSinkError, b.info, st, took);
        if (opt_.slow_flush > Clock::duration::zero() && took > opt_.slow_flush) {
          log_flush(BatcherEvent::Kind::kSlowFlush, b.info, st, took);
        }
      }
      if (!retry) break;
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    resolve(b.acks, st);  // before `flushing` drops: whoever sees it drop sees the acks settled
    {
      std::lock_guard lock(stats_mu_);
      if (!abandoned_) {  // else abandon() counted these items as dropped
        stats_.flushing -= n;
        if (st.ok()) {
          stats_.flushed_ok += n;
          ++stats_.flushes_ok;
          stats_.flush_seconds_ok.observe(secs);
        } else {
          stats_.flushed_fail += n;
          ++stats_.flushes_failed;
          stats_.flush_seconds_fail.observe(secs);
        }
      }
    }
    finish_dispatch(st);
  }

  // The user's item_bytes; a throw must not leave the run loop's thread
  // (every accepted item would go with the process): the item counts as a
  // whole batch's bytes, so it goes alone, and the logger hears why.
  std::size_t item_size(const T& item) noexcept {
    Status why;
    try {
      return opt_.item_bytes(item);
    } catch (const std::exception& e) {
      why = {StatusCode::kInternal, std::string("item_bytes threw: ") + e.what()};
    } catch (...) {
      why = {StatusCode::kInternal, "item_bytes threw a non-std exception"};
    }
    if (opt_.logger) {
      BatcherEvent e;
      e.kind = BatcherEvent::Kind::kItemBytesFailed;
      e.name = opt_.name;
      e.status = std::move(why);
      call_logger(e);
    }
    return opt_.max_batch_bytes;
  }

  // One sink call; a throw is a failed attempt (F1).
  Status call_sink(std::vector<T>&& items, const FlushInfo& info, const Context& ctx, bool& threw) {
    try {
      if (opt_.sink_with_info) return opt_.sink_with_info(std::move(items), info, ctx);
      return opt_.sink(std::move(items), ctx);
    } catch (const std::exception& e) {
      threw = true;
      return {StatusCode::kInternal, std::string("sink threw: ") + e.what()};
    } catch (...) {
      threw = true;
      return {StatusCode::kInternal, "sink threw a non-std exception"};
    }
  }

  // A copy for an attempt that may be retried; create() refuses
  // max_attempts > 1 for a T that cannot be copied. T's copy may throw
  // (bad_alloc): that is a failed attempt, like a throwing sink, and must
  // not leave the batcher's thread.
  static Status copy_items(const std::vector<T>& items, std::vector<T>& out) noexcept {
    if constexpr (std::is_copy_constructible_v<T>) {
      try {
        out = items;
        return Status::Ok();
      } catch (const std::exception& e) {
        return {StatusCode::kInternal,
                std::string("copying the batch for an attempt threw: ") + e.what()};
      } catch (...) {
        return {StatusCode::kInternal, "copying the batch for an attempt threw"};
      }
    } else {
      (void)items;
      (void)out;
      return Status::Ok();  // unreachable: create() refused these options
    }
  }

  void log_flush(BatcherEvent::Kind kind, const FlushInfo& info, const Status& st,
                 std::chrono::duration<double> took) {
    BatcherEvent e;
    e.kind = kind;
    e.name = opt_.name;
    e.flush = info;
    e.status = st;
    e.took = took;
    call_logger(e);
  }
  void log_dropped(std::uint64_t items) {
    if (!opt_.logger || items == 0) return;
    BatcherEvent e;
    e.kind = BatcherEvent::Kind::kDropped;
    e.name = opt_.name;
    e.items = items;
    call_logger(e);
  }
  // A logger that throws must not take a batcher thread down with it.
  void call_logger(const BatcherEvent& e) noexcept {
    try {
      opt_.logger(e);
    } catch (...) {
    }
  }

  // A batch counted as flushing that never reached the sink: the shutdown
  // deadline passed first.
  void drop_dispatched(Batch& b) {
    resolve(b.acks, dropped_status());
    bool counted = false;
    {
      std::lock_guard lock(stats_mu_);
      if (!abandoned_) {
        counted = true;
        stats_.flushing -= b.items.size();
        stats_.dropped_on_shutdown += b.items.size();
      }
    }
    if (counted) log_dropped(b.items.size());
    b.items.clear();
    finish_dispatch(dropped_status());
  }

  void finish_dispatch(const Status& st) {
    std::lock_guard lock(fence_mu_);
    if (!st.ok()) {
      for (auto& r : fence_watchers_) {
        if (r->error.ok()) r->error = st;
      }
    }
    if (--outstanding_ == 0) fence_cv_.notify_all();
  }

  void wait_idle() {
    std::unique_lock lock(fence_mu_);
    fence_cv_.wait(lock, [&] { return outstanding_ == 0; });
  }

  static Status dropped_status() {
    return {StatusCode::kDropped,
            "dropped on shutdown: the deadline passed before the sink got it"};
  }
  static Status abandoned_status() {
    return {StatusCode::kDropped,
            "dropped on shutdown: the batcher was destroyed after the deadline while its sink, "
            "ignoring cancellation, still ran; the sink may yet write the item"};
  }

  void link(Ack& a) {
    std::lock_guard lock(acks_mu_);
    a.linked = true;
    a.next = acks_;
    if (acks_ != nullptr) acks_->prev = &a;
    acks_ = &a;
  }
  // Resolves the ack's future once: later settles do nothing.
  void settle(Ack& a, const Status& st) {
    std::lock_guard lock(acks_mu_);
    settle_locked(a, st);
  }
  void settle_dropped(Ack& a) {
    std::lock_guard lock(acks_mu_);
    if (a.linked) settle_locked(a, dropped_status());  // no message built when settled
  }
  void settle_locked(Ack& a, const Status& st) {
    if (!a.linked) return;
    a.linked = false;
    if (a.prev != nullptr) a.prev->next = a.next;
    if (a.next != nullptr) a.next->prev = a.prev;
    if (acks_ == &a) acks_ = a.next;
    a.prev = a.next = nullptr;
    a.promise.set_value(st);
  }
  void resolve(std::vector<AckPtr>& acks, const Status& st) {
    for (auto& a : acks) settle(*a, st);
    acks.clear();
  }
  void drop(std::vector<Entry>& entries) {
    for (Entry& e : entries) {
      if (e.ack) settle(*e.ack, dropped_status());
    }
    entries.clear();
  }
  // Answers flush requests: with *s, or (null) each with its first error.
  void complete(std::vector<std::shared_ptr<FlushRequest>>& reqs, const Status* s) {
    if (reqs.empty()) return;
    std::vector<Status> answers;
    answers.reserve(reqs.size());
    {
      std::lock_guard lock(fence_mu_);
      for (auto& r : reqs) {
        answers.push_back(s != nullptr ? *s : r->error);
        std::erase(fence_watchers_, r);
      }
    }
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      std::lock_guard lock(reqs[i]->mu);
      reqs[i]->done = true;
      reqs[i]->status = std::move(answers[i]);
      reqs[i]->cv.notify_all();
    }
  }

  void thread_exit() {
    std::lock_guard lock(done_mu_);
    if (--live_threads_ == 0) {
      finished_ = true;
      done_cv_.notify_all();
    }
  }

  const BatcherOptions<T> opt_;

  std::mutex clock_mu_;
  Clock* clock_;  // guarded by clock_mu_ unless steady_; null once abandoned
  const bool steady_;
  Clock::time_point last_now_{};  // guarded by clock_mu_

  // Before the queues: entries they still hold settle their acks on the way out.
  std::mutex acks_mu_;
  Ack* acks_ = nullptr;  // unsettled acks; guarded by acks_mu_

  Queue<Entry> input_;
  std::atomic<std::uint64_t> try_add_refused_{0};
  std::atomic<bool> shutdown_started_{false};
  std::stop_source shut_;  // fired when shutdown starts (shutdown_token)
  std::atomic<Clock::duration::rep> idle_add_hint_{0};  // see note_add_if_idle()
  std::stop_source abort_;

  mutable std::mutex stats_mu_;
  BatcherStats stats_;       // guarded by stats_mu_ (enqueued/queued/in_flight derived)
  std::uint64_t taken_ = 0;  // items the run loop took from input_; guarded by stats_mu_
  bool aborted_ = false;     // guarded by stats_mu_
  Status abort_status_;      // why aborted_: later shutdowns return it; guarded by stats_mu_
  bool abandoned_ = false;   // guarded by stats_mu_

  std::mutex wake_mu_;
  std::stop_source wake_;  // fired to interrupt the run loop's wait; replaced after
  std::vector<std::shared_ptr<FlushRequest>> flush_requests_;  // guarded by wake_mu_
  bool requests_closed_ = false;  // the run loop has taken its last; guarded by wake_mu_

  std::mutex fence_mu_;
  std::condition_variable fence_cv_;
  std::uint64_t outstanding_ = 0;  // batches handed to the sink path, not yet done
  std::vector<std::shared_ptr<FlushRequest>> fence_watchers_;  // flush() calls not yet answered

  std::mutex done_mu_;
  std::condition_variable_any done_cv_;
  std::size_t live_threads_ = 0;
  bool finished_ = false;

  std::unique_ptr<Queue<Batch>> jobs_;  // flushers > 1
  std::uint64_t flush_seq_ = 0;         // run loop only
};

}  // namespace detail

template <class T>
class Batcher {
  static_assert(std::is_nothrow_move_assignable_v<T>,
                "sluice::Batcher<T> needs a noexcept move assignment (a refused item is moved "
                "back to the caller)");
  using Core = detail::BatcherCore<T>;

 public:
  // Validates the options (C1-C5) and starts the run loop.
  static Result<std::unique_ptr<Batcher>> create(BatcherOptions<T> options) {
    if (options.max_batch_size == 0) return invalid("max_batch_size must be > 0");
    if (options.max_batch_delay <= Clock::duration::zero()) {
      return invalid("max_batch_delay must be > 0");
    }
    if (!options.sink && !options.sink_with_info) return invalid("a sink is required");
    if (options.sink && options.sink_with_info) {
      return invalid("set sink or sink_with_info, not both");
    }
    if (options.max_attempts == 0) return invalid("max_attempts must be >= 1");
    if (options.max_attempts > 1 && !std::is_copy_constructible_v<T>) {
      return invalid("max_attempts > 1 needs a copyable item type (each attempt gets a copy)");
    }
    if (options.max_batch_bytes > 0 && !options.item_bytes) {
      return invalid("max_batch_bytes needs an item_bytes function");
    }
    if (options.flushers == 0) return invalid("flushers must be >= 1");
    if (options.queue_depth == 0) options.queue_depth = 1024;
    if (options.flush_timeout <= Clock::duration::zero())
      options.flush_timeout = std::chrono::seconds(5);
    return std::unique_ptr<Batcher>(new Batcher(std::move(options)));
  }

  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Drains (shutdown without a deadline) and joins the threads. After a
  // shutdown whose Context ended, returns at once instead: sink calls still
  // running are abandoned (their items count as dropped_on_shutdown, every
  // pending ack resolves kDropped) and their threads, detached, keep the
  // batcher's state alive until the sink returns.
  ~Batcher() {
    if (clock_sub_ != 0) clock_->unsubscribe(clock_sub_);
    if (core_->abandon()) {
      for (auto& t : threads_) t.detach();
      return;
    }
    (void)core_->shutdown(Context());
    for (auto& t : threads_) t.join();
  }

  // Fires once shutdown() starts: for a caller that waits on something else
  // (feed_batcher on its input) and must stop when the batcher does.
  std::stop_token shutdown_token() const { return core_->shutdown_token(); }

  // Waits for room in the bounded input. kOk (moved in), kClosed after
  // shutdown began (E1), kCancelled / kDeadlineExceeded (item untouched, E2).
  Status add(T&& item, const Context& ctx = {}) { return core_->add(std::move(item), ctx); }

  // Never waits: kWouldBlock when the input is full, kClosed after shutdown;
  // both counted in try_add_refused. Item untouched unless kOk.
  Status try_add(T&& item) { return core_->try_add(std::move(item)); }

  // All items or none, atomically against a concurrent shutdown; waits until
  // there is room for all. kInvalidArgument if items.size() > queue_depth.
  // The items are moved from only on kOk.
  Status add_batch(std::span<T> items, const Context& ctx = {}) {
    return core_->add_batch(items, ctx);
  }

  // Like add, and returns a future that always resolves: with the sink's
  // status for the batch holding the item, or kDropped if the item was
  // dropped on shutdown. No future is left pending once the batcher is gone.
  Result<std::future<Status>> add_with_ack(T&& item, const Context& ctx = {}) {
    return core_->add_with_ack(std::move(item), ctx);
  }

  // Flushes every item added before this call (those still queued and the
  // batch being built) and waits until they and any batch in flight have
  // been through the sink. Returns the first sink error among them, kOk, or
  // the context's error (the flush still happens), or kClosed after shutdown.
  Status flush(const Context& ctx = {}) { return core_->flush(ctx); }

  // Stops accepting items (S3), drains the input and the buffer through the
  // sink (S4) and waits for that. kOk after a clean drain (I6). If ctx ends
  // first: sink calls in progress are cancelled, every item not yet handed to
  // the sink is counted in dropped_on_shutdown (I7, S7), and the context's
  // error is returned at once. Idempotent: later calls wait for the first's
  // drain (S2), and return that deadline's error (kDeadlineExceeded /
  // kCancelled), not kOk, if it dropped items: kOk means every accepted item
  // reached the sink (I6).
  Status shutdown(const Context& ctx = {}) { return core_->shutdown(ctx); }

  BatcherStats stats() const { return core_->stats(); }

  std::string prometheus() const { return to_prometheus(stats(), options().name); }
  const BatcherOptions<T>& options() const { return core_->options(); }

 private:
  static Status invalid(std::string_view why) {
    return {StatusCode::kInvalidArgument, std::string("batcher: ") + std::string(why)};
  }

  explicit Batcher(BatcherOptions<T> o) : core_(std::make_shared<Core>(std::move(o))) {
    const BatcherOptions<T>& opt = core_->options();
    if (!core_->steady()) {
      clock_ = opt.clock;
      clock_sub_ = clock_->subscribe([c = core_.get()] { c->wake(); });
    }
    // Each thread holds the core, so it may outlive this handle (~Batcher).
    for (std::size_t i = 0; opt.flushers > 1 && i < opt.flushers; ++i) {
      threads_.emplace_back([c = core_] { c->run_flusher(); });
    }
    threads_.emplace_back([c = core_] { c->run(); });
  }

  std::shared_ptr<Core> core_;
  Clock* clock_ = nullptr;  // a manual clock we subscribed to
  std::uint64_t clock_sub_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace sluice
