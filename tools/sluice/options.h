// CLI11 validators over args.h: whole numbers and durations whose errors say
// what is wrong ("--count: '0' is too small (1 or more)") instead of CLI11's
// "not in range 0.000000 to 1797693134862315...".
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>

#include "args.h"

namespace sluice::cli {

// A check: the text is a whole number in [min, max].
inline CLI::Validator whole_number(std::uint64_t min = 0,
                                   std::uint64_t max = std::numeric_limits<std::uint64_t>::max()) {
  return CLI::Validator(
      [min, max](std::string& text) {
        std::string error;
        return parse_whole(text, min, max, &error) ? std::string() : error;
      },
      "", "WHOLE");
}

// A transform: "500ms", "2m", "1.5" ... become the seconds they stand for,
// which the option then reads as a double.
inline CLI::Validator duration() {
  return CLI::Validator(
      [](std::string& text) {
        std::string error;
        const auto seconds = parse_duration(text, &error);
        if (!seconds) return error;
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.17g", *seconds);
        text = buf;
        return std::string();
      },
      "", "DURATION");
}

// Makes `o` (a double, in seconds) a duration option: the transform above,
// and DURATION for its type in --help (CLI11 would say FLOAT).
inline CLI::Option* as_duration(CLI::Option* o) {
  return o->transform(duration())->type_name("DURATION");
}

}  // namespace sluice::cli
