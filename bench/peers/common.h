// Shared by the peer adapters: item types and a spin-then-yield wait for
// peers that have no blocking call of their own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <thread>

#include "sluice/detail/cpu.h"

namespace bench {

// A plain payload of `Bytes` bytes; the value travels in the first word.
template <std::size_t Bytes>
struct Item {
  std::uint64_t v[Bytes / sizeof(std::uint64_t)];
};
using Item64 = Item<64>;
using Item256 = Item<256>;
inline std::uint64_t value_of(std::uint64_t x) { return x; }
template <std::size_t Bytes>
std::uint64_t value_of(const Item<Bytes>& x) {
  return x.v[0];
}
template <class T>
T make_item(std::uint64_t i) {
  if constexpr (sizeof(T) == sizeof(std::uint64_t)) {
    return i;
  } else {
    T t{};
    t.v[0] = i;
    return t;
  }
}

// Spin briefly, then yield: how the non-blocking peers are normally driven
// (on 2 cores a pure spin would starve the thread it waits for).
template <class F>
void spin_until(F&& f) {
  for (int i = 0; !f(); ++i) {
    if (i < 64) {
      sluice::detail::spin_pause();
    } else {
      std::this_thread::yield();
    }
  }
}

}  // namespace bench
