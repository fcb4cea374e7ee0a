// Numbers and durations on the sluice command line (docs/cli.md, "Numbers and
// durations"). Pure parsing, no CLI11: unit-tested on its own
// (tests/cli/args_test.cpp); options.h hangs these on CLI11 options.
//
// CLI11's own checks answer "-1" with "Value -1 not in range 0.000000 to
// 1797693134862315...", take "1e300" seconds as a valid timeout, and cap an
// out-of-range count silently; these say what is wrong in one line.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::cli {

// A decimal whole number in [min, max]: digits only (no sign, no spaces, no
// exponent). On failure returns nullopt and sets *error to a sentence that
// quotes the text and names the allowed range.
std::optional<std::uint64_t> parse_whole(std::string_view text, std::uint64_t min,
                                         std::uint64_t max, std::string* error);

// The longest duration accepted: 100 years, far beyond any wait a command
// means, and far from overflowing a steady_clock deadline.
inline constexpr double kMaxDurationSeconds = 100.0 * 365 * 24 * 3600;

// A duration in seconds: a non-negative decimal ("30", "1.5", ".25") with an
// optional unit: ms, s, m (minutes) or h. No sign, exponent, inf or nan.
// On failure returns nullopt and sets *error.
std::optional<double> parse_duration(std::string_view text, std::string* error);

// A point in time: RFC 3339 ("2026-11-26T01:02:03Z", "2026-11-26T01:02:03.5+01:00"; a
// space may stand for the T), or seconds since the Unix epoch after '@' ("@1795652155",
// "@1795652155.25"), as date(1) prints with +@%s. On failure returns nullopt and
// sets *error.
std::optional<std::chrono::system_clock::time_point> parse_time(std::string_view text,
                                                                std::string* error);

}  // namespace sluice::cli
