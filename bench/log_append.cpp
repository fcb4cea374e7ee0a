// log_append: the log's append and end-to-end rates through the public API
// only, so that the same source builds against an older sluice
// (bench/append_ab builds it against a previous commit's library and this
// one, and runs them alternately: what a change to the record format
// costs). kNone, 100-byte records; msg/s, one line per workload.
//   single     one producer, one append per record
//   batch      append_batch of 1000
//   e2e        one producer and one channel consuming at once, acking each
//              batch (the library's `put | get`)
// Usage: log_append [--records N]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "sluice/log/channel.h"
#include "sluice/log/topic.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::unique_ptr<sluice::Topic> open(const fs::path& dir) {
  fs::remove_all(dir);
  ::sync();  // no workload pays for another's writeback
  sluice::TopicOptions o;
  o.durability = sluice::Durability::kNone;
  auto t = sluice::Topic::open(dir.string(), o);
  if (!t.ok()) {
    std::fprintf(stderr, "open: %s\n", t.status().to_string().c_str());
    std::exit(1);
  }
  return std::move(*t);
}

double appends(const fs::path& dir, long n, std::size_t batch) {
  auto t = open(dir);
  const std::string payload(100, 'p');
  std::vector<std::string_view> views(batch, payload);
  const auto t0 = Clock::now();
  for (long i = 0; i < n; i += static_cast<long>(batch)) {
    const bool ok = batch == 1 ? t->append(payload).ok() : t->append_batch(views).ok();
    if (!ok) std::abort();
  }
  return static_cast<double>(n) / std::chrono::duration<double>(Clock::now() - t0).count();
}

double end_to_end(const fs::path& dir, long n) {
  auto t = open(dir);
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
    if (!(*c)->ack(batch.back().seq).ok()) std::abort();
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  producer.join();
  return static_cast<double>(n) / s;
}

}  // namespace

int main(int argc, char** argv) {
  long n = 2'000'000;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--records") == 0 && i + 1 < argc) {
      n = std::max(1000L, std::atol(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--records N]\n", argv[0]);
      return 2;
    }
  }
  const fs::path dir = fs::temp_directory_path() / ("sluice-append-" + std::to_string(getpid()));
  std::printf("single %.0f\n", appends(dir, n, 1));
  std::printf("batch %.0f\n", appends(dir, 2 * n, 1000));
  std::printf("e2e %.0f\n", end_to_end(dir, n));
  fs::remove_all(dir);
  return 0;
}
