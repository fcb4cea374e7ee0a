// A tour of sluice in one run: producers -> bounded Queue -> Stage (parallel
// work) -> Batcher -> durable Topic -> Channel (read back, acknowledged).
//
// Every hop is bounded, so when the end of the line (a disk sync per batch)
// is slower than the producers, the producers wait instead of memory growing:
// that is backpressure, and the summary shows how much of it there was. The
// run then checks that every item produced is in the topic exactly once and
// exits non-zero if one is lost or duplicated.
#include <stdlib.h>  // mkdtemp

#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "sluice/batch_stage.h"
#include "sluice/batcher.h"
#include "sluice/log/channel.h"
#include "sluice/log/topic.h"
#include "sluice/queue.h"
#include "sluice/stage.h"

using namespace std::chrono_literals;
using sluice::Context;
using sluice::Result;
using sluice::Status;
using sluice::StatusCode;

namespace {

constexpr int kProducers = 3;
constexpr int kItemsEach = 5000;
constexpr std::size_t kQueueCapacity = 64;
constexpr std::size_t kBatchSize = 500;

struct Event {
  int producer = 0;
  int seq = 0;
};

// The "work" of the stage: a checksum that takes a few microseconds.
std::uint64_t checksum(int producer, int seq) {
  std::uint64_t h = 1469598103934665603ULL;
  for (int round = 0; round < 500; ++round) {
    h = (h ^ static_cast<std::uint64_t>(producer * 1000003 + seq + round)) * 1099511628211ULL;
  }
  return h;
}

std::string render(const Event& e) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "p%d #%d %016" PRIx64, e.producer, e.seq,
                checksum(e.producer, e.seq));
  return buf;
}

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

struct ProducerTally {
  std::uint64_t pushed = 0;
  std::uint64_t waits = 0;  // pushes that found the queue full
  std::chrono::steady_clock::duration blocked{};
};

