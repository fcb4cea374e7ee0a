// log_lookback: what looking back into a topic costs (issue 25), side by
// side in one run, medians of R rounds (the two sides of a comparison
// alternate within each round, and the ratio is taken per round).
//
//   seq_at_time      a topic of N 100-byte records (default 10,000,000; the
//                    page cache warm: it was just written and read), opened
//                    for writing and read-only; the time per search at random
//                    times between the first and the last record's
//                    (median, p99, max over 200 searches)     target < 50 ms
//                    The open (recovery reads every segment) is shown too:
//                    a command that opens the topic to seek pays it.
//   cursor positioning  Topic::cursor(random seq): the time to the first record
//   append time cost    appends with the time in the record (format 2) against
//                    the format before it (format 1, OpenHooks::untimed: the
//                    same code writing 16-byte headers), kNone, 100 B:
//                    1 producer; producer + channel end to end (put | get);
//                    batches of 1000          target: format 2 >= 0.95x format 1
//   cursor vs channel  1,000,000 records of 100 B read by a LogCursor and by a
//                    new channel's next_batch (1024 per call, no ack; and with
//                    an ack per batch, as get does), in the writer's process
//                    (reads through its map) and in a read-only topic (pread)
//                                             target: cursor >= 0.9x channel
// Usage: log_lookback [--quick] [--runs R] [--records N]
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "log/topic_impl.h"
#include "sluice/log/channel.h"
#include "sluice/log/cursor.h"
#include "sluice/log/topic.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using sluice::Durability;
using sluice::LogMessage;
using sluice::Topic;
using sluice::TopicOptions;

double secs_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

[[noreturn]] void die(const char* what, const sluice::Status& s) {
  std::fprintf(stderr, "%s: %s\n", what, s.to_string().c_str());
  std::exit(1);
}

std::unique_ptr<Topic> open(const fs::path& dir, Durability d, bool untimed = false,
                            bool read_only = false) {
  TopicOptions o;
  o.durability = d;
  o.read_only = read_only;
  sluice::log::OpenHooks h;
  h.untimed = untimed;
  auto t = sluice::log::open_topic(sluice::log::posix_file_system(), dir.string(), o, h);
  if (!t.ok()) die("open", t.status());
  return std::move(*t);
}

fs::path fresh(const fs::path& root, const std::string& name) {
  static int n = 0;
  fs::path p = root / (name + std::to_string(n++));
  fs::remove_all(p);
  ::sync();  // no workload pays for another's writeback
  return p;
}

// Appends n records of `size` bytes in batches of `batch`; msg/s.
double fill(Topic& t, long n, std::size_t size, std::size_t batch) {
  const std::string payload(size, 'p');
  std::vector<std::string_view> views(batch, payload);
  const auto t0 = Clock::now();
  for (long i = 0; i < n; i += static_cast<long>(batch)) {
    const std::size_t k = std::min<std::size_t>(batch, static_cast<std::size_t>(n - i));
    auto r = k == 1 ? t.append(payload)
                    : t.append_batch(std::span<const std::string_view>(views.data(), k));
    if (!r.ok()) die("append", r.status());
  }
  return static_cast<double>(n) / secs_since(t0);
}

// kNone, one producer and one channel consuming (ack per batch): msg/s.
double end_to_end(const fs::path& dir, long n, bool untimed) {
  auto t = open(dir, Durability::kNone, untimed);
  auto c = t->channel("e2e");
  if (!c.ok()) die("channel", c.status());
  const std::string payload(100, 'p');
  const auto t0 = Clock::now();
  std::thread producer([&] {
    for (long i = 0; i < n; ++i) {
      if (auto r = t->append(payload); !r.ok()) die("append", r.status());
    }
  });
  long got = 0;
  std::vector<LogMessage> batch;
  while (got < n) {
    batch.clear();
    if (auto s = (*c)->next_batch(batch, 1024); !s.ok()) die("next_batch", s);
    got += static_cast<long>(batch.size());
    if (auto s = (*c)->ack(batch.back().seq); !s.ok()) die("ack", s);
  }
  const double s = secs_since(t0);
  producer.join();
  return static_cast<double>(n) / s;
}

// Reads n records through a cursor from seq 0: msg/s.
double cursor_rate(Topic& t, long n) {
  auto c = t.cursor(0);
  if (!c.ok()) die("cursor", c.status());
  std::vector<LogMessage> batch;
  long got = 0;
  const auto t0 = Clock::now();
  while (got < n) {
    batch.clear();
    if (auto s = (*c)->next_batch(batch, 1024); !s.ok()) die("cursor next_batch", s);
    if (batch.empty()) die("cursor", sluice::Status(sluice::StatusCode::kInternal, "ran dry"));
    got += static_cast<long>(batch.size());
  }
  return static_cast<double>(got) / secs_since(t0);
}

