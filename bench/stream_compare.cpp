// stream_compare: sluice::StreamTopic/StreamChannel against redis-benchmark on
// the same redis-server (started here on a free loopback port), side by side
// in one run, R interleaved runs, medians reported. 100-byte messages.
//
// Rows:
//   redis-benchmark -c 1 -P 1  XADD key * d <100 B>   (no pipelining)
//   redis-benchmark -c 1 -P 16 XADD key * d <100 B>   (pipeline 16)
//   sluice append, batch 1 and batch 64 (append / append_batch), one producer
//   sluice consume + ack, batch 64, one consumer (of a pre-filled topic)
//   sluice consume + ack with a 200 us handler per message: 1 and 4 consumers
//     of one channel (threads, a handle each)
//   sluice append, batch 1 and batch 64, on a primary with one replica
//     attached: without and with StreamTopicOptions::replicas = 1 (WAIT 1
//     after each append script, pipelined with it): the cost of waiting for
//     the replica
//   on a 3-primary Redis Cluster (made here with redis-cli --cluster create):
//     append, batch 1 and batch 64, one producer per topic: 4 topics spread
//     over the 3 shards against 1 topic (handles given the first node only)
// Targets (issue 16): append batch 64 >= 0.5x redis-benchmark -P 16; four
// consumers >= 2.5x one consumer with the 200 us handler; 4 topics on the
// cluster >= 2x one topic.
// Usage: stream_compare [--quick] [--runs R] [--messages N] [--no-cluster]
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "sluice/redis/stream_topic.h"
#include "testutil/redis_cluster.h"
#include "testutil/redis_server.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kSize = 100;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// redis-benchmark's requests/s for XADD (custom-command mode, --csv).
double redis_benchmark(int port, int pipeline, long n) {
  const std::string cmd = "redis-benchmark -h 127.0.0.1 -p " + std::to_string(port) + " -c 1 -P " +
                          std::to_string(pipeline) + " -n " + std::to_string(n) +
                          " --csv XADD 'rb{bench}' '*' d " + std::string(kSize, 'x') +
                          " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");  // NOLINT(cert-env33-c): a fixed command line
  if (p == nullptr) return 0;
  char line[1024];
  double rps = 0;
  while (std::fgets(line, sizeof line, p) != nullptr) {
    if (std::strncmp(line, "\"XADD", 5) != 0) continue;
    const char* q = std::strstr(line, "\",\"");  // end of the test name
    if (q != nullptr) rps = std::atof(q + 3);
  }
  pclose(p);
  return rps;
}

void fail(const char* what, const sluice::Status& s) {
  std::fprintf(stderr, "stream_compare: %s: %s\n", what, std::string(s.message()).c_str());
  std::exit(1);
}

