#include "args.h"

#include <charconv>

namespace sluice::cli {
namespace {

std::string quoted(std::string_view text) { return "'" + std::string(text) + "'"; }

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

}  // namespace

std::optional<std::uint64_t> parse_whole(std::string_view text, std::uint64_t min,
                                         std::uint64_t max, std::string* error) {
  const std::string range = max == std::numeric_limits<std::uint64_t>::max()
                                ? std::to_string(min) + " or more"
                                : "from " + std::to_string(min) + " to " + std::to_string(max);
  if (!all_digits(text)) {
    *error = quoted(text) + " is not a whole number (" + range + ")";
    return std::nullopt;
  }
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc::result_out_of_range || (ec == std::errc() && v > max)) {
    *error = quoted(text) + " is too large (" + range + ")";
    return std::nullopt;
  }
  if (ec != std::errc() || end != text.data() + text.size()) {
    *error = quoted(text) + " is not a whole number (" + range + ")";
    return std::nullopt;
  }
  if (v < min) {
    *error = quoted(text) + " is too small (" + range + ")";
    return std::nullopt;
  }
  return v;
}

std::optional<double> parse_duration(std::string_view text, std::string* error) {
  const std::string how = ": give seconds (30, 1.5) or a number with a unit: 500ms, 2s, 1m, 1h";
  std::size_t n = 0;  // the number's length
  while (n < text.size() && ((text[n] >= '0' && text[n] <= '9') || text[n] == '.')) ++n;
  const std::string_view number = text.substr(0, n);
  const std::string_view unit = text.substr(n);
  double scale = 0;
  if (unit.empty() || unit == "s") {
    scale = 1;
  } else if (unit == "ms") {
    scale = 1e-3;
  } else if (unit == "m") {
    scale = 60;
  } else if (unit == "h") {
    scale = 3600;
  }
  // One dot at most, and at least one digit.
  const std::size_t dot = number.find('.');
  const bool one_dot = dot == std::string_view::npos || number.find('.', dot + 1) == number.npos;
  const bool digit = number.find_first_of("0123456789") != std::string_view::npos;
  if (scale == 0 || !one_dot || !digit) {
    *error = quoted(text) + " is not a duration" + how;
    return std::nullopt;
  }
  // std::from_chars for double is in GCC 11+; the grammar above leaves it
  // nothing it could read differently (no sign, exponent, hex or inf).
  double v = 0;
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), v);
  if (ec != std::errc() || end != number.data() + number.size()) {
    *error = quoted(text) + " is not a duration" + how;
    return std::nullopt;
  }
  v *= scale;
  if (v > kMaxDurationSeconds) {
    *error = quoted(text) + " is too long (at most 100 years)";
    return std::nullopt;
  }
  return v;
}

}  // namespace sluice::cli
