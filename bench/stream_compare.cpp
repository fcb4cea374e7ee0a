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
//   peek (issue 25): StreamTopic::peek of P messages (default 1,000,000), in
//     pages of 1000 after the last id, against reading the same with
//     next_batch(1000) (no ack, as a peek takes nothing; and with the ack,
//     as `sluice get` does), alternately first; then peek of the same P
//     messages held (pending: each one's payload looked up apart), seek
//     back to the start over P pending messages (XACKs them all), and seek
//     to the middle (the script counts the entries after it from the
//     nearest checkpoint). The first page goes through Lua, the next ones
//     are the script and a plain XRANGE in one MULTI/EXEC: with --quick
//     (2000 messages) the first page is half the work
//   on a 3-primary Redis Cluster (made here with redis-cli --cluster create):
//     append, batch 1 and batch 64, one producer per topic: 4 topics spread
//     over the 3 shards against 1 topic (handles given the first node only)
// Targets (issue 16): append batch 64 >= 0.5x redis-benchmark -P 16; four
// consumers >= 2.5x one consumer with the 200 us handler; 4 topics on the
// cluster >= 2x one topic. Issue 25: peek >= 0.9x next_batch.
// Usage: stream_compare [--quick] [--runs R] [--messages N] [--peek-messages P]
//                       [--no-cluster] [--only-peek]
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

struct PeekRates {
  double peek = 0;         // msg/s, undelivered messages
  double read = 0;         // msg/s, next_batch without ack
  double read_ack = 0;     // msg/s, next_batch + ack
  double peek_held = 0;    // msg/s, the same messages pending
  double seek_start = 0;   // ms, to the start over n pending
  double seek_middle = 0;  // ms, to the middle (counting n/2)
};

