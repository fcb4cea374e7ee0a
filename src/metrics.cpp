#include "sluice/metrics.h"

#include <cmath>
#include <cstdio>

namespace sluice {
namespace {

std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

void PrometheusWriter::header(std::string_view metric, std::string_view type,
                              std::string_view help) {
  out_ += "# HELP ";
  out_ += metric;
  out_ += ' ';
  out_ += help;
  out_ += "\n# TYPE ";
  out_ += metric;
  out_ += ' ';
  out_ += type;
  out_ += '\n';
}

void PrometheusWriter::sample(std::string_view metric, std::string_view labels, double value) {
  out_ += metric;
  if (!labels.empty()) {
    out_ += '{';
    out_ += labels;
    out_ += '}';
  }
  out_ += ' ';
  out_ += number(value);
  out_ += '\n';
}

void PrometheusWriter::histogram(std::string_view metric, std::string_view labels,
                                 const Histogram& h) {
  const std::string sep = labels.empty() ? "" : ",";
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i <= h.bounds().size(); ++i) {
    cumulative += h.counts()[i];
    const std::string le = i < h.bounds().size() ? number(h.bounds()[i]) : "+Inf";
    sample(std::string(metric) + "_bucket", std::string(labels) + sep + "le=\"" + le + "\"",
           static_cast<double>(cumulative));
  }
  sample(std::string(metric) + "_sum", labels, h.sum());
  sample(std::string(metric) + "_count", labels, static_cast<double>(h.count()));
}

namespace {

// The length of the well-formed UTF-8 sequence at s[i] (no overlong forms,
// surrogates or code points past U+10FFFF), or 0.
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  const std::size_t n = (c & 0xE0) == 0xC0   ? 2
                        : (c & 0xF0) == 0xE0 ? 3
                        : (c & 0xF8) == 0xF0 ? 4
                                             : 0;
  if (n == 0 || i + n > s.size()) return 0;
  std::uint32_t cp = c & (0x7F >> n);
  for (std::size_t k = 1; k < n; ++k) {
    const auto d = static_cast<unsigned char>(s[i + k]);
    if ((d & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (d & 0x3F);
  }
  static constexpr std::uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

}  // namespace

std::string prometheus_escape(std::string_view value) {
  // Label values are UTF-8 (Prometheus refuses a scrape with one that is
  // not): a byte that is not part of a well-formed sequence becomes U+FFFD.
  std::string out;
  for (std::size_t i = 0; i < value.size();) {
    const char c = value[i];
    const std::size_t n = utf8_length(value, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
      ++i;
    } else if (c == '\n') {
      out += "\\n";
      ++i;
    } else {
      out.append(value.substr(i, n));
      i += n;
    }
  }
  return out;
}

void PrometheusWriter::family(std::string_view metric, std::string_view type, std::string_view help,
                              std::string_view labels, double value) {
  header(metric, type, help);
  sample(metric, labels, value);
}

std::string prometheus_name_label(std::string_view name) {
  return "name=\"" + prometheus_escape(name) + "\"";
}

}  // namespace sluice
