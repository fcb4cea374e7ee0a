// The Prometheus rendering (src/metrics.cpp): label values are UTF-8 whatever
// bytes a component's name holds (failed before its fix).
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "sluice/metrics.h"
#include "sluice/queue_stats.h"

namespace sluice {
namespace {

// Well-formed UTF-8 (no overlong forms, surrogates, or code points past U+10FFFF).
bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80             ? 0
            : (c & 0xE0) == 0xC0 ? 1
            : (c & 0xF0) == 0xE0 ? 2
            : (c & 0xF8) == 0xF0 ? 3
                                 : -1;
    if (n < 0 || i + static_cast<std::size_t>(n) >= s.size() + (n == 0 ? 1 : 0)) return false;
    std::uint32_t cp = n == 0 ? c : n == 1 ? (c & 0x1F) : n == 2 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    static constexpr std::uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += static_cast<std::size_t>(n) + 1;
  }
  return true;
}

// The exposition format's label values are UTF-8; Prometheus's scrape parser
// (model/textparse/promparse.go, parseLVals) fails the whole scrape with
// "invalid UTF-8 label value" otherwise. prometheus_escape() escapes only
// backslash, quote and newline, and passes any other byte through, so a
// component named with Latin-1 text (or a raw path) breaks every scrape of
// the page it is on.
TEST(PrometheusEdgesTest, ANameThatIsNotUtf8StillRendersUtf8LabelValues) {
  ASSERT_TRUE(valid_utf8(to_prometheus(QueueStats{}, "caf\xc3\xa9 \xf0\x9f\x93\x88")));  // control
  for (const char* name : {"caf\xe9", "\xff\xfe", "a\xc0\xafz", "\xed\xa0\x80"}) {
    const std::string text = to_prometheus(QueueStats{}, name);
    EXPECT_TRUE(valid_utf8(text)) << "name \"" << name << "\":\n" << text.substr(0, 200);
    EXPECT_TRUE(valid_utf8(prometheus_name_label(name))) << prometheus_name_label(name);
  }
}

}  // namespace
}  // namespace sluice
