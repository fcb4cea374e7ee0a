// A distributed, bounded queue on Redis: a producer thread and a consumer
// thread share one pressure queue (they could be separate machines).
// Connection settings come from the pressure protocol's environment variables
// (REDIS_SERVER, REDIS_PORT, REDIS_DB, PRESSURE_PREFIX), REDIS_USERNAME and
// REDIS_PASSWORD, or REDIS_URL. A wrong password fails the first call with
// "redis: authentication failed at host:port: ...".
// Run: REDIS_PORT=6379 ./redis_example   (needs a running redis-server >= 6.2)
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "sluice/redis/pressure_queue.h"

int main() {
  using namespace std::chrono_literals;
  auto options = sluice::RedisOptions::from_env();
  if (!options.ok()) {
    std::fprintf(stderr, "bad settings: %s\n", options.status().to_string().c_str());
    return 2;
  }
  const std::string name =
      "example-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  sluice::PressureQueue admin(*options, name);
  if (sluice::Status s = admin.create(/*bound=*/16); !s.ok()) {
    std::fprintf(stderr, "create: %s\n", s.to_string().c_str());
    return 1;
  }

  // The producer: single puts, then a batch; a full queue makes it wait,
  // holding the producer role meanwhile (as every pressure client does).
  std::thread producer([&] {
    sluice::PressureQueue q(*options, name);  // one handle per thread
    for (int i = 0; i < 10; ++i) {
      sluice::PutResult r = q.put("job " + std::to_string(i), sluice::with_timeout(5s));
      if (!r.ok()) {
        // A failed put says whether the message is in the queue.
        std::fprintf(stderr, "put: %s (delivery %d)\n", r.status.to_string().c_str(),
                     static_cast<int>(r.delivery()));
        return;
      }
    }
    std::vector<std::string> batch;
    for (int i = 10; i < 50; ++i) batch.push_back("job " + std::to_string(i));
    if (auto r = q.put_many(batch, sluice::with_timeout(5s)); !r.ok()) {
      std::fprintf(stderr, "put_many: %s after %zu\n", r.status.to_string().c_str(), r.enqueued);
    }
    (void)q.close();  // consumers drain, then see kClosed
  });

  // The consumer: batches of up to 8, until the queue is closed and empty.
  sluice::PressureQueue q(*options, name);
  std::size_t got = 0;
  for (;;) {
    std::vector<std::string> out;
    sluice::Status s = q.get_many(out, 8, sluice::with_timeout(5s));
    if (s.code() == sluice::StatusCode::kClosed) break;
    if (!s.ok()) {
      std::fprintf(stderr, "get: %s\n", s.to_string().c_str());
      break;
    }
    got += out.size();
  }
  producer.join();
  auto st = admin.stats();
  if (st.ok()) {
    std::printf("consumed %zu; stats: produced %llu, consumed %llu, %llu bytes\n", got,
                static_cast<unsigned long long>(st->produced_messages),
                static_cast<unsigned long long>(st->consumed_messages),
                static_cast<unsigned long long>(st->consumed_bytes));
  }
  (void)admin.destroy();
  return got == 50 ? 0 : 1;
}
