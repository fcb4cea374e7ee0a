// queue_compare: sluice::Queue (Block) against its peers, side by side in one
// run, on the same workloads (the atomic_queue / leveldb db_bench pattern).
//
// Throughput: P producers push N items in total, C consumers pull them;
// items/s = N / wall time, CPU = process CPU time (user + sys) per million
// items. Each (workload, queue) is run R times, interleaved across queues so
// that machine noise hits all of them alike; the table shows medians.
// Latency: two capacity-1 queues between two threads; p50/p99 of a round trip.
//
// Usage: queue_compare [--quick] [--runs R] [--items N] [--filter S] [--peers S,S2,...]
//   --quick: a smoke test (small N, one run) for CI.
//   --filter S: only workloads whose name contains S; --peers S,S2: only queues
//   whose name contains one of the comma-separated S (sluice::Queue always
//   runs, as the reference).
// Items are 64-bit words, or plain 64- or 256-byte structs. A "pinned apart"
// workload puts its producer and consumer on different CPUs, so that both
// sides are busy at once (unpinned, the scheduler may let them take turns
// on one core, where a ring that never sleeps wins by batching).
#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <latch>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "peers/atomic_queue.h"
#include "peers/boost.h"
#include "peers/moodycamel.h"
#include "peers/mutex_baseline.h"
#include "peers/sluice_queue.h"
#include "peers/tbb.h"

namespace bench {
namespace {

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Workload {
  std::string name;
  int producers;
  int consumers;
  std::size_t capacity;
  std::size_t bytes;    // item size: 8 (a word), 64 or 256
  bool pinned = false;  // producers and consumers on different CPUs, each on its own
};

// The CPUs this process may run on.
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int i = 0; i < CPU_SETSIZE; ++i) {
    if (CPU_ISSET(i, &set)) cpus.push_back(i);
  }
  return cpus;
}

// Thread k of a pinned workload runs on the k-th allowed CPU (round robin):
// with one producer and one consumer, each has a core to itself, so both
// sides stay busy at once instead of taking turns on one core.
void pin_self(int k) {
  static const std::vector<int> cpus = allowed_cpus();
  if (cpus.size() < 2) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpus[static_cast<std::size_t>(k) % cpus.size()], &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

struct Sample {
  double items_per_s;
  double cpu_s_per_m;
};

template <class Q, class T>
Sample run_throughput(const Workload& w, std::uint64_t items) {
  Q q(w.capacity);
  const std::uint64_t per_p = items / static_cast<std::uint64_t>(w.producers);
  const std::uint64_t total = per_p * static_cast<std::uint64_t>(w.producers);
  const std::uint64_t per_c = total / static_cast<std::uint64_t>(w.consumers);
  std::latch ready(w.producers + w.consumers + 1);
  std::latch go(1);
  std::vector<std::uint64_t> sums(static_cast<std::size_t>(w.consumers), 0);
  std::vector<std::thread> threads;
  for (int p = 0; p < w.producers; ++p) {
    threads.emplace_back([&, p] {
      if (w.pinned) pin_self(p);
      ready.count_down();
      go.wait();
      const std::uint64_t base = static_cast<std::uint64_t>(p) * per_p;
      for (std::uint64_t i = 0; i < per_p; ++i) q.push(make_item<T>(base + i));
    });
  }
  for (int c = 0; c < w.consumers; ++c) {
    threads.emplace_back([&, c] {
      if (w.pinned) pin_self(w.producers + c);
      ready.count_down();
      go.wait();
      const std::uint64_t n =
          per_c + (c == 0 ? total - per_c * static_cast<std::uint64_t>(w.consumers) : 0);
      std::uint64_t sum = 0;
      T v{};
      for (std::uint64_t i = 0; i < n; ++i) {
        q.pop(v);
        sum += value_of(v);
      }
      sums[static_cast<std::size_t>(c)] = sum;
    });
  }
  ready.arrive_and_wait();
  const double cpu0 = process_cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  go.count_down();
  for (auto& t : threads) t.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = process_cpu_seconds() - cpu0;
  std::uint64_t sum = 0;
  for (auto s : sums) sum += s;
  if (sum != total * (total - 1) / 2) {
    std::fprintf(stderr, "%s: checksum mismatch (lost or duplicated items)\n", Q::kName);
    std::exit(2);
  }
  return {static_cast<double>(total) / wall, cpu / static_cast<double>(total) * 1e6};
}

struct Latency {
  double p50_ns;
  double p99_ns;
};

template <class Q>
Latency run_latency(int round_trips) {
  Q there(1), back(1);
  std::vector<double> ns(static_cast<std::size_t>(round_trips));
  std::thread echo([&] {
    std::uint64_t v = 0;
    for (int i = 0; i < round_trips + 1000; ++i) {
      there.pop(v);
      back.push(v);
    }
  });
  std::uint64_t v = 0;
  for (int i = 0; i < 1000; ++i) {  // warm up
    there.push(std::uint64_t(i));
    back.pop(v);
  }
  for (int i = 0; i < round_trips; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    there.push(std::uint64_t(i));
    back.pop(v);
    ns[static_cast<std::size_t>(i)] =
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  }
  echo.join();
  std::sort(ns.begin(), ns.end());
  return {ns[ns.size() / 2], ns[ns.size() * 99 / 100]};
}

struct Candidate {
  std::string name;
  bool spsc_only;
  std::function<Sample(const Workload&, std::uint64_t)> throughput;
  std::function<Latency(int)> latency;
};

template <template <class> class Q>
Candidate candidate() {
  return {Q<std::uint64_t>::kName, Q<std::uint64_t>::kSpscOnly,
          [](const Workload& w, std::uint64_t n) {
            switch (w.bytes) {
              case 64:
                return run_throughput<Q<Item64>, Item64>(w, n);
              case 256:
                return run_throughput<Q<Item256>, Item256>(w, n);
              default:
                return run_throughput<Q<std::uint64_t>, std::uint64_t>(w, n);
            }
          },
          [](int k) { return run_latency<Q<std::uint64_t>>(k); }};
}

// "a,b" -> {"a", "b"}
std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t from = 0;
  for (std::size_t comma; (comma = s.find(',', from)) != std::string::npos; from = comma + 1) {
    out.push_back(s.substr(from, comma - from));
  }
  out.push_back(s.substr(from));
  return out;
}

