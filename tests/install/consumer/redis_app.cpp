// Uses sluice::redis; links only (a PressureQueue connects lazily, so no
// server is needed to construct one).
#include <cstdio>

#include "sluice/redis/pressure_queue.h"
#include "sluice/redis/redis_options.h"

int main() {
  auto opts = sluice::RedisOptions::from_url("redis://127.0.0.1:6399/2");
  if (!opts.ok()) return 1;
  sluice::PressureQueue q(*opts, "jobs");
  std::printf("redis: %s\n", opts->endpoint().c_str());
  return opts->port == 6399 && opts->db == 2 ? 0 : 1;
}
