// Two workers serve an urgent queue and a bulk queue through one Selector:
// neither queue waits for the other to drain, the bulk queue is not starved
// while urgent work keeps coming, and the workers finish once both queues
// are closed and drained.
#include <array>
#include <atomic>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "sluice/select.h"

int main() {
  sluice::Queue<std::string> urgent(64);
  sluice::Queue<std::string> bulk(1024);
  auto sel = sluice::Selector<std::string>::create({&urgent, &bulk});
  if (!sel.ok()) return 1;

  std::array<std::atomic<int>, 2> served{};
  std::vector<std::jthread> workers;
  for (int w = 0; w < 2; ++w) {
    workers.emplace_back([&] {
      for (;;) {
        auto r = sel->pull();
        if (!r.ok()) return;  // kClosed: both are closed and drained
        ++served[r->index];
      }
    });
  }
  std::jthread bulk_producer([&] {
    for (int i = 0; i < 5000; ++i) (void)bulk.push("report " + std::to_string(i));
    bulk.close();
  });
  std::jthread urgent_producer([&] {
    for (int i = 0; i < 5000; ++i) (void)urgent.push("alert " + std::to_string(i));
    urgent.close();
  });
  bulk_producer.join();
  urgent_producer.join();
  workers.clear();
  std::printf("served: %d urgent, %d bulk\n", served[0].load(), served[1].load());
  return served[0] == 5000 && served[1] == 5000 ? 0 : 1;
}