int run(const std::string& dir) {
  // 1. A durable topic: each batch is one write and one fdatasync.
  sluice::TopicOptions topic_opts;
  topic_opts.durability = sluice::Durability::kGroupCommit;
  auto opened = sluice::Topic::open(dir, topic_opts);
  if (!opened.ok()) {
    std::fprintf(stderr, "open %s: %s\n", dir.c_str(), opened.status().to_string().c_str());
    return 1;
  }
  sluice::Topic& topic = **opened;

  // 2. The bounded queue the producers push into (Block policy: a full
  //    queue makes them wait).
  sluice::Queue<Event> events(kQueueCapacity);

  // 3. A stage: 2 workers render events into records, in parallel.
  sluice::StageOptions<Event> stage_opts;
  stage_opts.name = "render";
  stage_opts.width = 2;
  auto stage = sluice::Stage<Event, std::string>::create(
      events, [](Event&& e, const Context&) -> Result<std::string> { return render(e); },
      stage_opts);
  if (!stage.ok()) {
    std::fprintf(stderr, "stage: %s\n", stage.status().to_string().c_str());
    return 1;
  }

  // 4. A batcher: up to 500 records or 5 ms per batch, appended to the topic.
  sluice::BatcherOptions<std::string> batch_opts;
  batch_opts.name = "to-topic";
  batch_opts.max_batch_size = kBatchSize;
  batch_opts.max_batch_delay = 5ms;
  batch_opts.queue_depth = 256;
  batch_opts.sink = [&topic](std::vector<std::string>&& batch, const Context& ctx) -> Status {
    std::vector<std::string_view> views(batch.begin(), batch.end());
    Result<std::uint64_t> first = topic.append_batch(views, ctx);
    return first.ok() ? Status::Ok() : first.status();
  };
  auto batcher = sluice::Batcher<std::string>::create(std::move(batch_opts));
  if (!batcher.ok()) {
    std::fprintf(stderr, "batcher: %s\n", batcher.status().to_string().c_str());
    return 1;
  }

  // 5. Producers: counted handles, so the queue closes when the last is done.
  const auto t_start = std::chrono::steady_clock::now();
  std::vector<ProducerTally> tally(kProducers);
  {
    std::vector<std::jthread> producers;
    for (int p = 0; p < kProducers; ++p) {
      producers.emplace_back([p, &tally, h = events.producer()]() mutable {
        ProducerTally& t = tally[static_cast<std::size_t>(p)];
        for (int i = 0; i < kItemsEach; ++i) {
          Status s = h.try_push(Event{p, i});
          if (s.code() == StatusCode::kWouldBlock) {  // full: wait for room
            ++t.waits;
            const auto t0 = std::chrono::steady_clock::now();
            s = h.push(Event{p, i});
            t.blocked += std::chrono::steady_clock::now() - t0;
          }
          if (!s.ok()) return;
          ++t.pushed;
        }
      });
    }
    // Meanwhile this thread feeds the stage's results to the batcher, until
    // the stage's output is closed and drained.
    std::uint64_t errors = 0;
    Status fed =
        sluice::feed_batcher((*stage)->output(), **batcher, [&errors](const Status&) { ++errors; });
    if (!fed.ok() || errors != 0) {
      std::fprintf(stderr, "feed: %s, %llu errors\n", fed.to_string().c_str(),
                   static_cast<unsigned long long>(errors));
      return 1;
    }
  }
  const Status stage_status = (*stage)->wait();
  const Status shutdown = (*batcher)->shutdown(sluice::with_timeout(30s));
  const auto t_written = std::chrono::steady_clock::now();

  // 6. Read everything back through a channel, acknowledging each batch.
  auto channel = topic.channel("tour-reader");
  if (!channel.ok()) {
    std::fprintf(stderr, "channel: %s\n", channel.status().to_string().c_str());
    return 1;
  }
  sluice::Channel& ch = **channel;
  std::vector<std::vector<int>> seen(kProducers, std::vector<int>(kItemsEach, 0));
  std::uint64_t read = 0, acked = 0, garbled = 0;
  std::vector<sluice::LogMessage> msgs;
  while (ch.delivered() < topic.next_seq()) {
    msgs.clear();
    if (Status s = ch.next_batch(msgs, 1024, sluice::with_timeout(10s)); !s.ok()) {
      std::fprintf(stderr, "read: %s\n", s.to_string().c_str());
      break;
    }
    for (const sluice::LogMessage& m : msgs) {
      ++read;
      int p = -1, i = -1;
      if (std::sscanf(m.payload.c_str(), "p%d #%d", &p, &i) != 2 || p < 0 || p >= kProducers ||
          i < 0 || i >= kItemsEach || m.payload != render(Event{p, i})) {
        ++garbled;
        continue;
      }
      ++seen[static_cast<std::size_t>(p)][static_cast<std::size_t>(i)];
    }
    if (Status s = ch.ack(msgs.back().seq); !s.ok()) {
      std::fprintf(stderr, "ack: %s\n", s.to_string().c_str());
      break;
    }
    acked += msgs.size();
  }
  const auto t_read = std::chrono::steady_clock::now();

  std::uint64_t missing = 0, duplicated = 0;
  for (const auto& per_producer : seen) {
    for (int n : per_producer) {
      if (n == 0) ++missing;
      if (n > 1) duplicated += static_cast<std::uint64_t>(n - 1);
    }
  }

  // The summary.
  std::uint64_t produced = 0, waits = 0;
  std::chrono::steady_clock::duration blocked{};
  for (const ProducerTally& t : tally) {
    produced += t.pushed;
    waits += t.waits;
    blocked += t.blocked;
  }
  const sluice::QueueStats qs = events.stats();
  const sluice::StageStats ss = (*stage)->stats();
  const sluice::BatcherStats bs = (*batcher)->stats();
  const std::uint64_t records = topic.next_seq() - topic.first_seq();
  auto u = [](std::uint64_t v) { return static_cast<unsigned long long>(v); };
  auto flushes = [&bs](sluice::FlushReason r) {
    return static_cast<unsigned long long>(bs.flushes_by_reason[static_cast<std::size_t>(r)]);
  };

  std::printf(
      "sluice tour: %d producers -> Queue(%zu) -> Stage(2 workers) -> Batcher(%zu items"
      " / 5 ms)\n",
      kProducers, kQueueCapacity, kBatchSize);
  std::printf("             -> Topic (group commit: durable on return) -> Channel reader\n\n");
  std::printf(
      "produced      %llu items from %d threads, all in the topic after %.2f s;"
      " read back in %.2f s\n",
      u(produced), kProducers, seconds(t_written - t_start), seconds(t_read - t_written));
  std::printf("backpressure  producers found the queue full %llu times and waited %.3f s in all;\n",
              u(waits), seconds(blocked));
  std::printf("              the queue never held more than %llu items (capacity %zu)\n",
              u(qs.high_watermark), kQueueCapacity);
  std::printf(
      "stage         %llu in, %llu out, %llu errors; its workers waited %.3f s for input\n"
      "              and %.3f s for room downstream\n",
      u(ss.items_in), u(ss.items_out), u(ss.errors), ss.blocked_on_input_s, ss.blocked_on_output_s);
  std::printf(
      "batcher       %llu batches: %llu full, %llu after 5 ms, %llu at shutdown;\n"
      "              %llu items written, %llu failed, %llu dropped\n",
      u(bs.flushes_ok + bs.flushes_failed), flushes(sluice::FlushReason::kSize),
      flushes(sluice::FlushReason::kTime), flushes(sluice::FlushReason::kShutdown),
      u(bs.flushed_ok), u(bs.flushed_fail), u(bs.dropped_on_shutdown));
  std::printf(
      "topic         %llu records, %.0f KiB on disk (a temporary directory, removed at"
      " exit)\n",
      u(records), static_cast<double>(topic.disk_bytes()) / 1024.0);
  std::printf("channel       %llu read, %llu acknowledged, %llu garbled\n", u(read), u(acked),
              u(garbled));

  const std::uint64_t expected = std::uint64_t{kProducers} * kItemsEach;
  const bool ok = stage_status.ok() && shutdown.ok() && produced == expected &&
                  bs.flushed_ok == expected && records == expected && read == expected &&
                  acked == expected && ch.acked() == topic.next_seq() && garbled == 0 &&
                  missing == 0 && duplicated == 0;
  std::printf("check         %s: %llu expected, %llu missing, %llu duplicated\n",
              ok ? "every item exactly once" : "FAILED", u(expected), u(missing), u(duplicated));
  if (!stage_status.ok()) std::printf("stage: %s\n", stage_status.to_string().c_str());
  if (!shutdown.ok()) std::printf("batcher shutdown: %s\n", shutdown.to_string().c_str());
  return ok ? 0 : 1;
}

}  // namespace

int main() {
  std::string dir = (std::filesystem::temp_directory_path() / "sluice-tour-XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const int rc = run(dir);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return rc;
}
