// Small CPU helpers for spin phases and layout.
#pragma once

#include <cstddef>

// Which sanitizer this translation unit is built with (GCC's macros, clang's
// __has_feature). TSan models no fences (wait_list.h); neither wants forced
// inlining (below).
#if defined(__SANITIZE_THREAD__)
#define SLUICE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SLUICE_TSAN 1
#endif
#endif
#ifndef SLUICE_TSAN
#define SLUICE_TSAN 0
#endif
#if defined(__SANITIZE_ADDRESS__)
#define SLUICE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SLUICE_ASAN 1
#endif
#endif
#ifndef SLUICE_ASAN
#define SLUICE_ASAN 0
#endif

// For the queue's hot paths: the common case inline in the caller, the rest
// out of line (every call and spilled register there is a store; see
// docs/design.md, "Hot path inline"). Not forced under the sanitizers, where
// speed is not the point and forced inlining made queue_test compile a third
// slower (at -O2 it compiles faster).
#if (defined(__GNUC__) || defined(__clang__)) && !SLUICE_TSAN && !SLUICE_ASAN
#define SLUICE_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define SLUICE_ALWAYS_INLINE inline
#endif
#if defined(__GNUC__) || defined(__clang__)
#define SLUICE_NOINLINE __attribute__((noinline))
#else
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
