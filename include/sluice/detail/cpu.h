// Small CPU helpers for spin phases and layout.
#pragma once

#include <cstddef>

// For the queue's hot paths: the common case inline in the caller, the rest
// out of line (every call and spilled register there is a store; see
// docs/design.md, "Hot path").
#if defined(__GNUC__) || defined(__clang__)
#define SLUICE_ALWAYS_INLINE inline __attribute__((always_inline))
#define SLUICE_NOINLINE __attribute__((noinline))
#else
#define SLUICE_ALWAYS_INLINE inline
#define SLUICE_NOINLINE
#endif

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
