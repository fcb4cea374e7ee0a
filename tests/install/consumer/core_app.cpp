// Uses sluice::core only: a bounded queue between two threads.
#include <cstdio>
#include <thread>

#include "sluice/queue.h"

int main() {
  sluice::Queue<int> q(4);
  std::thread producer([&q] {
    for (int i = 1; i <= 1000; ++i) {
      if (!q.push(int{i}).ok()) return;
    }
    q.close();
  });
  long sum = 0;
  for (int& v : q) sum += v;
  producer.join();
  std::printf("core: sum %ld\n", sum);
  return sum == 500500 ? 0 : 1;
}
