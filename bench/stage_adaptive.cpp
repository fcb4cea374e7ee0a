// stage_adaptive: a Stage calling a simulated remote service whose latency
// grows past a concurrency knee, with fixed worker counts (a sweep) and with
// adaptive concurrency (AIMD, StageOptions::adaptive), side by side in one
// run. The service serves `knee` calls at once in `base` each; past the
// knee each call is slower by (c / knee)^1.5 (contention: throughput falls).
// Reports items/s and the p99 latency of service calls; medians of --runs.
// Targets (issue 27; issue 17 asked 0.9x): adaptive >= 0.97x the throughput
// of the best fixed worker count of the sweep, its p99 at most 1.5x that
// count's, and lower than the fixed ceiling's (the count one would configure
// without adaptation). The plain AIMD (max_probe_wait 0) runs beside it.
// Usage: stage_adaptive [--quick] [--runs R] [--seconds S]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sluice/stage.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kKnee = 8;
constexpr double kBaseMs = 2.0;
constexpr std::size_t kCeiling = 48;

struct Service {
  std::atomic<int> in_flight{0};
  std::mutex mu;
  std::vector<double> latencies_ms;  // of calls started after warm-up
  std::atomic<bool> recording{false};

  void call() {
    const int c = ++in_flight;
    const double factor = c <= kKnee ? 1.0 : std::pow(static_cast<double>(c) / kKnee, 1.5);
    const auto t0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(kBaseMs * factor));
    --in_flight;
    if (recording.load(std::memory_order_relaxed)) {
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      std::lock_guard lock(mu);
      latencies_ms.push_back(ms);
    }
  }
};

struct Outcome {
  double items_per_s = 0;
  double p99_ms = 0;
  double mean_limit = 0;  // adaptive: the limit, sampled
};

// Runs a stage for warm-up + `seconds`, the input kept full.
// probe_wait: AdaptiveConcurrency::max_probe_wait (0: the plain AIMD).
Outcome run(std::size_t width, bool adaptive, double seconds, std::size_t probe_wait = 32) {
  Service service;
  sluice::Queue<int> in(256);
  sluice::StageOptions<int> o;
  o.width = width;
  o.output_capacity = 256;
  o.adaptive.enabled = adaptive;
  o.adaptive.max_probe_wait = probe_wait;
  auto stage = sluice::Stage<int, int>::create(
      in,
      [&](int&& v, const sluice::Context&) -> sluice::Result<int> {
        service.call();
        return v;
      },
      o);
  if (!stage.ok()) std::abort();
  std::atomic<bool> stop{false};
  std::jthread feeder([&] {
    for (int i = 0; !stop.load(std::memory_order_relaxed); ++i) {
      if (!in.push(int{i}, sluice::with_timeout(std::chrono::milliseconds(50))).ok()) continue;
    }
    in.close();
  });
  std::atomic<std::uint64_t> out{0};
  std::jthread drainer([&] {
    for (auto& r : (*stage)->output()) {
      (void)r;
      out.fetch_add(1, std::memory_order_relaxed);
    }
  });
  const double warmup = std::min(1.0, seconds / 2);
  std::this_thread::sleep_for(std::chrono::duration<double>(warmup));
  service.recording = true;
  const std::uint64_t n0 = out.load();
  const auto t0 = Clock::now();
  double limit_sum = 0;
  int limit_samples = 0;
  while (Clock::now() - t0 < std::chrono::duration<double>(seconds)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    limit_sum += static_cast<double>((*stage)->stats().concurrency_limit);
    ++limit_samples;
  }
  const std::uint64_t n1 = out.load();
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  service.recording = false;
  stop = true;
  feeder.join();
  (*stage)->cancel();
  drainer.join();
  Outcome res;
  res.items_per_s = static_cast<double>(n1 - n0) / secs;
  std::lock_guard lock(service.mu);
  auto& l = service.latencies_ms;
  if (!l.empty()) {
    std::sort(l.begin(), l.end());
    res.p99_ms = l[std::min(l.size() - 1, l.size() * 99 / 100)];
  }
  res.mean_limit = limit_samples > 0 ? limit_sum / limit_samples : 0;
  return res;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 3;
  double seconds = 2.0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      runs = 1;
      seconds = 0.4;
    } else if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--runs R] [--seconds S]\n", argv[0]);
      return 2;
    }
  }
  const std::vector<std::size_t> widths = {2, 4, 6, 8, 10, 12, 16, 24, 32, 48};
  struct Row {
    std::string name;
    std::size_t width;
    double ips, p99, limit;
  };
  std::vector<Row> rows;
  auto measure = [&](std::size_t w, bool adaptive, std::size_t probe_wait, std::string name) {
    std::vector<double> ips, p99, lim;
    for (int r = 0; r < runs; ++r) {
      const Outcome o = run(w, adaptive, seconds, probe_wait);
      ips.push_back(o.items_per_s);
      p99.push_back(o.p99_ms);
      lim.push_back(o.mean_limit);
    }
    rows.push_back({std::move(name), w, median(ips), median(p99), median(lim)});
  };
  for (std::size_t w : widths) measure(w, false, 0, "fixed " + std::to_string(w));
  // The plain AIMD (probes neither judged by throughput nor spaced), then
  // the default, side by side.
  measure(kCeiling, true, 0, "adaptive, plain AIMD (1.." + std::to_string(kCeiling) + ")");
  measure(kCeiling, true, 32, "adaptive (1.." + std::to_string(kCeiling) + ")");

  std::printf(
      "# stage_adaptive: %d run(s) of %.1f s, medians; service: %d at once in %.1f ms, "
      "(c/%d)^1.5 slower past the knee\n\n",
      runs, seconds, kKnee, kBaseMs, kKnee);
  std::printf("| workers | items/s | p99 call latency | mean limit |\n|---|---:|---:|---:|\n");
  for (const Row& r : rows) {
    std::printf("| %s | %.0f | %.2f ms | %s |\n", r.name.c_str(), r.ips, r.p99,
                r.name.starts_with("adaptive") ? std::to_string(r.limit).substr(0, 4).c_str() : "");
  }
  const Row* best = &rows[0];
  for (const Row& r : rows) {
    if (!r.name.starts_with("adaptive") && r.ips > best->ips) best = &r;
  }
  const Row& ad = rows.back();
  const Row* ceiling = nullptr;
  for (const Row& r : rows) {
    if (r.name == "fixed " + std::to_string(kCeiling)) ceiling = &r;
  }
  const Row& plain = rows[rows.size() - 2];
  const double ratio = ad.ips / best->ips;
  std::printf("\n## Targets\n\n| target | measured | met |\n|---|---:|---|\n");
  std::printf("| adaptive >= 0.97x the best fixed count's throughput (%s) | %.2fx | %s |\n",
              best->name.c_str(), ratio, ratio >= 0.97 ? "yes" : "NO");
  std::printf("| adaptive p99 <= 1.5x the best fixed count's | %.2f vs %.2f ms | %s |\n", ad.p99,
              best->p99, ad.p99 <= 1.5 * best->p99 ? "yes" : "NO");
  std::printf("| the plain AIMD against the best fixed count (for information) | %.2fx | |\n",
              plain.ips / best->ips);
  std::printf("| adaptive p99 below the fixed ceiling's (%zu workers) | %.2f vs %.2f ms | %s |\n",
              kCeiling, ad.p99, ceiling->p99, ad.p99 < ceiling->p99 ? "yes" : "NO");

  return 0;
}
