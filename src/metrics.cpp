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

std::string prometheus_escape(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
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
