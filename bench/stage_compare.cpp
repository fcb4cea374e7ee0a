// stage_compare: a sluice Stage against oneTBB's parallel_pipeline doing the
// same work, side by side in one run: serial input -> parallel middle ->
// serial output (in order for the strict and TBB runs).
//
// sluice Stage: a source thread pushes into a Queue (capacity 64), a Stage of
// width N runs the function, the main thread drains the output.
// sluice run_pipeline: source, function and sink as plain functions on N
// threads (the caller and N - 1 helpers), as oneTBB runs them. TBB: an input
// filter (serial_in_order), the function (parallel), an output filter
// (serial_in_order), 4 x N tokens, max_allowed_parallelism N.
// Workloads: a trivial function (per-item overhead) and a ~20 us CPU-bound
// function. Medians over R interleaved runs.
// Cancel latency: a Stage with a worker blocked in every place one can block
// (full output, inside fn on a cancellable wait, the strict reorder lag or
// the per-key dispatcher, the input), then cancel(): the time until wait()
// returns, i.e. every thread has exited and the output is closed. The seed's
// target is 10 ms; 200 x R samples per mode (50 in quick mode).
// Usage: stage_compare [--quick] [--runs R] [--cancel-only]
#include <tbb/global_control.h>
#include <tbb/parallel_pipeline.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sluice/run_pipeline.h"
#include "sluice/stage.h"