// Reads n records through a new channel (deleted after): msg/s.
double channel_rate(Topic& t, long n, bool ack, const std::string& name) {
  double rate = 0;
  {
    auto c = t.channel(name);
    if (!c.ok()) die("channel", c.status());
    std::vector<LogMessage> batch;
    long got = 0;
    const auto t0 = Clock::now();
    while (got < n) {
      batch.clear();
      if (auto s = (*c)->next_batch(batch, 1024); !s.ok()) die("channel next_batch", s);
      got += static_cast<long>(batch.size());
      if (ack) {
        if (auto s = (*c)->ack(batch.back().seq); !s.ok()) die("ack", s);
      }
    }
    rate = static_cast<double>(got) / secs_since(t0);
  }
  return rate;
}

void row(const char* name, const std::string& value) {
  std::printf("| %s | %s |\n", name, value.c_str());
}
std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 5;
  bool quick = false;
  long records = 10'000'000;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
      runs = 1;
      records = 200'000;
    } else if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--records") == 0 && i + 1 < argc) {
      records = std::max(1L, std::atol(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--runs R] [--records N]\n", argv[0]);
      return 2;
    }
  }
  const fs::path root = fs::temp_directory_path() / ("sluice-lookback-" + std::to_string(getpid()));
  fs::create_directories(root);
  std::mt19937_64 rng(42);

  // --- seq_at_time and positioning on a big topic ---
  std::map<std::string, std::vector<double>> r;
  double fill_rate = 0;
  double open_writer_s = 0;
  double open_reader_s = 0;
  std::vector<double> search_w;
  std::vector<double> search_r;
  std::vector<double> position_ms;
  std::uint64_t segments = 0;
  {
    const fs::path big = fresh(root, "big");
    {
      auto t = open(big, Durability::kNone);
      fill_rate = fill(*t, records, 100, 1000);
      segments = t->stats().segments;
    }
    // Warm: read it all once (as the writer's open does).
    auto t0 = Clock::now();
    auto t = open(big, Durability::kNone);
    open_writer_s = secs_since(t0);  // warm already (just written)
    t0 = Clock::now();
    auto ro = open(big, Durability::kNone, false, true);
    open_reader_s = secs_since(t0);
    auto first = t->cursor(0);
    std::vector<LogMessage> one;
    if (!first.ok() || !(*first)->next_batch(one, 1).ok() || one.empty() || !one[0].time) {
      die("first record", sluice::Status(sluice::StatusCode::kInternal, "none"));
    }
    const auto lo = *one[0].time;
    auto last = t->cursor(t->next_seq() - 1);
    one.clear();
    if (!last.ok() || !(*last)->next_batch(one, 1).ok() || one.empty()) {
      die("last record", sluice::Status(sluice::StatusCode::kInternal, "none"));
    }
    const auto hi = *one[0].time;
    const auto span = std::chrono::duration_cast<std::chrono::microseconds>(hi - lo).count();
    for (int i = 0; i < 200; ++i) {
      const auto at = lo + std::chrono::microseconds(static_cast<std::int64_t>(
                               rng() % static_cast<std::uint64_t>(span + 1)));
      auto s0 = Clock::now();
      auto w = t->seq_at_time(at);
      search_w.push_back(secs_since(s0) * 1e3);
      s0 = Clock::now();
      auto rr = ro->seq_at_time(at);
      search_r.push_back(secs_since(s0) * 1e3);
      if (!w.ok() || !rr.ok() || *w != *rr) {
        die("seq_at_time", w.ok() ? rr.status() : w.status());
      }
      const std::uint64_t seq = rng() % t->next_seq();
      s0 = Clock::now();
      auto c = t->cursor(seq);
      one.clear();
      if (!c.ok() || !(*c)->next_batch(one, 1).ok() || one.empty() || one[0].seq != seq) {
        die("cursor(seq)", sluice::Status(sluice::StatusCode::kInternal, "wrong record"));
      }
      position_ms.push_back(secs_since(s0) * 1e3);
    }
    t.reset();
    ro.reset();
    fs::remove_all(big);
  }

  // --- append cost of the time, and cursor against channel ---
  const long single_n = quick ? 100'000 : 2'000'000;
  const long batch_n = quick ? 200'000 : 4'000'000;
  const long read_n = quick ? 100'000 : 1'000'000;
  for (int run = 0; run < runs; ++run) {
    for (const bool untimed : {run % 2 == 0, run % 2 != 0}) {  // alternate which goes first
      const char* side = untimed ? "format 1" : "format 2";
      {
        auto t = open(fresh(root, "a1"), Durability::kNone, untimed);
        r[std::string("append, 1 producer, kNone: ") + side].push_back(fill(*t, single_n, 100, 1));
      }
      {
        auto t = open(fresh(root, "ab"), Durability::kNone, untimed);
        r[std::string("append_batch(1000), kNone: ") + side].push_back(
            fill(*t, batch_n, 100, 1000));
      }
      r[std::string("end to end (producer + channel), kNone: ") + side].push_back(
          end_to_end(fresh(root, "e2e"), single_n, untimed));
    }
    for (const char* k : {"append, 1 producer, kNone: ", "append_batch(1000), kNone: ",
                          "end to end (producer + channel), kNone: "}) {
      const std::string key(k);
      r["ratio " + key + "format 2 / format 1"].push_back(r[key + "format 2"].back() /
                                                          r[key + "format 1"].back());
    }
    {
      const fs::path dir = fresh(root, "rd");
      auto t = open(dir, Durability::kNone);
      (void)fill(*t, read_n, 100, 1000);
      auto ro = open(dir, Durability::kNone, false, true);
      const std::string name = "c" + std::to_string(run);
      // Alternate which side reads first: the second finds the cache warmer.
      double cw = 0;
      double chw = 0;
      double cr = 0;
      double chr = 0;
      if (run % 2 == 0) {
        cw = cursor_rate(*t, read_n);
        chw = channel_rate(*t, read_n, false, name + "w");
        chr = channel_rate(*ro, read_n, false, name + "r");
        cr = cursor_rate(*ro, read_n);
      } else {
        chw = channel_rate(*t, read_n, false, name + "w");
        cw = cursor_rate(*t, read_n);
        cr = cursor_rate(*ro, read_n);
        chr = channel_rate(*ro, read_n, false, name + "r");
      }
      const double cha = channel_rate(*t, read_n, true, name + "a");
      r["read 1M, writer's process: cursor"].push_back(cw);
      r["read 1M, writer's process: channel next_batch"].push_back(chw);
      r["read 1M, writer's process: channel next_batch + ack per batch"].push_back(cha);
      r["read 1M, read-only topic: cursor"].push_back(cr);
      r["read 1M, read-only topic: channel next_batch"].push_back(chr);
      r["ratio cursor / channel next_batch, writer's process"].push_back(cw / chw);
      r["ratio cursor / channel next_batch, read-only topic"].push_back(cr / chr);
      r["ratio cursor / channel next_batch + ack, writer's process"].push_back(cw / cha);
    }
    fs::remove_all(root);
    fs::create_directories(root);
    std::fprintf(stderr, "run %d/%d done\n", run + 1, runs);
  }
  fs::remove_all(root);

  std::printf("# log_lookback: %d round(s), medians%s\n\n", runs,
              quick ? " (quick: too short to quote)" : "");
  std::printf("## seq_at_time on %ld records of 100 B (%llu segments of 64 MiB), warm cache\n\n",
              records, static_cast<unsigned long long>(segments));
  std::printf("| measure | result |\n|---|---:|\n");
  row("filled at (append_batch 1000, kNone), msg/s", fmt("%.0f", fill_rate));
  row("open for writing (recovery reads every segment), s", fmt("%.2f", open_writer_s));
  row("open read-only (the same scan), s", fmt("%.2f", open_reader_s));
  row("seq_at_time, writer: median ms", fmt("%.3f", median(search_w)));
  row("seq_at_time, writer: p99 ms", fmt("%.3f", pct(search_w, 0.99)));
  row("seq_at_time, writer: max ms", fmt("%.3f", pct(search_w, 1.0)));
  row("seq_at_time, read-only: median ms", fmt("%.3f", median(search_r)));
  row("seq_at_time, read-only: p99 ms", fmt("%.3f", pct(search_r, 0.99)));
  row("seq_at_time, read-only: max ms", fmt("%.3f", pct(search_r, 1.0)));
  row("cursor(random seq) to its first record: median ms", fmt("%.3f", median(position_ms)));
  row("cursor(random seq) to its first record: max ms", fmt("%.3f", pct(position_ms, 1.0)));
  std::printf("\n## throughput, msg/s (ratios: median of per-round ratios)\n\n");
  std::printf("| workload | result |\n|---|---:|\n");
  for (const auto& [k, v] : r) {
    row(k.c_str(), k.starts_with("ratio") ? fmt("%.3fx", median(v)) : fmt("%.0f", median(v)));
  }
  std::printf("\ntargets:\n");
  const double sw = pct(search_w, 1.0);
  const double sr = pct(search_r, 1.0);
  std::printf(
      "- seq_at_time on %ld records < 50 ms: slowest of 200 %.3f ms (writer), %.3f ms "
      "(read-only) %s\n",
      records, sw, sr, std::max(sw, sr) < 50 ? "met" : "MISSED");
  double worst = 1e9;
  for (const char* k : {"ratio append, 1 producer, kNone: format 2 / format 1",
                        "ratio append_batch(1000), kNone: format 2 / format 1",
                        "ratio end to end (producer + channel), kNone: format 2 / format 1"}) {
    worst = std::min(worst, median(r[k]));
  }
  std::printf("- appends with the time >= 0.95x without: worst %.3fx %s\n", worst,
              worst >= 0.95 ? "met" : "MISSED");
  const double cw = median(r["ratio cursor / channel next_batch, writer's process"]);
  const double cr = median(r["ratio cursor / channel next_batch, read-only topic"]);
  std::printf(
      "- cursor >= 0.9x channel next_batch: %.3fx (writer's process), %.3fx (read-only) %s\n", cw,
      cr, std::min(cw, cr) >= 0.9 ? "met" : "MISSED");
  return 0;
}
