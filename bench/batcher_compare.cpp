// batcher_compare: sluice::Batcher against a bare sluice::Queue push and a
// naive mutex + vector + condition-variable batcher, side by side in one run.
//
// 1. Add throughput, no-op sink, MaxBatchSize 512, input depth 1024, 1 and 2
//    producers: items/s from the first add until the sink has every item.
//    The bare-queue run pushes the same items into a Queue drained by one
//    thread with pull_many(512): the cost the batcher builds on.
// 2. AddBatch of 64 items vs single adds (1 producer).
// 3. Time-trigger lateness in every run: one item at a time (a trickle),
//    MaxBatchDelay 5 ms, after a 300 ms pause so that the host is quiet (a
//    trickle is a quiet-system scenario);
//    lateness = sink call time - add time - 5 ms; p50 and p99.
// Medians over R interleaved runs. Usage: batcher_compare [--quick] [--runs R] [--items N]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "sluice/batcher.h"
#include "sluice/queue.h"

namespace {

using Clock = std::chrono::steady_clock;
using Item = std::uint64_t;
constexpr std::size_t kBatch = 512;
constexpr std::size_t kDepth = 1024;

// The baseline peer: what people write first.
class NaiveBatcher {
 public:
  NaiveBatcher(std::size_t max, Clock::duration delay,
               std::function<void(std::vector<Item>&&)> sink)
      : max_(max), delay_(delay), sink_(std::move(sink)), loop_([this] { run(); }) {}
  ~NaiveBatcher() { shutdown(); }
  void add(Item v) {
    std::unique_lock lk(mu_);
    not_full_.wait(lk, [&] { return buf_.size() < kDepth; });
    if (buf_.empty()) first_ = Clock::now();
    buf_.push_back(v);
    if (buf_.size() >= max_) wake_.notify_one();
    if (buf_.size() == 1) wake_.notify_one();
  }
  void shutdown() {
    {
      std::lock_guard lk(mu_);
      if (closed_) return;
      closed_ = true;
    }
    wake_.notify_one();
    loop_.join();
  }

 private:
  void run() {
    std::unique_lock lk(mu_);
    for (;;) {
      if (buf_.empty()) {
        if (closed_) return;
        wake_.wait(lk, [&] { return !buf_.empty() || closed_; });
        continue;
      }
      wake_.wait_until(lk, first_ + delay_, [&] { return buf_.size() >= max_ || closed_; });
      std::vector<Item> batch;
      const std::size_t n = std::min(max_, buf_.size());
      batch.assign(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(n));
      buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(n));
      if (!buf_.empty()) first_ = Clock::now();
      not_full_.notify_all();
      lk.unlock();
      sink_(std::move(batch));
      lk.lock();
    }
  }
  std::size_t max_;
  Clock::duration delay_;
  std::function<void(std::vector<Item>&&)> sink_;
  std::mutex mu_;
  std::condition_variable wake_, not_full_;
  std::vector<Item> buf_;
  Clock::time_point first_{};
  bool closed_ = false;
  std::thread loop_;
};

// CPU time the hypervisor took from this VM so far (steal, /proc/stat), in ms.
double steal_ms() {
  std::FILE* f = std::fopen("/proc/stat", "r");
  if (f == nullptr) return 0;
  unsigned long long v[8] = {};
  const int n = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                            &v[3], &v[4], &v[5], &v[6], &v[7]);
  std::fclose(f);
  return n == 8 ? static_cast<double>(v[7]) * 1000.0 / 100.0 : 0;  // USER_HZ = 100
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

