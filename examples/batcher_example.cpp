// A batcher in front of a slow "database": many request threads add rows;
// the sink writes them 100 at a time (or every 20 ms), a flush() acts as a
// fence at the end of a request, and shutdown() drains with a deadline.
// The database fails now and then: each batch gets up to 3 attempts, a
// logger hears of the failures, and the sink sees why each batch was
// flushed and how long its oldest row waited. Prints the Prometheus metrics
// the application would serve.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "sluice/batcher.h"

using namespace std::chrono_literals;

struct Row {
  int user;
  std::string event;
};

int main() {
  // The sink owns what it uses: after a shutdown whose deadline passed, a
  // sink call still running may outlive the batcher (and this scope).
  auto written = std::make_shared<std::atomic<long long>>(0);
  sluice::BatcherOptions<Row> opts;
  opts.name = "events";
  opts.max_batch_size = 100;
  opts.max_batch_delay = 20ms;
  opts.queue_depth = 1000;  // bounded: request threads wait rather than grow memory
  auto longest_wait_us = std::make_shared<std::atomic<long long>>(0);
  opts.max_attempts = 3;  // a transient failure is retried with the same batch
  opts.sink_with_info = [written, longest_wait_us](std::vector<Row>&& rows,
                                                   const sluice::FlushInfo& info,
                                                   const sluice::Context& ctx) -> sluice::Status {
    if (ctx.stop_requested()) return sluice::StatusCode::kCancelled;
    std::this_thread::sleep_for(1ms);  // the round trip to the database
    if (info.seq % 10 == 0 && info.attempt == 1) {
      return {sluice::StatusCode::kUnavailable, "database busy"};  // every 10th batch, once
    }
    *written += static_cast<long long>(rows.size());
    const long long us =
        std::chrono::duration_cast<std::chrono::microseconds>(info.oldest_wait).count();
    long long seen = longest_wait_us->load();
    while (us > seen && !longest_wait_us->compare_exchange_weak(seen, us)) {
    }
    return sluice::Status::Ok();
  };
  auto transient = std::make_shared<std::atomic<int>>(0);
  opts.logger = [transient](const sluice::BatcherEvent& e) {
    if (e.kind == sluice::BatcherEvent::Kind::kSinkError) ++*transient;
  };
  auto created = sluice::Batcher<Row>::create(std::move(opts));
  if (!created.ok()) {
    std::fprintf(stderr, "bad options: %s\n", created.status().to_string().c_str());
    return 1;
  }
  auto& batcher = *created;

  std::vector<std::jthread> requests;
  for (int t = 0; t < 4; ++t) {
    requests.emplace_back([&batcher, t] {
      for (int i = 0; i < 2500; ++i) {
        sluice::Status s = batcher->add(Row{t, "click " + std::to_string(i)});
        if (!s.ok()) std::fprintf(stderr, "add: %s\n", s.to_string().c_str());
      }
    });
  }
  requests.clear();  // join

  // End of a request: make sure everything so far is written.
  if (sluice::Status s = batcher->flush(); !s.ok())
    std::fprintf(stderr, "flush: %s\n", s.to_string().c_str());

  sluice::Status s = batcher->shutdown(sluice::with_timeout(2s));
  const sluice::BatcherStats st = batcher->stats();
  std::printf("shutdown: %s; written %lld of %llu accepted\n", s.to_string().c_str(),
              written->load(), static_cast<unsigned long long>(st.enqueued));
  std::printf("failed attempts retried: %d; longest wait of a row before its flush: %lld us\n\n",
              transient->load(), longest_wait_us->load());
  std::printf("%s", batcher->prometheus().c_str());
  return s.ok() && *written == 10000 ? 0 : 1;
}
