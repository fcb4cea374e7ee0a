// A strict reader of the Prometheus text exposition format (0.0.4), to check
// what the renderers write: every sample's family is declared by a TYPE line
// before it, names and labels are well formed, values parse, counters end in
// _total, and a histogram's buckets are cumulative and end in +Inf == count.
#pragma once

#include <cctype>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>

namespace sluice::testutil {

struct Exposition {
  std::map<std::string, double> samples;  // "metric{labels}" (labels as written) -> value
  std::map<std::string, std::string> types;
  std::string error;  // empty when the text is well formed
  double at(const std::string& key) const {
    auto it = samples.find(key);
    return it == samples.end() ? -1 : it->second;
  }
};

inline bool metric_name_ok(std::string_view n) {
  if (n.empty() || std::isdigit(static_cast<unsigned char>(n[0])) != 0) return false;
  for (char c : n) {
    if (std::isalnum(static_cast<unsigned char>(c)) == 0 && c != '_' && c != ':') return false;
  }
  return true;
}

// Checks a label set `a="x",b="y"` (without braces).
inline bool labels_ok(std::string_view l) {
  std::size_t i = 0;
  while (i < l.size()) {
    const std::size_t eq = l.find('=', i);
    if (eq == std::string_view::npos || !metric_name_ok(l.substr(i, eq - i))) return false;
    if (eq + 1 >= l.size() || l[eq + 1] != '"') return false;
    std::size_t j = eq + 2;
    for (; j < l.size() && l[j] != '"'; ++j) {
      if (l[j] == '\\') {
        if (j + 1 >= l.size() || (l[j + 1] != '\\' && l[j + 1] != '"' && l[j + 1] != 'n')) {
          return false;
        }
        ++j;
      } else if (l[j] == '\n') {
        return false;
      }
    }
    if (j >= l.size()) return false;  // unterminated value
    i = j + 1;
    if (i < l.size()) {
      if (l[i] != ',') return false;
      ++i;
    }
  }
  return true;
}

inline Exposition parse_prometheus(std::string_view text) {
  Exposition e;
  std::istringstream in{std::string(text)};
  std::string line;
  std::map<std::string, double> last_bucket;  // histogram series -> last cumulative count
  int n = 0;
  auto fail = [&](const std::string& why) {
    e.error = "line " + std::to_string(n) + ": " + why + ": " + line;
    return e;
  };
  if (!text.empty() && text.back() != '\n') {
    e.error = "the text does not end with a newline";
    return e;
  }
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    if (line.starts_with("# HELP ")) continue;
    if (line.starts_with("# TYPE ")) {
      std::istringstream l(line.substr(7));
      std::string name;
      std::string type;
      l >> name >> type;
      if (!metric_name_ok(name)) return fail("bad metric name");
      static const std::set<std::string> kTypes = {"counter", "gauge", "histogram", "summary",
                                                   "untyped"};
      if (!kTypes.contains(type)) return fail("bad type");
      if (!e.types.emplace(name, type).second) return fail("family declared twice");
      if (type == "counter" && !name.ends_with("_total")) return fail("a counter without _total");
      continue;
    }
    if (line[0] == '#') continue;
    const std::size_t brace = line.find('{');
    const std::size_t space = line.rfind(' ');
    if (space == std::string::npos) return fail("no value");
    std::string name = line.substr(0, std::min(brace, space));
    std::string labels;
    if (brace != std::string::npos && brace < space) {
      const std::size_t close = line.rfind('}', space);
      if (close == std::string::npos || close + 1 != space) return fail("bad label braces");
      labels = line.substr(brace + 1, close - brace - 1);
      if (!labels_ok(labels)) return fail("bad labels");
    }
    if (!metric_name_ok(name)) return fail("bad metric name");
    const std::string value = line.substr(space + 1);
    double v = 0;
    if (value == "+Inf") {
      v = 1e308 * 10;
    } else {
      char* end = nullptr;
      v = std::strtod(value.c_str(), &end);
      if (end == value.c_str() || *end != '\0') return fail("bad value");
    }
    std::string family = name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      if (name.ends_with(suffix)) {
        const std::string base = name.substr(0, name.size() - std::string_view(suffix).size());
        if (e.types.contains(base) && e.types[base] == "histogram") family = base;
      }
    }
    if (!e.types.contains(family)) return fail("a sample before its TYPE");
    if (family != name && name.ends_with("_bucket")) {
      const std::size_t le = labels.find("le=\"");
      if (le == std::string::npos) return fail("a bucket without le");
      std::string series = labels.substr(0, le);
      auto [it, first] = last_bucket.try_emplace(family + "{" + series, v);
      if (!first && v < it->second) return fail("buckets are not cumulative");
      it->second = v;
    }
    const std::string key = labels.empty() ? name : name + "{" + labels + "}";
    if (!e.samples.emplace(key, v).second) return fail("a sample twice");
  }
  return e;
}

}  // namespace sluice::testutil
