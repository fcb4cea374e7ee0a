// log_compare: sluice::Topic against the physical limit (raw pwrite +
// fdatasync) and an SQLite table used as a queue (WAL, synchronous=FULL,
// insert, then select + delete on consume), side by side in one run.
// All files live in one temporary directory on the same file system.
//
// Workloads (100-byte messages unless said), each as msg/s; medians of R runs:
//   raw probe          pwrite(116 B) + fdatasync, one thread: the durable-append limit,
//                      appending, and into fallocate'd space (no size change to journal)
//   raw bandwidth      pwrite(1 MiB) + fdatasync: MB/s
//   per-append         Topic kPerAppend, 1 producer           target >= 0.8x the faster probe
//   group commit       Topic kGroupCommit, 8 producers        target >= 25,000 msg/s and
//                                                             >= 4x per-append of the same run
//   batched            append_batch(1000), one sync per batch target >= 300,000 msg/s (100 B)
//                                                             and >= 150 MB/s (1 KiB)
//   no sync            Topic kNone, 1 producer + 1 channel consuming, end to end
//                                                             target >= 1,000,000 msg/s
//   consume + ack      a channel's consume() (batches of 1024, ack per batch) over what the
//                      mode appended                          target >= 0.9x its append rate
//   cross-process      a reader process (read-only topic) woken through NOTIFY: append-to-
//                      delivery latency p50/p99 (target p99 <= 1 ms), idle CPU over 1 s
//   sqlite             per-message transactions, and batches of 1000
// Usage: log_compare [--quick] [--runs R]
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "sluice/log/channel.h"
#include "sluice/log/topic.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double secs_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Env {
  fs::path root;
  int n = 0;
  // A fresh directory, after writing back what earlier workloads left dirty,
  // so that no workload pays for another's writeback.
  fs::path fresh(const std::string& name) {
    fs::path p = root / (name + std::to_string(n++));
    fs::remove_all(p);
    ::sync();
    return p;
  }
};

// prealloc: the file's space is reserved first (fallocate), as the topic
// does, so a sync need not journal a size change: the faster limit.
double raw_probe(Env& env, long ops, std::size_t size, bool prealloc = false) {
  const fs::path p = env.fresh("raw") += ".dat";
  const int fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (prealloc && ::fallocate(fd, 0, 0, static_cast<off_t>(ops * size)) != 0) std::abort();
  std::string buf(size, 'x');
  const auto t0 = Clock::now();
  std::uint64_t off = 0;
  for (long i = 0; i < ops; ++i) {
    if (::pwrite(fd, buf.data(), buf.size(), static_cast<off_t>(off)) < 0) std::abort();
    off += buf.size();
    ::fdatasync(fd);
  }
  const double s = secs_since(t0);
  ::close(fd);
  fs::remove(p);
  return static_cast<double>(ops) / s;
}

std::unique_ptr<sluice::Topic> open_topic(const fs::path& dir, sluice::Durability d) {
  sluice::TopicOptions o;
  o.durability = d;
  auto t = sluice::Topic::open(dir.string(), o);
  if (!t.ok()) {
    std::fprintf(stderr, "open: %s\n", t.status().to_string().c_str());
    std::exit(1);
  }
  return std::move(*t);
}

// Appends n messages with `threads` producers; returns msg/s.
double append_rate(sluice::Topic& t, long n, int threads, std::size_t size, std::size_t batch) {
  const std::string payload(size, 'p');
  std::vector<std::string_view> views(batch, payload);
  std::atomic<long> next{0};
  const auto t0 = Clock::now();
  std::vector<std::thread> ts;
  for (int k = 0; k < threads; ++k) {
    ts.emplace_back([&] {
      for (;;) {
        const long at = next.fetch_add(static_cast<long>(batch));
        if (at >= n) return;
        const auto r = batch == 1 ? t.append(payload) : t.append_batch(views);
        if (!r.ok()) std::abort();
      }
    });
  }
  for (auto& th : ts) th.join();
  return static_cast<double>(n) / secs_since(t0);
}

// A channel's consume() over everything in the topic; returns msg/s.
double consume_rate(sluice::Topic& t, long n) {
  auto c = t.channel("bench");
  if (!c.ok()) std::abort();
  long got = 0;
  const auto t0 = Clock::now();
  (void)(*c)->consume(
      [&](const sluice::LogMessage&) {
        ++got;
        return got == n ? sluice::Status(sluice::StatusCode::kClosed) : sluice::Status::Ok();
      },
      sluice::Context(), 1024);
  const double s = secs_since(t0);
  return static_cast<double>(got) / s;
}

