// tools/sluice/args.cpp at its edges: times past the clock's range, durations
// with more digits than a double holds (each test failed before its fix).
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "args.h"

namespace sluice::cli {
namespace {

// parse_time: seconds(secs) + nanoseconds(ns), then duration_cast to
// system_clock::duration (int64 nanoseconds: 1677-09-21 .. 2262-04-11). Past
// that the multiplication overflows (undefined behaviour; it wraps), so a
// time after 2262 comes back as one in the 1700s: `seek --to-time` to "the
// far future" (skip everything) replays everything. Such a time should be
// refused, or clamp to the clock's range; never move backwards.
TEST(ArgsEdgesTest, TimesPastTheClocksRangeDoNotWrapIntoThePast) {
  using namespace std::chrono;
  const auto y2026 = system_clock::time_point(seconds(1795652155));
  for (const char* text :
       {"2300-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "@10000000000", "@999999999999"}) {
    std::string error;
    const auto t = parse_time(text, &error);
    if (t) {
      EXPECT_GT(*t, y2026) << text << " parsed as "
                           << duration_cast<seconds>(t->time_since_epoch()).count()
                           << " s since the epoch";
    } else {
      EXPECT_NE(error, "") << text;
    }
  }
  // And one before 1677 must not land after it.
  std::string error;
  if (const auto t = parse_time("0001-01-01T00:00:00Z", &error)) {
    EXPECT_LT(*t, system_clock::time_point(seconds(0)))
        << "0001-01-01 parsed as " << duration_cast<seconds>(t->time_since_epoch()).count()
        << " s since the epoch";
  }
}

// A decimal too large for a double is "too long", as 99999999999999999999999999
// is (args_test.cpp); from_chars' result_out_of_range made it "not a duration".
TEST(ArgsEdgesTest, AHugeDecimalDurationIsTooLongNotMalformed) {
  const std::string huge = "1" + std::string(400, '0');
  std::string error;
  EXPECT_FALSE(parse_duration(huge, &error).has_value());
  EXPECT_EQ(error, "'" + huge + "' is too long (at most 100 years)");
}

}  // namespace
}  // namespace sluice::cli
