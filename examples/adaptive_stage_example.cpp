// A stage of 32 workers calls a "remote service" that handles 4 calls at
// once and slows down past that. With adaptive concurrency the stage finds
// the service's knee by itself and keeps about 4 calls in flight, instead of
// 32 queued inside the service.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>

#include "sluice/stage.h"

int main() {
  std::atomic<int> in_service{0};
  auto call_service = [&in_service] {
    const int c = ++in_service;
    const double slow = c <= 4 ? 1.0 : std::pow(c / 4.0, 1.5);  // contention past 4
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(1.0 * slow));
    --in_service;
  };

  sluice::Queue<int> requests(64);
  sluice::StageOptions<int> opts;
  opts.name = "client";
  opts.width = 32;  // the ceiling
  opts.adaptive.enabled = true;
  auto stage = sluice::Stage<int, int>::create(
      requests,
      [&](int&& id, const sluice::Context&) -> sluice::Result<int> {
        call_service();
        return id;
      },
      opts);
  if (!stage.ok()) return 1;
  std::jthread producer([&] {
    for (int i = 0; i < 2000; ++i) (void)requests.push(int{i});
    requests.close();
  });
  int done = 0;
  for (auto& r : (*stage)->output()) done += r.ok() ? 1 : 0;
  const sluice::StageStats s = (*stage)->stats();
  std::printf("%d calls; limit now %llu of %zu workers (%llu steps up, %llu down)\n", done,
              static_cast<unsigned long long>(s.concurrency_limit), s.width,
              static_cast<unsigned long long>(s.limit_increases),
              static_cast<unsigned long long>(s.limit_decreases));
  return done == 2000 && s.concurrency_limit < 16 ? 0 : 1;
}