// Peek of n messages in pages of 1000 against next_batch(1000) of the same
// (`peek_first` says which goes first); then the rest of PeekRates.
PeekRates run_peek(const sluice::RedisOptions& o, long n, bool peek_first) {
  constexpr std::size_t kPage = 1000;
  sluice::StreamTopic t(o, "peek");
  (void)t.destroy();
  if (auto c = t.channel("c"); !c.ok()) fail("join", c.status());
  const std::string payload(kSize, 'x');
  std::vector<std::string_view> b(1000, payload);
  for (long i = 0; i < n; i += 1000) {
    const std::size_t k = std::min<std::size_t>(1000, static_cast<std::size_t>(n - i));
    if (auto s = t.append_batch(std::span(b).first(k)); !s.ok()) fail("fill", s);
  }
  const auto secs = [](Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  // Every message once, in pages; returns the last id.
  const auto peek_all = [&](std::string* middle) {
    std::string after;
    long seen = 0;
    for (;;) {
      auto page = t.peek("c", after, kPage);
      if (!page.ok()) fail("peek", page.status());
      if (page->empty()) break;
      if (middle != nullptr && seen <= n / 2 && seen + static_cast<long>(page->size()) > n / 2) {
        *middle = (*page)[static_cast<std::size_t>(n / 2 - seen)].id;
      }
      seen += static_cast<long>(page->size());
      after = page->back().id;
    }
    if (seen != n) fail("peek", sluice::Status(sluice::StatusCode::kInternal, "short"));
  };
  sluice::StreamChannel ch(o, "peek", "c");
  const auto read_all = [&](bool ack) {
    std::vector<sluice::StreamMessage> got;
    std::vector<std::string> ids;
    for (long seen = 0; seen < n;) {
      got.clear();
      if (auto s = ch.next_batch(got, kPage, sluice::with_timeout(std::chrono::seconds(10)));
          !s.ok()) {
        fail("read", s);
      }
      seen += static_cast<long>(got.size());
      if (ack) {
        ids.clear();
        for (const auto& m : got) ids.push_back(m.id);
        if (auto s = ch.ack(ids); !s.ok()) fail("ack", s);
      }
    }
  };
  PeekRates r;
  std::string middle;
  auto t0 = Clock::now();
  const auto rate = [&](Clock::time_point from) { return static_cast<double>(n) / secs(from); };
  if (peek_first) {
    t0 = Clock::now();
    peek_all(&middle);
    r.peek = rate(t0);
  }
  t0 = Clock::now();
  read_all(false);
  r.read = rate(t0);
  // Back to the start: nothing pending, nothing delivered.
  if (auto s = t.seek("c", "0"); !s.ok()) fail("seek", s);
  if (!peek_first) {
    t0 = Clock::now();
    peek_all(&middle);
    r.peek = rate(t0);
  }
  read_all(false);  // all held again
  t0 = Clock::now();
  peek_all(nullptr);
  r.peek_held = rate(t0);
  t0 = Clock::now();
  sluice::StreamSeekResult where;
  if (auto s = t.seek("c", "0", &where); !s.ok()) fail("seek", s);
  r.seek_start = secs(t0) * 1e3;
  if (where.dropped_pending != static_cast<std::uint64_t>(n)) {
    fail("seek", sluice::Status(sluice::StatusCode::kInternal, "dropped_pending"));
  }
  t0 = Clock::now();
  read_all(true);
  r.read_ack = rate(t0);
  t0 = Clock::now();
  if (auto s = t.seek("c", middle, &where); !s.ok()) fail("seek", s);
  r.seek_middle = secs(t0) * 1e3;
  if (where.unacknowledged != static_cast<std::uint64_t>(n - 1 - n / 2)) {
    fail("seek", sluice::Status(sluice::StatusCode::kInternal, "count after the middle"));
  }
  (void)t.destroy();
  return r;
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
  long peek_messages = 1000000;
  bool quick = false;
  bool with_cluster = true;
  bool only_peek = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
      runs = 1;
      messages = 2000;
      peek_messages = 2000;
    } else if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--messages") == 0 && i + 1 < argc) {
      messages = std::atol(argv[++i]);
    } else if (std::strcmp(argv[i], "--peek-messages") == 0 && i + 1 < argc) {
      peek_messages = std::atol(argv[++i]);
    } else if (std::strcmp(argv[i], "--no-cluster") == 0) {
      with_cluster = false;
    } else if (std::strcmp(argv[i], "--only-peek") == 0) {
      only_peek = true;
      with_cluster = false;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--quick] [--runs R] [--messages N] [--peek-messages P] "
                   "[--no-cluster] [--only-peek]\n",
                   argv[0]);
      return 2;
    }
  }
  sluice::testutil::RedisServer server;
  const sluice::RedisOptions o = server.options();
  // The slow-handler rows move fewer messages: 200 us each bounds one consumer
  // to ~5,000/s.
  const long slow = std::max<long>(200, messages / 50);
  using std::chrono::microseconds;
  std::map<std::string, std::vector<double>> rate;
  if (!only_peek) {
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
  }
  // Peek against next_batch, alternately first; the ratio per run, then
  // its median (the machine's speed swings between runs).
  for (int r = 0; r < runs; ++r) {
    const PeekRates p = run_peek(o, peek_messages, r % 2 == 0);
    rate["peek"].push_back(p.peek);
    rate["peek_read"].push_back(p.read);
    rate["peek_read_ack"].push_back(p.read_ack);
    rate["peek_held"].push_back(p.peek_held);
    rate["seek_start"].push_back(p.seek_start);
    rate["seek_middle"].push_back(p.seek_middle);
    rate["peek_ratio"].push_back(p.peek / p.read);
    rate["peek_ratio_ack"].push_back(p.peek / p.read_ack);
    std::fprintf(stderr, "peek run %d/%d done (peek %.0f/s, next_batch %.0f/s)\n", r + 1, runs,
                 p.peek, p.read);
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
  std::printf(
      "# stream_compare: %d run(s), %ld messages of %zu bytes (peek rows: %ld)%s, medians\n\n",
      runs, messages, kSize, peek_messages, quick ? " (quick)" : "");
  std::printf("| workload | msg/s | vs |\n|---|---:|---|\n");
  const double pk = median(rate["peek"]), pr = median(rate["peek_read"]);
  const double pra = median(rate["peek_read_ack"]), ph = median(rate["peek_held"]);
  const double ratio = median(rate["peek_ratio"]), ratio_ack = median(rate["peek_ratio_ack"]);
  std::printf("| next_batch(1000) of %ld messages, no ack | %.0f | |\n", peek_messages, pr);
  std::printf("| next_batch(1000) + ack of %ld messages | %.0f | |\n", peek_messages, pra);
  std::printf(
      "| peek of %ld messages, pages of 1000 | %.0f | %.2fx next_batch, %.2fx next_batch + ack "
      "(medians of per-run ratios) |\n",
      peek_messages, pk, ratio, ratio_ack);
  std::printf("| peek of the same %ld messages held (pending) | %.0f | %.2fx peek |\n",
              peek_messages, ph, ph / pk);
  std::printf("| seek to the start over %ld pending messages | %.1f ms | |\n", peek_messages,
              median(rate["seek_start"]));
  std::printf("| seek to the middle of %ld messages (%ld after it) | %.1f ms | |\n", peek_messages,
              peek_messages - 1 - peek_messages / 2, median(rate["seek_middle"]));
  if (only_peek) {
    std::printf("\ntargets:\n- peek >= 0.9x next_batch: %.2fx %s\n", ratio,
                ratio >= 0.9 ? "met" : "MISSED");
    return 0;
  }
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
  std::printf("- peek >= 0.9x next_batch: %.2fx %s\n", ratio, ratio >= 0.9 ? "met" : "MISSED");
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