double run_append(const sluice::RedisOptions& o, long n, std::size_t batch,
                  std::uint32_t replicas = 0) {
  sluice::StreamTopicOptions to;
  to.replicas = replicas;
  sluice::StreamTopic t(o, "append", to);
  (void)t.destroy();
  const std::string payload(kSize, 'x');
  std::vector<std::string_view> b(batch, payload);
  const auto t0 = Clock::now();
  if (batch == 1) {
    for (long i = 0; i < n; ++i) {
      if (auto r = t.append(payload); !r.ok()) fail("append", r.status());
    }
  } else {
    for (long i = 0; i < n; i += static_cast<long>(batch)) {
      const std::size_t k = std::min<std::size_t>(batch, static_cast<std::size_t>(n - i));
      if (auto s = t.append_batch(std::span(b).first(k)); !s.ok()) fail("append_batch", s);
    }
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  (void)t.destroy();
  return static_cast<double>(n) / secs;
}

// Consume + ack of n pre-filled messages by `consumers` threads of one
// channel, each message costing `handler` of (sleeping) work.
double run_consume(const sluice::RedisOptions& o, long n, int consumers,
                   std::chrono::microseconds handler) {
  sluice::StreamTopic t(o, "consume");
  (void)t.destroy();
  if (auto c = t.channel("ch"); !c.ok()) fail("join", c.status());
  const std::string payload(kSize, 'x');
  std::vector<std::string_view> b(1000, payload);
  for (long i = 0; i < n; i += 1000) {
    const std::size_t k = std::min<std::size_t>(1000, static_cast<std::size_t>(n - i));
    if (auto s = t.append_batch(std::span(b).first(k)); !s.ok()) fail("fill", s);
  }
  std::atomic<long> done{0};
  std::atomic<Clock::rep> end{0};  // when the last message was acknowledged
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < consumers; ++c) {
    threads.emplace_back([&] {
      sluice::StreamChannel ch(o, "consume", "ch");
      std::vector<sluice::StreamMessage> got;
      std::vector<std::string> ids;
      // Batches small enough to share the work out when handling is slow.
      const std::size_t max = handler.count() > 0 ? 8 : 64;
      while (done.load(std::memory_order_relaxed) < n) {
        got.clear();
        const auto s =
            ch.next_batch(got, max, sluice::with_timeout(std::chrono::milliseconds(100)));
        if (s.code() == sluice::StatusCode::kDeadlineExceeded) continue;
        if (!s.ok()) fail("read", s);
        ids.clear();
        for (const auto& m : got) {
          if (handler.count() > 0) std::this_thread::sleep_for(handler);
          ids.push_back(m.id);
        }
        if (auto a = ch.ack(ids); !a.ok()) fail("ack", a);
        const long k = static_cast<long>(got.size());
        if (done.fetch_add(k, std::memory_order_relaxed) + k >= n) {
          end.store(
              Clock::now().time_since_epoch().count());  // idle consumers' last wait not counted
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  const double secs =
      std::chrono::duration<double>(Clock::time_point(Clock::duration(end.load())) - t0).count();
  (void)t.destroy();
  return static_cast<double>(n) / secs;
}

// CPU seconds used so far by this process (every thread) and by the
// redis-servers on `ports` (INFO cpu).
double cpu_seconds(const std::vector<int>& ports) {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  double s = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
             static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  for (const int port : ports) {
    sluice::testutil::RawRedis c(port);
    auto r = c.cmd({"INFO", "cpu"});
    const std::string info(r->str, r->len);
    for (const char* key : {"used_cpu_sys:", "used_cpu_user:"}) {
      const auto at = info.find(key);
      if (at != std::string::npos) s += std::atof(info.c_str() + at + std::strlen(key));
    }
  }
  return s;
}

// Appends of n messages to each topic, one producer thread per topic; the
// total rate. *cores: CPU used (client and servers) per second of the run.
double run_topics(const sluice::RedisOptions& o, const std::vector<std::string>& topics, long n,
                  std::size_t batch, const std::vector<int>& ports, double* cores) {
  for (const auto& name : topics) (void)sluice::StreamTopic(o, name).destroy();
  const std::string payload(kSize, 'x');
  const double cpu0 = cpu_seconds(ports);
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (const auto& name : topics) {
    threads.emplace_back([&, name] {
      sluice::StreamTopic t(o, name);
      std::vector<std::string_view> b(batch, payload);
      for (long i = 0; i < n; i += static_cast<long>(batch)) {
        const std::size_t k = std::min<std::size_t>(batch, static_cast<std::size_t>(n - i));
        if (auto s = t.append_batch(std::span(b).first(k)); !s.ok()) fail("cluster append", s);
      }
    });
  }
  for (auto& th : threads) th.join();
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  *cores = (cpu_seconds(ports) - cpu0) / secs;
  for (const auto& name : topics) (void)sluice::StreamTopic(o, name).destroy();
  return static_cast<double>(n) * static_cast<double>(topics.size()) / secs;
}

// A topic name whose keys live on cluster node `node`.
std::string topic_on(sluice::testutil::RedisCluster& c, std::size_t node, int& next) {
  for (;;) {
    std::string n = "topic" + std::to_string(next++);
    if (c.node_of("sluice:{" + n + "}:stream") == node) return n;
  }
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 5;
  long messages = 100000;
  bool quick = false;
  bool with_cluster = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
      runs = 1;
      messages = 2000;
    } else if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--messages") == 0 && i + 1 < argc) {
      messages = std::atol(argv[++i]);
    } else if (std::strcmp(argv[i], "--no-cluster") == 0) {
      with_cluster = false;
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--runs R] [--messages N] [--no-cluster]\n",
                   argv[0]);
      return 2;
    }
  }
  sluice::testutil::RedisServer server;
  const sluice::RedisOptions o = server.options();
  // A primary with one replica, for the replicas rows.
  sluice::testutil::RedisServer primary;
  sluice::testutil::RedisServer replica;
  const sluice::RedisOptions po = primary.options();
  {
    sluice::testutil::RawRedis p(primary.port());
    p.cmd({"CONFIG", "SET", "repl-diskless-sync-delay", "0"});
    sluice::testutil::RawRedis(replica.port())
        .cmd({"REPLICAOF", "127.0.0.1", std::to_string(primary.port())});
    // Streaming once a write is acknowledged with the replica's offset past
    // 0 (Redis 7 starts at the replica's first ACK).
    for (const auto give_up = Clock::now() + std::chrono::seconds(30);;) {
      p.cmd({"SET", "probe", "1"});
      auto r = sluice::testutil::RawRedis(replica.port()).cmd({"INFO", "replication"});
      const std::string info(r->str, r->len);
      const auto at = info.find("slave_repl_offset:");
      if (p.integer({"WAIT", "1", "100"}) == 1 && at != std::string::npos &&
          std::atoll(info.c_str() + at + 18) > 0) {
        break;
      }
      if (Clock::now() > give_up) {
        std::fprintf(stderr, "stream_compare: the replica did not sync\n");
        return 1;
      }
    }
  }
  // The slow-handler rows move fewer messages: 200 us each bounds one consumer
  // to ~5,000/s.
  const long slow = std::max<long>(200, messages / 50);
  using std::chrono::microseconds;
  std::map<std::string, std::vector<double>> rate;
  for (int r = 0; r < runs; ++r) {
    rate["rb1"].push_back(redis_benchmark(server.port(), 1, messages / 4));
    rate["rb16"].push_back(redis_benchmark(server.port(), 16, messages));
    rate["append1"].push_back(run_append(o, messages / 4, 1));
    rate["append64"].push_back(run_append(o, messages, 64));
    rate["consume64"].push_back(run_consume(o, messages, 1, microseconds(0)));
    rate["slow1"].push_back(run_consume(o, slow, 1, microseconds(200)));
    rate["slow4"].push_back(run_consume(o, slow, 4, microseconds(200)));
    rate["rep0x1"].push_back(run_append(po, messages / 4, 1, 0));
    rate["rep1x1"].push_back(run_append(po, messages / 4, 1, 1));
    rate["rep0x64"].push_back(run_append(po, messages, 64, 0));
    rate["rep1x64"].push_back(run_append(po, messages, 64, 1));
    std::fprintf(stderr, "run %d/%d done\n", r + 1, runs);
  }
  if (with_cluster) {
    sluice::testutil::RedisCluster cluster(3);
    int next = 0;
    const std::vector<std::string> one = {topic_on(cluster, 1, next)};
    std::vector<std::string> four;
    for (std::size_t node : {0U, 1U, 2U, 0U}) four.push_back(topic_on(cluster, node, next));
    const sluice::RedisOptions seed = cluster.options();
    std::vector<int> ports;
    for (std::size_t i = 0; i < cluster.size(); ++i) ports.push_back(cluster.port(i));
    for (int r = 0; r < runs; ++r) {
      for (const auto& [row, topics, n, batch] :
           {std::tuple{"cl1x1", one, messages / 8, 1}, std::tuple{"cl4x1", four, messages / 8, 1},
            std::tuple{"cl1x64", one, messages, 64}, std::tuple{"cl4x64", four, messages, 64}}) {
        double cores = 0;
        rate[row].push_back(
            run_topics(seed, topics, n, static_cast<std::size_t>(batch), ports, &cores));
        rate[std::string(row) + "cpu"].push_back(cores);
      }
      std::fprintf(stderr, "cluster run %d/%d done\n", r + 1, runs);
    }
  }
  const double rb1 = median(rate["rb1"]), rb16 = median(rate["rb16"]);
  const double a1 = median(rate["append1"]), a64 = median(rate["append64"]);
  const double c64 = median(rate["consume64"]);
  const double s1 = median(rate["slow1"]), s4 = median(rate["slow4"]);
  std::printf("# stream_compare: %d run(s), %ld messages of %zu bytes%s, medians\n\n", runs,
              messages, kSize, quick ? " (quick)" : "");
  std::printf("| workload | msg/s | vs |\n|---|---:|---|\n");
  std::printf("| redis-benchmark XADD -c 1 -P 1 | %.0f | |\n", rb1);
  std::printf("| redis-benchmark XADD -c 1 -P 16 | %.0f | |\n", rb16);
  std::printf("| sluice append, batch 1 | %.0f | %.2fx redis-benchmark -P 1 |\n", a1, a1 / rb1);
  std::printf("| sluice append_batch, 64 | %.0f | %.2fx redis-benchmark -P 16 |\n", a64,
              a64 / rb16);
  std::printf("| sluice read + ack, batch 64, 1 consumer | %.0f | |\n", c64);
  std::printf("| sluice read + ack, 200 us handler, 1 consumer (%ld msgs) | %.0f | |\n", slow, s1);
  std::printf(
      "| sluice read + ack, 200 us handler, 4 consumers of one channel | %.0f | %.2fx 1 "
      "consumer |\n",
      s4, s4 / s1);
  const double r01 = median(rate["rep0x1"]), r11 = median(rate["rep1x1"]);
  const double r064 = median(rate["rep0x64"]), r164 = median(rate["rep1x64"]);
  std::printf("| with a replica: append, batch 1 | %.0f | |\n", r01);
  std::printf("| with a replica: append, batch 1, replicas 1 (WAIT) | %.0f | %.2fx without |\n",
              r11, r11 / r01);
  std::printf("| with a replica: append_batch, 64 | %.0f | |\n", r064);
  std::printf("| with a replica: append_batch, 64, replicas 1 (WAIT) | %.0f | %.2fx without |\n",
              r164, r164 / r064);
  const double k11 = median(rate["cl1x1"]), k41 = median(rate["cl4x1"]);
  const double k164 = median(rate["cl1x64"]), k464 = median(rate["cl4x64"]);
  if (with_cluster) {
    // CPU: cores busy (this process and the three servers) during the row.
    const auto cpu = [&](const char* row) { return median(rate[std::string(row) + "cpu"]); };
    std::printf("| cluster (3 primaries): append batch 1, 1 topic | %.0f | %.2f cores busy |\n",
                k11, cpu("cl1x1"));
    std::printf(
        "| cluster: append batch 1, 4 topics on 3 shards | %.0f | %.2fx 1 topic; %.2f cores |\n",
        k41, k41 / k11, cpu("cl4x1"));
    std::printf("| cluster: append_batch 64, 1 topic | %.0f | %.2f cores busy |\n", k164,
                cpu("cl1x64"));
    std::printf(
        "| cluster: append_batch 64, 4 topics on 3 shards | %.0f | %.2fx 1 topic; %.2f cores |\n",
        k464, k464 / k164, cpu("cl4x64"));
  }
  std::printf("\ntargets:\n");
  std::printf("- append batch 64 >= 0.5x redis-benchmark XADD -P 16: %.2fx %s\n", a64 / rb16,
              a64 >= 0.5 * rb16 ? "met" : "MISSED");
  std::printf("- 4 consumers >= 2.5x 1 consumer (200 us handler): %.2fx %s\n", s4 / s1,
              s4 >= 2.5 * s1 ? "met" : "MISSED");
  if (with_cluster) {
    std::printf("- cluster, 4 topics >= 2x 1 topic: batch 1 %.2fx %s, batch 64 %.2fx %s\n",
                k41 / k11, k41 >= 2 * k11 ? "met" : "MISSED", k464 / k164,
                k464 >= 2 * k164 ? "met" : "MISSED");
  }
  return 0;
}
