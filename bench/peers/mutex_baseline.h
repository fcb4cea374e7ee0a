// The baseline: a ring under one mutex with two condition variables.
#pragma once
#include <condition_variable>
#include <mutex>
#include <vector>

#include "peers/common.h"

namespace bench {
template <class T>
struct MutexQueue {
  static constexpr const char* kName = "mutex + 2 condvars";
  static constexpr bool kSpscOnly = false;
  explicit MutexQueue(std::size_t cap) : buf(cap) {}
  void push(T v) {
    std::unique_lock lk(mu);
    not_full.wait(lk, [&] { return size < buf.size(); });
    buf[(head + size) % buf.size()] = std::move(v);
    ++size;
    lk.unlock();
    not_empty.notify_one();
  }
  void pop(T& v) {
    std::unique_lock lk(mu);
    not_empty.wait(lk, [&] { return size > 0; });
    v = std::move(buf[head]);
    head = (head + 1) % buf.size();
    --size;
    lk.unlock();
    not_full.notify_one();
  }
  std::mutex mu;
  std::condition_variable not_full, not_empty;
  std::vector<T> buf;
  std::size_t head = 0, size = 0;
};
}  // namespace bench
