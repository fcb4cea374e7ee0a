#include "sluice/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string_view>

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

// A Result made from an ok status has no value, so it must not look ok:
// `code()` used to say kOk while `ok()` said false.
TEST(ResultTest, AnOkStatusWithoutAValueIsAnInternalError) {
  Result<int> from_status = Status::Ok();
  EXPECT_FALSE(from_status.ok());
  EXPECT_EQ(from_status.code(), StatusCode::kInternal);
  EXPECT_NE(from_status.status().message().find("without a value"), std::string_view::npos);
  Result<int> from_code = StatusCode::kOk;
  EXPECT_FALSE(from_code.ok());
  EXPECT_EQ(from_code.code(), StatusCode::kInternal);
  Result<int> failed = Status(StatusCode::kClosed, "gone");  // other statuses kept as given
  EXPECT_EQ(failed.code(), StatusCode::kClosed);
  EXPECT_EQ(failed.status().message(), "gone");
}

// status.h promises that reading the value of a failed Result is caught in
// builds without NDEBUG (the asan and tsan presets are such builds).
TEST(ResultDeathTest, ValueOfAFailedResultAbortsNamingTheStatus) {
#ifdef NDEBUG
  GTEST_SKIP() << "the check is compiled out with NDEBUG";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  struct Box {  // trivially destructible: GCC 12 at -O1 warns falsely about optional<unique_ptr>
    int v = 0;
    int get() const { return v; }
  };
  Result<Box> bad(Status(StatusCode::kClosed, "queue closed"));
  const Result<Box>& cbad = bad;
  EXPECT_DEATH((void)bad.value(), "value of a failed Result \\(closed: queue closed\\)");
  EXPECT_DEATH((void)cbad.value(), "value of a failed Result");
  EXPECT_DEATH((void)std::move(bad).value(), "value of a failed Result");
  EXPECT_DEATH((void)*bad, "value of a failed Result");
  EXPECT_DEATH((void)bad->get(), "value of a failed Result");
  EXPECT_DEATH((void)cbad->get(), "value of a failed Result");
#endif
}

}  // namespace
}  // namespace sluice
