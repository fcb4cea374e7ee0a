// Small CPU helpers for spin phases and layout.
#pragma once

#include <cstddef>

namespace sluice::detail {

// Destructive-interference size; fixed rather than
// std::hardware_destructive_interference_size, whose value GCC warns may vary between builds.
inline constexpr std::size_t kCacheLine = 64;

// One polite spin iteration: tells the core we are busy-waiting so the sibling
// hyper-thread runs and the pipeline is not flushed on exit. (Not named
// cpu_relax: Boost.Fiber defines that as a macro.)
inline void spin_pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace sluice::detail
