#include "sluice/context.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <stop_token>

namespace sluice {
namespace {

using namespace std::chrono_literals;

TEST(ContextTest, DefaultNeverEnds) {
  Context ctx;
  EXPECT_FALSE(ctx.can_end());
  EXPECT_EQ(ctx.err(), StatusCode::kOk);
}

TEST(ContextTest, StopTokenCancels) {
  std::stop_source src;
  Context ctx(src.get_token());
  EXPECT_EQ(ctx.err(), StatusCode::kOk);
  src.request_stop();
  EXPECT_EQ(ctx.err(), StatusCode::kCancelled);
}

TEST(ContextTest, DeadlineExpires) {
  Context ctx = with_deadline(Context::Clock::now() - 1ms);
  EXPECT_EQ(ctx.err(), StatusCode::kDeadlineExceeded);
  Context later = with_timeout(1h);
  EXPECT_EQ(later.err(), StatusCode::kOk);
}

TEST(ContextTest, CancellationWinsOverDeadline) {
  std::stop_source src;
  src.request_stop();
  Context ctx = with_deadline(Context::Clock::now() - 1ms, src.get_token());
  EXPECT_EQ(ctx.err(), StatusCode::kCancelled);
}

TEST(ContextTest, ChildKeepsTheEarlierDeadline) {
  const auto soon = Context::Clock::now() + 10ms;
  Context parent = with_deadline(soon);
  EXPECT_EQ(*parent.with_timeout(1h).deadline(), soon);
  EXPECT_LT(*with_timeout(1h).with_deadline(soon).deadline(), Context::Clock::now() + 1h);
}

TEST(ContextTest, ATimeoutIsAddedExactlyAndRoundedUp) {
  const auto now = Context::Clock::now();
  EXPECT_EQ(Context::deadline_in(1h, now), now + 1h);
  EXPECT_EQ(Context::deadline_in(std::chrono::duration<double>(0.5), now), now + 500ms);
  EXPECT_EQ(Context::deadline_in(std::chrono::duration<double, std::pico>(1500), now), now + 2ns);
}

// hours::max() or 1e300 s used to overflow now + timeout into a deadline in
// the past: a wait that should never time out failed at once.
TEST(ContextTest, ATimeoutTooLongForTheClockNeverExpires) {
  const auto now = Context::Clock::now();
  const auto end = Context::Clock::time_point::max();
  EXPECT_EQ(Context::deadline_in(std::chrono::hours::max(), now), end);
  EXPECT_EQ(Context::deadline_in(std::chrono::nanoseconds::max(), now), end);
  EXPECT_EQ(Context::deadline_in(std::chrono::duration<double>(1e300), now), end);
  EXPECT_EQ(Context::deadline_in(
                std::chrono::duration<double>(std::numeric_limits<double>::infinity()), now),
            end);
  EXPECT_EQ(Context::deadline_in(std::chrono::duration<std::int64_t, std::pico>::max(), now),
            now + std::chrono::ceil<Context::Clock::duration>(
                      std::chrono::duration<std::int64_t, std::pico>::max()));
  EXPECT_EQ(with_timeout(std::chrono::hours::max()).err(), StatusCode::kOk);
  EXPECT_EQ(Context().with_timeout(std::chrono::duration<double>(1e300)).err(), StatusCode::kOk);
}

TEST(ContextTest, ANegativeOrNanTimeoutHasPassed) {
  const auto now = Context::Clock::now();
  EXPECT_EQ(Context::deadline_in(-1h, now), now);
  EXPECT_EQ(Context::deadline_in(std::chrono::hours::min(), now), now);
  EXPECT_EQ(Context::deadline_in(std::chrono::duration<double>(std::nan("")), now), now);
  EXPECT_EQ(with_timeout(std::chrono::duration<double>(-1e300)).err(),
            StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace sluice
