// pressure_compare: sluice::PressureQueue against redis-benchmark on the same
// redis-server (started here on a free loopback port), side by side in one run.
//
// Peers, each run in turn, R interleaved runs, medians reported:
//   redis-benchmark -c 1 -P 1  -d 100 -t lpush,rpop   (1 connection, no pipelining)
//   redis-benchmark -c 1 -P 16 -d 100 -t lpush,rpop   (1 connection, pipeline 16)
//   sluice single: 1 producer thread put() + 1 consumer thread get(), concurrent
//   sluice batch 64: put_many(64) + get_many(64), concurrent
//   reference: the protocol spoken step by step as the existing clients do
//     (tests/redis/reference_client.h), 1 producer + 1 consumer, concurrent
// Messages are 100 bytes; the queue's bound is 1000. A rate is messages moved
// end to end per second (first put to last get). Round trips per message count
// both sides. Targets (issue 6): single >= 0.6x redis-benchmark LPUSH -P 1;
// batch >= 0.5x LPUSH -P 16.
// Usage: pressure_compare [--quick] [--runs R] [--messages N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "redis/reference_client.h"
#include "sluice/redis/pressure_queue.h"
#include "testutil/redis_server.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kSize = 100;
constexpr std::uint64_t kBound = 1000;

struct Sample {
  double rate = 0;         // messages/s
  double round_trips = 0;  // per message, both sides
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// redis-benchmark's requests/s for LPUSH and RPOP (its --csv output).
std::map<std::string, double> redis_benchmark(int port, int pipeline, long n) {
  const std::string cmd = "redis-benchmark -h 127.0.0.1 -p " + std::to_string(port) + " -c 1 -P " +
                          std::to_string(pipeline) + " -n " + std::to_string(n) + " -d " +
                          std::to_string(kSize) + " -t lpush,rpop --csv 2>/dev/null";
  std::map<std::string, double> out;
  FILE* p = popen(cmd.c_str(), "r");  // NOLINT(cert-env33-c): a fixed command line
  if (p == nullptr) return out;
  char line[512];
  while (std::fgets(line, sizeof line, p) != nullptr) {
    // "LPUSH","41152.26",...
    char name[64];
    double rps = 0;
    if (std::sscanf(line, "\"%63[^\"]\",\"%lf\"", name, &rps) == 2) out[name] = rps;
  }
  pclose(p);
  return out;
}

Sample run_sluice(const sluice::RedisOptions& o, const std::string& name, long n,
                  std::size_t batch) {
  sluice::PressureQueue admin(o, name);
  (void)admin.destroy();
  if (!admin.create(kBound).ok()) {
    std::fprintf(stderr, "create failed\n");
    std::exit(1);
  }
  const std::string payload(kSize, 'x');
  std::uint64_t producer_rt = 0;
  std::uint64_t consumer_rt = 0;
  const auto t0 = Clock::now();
  std::thread producer([&] {
    sluice::PressureQueue q(o, name);
    const std::uint64_t before = q.round_trips();
    if (batch == 1) {
      for (long i = 0; i < n; ++i) {
        if (!q.put(payload).ok()) std::abort();
      }
    } else {
      std::vector<std::string> b(batch, payload);
      for (long i = 0; i < n; i += static_cast<long>(batch)) {
        b.resize(std::min<std::size_t>(batch, static_cast<std::size_t>(n - i)));
        if (!q.put_many(b).ok()) std::abort();
      }
    }
    producer_rt = q.round_trips() - before;
  });
  sluice::PressureQueue q(o, name);
  const std::uint64_t before = q.round_trips();
  std::vector<std::string> out;
  long got = 0;
  while (got < n) {
    out.clear();
    if (!q.get_many(out, batch).ok()) std::abort();
    got += static_cast<long>(out.size());
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  consumer_rt = q.round_trips() - before;
  producer.join();
  (void)admin.destroy();
  return {static_cast<double>(n) / secs,
          static_cast<double>(producer_rt + consumer_rt) / static_cast<double>(n)};
}

Sample run_reference(int port, long n) {
  {
    sluice::testutil::ReferenceClient admin(port, "ref");
    if (admin.exists()) admin.del();
    admin.create(static_cast<long long>(kBound));
  }
  const std::string payload(kSize, 'x');
  const auto t0 = Clock::now();
  std::thread producer([&] {
    sluice::testutil::ReferenceClient p(port, "ref");
    for (long i = 0; i < n; ++i) p.put(payload);
  });
  sluice::testutil::ReferenceClient c(port, "ref");
  for (long i = 0; i < n; ++i) (void)c.get();
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  producer.join();
  c.del();
  // put: EXISTS, BRPOP, SET, EXISTS, GET, BRPOP, LPUSH, [LPUSH, LTRIM], INCR, INCRBY, LPUSH;
  // get is similar: about 10 + 11 round trips per message (not counted live).
  return {static_cast<double>(n) / secs, 0};
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 5;
  long n = 20000;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
      runs = 1;
      n = 2000;
    } else if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--messages") == 0 && i + 1 < argc) {
      n = std::max(64L, std::atol(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--runs R] [--messages N]\n", argv[0]);
      return 2;
    }
  }
  sluice::testutil::RedisServer server;
  const sluice::RedisOptions o = server.options();
  std::map<std::string, std::vector<double>> rate;
  std::map<std::string, std::vector<double>> rts;
  std::map<std::string, std::vector<double>> ratio;  // within each run: drift-proof
  for (int r = 0; r < runs; ++r) {
    for (const auto& [k, v] : redis_benchmark(server.port(), 1, n)) rate["rb P1 " + k].push_back(v);
    Sample s = run_sluice(o, "bench1", n, 1);
    rate["sluice single"].push_back(s.rate);
    rts["sluice single"].push_back(s.round_trips);
    for (const auto& [k, v] : redis_benchmark(server.port(), 16, n * 10)) {
      rate["rb P16 " + k].push_back(v);
    }
    s = run_sluice(o, "bench64", n * 10, 64);
    rate["sluice batch 64"].push_back(s.rate);
    rts["sluice batch 64"].push_back(s.round_trips);
    ratio["single"].push_back(rate["sluice single"].back() / rate["rb P1 LPUSH"].back());
    ratio["batch"].push_back(rate["sluice batch 64"].back() / rate["rb P16 LPUSH"].back());
    s = run_reference(server.port(), std::min(n, 3000L));
    rate["reference client"].push_back(s.rate);
    std::fprintf(stderr, "run %d/%d done\n", r + 1, runs);
  }
  const double lpush1 = median(rate["rb P1 LPUSH"]);
  const double lpush16 = median(rate["rb P16 LPUSH"]);
  const double single = median(rate["sluice single"]);
  const double batch = median(rate["sluice batch 64"]);
  std::printf("# pressure_compare: %d run(s), medians, %zu-byte messages, bound %llu%s\n\n", runs,
              kSize, static_cast<unsigned long long>(kBound), quick ? " (quick)" : "");
  std::printf("| workload | msg/s (median) | round trips/msg | vs redis-benchmark LPUSH |\n");
  std::printf("|---|---:|---:|---:|\n");
  std::printf("| redis-benchmark LPUSH -c 1 -P 1 | %.0f | 1 | 1.00x (P1) |\n", lpush1);
  std::printf("| redis-benchmark RPOP -c 1 -P 1 | %.0f | 1 | |\n", median(rate["rb P1 RPOP"]));
  std::printf("| redis-benchmark LPUSH -c 1 -P 16 | %.0f | 1/16 | 1.00x (P16) |\n", lpush16);
  std::printf("| redis-benchmark RPOP -c 1 -P 16 | %.0f | 1/16 | |\n", median(rate["rb P16 RPOP"]));
  std::printf("| sluice put + get, concurrent | %.0f | %.2f | %.2fx (P1) |\n", single,
              median(rts["sluice single"]), single / lpush1);
  std::printf("| sluice put_many(64) + get_many(64) | %.0f | %.3f | %.2fx (P16) |\n", batch,
              median(rts["sluice batch 64"]), batch / lpush16);
  std::printf("| reference client (existing clients' steps) | %.0f | ~21 | %.2fx (P1) |\n",
              median(rate["reference client"]), median(rate["reference client"]) / lpush1);
  // Targets judged on the median of the per-run ratios (each run measures
  // sluice and redis-benchmark back to back, so machine drift cancels).
  const double r1 = median(ratio["single"]);
  const double r2 = median(ratio["batch"]);
  std::printf("\nper-run ratios (median): single %.2fx LPUSH P1, batch 64 %.2fx LPUSH P16\n", r1,
              r2);
  std::printf("targets: single >= 0.6x LPUSH P1: %s; batch 64 >= 0.5x LPUSH P16: %s\n",
              r1 >= 0.6 ? "met" : "MISSED", r2 >= 0.5 ? "met" : "MISSED");
  return 0;
}
