// parse_whole and parse_duration (tools/sluice/args.h): what the command line
// accepts as a count or a duration, and the one-line errors for the rest.
#include "args.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

namespace sluice::cli {
namespace {

constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();

std::string whole_error(std::string_view text, std::uint64_t min, std::uint64_t max) {
  std::string error;
  EXPECT_FALSE(parse_whole(text, min, max, &error).has_value()) << text;
  return error;
}

std::string duration_error(std::string_view text) {
  std::string error;
  EXPECT_FALSE(parse_duration(text, &error).has_value()) << text;
  return error;
}

TEST(ArgsTest, WholeNumbersInRange) {
  std::string error;
  EXPECT_EQ(parse_whole("0", 0, kMax, &error), 0u);
  EXPECT_EQ(parse_whole("1000", 1, kMax, &error), 1000u);
  EXPECT_EQ(parse_whole("18446744073709551615", 0, kMax, &error), kMax);
  EXPECT_EQ(parse_whole("1024", 1, 1024, &error), 1024u);
  EXPECT_EQ(parse_whole("007", 1, 10, &error), 7u);
}

TEST(ArgsTest, WholeNumbersOutOfRangeOrMalformedSayWhy) {
  EXPECT_EQ(whole_error("-1", 0, kMax), "'-1' is not a whole number (0 or more)");
  EXPECT_EQ(whole_error("1.5", 0, kMax), "'1.5' is not a whole number (0 or more)");
  EXPECT_EQ(whole_error("1x", 0, kMax), "'1x' is not a whole number (0 or more)");
  EXPECT_EQ(whole_error("", 0, kMax), "'' is not a whole number (0 or more)");
  EXPECT_EQ(whole_error(" 1", 0, kMax), "' 1' is not a whole number (0 or more)");
  EXPECT_EQ(whole_error("+1", 0, kMax), "'+1' is not a whole number (0 or more)");
  EXPECT_EQ(whole_error("0", 1, kMax), "'0' is too small (1 or more)");
  EXPECT_EQ(whole_error("1025", 1, 1024), "'1025' is too large (from 1 to 1024)");
  // One past 2^64 - 1 is refused, not cut down to the largest value.
  EXPECT_EQ(whole_error("18446744073709551616", 0, kMax),
            "'18446744073709551616' is too large (0 or more)");
  EXPECT_EQ(whole_error("99999999999999999999999", 0, kMax),
            "'99999999999999999999999' is too large (0 or more)");
}

TEST(ArgsTest, DurationsInSecondsOrWithAUnit) {
  std::string error;
  EXPECT_DOUBLE_EQ(*parse_duration("30", &error), 30.0);
  EXPECT_DOUBLE_EQ(*parse_duration("1.5", &error), 1.5);
  EXPECT_DOUBLE_EQ(*parse_duration(".25", &error), 0.25);
  EXPECT_DOUBLE_EQ(*parse_duration("2.", &error), 2.0);
  EXPECT_DOUBLE_EQ(*parse_duration("0", &error), 0.0);
  EXPECT_DOUBLE_EQ(*parse_duration("2s", &error), 2.0);
  EXPECT_DOUBLE_EQ(*parse_duration("500ms", &error), 0.5);
  EXPECT_DOUBLE_EQ(*parse_duration("1.5m", &error), 90.0);
  EXPECT_DOUBLE_EQ(*parse_duration("2h", &error), 7200.0);
  EXPECT_DOUBLE_EQ(*parse_duration("876000h", &error), kMaxDurationSeconds);  // 100 years
}

TEST(ArgsTest, WhatIsNotADurationIsRefusedWithTheFormsThatWork) {
  const std::string how = ": give seconds (30, 1.5) or a number with a unit: 500ms, 2s, 1m, 1h";
  for (const char* bad : {"", "-1", "+1", "1x", "5 s", "1e3", "1e300", "inf", "nan", "0x10", ".",
                          "1..2", "1.2.3", "ms", "2sec", "1d", "1S"}) {
    EXPECT_EQ(duration_error(bad), "'" + std::string(bad) + "' is not a duration" + how);
  }
  EXPECT_EQ(duration_error("876001h"), "'876001h' is too long (at most 100 years)");
  EXPECT_EQ(duration_error("99999999999999999999999999"),
            "'99999999999999999999999999' is too long (at most 100 years)");
}

TEST(ArgsTest, TimesInRfc3339OrUnixSeconds) {
  using namespace std::chrono;
  std::string error;
  const auto at = [&](const char* text) {
    auto t = parse_time(text, &error);
    EXPECT_TRUE(t.has_value()) << text << ": " << error;
    return t ? duration_cast<milliseconds>(t->time_since_epoch()).count() : -1;
  };
  EXPECT_EQ(at("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(at("2026-11-26T00:15:55.839Z"), 1795652155839);
  EXPECT_EQ(at("2026-11-26 01:15:55.839+01:00"), 1795652155839);
  EXPECT_EQ(at("2026-11-25T23:45:55.839-00:30"), 1795652155839);
  EXPECT_EQ(at("2024-02-29T12:00:00z"), 1709208000000);  // a leap day
  EXPECT_EQ(at("@1795652155"), 1795652155000);
  EXPECT_EQ(at("@1795652155.25"), 1795652155250);
  for (const char* bad : {"", "yesterday", "2026-11-26", "2026-11-26T01:02:03",
                          "2026-13-01T00:00:00Z", "2026-11-26T24:00:00Z", "2026-11-26T01:02:03.Z",
                          "2026-11-26T01:02:03+1", "@", "@-5", "@5m", "@1e9"}) {
    EXPECT_FALSE(parse_time(bad, &error).has_value()) << bad;
    EXPECT_NE(error.find("is not a time"), std::string::npos) << bad << ": " << error;
  }
}

}  // namespace
}  // namespace sluice::cli
