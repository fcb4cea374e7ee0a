// One metrics shape for every component: components expose exact counters in
// a stats() snapshot; these helpers render them in the Prometheus text
// exposition format (version 0.0.4), for the application to serve.
// Each component's rendering, to_prometheus(<Component>Stats, name), lives
// in its own <component>_metrics.cpp beside the component, with these
// helpers; docs/metrics.md lists every metric.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

// A cumulative histogram with fixed upper bounds (Prometheus "le" buckets).
// Not thread-safe: components update it under their own lock.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds)
      : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

  void observe(double v) {
    std::size_t i = 0;
    while (i < bounds_.size() && v > bounds_[i]) ++i;
    ++counts_[i];
    sum_ += v;
    ++count_;
  }
  const std::vector<double>& bounds() const { return bounds_; }
  // Per-bucket (not cumulative) counts; the last is the +Inf overflow.
  const std::vector<std::uint64_t>& counts() const { return counts_; }
  double sum() const { return sum_; }
  std::uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;
  double sum_ = 0;
  std::uint64_t count_ = 0;
};

// Appends Prometheus text for one metric family. `labels` is the label set
// without braces, e.g. name="orders",reason="size" (already escaped).
class PrometheusWriter {
 public:
  void header(std::string_view metric, std::string_view type, std::string_view help);
  void sample(std::string_view metric, std::string_view labels, double value);
  void histogram(std::string_view metric, std::string_view labels, const Histogram& h);
  // A family of one sample: header(), then sample().
  void family(std::string_view metric, std::string_view type, std::string_view help,
              std::string_view labels, double value);
  const std::string& text() const { return out_; }

 private:
  std::string out_;
};

// Escapes a label value (backslash, quote, newline).
std::string prometheus_escape(std::string_view value);
// The label every component's samples carry: name="<name, escaped>".
std::string prometheus_name_label(std::string_view name);

}  // namespace sluice
