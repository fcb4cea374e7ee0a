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
  auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), v);
  if (ec == std::errc::result_out_of_range && end == number.data() + number.size()) {
    // Too many digits for a double: too long if its whole part is not zero,
    // else too small to tell from 0.
    if (number.substr(0, dot).find_first_not_of('0') != std::string_view::npos) {
      *error = quoted(text) + " is too long (at most 100 years)";
      return std::nullopt;
    }
    v = 0;
    ec = std::errc();
  }
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

namespace {

// `n` digits at text[at...] as a number; false if they are not all digits.
bool digits(std::string_view text, std::size_t at, std::size_t n, int* out) {
  if (at + n > text.size()) return false;
  int v = 0;
  for (std::size_t i = at; i < at + n; ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
    v = v * 10 + (text[i] - '0');
  }
  *out = v;
  return true;
}

// Days from 1970-01-01 to y-m-d in the proleptic Gregorian calendar
// (Howard Hinnant's days_from_civil).
std::int64_t days_from_civil(int y, int m, int d) {
  y -= m <= 2;
  const int era = (y >= 0 ? y : y - 399) / 400;
  const int yoe = y - era * 400;
  const int doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return static_cast<std::int64_t>(era) * 146097 + doe - 719468;
}

}  // namespace

std::optional<std::chrono::system_clock::time_point> parse_time(std::string_view text,
                                                                std::string* error) {
  using namespace std::chrono;
  const std::string what =
      quoted(text) +
      " is not a time: give RFC 3339 (2026-11-26T01:02:03Z, 2026-11-26T01:02:03.5+01:00) or "
      "@SECONDS since the Unix epoch (@1795652155)";
  // system_clock counts int64 nanoseconds: 1677-09-21 to 2262-04-11.
  constexpr seconds kLatest = duration_cast<seconds>(system_clock::duration::max());
  const std::string out_of_range =
      quoted(text) + " is out of range: the clock holds times from 1677-09-22 to 2262-04-11";
  if (text.starts_with('@')) {
    // Whole seconds and a fraction, each as integers: a double has no room
    // for nanoseconds since 1970.
    const std::string_view num = text.substr(1);
    const std::size_t dot = num.find('.');
    const std::string_view whole = num.substr(0, dot);
    const std::string_view fraction = dot == std::string_view::npos ? "" : num.substr(dot + 1);
    std::uint64_t secs = 0;
    std::int64_t ns = 0, scale = 100000000;
    const bool ok =
        all_digits(whole) && whole.size() <= 12 &&
        (dot == std::string_view::npos || all_digits(fraction)) &&
        std::from_chars(whole.data(), whole.data() + whole.size(), secs).ec == std::errc();
    if (!ok) {
      *error = what;
      return std::nullopt;
    }
    for (std::size_t i = 0; i < fraction.size() && scale > 0; ++i, scale /= 10) {
      ns += (fraction[i] - '0') * scale;
    }
    if (secs >= static_cast<std::uint64_t>(kLatest.count())) {
      *error = out_of_range;
      return std::nullopt;
    }
    return system_clock::time_point(
        duration_cast<system_clock::duration>(seconds(secs) + nanoseconds(ns)));
  }
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  if (text.size() < 20 || !digits(text, 0, 4, &y) || text[4] != '-' || !digits(text, 5, 2, &mo) ||
      text[7] != '-' || !digits(text, 8, 2, &d) ||
      (text[10] != 'T' && text[10] != 't' && text[10] != ' ') || !digits(text, 11, 2, &h) ||
      text[13] != ':' || !digits(text, 14, 2, &mi) || text[16] != ':' || !digits(text, 17, 2, &s) ||
      mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60) {
    *error = what;
    return std::nullopt;
  }
  std::size_t at = 19;
  nanoseconds frac{0};
  if (text[at] == '.') {
    std::int64_t scale = 100000000;
    std::size_t n = 0;
    for (++at; at < text.size() && text[at] >= '0' && text[at] <= '9'; ++at, ++n) {
      frac += nanoseconds((text[at] - '0') * scale);
      scale /= 10;
    }
    if (n == 0) {
      *error = what;
      return std::nullopt;
    }
  }
  minutes offset{0};
  const std::string_view zone = text.substr(at);
  if (zone == "Z" || zone == "z") {
    // UTC
  } else if (int oh = 0, om = 0; zone.size() == 6 && (zone[0] == '+' || zone[0] == '-') &&
                                 digits(zone, 1, 2, &oh) && zone[3] == ':' &&
                                 digits(zone, 4, 2, &om) && oh <= 23 && om <= 59) {
    offset = minutes((zone[0] == '-' ? -1 : 1) * (oh * 60 + om));
  } else {
    *error = what;
    return std::nullopt;
  }
  const auto day = days_from_civil(y, mo, d);
  const auto t = seconds(day * 86400 + h * 3600 + mi * 60 + std::min(s, 59)) - offset;
  if (t >= kLatest || t <= -kLatest) {
    *error = out_of_range;
    return std::nullopt;
  }
  return system_clock::time_point(duration_cast<system_clock::duration>(t + frac));
}

}  // namespace sluice::cli
