#include "sluice/context.h"

#include <gtest/gtest.h>

#include <chrono>
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

}  // namespace
}  // namespace sluice
