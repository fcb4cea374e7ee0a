// Every public header compiles after headers that define common names as
// macros: Boost.Fiber's cpu_relax(), windows.h's min/max (without NOMINMAX),
// the kernel-style likely/unlikely, macOS AssertMacros' check/verify/require,
// glibc's major/minor. A header that uses one of these names breaks this
// build. (X11's object-like Status/None/Success/Bool are not covered:
// sluice::Status is the API's own name.)
//
// Standard headers come first: they are not ours to guard.
#if __has_include(<bits/stdc++.h>)
#include <bits/stdc++.h>
#else
#error "list the standard headers sluice uses here"
#endif

#include <gtest/gtest.h>

#include <boost/fiber/all.hpp>

#ifndef cpu_relax
#error "Boost.Fiber no longer defines cpu_relax(): this test must find another such macro"
#endif

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define check(x) SLUICE_MACRO_GUARD_EXPANDED_check
#define verify(x) SLUICE_MACRO_GUARD_EXPANDED_verify
#define require(x, label) SLUICE_MACRO_GUARD_EXPANDED_require
#define major(dev) SLUICE_MACRO_GUARD_EXPANDED_major
#define minor(dev) SLUICE_MACRO_GUARD_EXPANDED_minor

#define min(a, b) SLUICE_MACRO_GUARD_EXPANDED_min
#define max(a, b) SLUICE_MACRO_GUARD_EXPANDED_max

#include "all_public_headers.h"  // generated: every header under include/sluice/

namespace {

TEST(MacroGuardTest, QueueWorksBesideBoostFiber) {
  sluice::Queue<int> q(2);
  boost::fibers::fiber producer([&q] {
    for (int i = 1; i <= 2; ++i) ASSERT_TRUE(q.push(int{i}).ok());
  });
  producer.join();
  q.close();
  int sum = 0;
  for (int& v : q) sum += v;
  EXPECT_EQ(sum, 3);
  EXPECT_EQ(q.stats().pulled, 2u);
}

TEST(MacroGuardTest, BlockingPushAndPipelineRun) {
  // A full queue: push waits (spin, then park) until the deadline.
  sluice::Queue<int> q(1);
  ASSERT_TRUE(q.push(1).ok());
  EXPECT_EQ(q.push(2, sluice::with_timeout(std::chrono::milliseconds(1))).code(),
            sluice::StatusCode::kDeadlineExceeded);
  auto r = sluice::run_pipeline(
      [n = 0]() mutable -> std::optional<int> {
        return n < 100 ? std::optional(n++) : std::nullopt;
      },
      [](int&& v, const sluice::Context&) -> sluice::Result<int> { return v * 2; },
      [sum = 0](sluice::Result<int>&& v) mutable {
        sum += *v;
        return sluice::Status::Ok();
      },
      {.width = 2});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->sunk, 100u);
}

}  // namespace