// kNone, one producer and one consumer thread at once: end to end msg/s.
double end_to_end_nosync(Env& env, long n) {
  auto t = open_topic(env.fresh("e2e"), sluice::Durability::kNone);
  auto c = t->channel("e2e");
  if (!c.ok()) std::abort();
  const std::string payload(100, 'p');
  const auto t0 = Clock::now();
  std::thread producer([&] {
    for (long i = 0; i < n; ++i) {
      if (!t->append(payload).ok()) std::abort();
    }
  });
  long got = 0;
  std::vector<sluice::LogMessage> batch;
  while (got < n) {
    batch.clear();
    if (!(*c)->next_batch(batch, 1024).ok()) std::abort();
    got += static_cast<long>(batch.size());
    if (!(*c)->ack(batch.back().seq).ok()) std::abort();  // ack per batch
  }
  const double s = secs_since(t0);
  producer.join();
  c->reset();
  return static_cast<double>(n) / s;
}

// A reader in another process (read-only topic, channel asleep on the NOTIFY futex):
// latency from append to delivery over `n` appends spaced 2 ms apart, and
// the reader's CPU time while idle for 1 s. Returns {p50 us, p99 us, idle CPU ms}.
std::vector<double> cross_process(Env& env, int n) {
  const fs::path dir = env.fresh("xp");
  auto t = open_topic(dir, sluice::Durability::kNone);
  int ready[2];
  int result[2];
  if (pipe(ready) != 0 || pipe(result) != 0) std::abort();
  const pid_t child = fork();
  if (child == 0) {
    sluice::TopicOptions o;
    o.read_only = true;
    auto r = sluice::Topic::open(dir.string(), o);
    if (!r.ok()) _exit(1);
    auto c = (*r)->channel("remote");
    if (!c.ok()) _exit(2);
    (void)!write(ready[1], "r", 1);
    std::vector<double> lat;
    for (int i = 0; i < n; ++i) {
      auto m = (*c)->next();
      if (!m.ok()) _exit(3);
      std::int64_t sent = 0;
      std::memcpy(&sent, m->payload.data(), sizeof sent);
      const std::int64_t now = Clock::now().time_since_epoch().count();
      lat.push_back(static_cast<double>(now - sent) / 1000.0);
    }
    rusage a{};
    getrusage(RUSAGE_SELF, &a);
    auto idle = (*c)->next(sluice::with_timeout(std::chrono::seconds(1)));  // nothing comes
    rusage b{};
    getrusage(RUSAGE_SELF, &b);
    const double cpu_ms =
        ((b.ru_utime.tv_sec - a.ru_utime.tv_sec) + (b.ru_stime.tv_sec - a.ru_stime.tv_sec)) * 1e3 +
        ((b.ru_utime.tv_usec - a.ru_utime.tv_usec) + (b.ru_stime.tv_usec - a.ru_stime.tv_usec)) /
            1e3;
    std::sort(lat.begin(), lat.end());
    const double out[3] = {lat[lat.size() / 2], lat[lat.size() * 99 / 100], cpu_ms};
    (void)!write(result[1], out, sizeof out);
    (void)idle;
    _exit(0);
  }
  char b = 0;
  if (read(ready[0], &b, 1) != 1) std::abort();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let it fall asleep
  std::string payload(100, 'p');
  for (int i = 0; i < n; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // an idle reader each time
    const std::int64_t now = Clock::now().time_since_epoch().count();
    std::memcpy(payload.data(), &now, sizeof now);
    if (!t->append(payload).ok()) std::abort();
  }
  double out[3] = {0, 0, 0};
  if (read(result[0], out, sizeof out) != static_cast<ssize_t>(sizeof out)) std::abort();
  int st = 0;
  waitpid(child, &st, 0);
  for (int fd : {ready[0], ready[1], result[0], result[1]}) ::close(fd);
  return {out[0], out[1], out[2]};
}

struct Sqlite {
  sqlite3* db = nullptr;
  explicit Sqlite(const fs::path& p) {
    sqlite3_open(p.c_str(), &db);
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA synchronous=FULL");
    exec("CREATE TABLE q (id INTEGER PRIMARY KEY AUTOINCREMENT, payload BLOB)");
  }
  ~Sqlite() { sqlite3_close(db); }
  void exec(const char* sql) {
    char* err = nullptr;
    if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
      std::fprintf(stderr, "sqlite: %s\n", err);
      std::exit(1);
    }
  }
};