template <class AddFn>
double timed_producers(int producers, std::uint64_t items, AddFn add) {
  const std::uint64_t per = items / static_cast<std::uint64_t>(producers);
  const auto t0 = Clock::now();
  std::vector<std::thread> ts;
  for (int p = 0; p < producers; ++p) {
    ts.emplace_back([&, p] {
      for (std::uint64_t i = 0; i < per; ++i) add(static_cast<Item>(p) * per + i);
    });
  }
  for (auto& t : ts) t.join();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// items/s from first add to last item consumed.
double run_queue(int producers, std::uint64_t items) {
  sluice::Queue<Item> q(kDepth);
  std::atomic<std::uint64_t> got{0};
  const auto t0 = Clock::now();
  std::thread consumer([&] {
    std::vector<Item> out;
    out.reserve(kBatch);
    for (;;) {
      out.clear();
      if (q.pull_many(std::back_inserter(out), kBatch).count == 0) return;
      got += out.size();
    }
  });
  timed_producers(producers, items, [&](Item v) { (void)q.push(std::move(v)); });
  q.close();
  consumer.join();
  return static_cast<double>(got.load()) / std::chrono::duration<double>(Clock::now() - t0).count();
}

std::unique_ptr<sluice::Batcher<Item>> make_batcher(std::atomic<std::uint64_t>& got) {
  sluice::BatcherOptions<Item> o;
  o.max_batch_size = kBatch;
  o.max_batch_delay = std::chrono::milliseconds(5);
  o.queue_depth = kDepth;
  o.sink = [&got](std::vector<Item>&& b, const sluice::Context&) {
    got += b.size();
    return sluice::Status::Ok();
  };
  return std::move(sluice::Batcher<Item>::create(std::move(o))).value();
}

double run_batcher(int producers, std::uint64_t items) {
  std::atomic<std::uint64_t> got{0};
  auto b = make_batcher(got);
  const auto t0 = Clock::now();
  timed_producers(producers, items, [&](Item v) { (void)b->add(std::move(v)); });
  (void)b->shutdown();
  return static_cast<double>(got.load()) / std::chrono::duration<double>(Clock::now() - t0).count();
}

double run_batcher_add_batch(std::uint64_t items) {
  std::atomic<std::uint64_t> got{0};
  auto b = make_batcher(got);
  const auto t0 = Clock::now();
  std::vector<Item> group(64);
  for (std::uint64_t i = 0; i < items; i += 64) {
    for (std::size_t k = 0; k < 64; ++k) group[k] = i + k;
    (void)b->add_batch(group);
  }
  (void)b->shutdown();
  return static_cast<double>(got.load()) / std::chrono::duration<double>(Clock::now() - t0).count();
}

double run_naive(int producers, std::uint64_t items) {
  std::atomic<std::uint64_t> got{0};
  const auto t0 = Clock::now();
  {
    NaiveBatcher nb(kBatch, std::chrono::milliseconds(5),
                    [&](std::vector<Item>&& b) { got += b.size(); });
    timed_producers(producers, items, [&](Item v) { nb.add(v); });
    nb.shutdown();
  }
  return static_cast<double>(got.load()) / std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Lateness {
  double p50_us, p99_us;
};

// A trickle: one item, wait for its (time-triggered) flush, repeat.
template <class AddOne>
Lateness lateness(int samples, AddOne add_one) {
  std::vector<double> us;
  for (int i = 0; i < samples; ++i) us.push_back(add_one());
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[us.size() * 99 / 100]};
}

Lateness lateness_sluice(int samples) {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Clock::time_point> flushed;
  sluice::BatcherOptions<Item> o;
  o.max_batch_size = kBatch;
  o.max_batch_delay = std::chrono::milliseconds(5);
  o.sink = [&](std::vector<Item>&&, const sluice::Context&) {
    std::lock_guard lk(mu);
    flushed = Clock::now();
    cv.notify_one();
    return sluice::Status::Ok();
  };
  auto b = std::move(sluice::Batcher<Item>::create(std::move(o))).value();
  return lateness(samples, [&] {
    const auto t0 = Clock::now();
    (void)b->add(1);
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return flushed.has_value(); });
    const double late = std::chrono::duration<double, std::micro>(*flushed - t0).count() - 5000.0;
    flushed.reset();
    return late;
  });
}