// The 1/5/15-minute load averages: the machine is shared, so say how busy it was.
std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  using namespace bench;
  bool quick = false;
  int runs = 5;
  std::uint64_t items = 2'000'000;
  std::string filter, peers;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--filter") == 0 && i + 1 < argc) {
      filter = argv[++i];
    } else if (std::strcmp(argv[i], "--peers") == 0 && i + 1 < argc) {
      peers = argv[++i];
    } else if (std::strcmp(argv[i], "--items") == 0 && i + 1 < argc) {
      items = std::strtoull(argv[++i], nullptr, 10);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--quick] [--runs R] [--items N] [--filter S] [--peers S,S2,...]\n",
                   argv[0]);
      return 2;
    }
  }
  if (quick) {
    runs = 1;
    items = 100'000;
  }
  const int round_trips = quick ? 5'000 : 100'000;

  std::vector<Candidate> all = {
      candidate<SluiceQueue>(),
      candidate<SluiceSpscQueue>(),
      candidate<MutexQueue>(),
      candidate<TbbBoundedQueue>(),
      candidate<MoodyConcurrentQueue>(),
      candidate<MoodyBlockingConcurrentQueue>(),
      candidate<MoodyBlockingRWCircularBuffer>(),
      candidate<AtomicQueue>(),
      candidate<BoostLockfreeQueue>(),
      candidate<BoostSpscQueue>(),
      candidate<BoostFiberChannel>(),
  };
  const std::vector<std::string> wanted = split(peers);
  std::vector<Candidate> cands;
  for (auto& c : all) {
    const bool match = std::any_of(wanted.begin(), wanted.end(), [&](const std::string& s) {
      return c.name.find(s) != std::string::npos;
    });
    if (cands.empty() || match) cands.push_back(std::move(c));
  }
  const std::vector<Workload> workloads = {
      {"SPSC cap 1024, 64-bit", 1, 1, 1024, 8},
      {"SPSC cap 1024, 64-bit, pinned apart", 1, 1, 1024, 8, true},
      {"SPSC cap 16, 64-bit", 1, 1, 16, 8},
      {"MPMC 2x2 cap 1024, 64-bit", 2, 2, 1024, 8},
      {"MPMC 4x4 cap 1024, 64-bit", 4, 4, 1024, 8},
      {"SPSC cap 1024, 64-byte", 1, 1, 1024, 64},
      {"SPSC cap 16, 64-byte", 1, 1, 16, 64},
      {"MPMC 2x2 cap 1024, 64-byte", 2, 2, 1024, 64},
      {"MPMC 4x4 cap 1024, 64-byte", 4, 4, 1024, 64},
      {"SPSC cap 1024, 256-byte", 1, 1, 1024, 256},
      {"SPSC cap 16, 256-byte", 1, 1, 16, 256},
      {"MPMC 2x2 cap 1024, 256-byte", 2, 2, 1024, 256},
      {"MPMC 4x4 cap 1024, 256-byte", 4, 4, 1024, 256},
  };

  // Medians by workload then queue, for the targets check at the end.
  std::map<std::string, std::map<std::string, double>> med_rate, med_cpu;
  std::printf("# queue_compare: %d run(s), %llu items per run, medians\n\n", runs,
              static_cast<unsigned long long>(items));
  std::printf("Load average at start: %s\n\n", load_average().c_str());
  for (const Workload& w : workloads) {
    if (w.name.find(filter) == std::string::npos) continue;
    const bool spsc = w.producers == 1 && w.consumers == 1;
    std::map<std::string, std::vector<double>> rate, cpu;
    for (int r = 0; r < runs; ++r) {
      for (const Candidate& c : cands) {
        if (c.spsc_only && !spsc) continue;
        const Sample s = c.throughput(w, items);
        rate[c.name].push_back(s.items_per_s);
        cpu[c.name].push_back(s.cpu_s_per_m);
      }
    }
    const double ours = median(rate[cands[0].name]);
    std::printf(
        "## %s\n\n| queue | M items/s | CPU s / M items | sluice / this |\n|---|---:|---:|---:|\n",
        w.name.c_str());
    for (const Candidate& c : cands) {
      if (c.spsc_only && !spsc) continue;
      const double m = median(rate[c.name]);
      med_rate[w.name][c.name] = m;
      med_cpu[w.name][c.name] = median(cpu[c.name]);
      std::printf("| %s | %.2f | %.3f | %.2fx |\n", c.name.c_str(), m / 1e6, median(cpu[c.name]),
                  ours / m);
    }
    std::printf("\n");
    std::fflush(stdout);
  }

  if (!filter.empty() && std::string("round trip").find(filter) == std::string::npos) {
    std::printf("Load average at end: %s\n", load_average().c_str());
    return 0;
  }
  std::printf(
      "## Round trip through two capacity-1 queues, 64-bit\n\n| queue | p50 ns | p99 ns "
      "|\n|---|---:|---:|\n");
  std::map<std::string, std::vector<double>> p50, p99;
  for (int r = 0; r < runs; ++r) {
    for (const Candidate& c : cands) {
      const Latency l = c.latency(round_trips);
      p50[c.name].push_back(l.p50_ns);
      p99[c.name].push_back(l.p99_ns);
    }
  }
  for (const Candidate& c : cands) {
    std::printf("| %s | %.0f | %.0f |\n", c.name.c_str(), median(p50[c.name]), median(p99[c.name]));
  }

  // The targets, as ratios within this run. A target whose peer or
  // workload was filtered out is skipped.
  std::printf(
      "\n## Targets (ratios within this run)\n\n| target | measured | met |\n|---|---:|---|\n");
  const std::string ours = cands[0].name;
  auto ratio_of = [&](const std::string& w, const std::string& mine, const std::string& peer,
                      double want, const char* what) {
    if (!med_rate.count(w) || !med_rate[w].count(peer) || !med_rate[w].count(mine)) return;
    const double r = med_rate[w][mine] / med_rate[w][peer];
    std::printf("| %s: %s%s >= %.1fx %s | %.2fx | %s |\n", w.c_str(),
                mine == ours ? "" : (mine + " ").c_str(), what, want, peer.c_str(), r,
                r >= want ? "yes" : "NO");
  };
  auto ratio = [&](const std::string& w, const std::string& peer, double want, const char* what) {
    ratio_of(w, ours, peer, want, what);
  };
  const std::string brwcb = MoodyBlockingRWCircularBuffer<std::uint64_t>::kName;
  const std::string tbb = TbbBoundedQueue<std::uint64_t>::kName;
  const std::string mutex = MutexQueue<std::uint64_t>::kName;
  const std::string cq = MoodyConcurrentQueue<std::uint64_t>::kName;
  ratio("SPSC cap 1024, 64-bit", brwcb, 1.5, "throughput");
  ratio("SPSC cap 16, 64-bit", tbb, 1.5, "throughput");
  for (const char* w : {"MPMC 2x2 cap 1024, 64-bit", "MPMC 4x4 cap 1024, 64-bit"}) {
    ratio(w, mutex, 3.0, "throughput");
    ratio(w, cq, 0.9, "throughput");
  }
  // Issue "sharp edges": big items, and a sleeping SPSC queue against spinning rings.
  ratio("MPMC 2x2 cap 1024, 64-byte", cq, 1.0, "throughput");
  ratio("MPMC 2x2 cap 1024, 256-byte", cq, 1.0, "throughput");
  const std::string spsc = SluiceSpscQueue<std::uint64_t>::kName;
  const std::string boost_spsc = BoostSpscQueue<std::uint64_t>::kName;
  ratio_of("SPSC cap 1024, 64-bit", spsc, boost_spsc, 1.0, "throughput");
  ratio_of("SPSC cap 1024, 64-bit, pinned apart", spsc, boost_spsc, 1.0, "throughput");
  if (p50.count(cq)) {
    const double r = median(p50[ours]) / median(p50[cq]);
    std::printf("| round trip p50 <= 1.1x %s | %.2fx | %s |\n", cq.c_str(), r,
                r <= 1.1 ? "yes" : "NO");
  }
  const double our_p99 = median(p99[ours]);
  std::printf("| round trip p99 < 2000 ns | %.0f ns | %s |\n", our_p99,
              our_p99 < 2000 ? "yes" : "NO");
  for (const auto& [w, by_queue] : med_cpu) {
    if (!by_queue.count(mutex)) continue;
    const double a = by_queue.at(ours), b = by_queue.at(mutex);
    std::printf("| %s: CPU s/M items <= mutex baseline's | %.3f vs %.3f | %s |\n", w.c_str(), a, b,
                a <= b ? "yes" : "NO");
  }
  std::printf("\nLoad average at end: %s\n", load_average().c_str());
  return 0;
}