// Inserts n messages in transactions of `batch`; returns msg/s.
double sqlite_insert(Sqlite& q, long n, int batch, std::size_t size) {
  sqlite3_stmt* ins = nullptr;
  sqlite3_prepare_v2(q.db, "INSERT INTO q (payload) VALUES (?)", -1, &ins, nullptr);
  const std::string payload(size, 'p');
  const auto t0 = Clock::now();
  for (long i = 0; i < n; i += batch) {
    if (batch > 1) q.exec("BEGIN");
    for (int k = 0; k < batch && i + k < n; ++k) {
      sqlite3_bind_blob(ins, 1, payload.data(), static_cast<int>(payload.size()), SQLITE_STATIC);
      if (sqlite3_step(ins) != SQLITE_DONE) std::abort();
      sqlite3_reset(ins);
    }
    if (batch > 1) q.exec("COMMIT");
  }
  sqlite3_finalize(ins);
  return static_cast<double>(n) / secs_since(t0);
}

// Consumes by select-then-delete in transactions of `batch`; returns msg/s.
double sqlite_consume(Sqlite& q, long n, int batch) {
  sqlite3_stmt* sel = nullptr;
  sqlite3_stmt* del = nullptr;
  sqlite3_prepare_v2(q.db, "SELECT id, payload FROM q ORDER BY id LIMIT ?", -1, &sel, nullptr);
  sqlite3_prepare_v2(q.db, "DELETE FROM q WHERE id <= ?", -1, &del, nullptr);
  long got = 0;
  const auto t0 = Clock::now();
  while (got < n) {
    q.exec("BEGIN");
    sqlite3_bind_int(sel, 1, batch);
    sqlite3_int64 last = 0;
    while (sqlite3_step(sel) == SQLITE_ROW) {
      last = sqlite3_column_int64(sel, 0);
      ++got;
    }
    sqlite3_reset(sel);
    sqlite3_bind_int64(del, 1, last);
    sqlite3_step(del);
    sqlite3_reset(del);
    q.exec("COMMIT");
  }
  sqlite3_finalize(sel);
  sqlite3_finalize(del);
  return static_cast<double>(got) / secs_since(t0);
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 3;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
      runs = 1;
    } else if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--runs R]\n", argv[0]);
      return 2;
    }
  }
  const long sync_ops = quick ? 200 : 3000;   // per-append / sqlite per-message
  const long group_n = quick ? 2000 : 40000;  // group commit
  const long batched_n = quick ? 20000 : 1000000;
  const long kb_n = quick ? 5000 : 200000;
  const long nosync_n = quick ? 50000 : 2000000;
  Env env;
  env.root = fs::temp_directory_path() / ("sluice-log-bench-" + std::to_string(getpid()));
  fs::create_directories(env.root);
  std::map<std::string, std::vector<double>> r;
  for (int run = 0; run < runs; ++run) {
    r["raw probe (116 B + fdatasync)"].push_back(raw_probe(env, sync_ops, 116));
    r["raw probe, preallocated (116 B + fdatasync)"].push_back(raw_probe(env, sync_ops, 116, true));
    r["raw bandwidth MB/s (1 MiB + fdatasync)"].push_back(
        raw_probe(env, quick ? 20 : 200, 1 << 20));
    double per_append = 0;
    {
      auto t = open_topic(env.fresh("pa"), sluice::Durability::kPerAppend);
      const double a = append_rate(*t, sync_ops, 1, 100, 1);
      per_append = a;
      r["per-append, 1 producer"].push_back(a);
      r["consume+ack ratio: per-append"].push_back(consume_rate(*t, sync_ops) / a);
    }
    {
      auto t = open_topic(env.fresh("gc"), sluice::Durability::kGroupCommit);
      const double a = append_rate(*t, group_n, 8, 100, 1);
      r["group commit, 8 producers"].push_back(a);
      const sluice::TopicStats st = t->stats();
      r["ratio: group commit records per sync"].push_back(static_cast<double>(st.appended) /
                                                          static_cast<double>(st.syncs));
      r["ratio: group commit / per-append (same run)"].push_back(a / per_append);
      r["consume+ack ratio: group commit"].push_back(consume_rate(*t, group_n) / a);
    }
    {
      auto t = open_topic(env.fresh("b1"), sluice::Durability::kPerAppend);
      const double a = append_rate(*t, batched_n, 1, 100, 1000);
      r["batched 1000, 100 B"].push_back(a);
      r["consume+ack ratio: batched"].push_back(consume_rate(*t, batched_n) / a);
    }
    {
      auto t = open_topic(env.fresh("bk"), sluice::Durability::kPerAppend);
      r["batched 1000, 1 KiB, MB/s"].push_back(append_rate(*t, kb_n, 1, 1024, 1000) * 1024 / 1e6);
    }
    {
      auto t = open_topic(env.fresh("in"), sluice::Durability::kInterval);
      const double a = append_rate(*t, nosync_n / 4, 1, 100, 1);
      r["interval sync, 1 producer"].push_back(a);
      r["consume+ack ratio: interval"].push_back(consume_rate(*t, nosync_n / 4) / a);
    }
    {
      auto t = open_topic(env.fresh("ns"), sluice::Durability::kNone);
      const double a = append_rate(*t, nosync_n, 1, 100, 1);
      r["no sync, 1 producer"].push_back(a);
      r["consume+ack ratio: no sync"].push_back(consume_rate(*t, nosync_n) / a);
    }
    r["no sync, end to end (producer + consumer)"].push_back(end_to_end_nosync(env, nosync_n));
    {
      const auto xp = cross_process(env, quick ? 50 : 300);
      r["cross-process wake-up p50, us"].push_back(xp[0]);
      r["cross-process wake-up p99, us"].push_back(xp[1]);
      r["idle reader CPU over 1 s, ms"].push_back(xp[2]);
    }
    {
      Sqlite q(env.fresh("sq") += ".db");
      r["sqlite per-message insert"].push_back(sqlite_insert(q, sync_ops, 1, 100));
      r["sqlite batched insert (1000)"].push_back(sqlite_insert(q, batched_n / 4, 1000, 100));
      r["sqlite consume (select+delete, 1000)"].push_back(
          sqlite_consume(q, sync_ops + batched_n / 4, 1000));
    }
    fs::remove_all(env.root);
    fs::create_directories(env.root);
    std::fprintf(stderr, "run %d/%d done\n", run + 1, runs);
  }
  fs::remove_all(env.root);

  std::printf("# log_compare: %d run(s), medians%s\n\n| workload | result |\n|---|---:|\n", runs,
              quick ? " (quick: too short to quote)" : "");
  for (const auto& [k, v] : r) {
    if (k.starts_with("consume+ack ratio") || k.starts_with("ratio")) {
      std::printf("| %s | %.2fx |\n", k.c_str(), median(v));
    } else {
      std::printf("| %s | %.0f |\n", k.c_str(), median(v));
    }
  }
  // Against the faster of the two probes: the physical limit.
  const double raw = std::max(median(r["raw probe (116 B + fdatasync)"]),
                              median(r["raw probe, preallocated (116 B + fdatasync)"]));
  const double pa = median(r["per-append, 1 producer"]);
  std::printf("\ntargets:\n");
  std::printf("- per-append >= 0.8x the faster raw probe: %.2fx %s\n", pa / raw,
              pa >= 0.8 * raw ? "met" : "MISSED");
  const double gc = median(r["group commit, 8 producers"]);
  std::printf("- group commit >= 25000 msg/s: %.0f %s\n", gc, gc >= 25000 ? "met" : "MISSED");
  const double gr = median(r["ratio: group commit / per-append (same run)"]);
  std::printf("- group commit (8 producers) >= 4x per-append: %.2fx %s\n", gr,
              gr >= 4 ? "met" : "MISSED");
  const double b1 = median(r["batched 1000, 100 B"]);
  std::printf("- batched 100 B >= 300000 msg/s: %.0f %s\n", b1, b1 >= 300000 ? "met" : "MISSED");
  const double bk = median(r["batched 1000, 1 KiB, MB/s"]);
  std::printf("- batched 1 KiB >= 150 MB/s: %.0f %s\n", bk, bk >= 150 ? "met" : "MISSED");
  const double e2e = median(r["no sync, end to end (producer + consumer)"]);
  std::printf("- no sync end to end >= 1000000 msg/s: %.0f %s\n", e2e,
              e2e >= 1e6 ? "met" : "MISSED");
  double worst = 1e9;
  for (const auto& [k, v] : r) {
    if (k.starts_with("consume+ack ratio")) worst = std::min(worst, median(v));
  }
  std::printf("- consume+ack >= 0.9x append in every mode: worst %.2fx %s\n", worst,
              worst >= 0.9 ? "met" : "MISSED");
  const double xp99 = median(r["cross-process wake-up p99, us"]);
  std::printf("- a reader in another process sees a new message within 1 ms (p99): %.0f us %s\n",
              xp99, xp99 <= 1000 ? "met" : "MISSED");
  return 0;
}
