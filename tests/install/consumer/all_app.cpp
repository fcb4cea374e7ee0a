// Links the umbrella target sluice::sluice and uses every component.
#include <cstdio>

#include "sluice/log/topic.h"
#include "sluice/queue.h"
#include "sluice/redis/redis_options.h"

int main() {
  sluice::Queue<int> q(1);
  if (!q.try_push(1).ok() || q.try_push(2).code() != sluice::StatusCode::kWouldBlock) return 1;
  const bool redis_ok = sluice::RedisOptions::from_url("redis://localhost:6379").ok();
  const bool log_ok = !sluice::verify_topic("/nonexistent/sluice-topic").ok();
  std::printf("all: queue ok, redis %d, log %d\n", redis_ok, log_ok);
  return redis_ok && log_ok ? 0 : 1;
}