Lateness lateness_naive(int samples) {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Clock::time_point> flushed;
  NaiveBatcher nb(kBatch, std::chrono::milliseconds(5), [&](std::vector<Item>&&) {
    std::lock_guard lk(mu);
    flushed = Clock::now();
    cv.notify_one();
  });
  return lateness(samples, [&] {
    const auto t0 = Clock::now();
    nb.add(1);
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return flushed.has_value(); });
    const double late = std::chrono::duration<double, std::micro>(*flushed - t0).count() - 5000.0;
    flushed.reset();
    return late;
  });
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 5;
  std::uint64_t items = 2'000'000;
  int samples = 500;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      runs = 1;
      items = 100'000;
      samples = 20;
    } else if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--items") == 0 && i + 1 < argc) {
      items = std::strtoull(argv[++i], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--runs R] [--items N]\n", argv[0]);
      return 2;
    }
  }
  std::map<std::string, std::vector<double>> r;
  for (int k = 0; k < runs; ++k) {
    for (int p : {1, 2}) {
      const std::string s = std::to_string(p) + "p";
      r["queue " + s].push_back(run_queue(p, items));
      r["batcher " + s].push_back(run_batcher(p, items));
      r["naive " + s].push_back(run_naive(p, items));
    }
    r["batcher add_batch(64)"].push_back(run_batcher_add_batch(items));
    // A trickle is a quiet-system scenario: let the host finish the
    // throughput runs' aftermath (freed memory, exiting threads) first.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const double steal0 = steal_ms();
    const Lateness ls = lateness_sluice(samples), ln = lateness_naive(samples);
    r["late steal ms"].push_back(steal_ms() - steal0);
    r["late sluice p50"].push_back(ls.p50_us);
    r["late sluice p99"].push_back(ls.p99_us);
    r["late naive p50"].push_back(ln.p50_us);
    r["late naive p99"].push_back(ln.p99_us);
  }
  auto m = [&](const std::string& k) { return median(r[k]); };
  std::printf("# batcher_compare: %d run(s), %llu items, MaxBatchSize %zu, depth %zu, medians\n\n",
              runs, static_cast<unsigned long long>(items), kBatch, kDepth);
  std::printf(
      "| producers | bare Queue push M/s | Batcher add M/s | ns/item | Batcher / Queue | naive "
      "batcher M/s | Batcher / naive |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
  for (int p : {1, 2}) {
    const std::string s = std::to_string(p) + "p";
    const double q = m("queue " + s), b = m("batcher " + s), n = m("naive " + s);
    std::printf("| %d | %.2f | %.2f | %.1f | %.2fx | %.2f | %.2fx |\n", p, q / 1e6, b / 1e6,
                1e9 / b, b / q, n / 1e6, b / n);
  }
  const double ab = m("batcher add_batch(64)"), single = m("batcher 1p");
  std::printf("\n| 1 producer | M items/s | vs single add |\n|---|---:|---:|\n");
  std::printf("| add | %.2f | 1.00x |\n| add_batch(64) | %.2f | %.2fx |\n", single / 1e6, ab / 1e6,
              ab / single);

  const Lateness ls{m("late sluice p50"), m("late sluice p99")};
  const Lateness ln{m("late naive p50"), m("late naive p99")};
  std::printf(
      "\nTime-trigger lateness, MaxBatchDelay 5 ms, %d single-item batches a run; medians over the "
      "runs "
      "of each run's p50 and p99 (us past the delay)\n\n",
      samples);
  std::printf("| batcher | p50 us | p99 us |\n|---|---:|---:|\n");
  std::printf("| sluice::Batcher | %.0f | %.0f |\n| naive | %.0f | %.0f |\n", ls.p50_us, ls.p99_us,
              ln.p50_us, ln.p99_us);
  std::printf("\nCPU stolen by the hypervisor during the lateness phases, per run (ms):");
  for (double v : r["late steal ms"]) std::printf(" %.0f", v);
  std::printf("\n");

  std::printf("\n## Targets\n\n| target | measured | met |\n|---|---:|---|\n");
  for (int p : {1, 2}) {
    const std::string s = std::to_string(p) + "p";
    const double ratio = m("batcher " + s) / m("queue " + s);
    std::printf("| %d producer(s): Batcher add >= 0.8x bare Queue push | %.2fx | %s |\n", p, ratio,
                ratio >= 0.8 ? "yes" : "NO");
  }
  std::printf("| add_batch(64) >= 3x single add | %.2fx | %s |\n", ab / single,
              ab / single >= 3 ? "yes" : "NO");
  std::printf("| time-trigger lateness p99 < 1 ms | %.0f us | %s |\n", ls.p99_us,
              ls.p99_us < 1000 ? "yes" : "NO");
  return 0;
}