namespace {

using Clock = std::chrono::steady_clock;

std::uint64_t g_spin_per_us = 100;  // calibrated at start

std::uint64_t burn(std::uint64_t x, std::uint64_t us) {
  std::uint64_t h = x | 1;
  for (std::uint64_t i = 0; i < us * g_spin_per_us; ++i)
    h = h * 6364136223846793005ULL + 1442695040888963407ULL;
  return h;
}

void calibrate() {
  g_spin_per_us = 1000;
  std::vector<double> per;
  for (int k = 0; k < 5; ++k) {
    const auto t0 = Clock::now();
    volatile std::uint64_t sink = burn(k, 2000);
    (void)sink;
    per.push_back(2000.0 * 1000 /
                  std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::sort(per.begin(), per.end());
  g_spin_per_us = static_cast<std::uint64_t>(per[2]);
}

// items/s through a sluice stage.
double run_sluice(std::size_t width, sluice::Ordering ord, std::uint64_t items,
                  std::uint64_t work_us) {
  sluice::Queue<std::uint64_t> in(64);
  sluice::StageOptions<std::uint64_t> o;
  o.width = width;
  o.ordering = ord;
  auto st = std::move(sluice::Stage<std::uint64_t, std::uint64_t>::create(
                          in,
                          [work_us](std::uint64_t&& v,
                                    const sluice::Context&) -> sluice::Result<std::uint64_t> {
                            return work_us ? burn(v, work_us) : v + 1;
                          },
                          o))
                .value();
  const auto t0 = Clock::now();
  std::thread src([&] {
    for (std::uint64_t i = 0; i < items; ++i) (void)in.push(std::uint64_t(i));
    in.close();
  });
  std::uint64_t n = 0, sum = 0;
  for (auto& r : st->output()) {
    sum += *r;
    ++n;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  src.join();
  if (n != items) {
    std::fprintf(stderr, "sluice: lost items (%llu of %llu)\n", static_cast<unsigned long long>(n),
                 static_cast<unsigned long long>(items));
    std::exit(2);
  }
  (void)sum;
  return static_cast<double>(items) / secs;
}

// items/s through run_pipeline: the same three filters as oneTBB's, on the
// same number of threads, no queues.
double run_fused(std::size_t width, sluice::Ordering ord, std::uint64_t items,
                 std::uint64_t work_us) {
  std::uint64_t next = 0, n = 0, sum = 0;
  const auto t0 = Clock::now();
  auto r = sluice::run_pipeline(
      [&]() -> std::optional<std::uint64_t> {
        if (next == items) return std::nullopt;
        return next++;
      },
      [work_us](std::uint64_t v, const sluice::Context&) -> sluice::Result<std::uint64_t> {
        return work_us ? burn(v, work_us) : v + 1;
      },
      [&](sluice::Result<std::uint64_t>&& v) {
        sum += *v;
        ++n;
        return sluice::Status::Ok();
      },
      {.width = width, .ordering = ord});
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!r.ok() || n != items) std::exit(2);
  return static_cast<double>(items) / secs;
}

double run_tbb(std::size_t width, std::uint64_t items, std::uint64_t work_us) {
  tbb::global_control gc(tbb::global_control::max_allowed_parallelism, width);
  std::uint64_t next = 0, n = 0, sum = 0;
  const auto t0 = Clock::now();
  tbb::parallel_pipeline(
      4 * width,
      tbb::make_filter<void, std::uint64_t>(tbb::filter_mode::serial_in_order,
                                            [&](tbb::flow_control& fc) -> std::uint64_t {
                                              if (next == items) {
                                                fc.stop();
                                                return 0;
                                              }
                                              return next++;
                                            }) &
          tbb::make_filter<std::uint64_t, std::uint64_t>(
              tbb::filter_mode::parallel,
              [work_us](std::uint64_t v) { return work_us ? burn(v, work_us) : v + 1; }) &
          tbb::make_filter<std::uint64_t, void>(tbb::filter_mode::serial_in_order,
                                                [&](std::uint64_t v) {
                                                  sum += v;
                                                  ++n;
                                                }));
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (n != items) std::exit(2);
  return static_cast<double>(items) / secs;
}

// Waits (yielding) for a state of the stage under test; gives up loudly.
template <class Pred>
void wait_until_state(Pred pred, const char* what) {
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (!pred()) {
    if (Clock::now() > until) {
      std::fprintf(stderr, "cancel latency: never reached: %s\n", what);
      std::exit(2);
    }
    std::this_thread::yield();
  }
}

// Microseconds from cancel() to wait() returning, with workers blocked as
// described at the top (kStrict: width 4, kPerKey: width 3).
double run_cancel(sluice::Ordering ord) {
  constexpr int kSlow = 100;  // items >= kSlow wait in fn until cancelled
  sluice::Queue<int> in(64);
  std::atomic<int> in_fn{0};
  sluice::StageOptions<int> o;
  o.width = ord == sluice::Ordering::kStrict ? 4 : 3;
  o.ordering = ord;
  o.window = 2;  // strict: a worker 2 items ahead of the oldest unwritten one waits
  o.output_capacity = 1;
  o.key = [](const int& v) { return static_cast<std::size_t>(v % 3); };
  auto st = std::move(sluice::Stage<int, int>::create(
                          in,
                          [&](int&& v, const sluice::Context& ctx) -> sluice::Result<int> {
                            if (v < kSlow) return v;
                            in_fn++;
                            std::mutex m;
                            std::condition_variable_any cv;
                            std::unique_lock lock(m);
                            cv.wait(lock, ctx.token(), [] { return false; });
                            return v;
                          },
                          o))
                .value();
  auto& out = st->output();
  (void)in.push(0);  // fills the output
  wait_until_state([&] { return out.approx_size() == 1; }, "output full");
  (void)in.push(3);  // its writer waits for room (per-key: the same worker)
  wait_until_state([&] { return out.stats().waiting_pushers == 1; }, "writer waiting");
  (void)in.push(kSlow + 1);
  wait_until_state([&] { return in_fn.load() == 1; }, "a worker in fn");
  if (ord == sluice::Ordering::kStrict) {
    (void)in.push(4);  // 2 past the oldest unwritten result: waits on the lag
    wait_until_state([&] { return st->stats().items_in == 4; }, "a worker on the lag");
    wait_until_state([&] { return in.stats().waiting_pullers == 1; }, "a worker on the input");
  } else {
    // The busy worker's queue (4) fills; the dispatcher waits with a fifth.
    for (int i = 1; i <= 5; ++i) (void)in.push(kSlow + 1 + 3 * i);
    wait_until_state([&] { return in.stats().pulled == 8; }, "the dispatcher waiting");
  }
  const auto t0 = Clock::now();
  st->cancel();
  const sluice::Status s = st->wait();
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  if (s.code() != sluice::StatusCode::kCancelled || !out.closed()) {
    std::fprintf(stderr, "cancel latency: wait() said %s\n", s.to_string().c_str());
    std::exit(2);
  }
  in.close();
  return us;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return 0;
  const auto k = static_cast<std::size_t>(p * static_cast<double>(v.size()) + 0.999999);
  return v[std::min(v.size(), std::max<std::size_t>(k, 1)) - 1];
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void print_cancel(const std::vector<double>& cancel_strict,
                  const std::vector<double>& cancel_per_key) {
  std::printf(
      "\n## Cancel latency: cancel() until every worker is out and the output is closed\n\n");
  // Other processes on a 2-core host stretch the tail by whole scheduler slices.
  if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
    char load[64] = {};
    if (std::fgets(load, sizeof load, f) != nullptr)
      std::printf("Load average at the end: %s\n", load);
    std::fclose(f);
  }
  std::printf("| Stage | runs | p50 | p99 | max | target: max < 10 ms |\n");
  std::printf("|---|---:|---:|---:|---:|---|\n");
  auto cancel_row = [](const char* what, const std::vector<double>& v) {
    const double mx = percentile(v, 1.0);
    std::printf("| %s | %zu | %.0f us | %.0f us | %.0f us | %s |\n", what, v.size(),
                percentile(v, 0.5), percentile(v, 0.99), mx, mx < 10'000 ? "yes" : "NO");
  };
  cancel_row("strict, N=4: workers on a full output, in fn, on the lag, on the input",
             cancel_strict);
  cancel_row(
      "per-key, N=3: worker on a full output, in fn, on its queue; dispatcher on a full "
      "queue",
      cancel_per_key);
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 5;
  std::uint64_t trivial_items = 1'000'000, work_items = 40'000;
  int cancel_runs = 0;  // per round: 200 (50 in quick mode)
  bool cancel_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      runs = 1;
      trivial_items = 50'000;
      work_items = 2'000;
      cancel_runs = 50;
    } else if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--cancel-only") == 0) {
      cancel_only = true;
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--runs R] [--cancel-only]\n", argv[0]);
      return 2;
    }
  }
  if (cancel_runs == 0) cancel_runs = 200;
  calibrate();
  using sluice::Ordering;
  std::map<std::string, std::vector<double>> r;
  std::vector<double> cancel_strict, cancel_per_key;
  for (int k = 0; k < runs; ++k) {
    for (int i = 0; i < cancel_runs; ++i) {
      cancel_strict.push_back(run_cancel(Ordering::kStrict));
      cancel_per_key.push_back(run_cancel(Ordering::kPerKey));
    }
    if (cancel_only) continue;
    for (std::size_t n : {1, 2}) {
      const std::string w = " N=" + std::to_string(n);
      r["trivial sluice unordered" + w].push_back(
          run_sluice(n, Ordering::kUnordered, trivial_items, 0));
      r["trivial sluice strict" + w].push_back(run_sluice(n, Ordering::kStrict, trivial_items, 0));
      r["trivial tbb" + w].push_back(run_tbb(n, trivial_items, 0));
      r["trivial run_pipeline strict" + w].push_back(
          run_fused(n, Ordering::kStrict, trivial_items, 0));
      r["20us sluice unordered" + w].push_back(run_sluice(n, Ordering::kUnordered, work_items, 20));
      r["20us sluice strict" + w].push_back(run_sluice(n, Ordering::kStrict, work_items, 20));
      r["20us tbb" + w].push_back(run_tbb(n, work_items, 20));
      r["20us run_pipeline strict" + w].push_back(run_fused(n, Ordering::kStrict, work_items, 20));
      r["20us run_pipeline unordered" + w].push_back(
          run_fused(n, Ordering::kUnordered, work_items, 20));
    }
  }
  if (cancel_only) {
    print_cancel(cancel_strict, cancel_per_key);
    return 0;
  }
  auto m = [&](const std::string& k) { return median(r[k]); };
  std::printf("# stage_compare: %d run(s), medians; trivial: %llu items, 20 us: %llu items\n\n",
              runs, static_cast<unsigned long long>(trivial_items),
              static_cast<unsigned long long>(work_items));
  std::printf(
      "| work | N | Stage unordered | Stage strict | run_pipeline strict | oneTBB "
      "parallel_pipeline "
      "(in order) |\n");
  std::printf("|---|---:|---:|---:|---:|---:|\n");
  for (const char* work : {"trivial", "20us"}) {
    for (std::size_t n : {1, 2}) {
      const std::string w = " N=" + std::to_string(n);
      const std::string p = std::string(work) + " ";
      auto cell = [&](const std::string& k) {
        const double v = m(p + k + w);
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.0f ns/item (%.2f M/s)", 1e9 / v, v / 1e6);
        return std::string(buf);
      };
      std::printf("| %s | %zu | %s | %s | %s | %s |\n", work, n, cell("sluice unordered").c_str(),
                  cell("sluice strict").c_str(), cell("run_pipeline strict").c_str(),
                  cell("tbb").c_str());
    }
  }
  std::printf("\n## Targets\n\n| target | measured | met |\n|---|---:|---|\n");
  const double triv_ours = m("trivial sluice strict N=2"), triv_tbb = m("trivial tbb N=2");
  std::printf("| trivial fn, N=2, in order: ns/item <= oneTBB's | %.0f vs %.0f ns | %s |\n",
              1e9 / triv_ours, 1e9 / triv_tbb, triv_ours >= triv_tbb ? "yes" : "NO");
  const double s1 = m("20us sluice unordered N=1"), s2 = m("20us sluice unordered N=2");
  std::printf("| 20 us fn: N=2 >= 1.8x N=1 | %.2fx | %s |\n", s2 / s1,
              s2 / s1 >= 1.8 ? "yes" : "NO");
  const double strict2 = m("20us sluice strict N=2"), tbb2 = m("20us tbb N=2");
  std::printf("| 20 us fn, N=2, in order: within 10%% of oneTBB | %.2fx | %s |\n", strict2 / tbb2,
              strict2 / tbb2 >= 0.9 ? "yes" : "NO");
  const double cost = m("20us sluice unordered N=2") / strict2 - 1;
  std::printf("| strict order costs <= 15%% over unordered (20 us, N=2) | %.1f%% | %s |\n",
              cost * 100, cost <= 0.15 ? "yes" : "NO");
  const double tcost = m("trivial sluice unordered N=2") / m("trivial sluice strict N=2") - 1;
  std::printf("| strict order cost, trivial fn, N=2 (for information) | %.1f%% | |\n", tcost * 100);
  std::printf("\n## The same targets for run_pipeline (serial ends on the workers, as oneTBB)\n\n");
  std::printf("| target | measured | met |\n|---|---:|---|\n");
  const double f_triv = m("trivial run_pipeline strict N=2");
  std::printf("| trivial fn, N=2, in order: ns/item <= oneTBB's | %.0f vs %.0f ns | %s |\n",
              1e9 / f_triv, 1e9 / triv_tbb, f_triv >= triv_tbb ? "yes" : "NO");
  const double f1 = m("20us run_pipeline unordered N=1"), f2 = m("20us run_pipeline unordered N=2");
  std::printf("| 20 us fn: N=2 >= 1.8x N=1 | %.2fx | %s |\n", f2 / f1,
              f2 / f1 >= 1.8 ? "yes" : "NO");
  const double fs2 = m("20us run_pipeline strict N=2");
  std::printf("| 20 us fn, N=2, in order: within 10%% of oneTBB | %.2fx | %s |\n", fs2 / tbb2,
              fs2 / tbb2 >= 0.9 ? "yes" : "NO");
  const double fcost = f2 / fs2 - 1;
  std::printf("| strict order costs <= 15%% over unordered (20 us, N=2) | %.1f%% | %s |\n",
              fcost * 100, fcost <= 0.15 ? "yes" : "NO");
  print_cancel(cancel_strict, cancel_per_key);
  return 0;
}
