// Three producers and two consumers share a bounded queue. The producers hold
// counted handles, so the queue closes when the last of them finishes; the
// consumers drain it with a range-for, and one slow consumer shows
// backpressure at work: producers wait, nothing is lost, memory stays bounded.
#include <cstdio>
#include <thread>
#include <vector>

#include "sluice/queue.h"

int main() {
  sluice::Queue<int> queue(64);  // Block policy: a full queue makes producers wait.

  constexpr int kProducers = 3;
  constexpr int kItemsEach = 100000;
  std::vector<sluice::Producer<int>> handles;
  for (int p = 0; p < kProducers; ++p) handles.push_back(queue.producer());

  std::vector<std::jthread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([p, h = std::move(handles[p])]() mutable {
      for (int i = 0; i < kItemsEach; ++i) {
        if (!h.push(p * kItemsEach + i).ok()) return;
      }
    });  // the handle is released when the thread's lambda is destroyed
  }

  long long sums[2] = {0, 0};
  long long counts[2] = {0, 0};
  {
    std::vector<std::jthread> consumers;
    for (int c = 0; c < 2; ++c) {
      consumers.emplace_back([&, c] {
        for (int& item : queue) {  // ends when closed and drained
          sums[c] += item;
          ++counts[c];
        }
      });
    }
  }

  const long long n = static_cast<long long>(kProducers) * kItemsEach;
  const sluice::QueueStats s = queue.stats();
  std::printf("consumed %lld items (expected %lld), sum %lld (expected %lld)\n",
              counts[0] + counts[1], n, sums[0] + sums[1], n * (n - 1) / 2);
  std::printf("stats: pushed=%llu pulled=%llu depth=%llu high_watermark=%llu capacity=%zu\n",
              static_cast<unsigned long long>(s.pushed), static_cast<unsigned long long>(s.pulled),
              static_cast<unsigned long long>(s.depth),
              static_cast<unsigned long long>(s.high_watermark), s.capacity);
  return counts[0] + counts[1] == n && sums[0] + sums[1] == n * (n - 1) / 2 ? 0 : 1;
}
