#include "sluice/status.h"

#include <gtest/gtest.h>

#include <memory>

namespace sluice {
namespace {

TEST(StatusTest, DefaultIsOkAndCarriesNoMessage) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.to_string(), "ok");
}

TEST(StatusTest, CodeAndMessageRoundTrip) {
  Status s(StatusCode::kIOError, "disk full");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s, StatusCode::kIOError);
  EXPECT_EQ(s.message(), "disk full");
  EXPECT_EQ(s.to_string(), "io_error: disk full");
  Status copy = s;  // deep copy
  EXPECT_EQ(copy.message(), "disk full");
}

TEST(StatusTest, EveryCodeHasADistinctName) {
  for (int a = 0; a <= static_cast<int>(StatusCode::kInternal); ++a) {
    for (int b = a + 1; b <= static_cast<int>(StatusCode::kInternal); ++b) {
      EXPECT_NE(status_code_name(static_cast<StatusCode>(a)),
                status_code_name(static_cast<StatusCode>(b)));
    }
  }
}

TEST(ResultTest, HoldsValueOrStatus) {
  Result<std::unique_ptr<int>> ok(std::make_unique<int>(7));
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(**ok, 7);
  Result<std::unique_ptr<int>> bad(StatusCode::kClosed);
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.code(), StatusCode::kClosed);
}

}  // namespace
}  // namespace sluice
