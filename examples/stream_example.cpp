// A topic on Redis Streams: every channel sees every message, and the
// consumers of one channel share it. Here a producer appends orders under a
// bound; two "billing" consumers (threads here, machines in real life) share
// the billing channel with consume(); an "audit" channel started at the tail
// sees only what comes after it joined. One order always fails: it is given
// back, retried and then dead-lettered, without stopping the others.
// Connection settings as in redis_example.cpp (REDIS_URL, REDIS_PORT, ...).
// Run: REDIS_PORT=6379 ./stream_example   (needs a running redis-server >= 6.2)
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "sluice/redis/stream_topic.h"

int main() {
  using namespace std::chrono_literals;
  auto redis = sluice::RedisOptions::from_env();
  if (!redis.ok()) {
    std::fprintf(stderr, "bad settings: %s\n", redis.status().to_string().c_str());
    return 2;
  }
  const std::string name =
      "orders-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  sluice::StreamTopicOptions o;
  o.max_unconsumed = 64;  // the producer waits once billing is 64 behind
  o.max_deliveries = 3;   // then a message goes to the dead letters
  sluice::StreamTopic topic(*redis, name, o);
  const std::string channels[] = {"billing"};
  if (sluice::Status s = topic.create(channels); !s.ok()) {
    std::fprintf(stderr, "create: %s\n", s.to_string().c_str());
    return 1;
  }
  constexpr int kOrders = 500;
  constexpr int kBefore = 100;  // appended before audit joins
  auto append = [&](int from, int to) {
    for (int i = from; i < to; ++i) {
      const std::string order = i == 42 ? "order 42 (malformed)" : "order " + std::to_string(i);
      if (auto id = topic.append(order, sluice::with_timeout(10s)); !id.ok()) {
        std::fprintf(stderr, "append: %s\n", id.status().to_string().c_str());
        return false;
      }
    }
    return true;
  };

  // Two consumers of one channel: each order is billed by one of them.
  std::atomic<int> billed[2] = {0, 0};
  std::vector<std::thread> billing;
  for (int k = 0; k < 2; ++k) {
    billing.emplace_back([&, k] {
      sluice::StreamChannel ch(*redis, name, "billing", o);  // one handle per thread
      sluice::Status end = ch.consume(
          [&](const sluice::StreamMessage& m) -> sluice::Status {
            if (m.payload.find("malformed") != std::string::npos) {
              return {sluice::StatusCode::kInvalidArgument, "cannot bill " + m.payload};
            }
            billed[k].fetch_add(1);
            return sluice::Status::Ok();
          },
          sluice::with_timeout(30s), /*batch=*/16);
      if (end.code() != sluice::StatusCode::kClosed) {  // kClosed: closed and all billed
        std::fprintf(stderr, "billing %d: %s\n", k, end.to_string().c_str());
      }
    });
  }

  if (!append(0, kBefore)) return 1;
  // A channel made now, at the tail: it sees the orders from here on only.
  sluice::StreamTopicOptions tail = o;
  tail.start = sluice::StartFrom::kTail;
  sluice::StreamChannel audit(*redis, name, "audit", tail);
  if (sluice::Status s = audit.join(); !s.ok()) {
    std::fprintf(stderr, "join: %s\n", s.to_string().c_str());
    return 1;
  }
  std::atomic<int> audited{0};
  std::thread auditor([&] {
    (void)audit.consume(
        [&](const sluice::StreamMessage&) {
          audited.fetch_add(1);
          return sluice::Status::Ok();
        },
        sluice::with_timeout(30s));
  });
  if (!append(kBefore, kOrders)) return 1;
  (void)topic.close();  // consumers end once they have had everything
  for (auto& t : billing) t.join();
  auditor.join();

  auto st = topic.stats();
  if (!st.ok()) return 1;
  std::printf("billed %d + %d of %d orders; audit saw %d (joined after %d); %llu dead letter(s)\n",
              billed[0].load(), billed[1].load(), kOrders, audited.load(), kBefore,
              static_cast<unsigned long long>(st->dead_letters));
  (void)topic.destroy();
  const bool ok =
      billed[0] + billed[1] == kOrders - 1 && audited == kOrders - kBefore && st->dead_letters == 1;
  return ok ? 0 : 1;
}
