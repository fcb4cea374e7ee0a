// docs/metrics.md against what the components render: every metric the page
// lists is emitted by the component whose section lists it, with the type
// and labels the page gives, and every metric a component emits is listed;
// and no two components share a prefix (issue 27: the command's queue
// metrics were sluice_queue_*, the in-memory Queue's prefix).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "metrics_server.h"  // tools/sluice: the command's CommandMetrics
#include "sluice/admission.h"
#include "sluice/batcher.h"
#include "sluice/log/topic.h"
#include "sluice/queue.h"
#include "sluice/redis/pressure_queue.h"
#include "sluice/redis/stream_topic.h"
#include "sluice/run_pipeline.h"
#include "sluice/stage.h"
#include "testutil/prometheus.h"

namespace sluice {
namespace {

struct Family {
  std::string type;
  std::set<std::string> labels;  // label names over its samples (le aside)
  std::string help;
};
using Families = std::map<std::string, Family>;

// Each component's text, rendered from stats with one channel where a
// component has channels, so every family has samples.
std::map<std::string, std::string> rendered() {
  std::map<std::string, std::string> out;
  out["Queue"] = to_prometheus(QueueStats{}, "x");
  out["Stage"] = to_prometheus(StageStats{}, "x");
  out["run_pipeline"] = to_prometheus(PipelineStats{}, "x");
  out["Batcher"] = to_prometheus(BatcherStats{}, "x");
  out["Admission"] = to_prometheus(AdmissionStats{}, "x");
  TopicStats topic;
  topic.channels.push_back({"c", 0});
  out["Topic"] = to_prometheus(topic, "x");
  out["PressureQueue"] = to_prometheus(PressureStats{}, "x");
  StreamTopicStats stream;
  stream.appended_bytes = 0;
  stream.channels.push_back(StreamChannelStats{.name = "c"});
  out["StreamTopic"] = to_prometheus(stream, "x");
  cli::CommandMetrics command;
  command.command = "get";
  command.queue = "q";
  command.exec = true;
  command.stat = [] { return Result<QueueInfo>(QueueInfo{}); };
  command.blocked = [] { return 0.0; };
  out["sluice command"] = command.render();
  return out;
}

// The families of one text: type, label names, help.
Families families(const std::string& text) {
  const testutil::Exposition e = testutil::parse_prometheus(text);
  EXPECT_EQ(e.error, "");
  Families out;
  for (const auto& [name, type] : e.types) out[name].type = type;
  for (const auto& [key, value] : e.samples) {
    const std::size_t brace = key.find('{');
    std::string name = key.substr(0, brace);
    if (!out.contains(name)) {
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        if (name.ends_with(suffix)) name.resize(name.size() - std::string_view(suffix).size());
      }
    }
    if (brace == std::string::npos) continue;
    std::istringstream labels(key.substr(brace + 1, key.size() - brace - 2));
    std::string pair;
    while (std::getline(labels, pair, ',')) {
      const std::string label = pair.substr(0, pair.find('='));
      if (label != "le") out[name].labels.insert(label);
    }
  }
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with("# HELP ")) continue;
    const std::size_t space = line.find(' ', 7);
    out[line.substr(7, space - 7)].help = line.substr(space + 1);
  }
  return out;
}

std::string trim(std::string s) {
  while (!s.empty() && s.front() == ' ') s.erase(s.begin());
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

// docs/metrics.md: per section ("## Component (`prefix_*`, ...)"), each
// table row "| `name` | type | `label`, ... | meaning |".
struct Documented {
  std::map<std::string, Families> metrics;                   // component -> its rows
  std::map<std::string, std::vector<std::string>> prefixes;  // component -> its prefixes
};

Documented documented() {
  Documented d;
  std::ifstream in(SLUICE_METRICS_DOC);
  EXPECT_TRUE(in.good()) << SLUICE_METRICS_DOC;
  std::string line;
  std::string component;
  while (std::getline(in, line)) {
    if (line.starts_with("## ")) {
      const std::size_t paren = line.find(" (");
      component = line.substr(3, paren == std::string::npos ? std::string::npos : paren - 3);
      d.metrics[component];  // a section, rows or not
      for (std::size_t i = line.find('`'); i != std::string::npos && paren != std::string::npos;
           i = line.find('`', line.find('`', i + 1) + 1)) {
        std::string p = line.substr(i + 1, line.find('`', i + 1) - i - 1);
        if (p.ends_with("*")) p.pop_back();
        d.prefixes[component].push_back(p);
      }
      continue;
    }
    if (!line.starts_with("| `") || component.empty()) continue;
    std::vector<std::string> cells;
    std::istringstream row(line.substr(1));
    std::string cell;
    while (std::getline(row, cell, '|')) cells.push_back(trim(cell));
    if (cells.size() < 4) continue;
    const std::string name = cells[0].substr(1, cells[0].find('`', 1) - 1);
    Family& f = d.metrics[component][name];
    f.type = cells[1];
    std::istringstream labels(cells[2]);
    std::string label;
    while (std::getline(labels, label, ',')) {
      label = trim(label);
      if (label.size() > 2 && label.front() == '`')
        f.labels.insert(label.substr(1, label.size() - 2));
    }
  }
  return d;
}

std::string row(const std::string& name, const Family& f) {
  std::string labels;
  for (const std::string& l : f.labels) labels += (labels.empty() ? "`" : ", `") + l + "`";
  return "| `" + name + "` | " + f.type + " | " + labels + " | " + f.help + " |";
}

TEST(MetricsNamesTest, TheMetricsPageListsEveryMetricEachComponentEmitsAndNoOther) {
  const Documented doc = documented();
  for (const auto& [component, text] : rendered()) {
    SCOPED_TRACE(component);
    const Families emitted = families(text);
    ASSERT_TRUE(doc.metrics.contains(component)) << "docs/metrics.md has no section " << component;
    const Families& listed = doc.metrics.at(component);
    for (const auto& [name, f] : emitted) {
      auto it = listed.find(name);
      if (it == listed.end()) {
        ADD_FAILURE() << "emitted, not in docs/metrics.md:\n" << row(name, f);
        continue;
      }
      EXPECT_EQ(it->second.type, f.type) << name;
      EXPECT_EQ(it->second.labels, f.labels) << name;
    }
    for (const auto& [name, f] : listed) {
      EXPECT_TRUE(emitted.contains(name)) << "in docs/metrics.md, not emitted: " << name;
    }
  }
  for (const auto& [component, rows] : doc.metrics) {
    EXPECT_TRUE(rendered().contains(component))
        << "docs/metrics.md section of no component: " << component;
  }
}

TEST(MetricsNamesTest, EveryComponentHasPrefixesOfItsOwn) {
  const Documented doc = documented();
  const auto texts = rendered();
  for (const auto& [component, text] : texts) {
    SCOPED_TRACE(component);
    ASSERT_TRUE(doc.prefixes.contains(component));
    const std::vector<std::string>& own = doc.prefixes.at(component);
    ASSERT_FALSE(own.empty());
    // Its metrics start with one of its prefixes...
    for (const auto& [name, f] : families(text)) {
      bool ok = false;
      for (const std::string& p : own) ok = ok || name.starts_with(p);
      EXPECT_TRUE(ok) << name << " has none of its component's prefixes";
    }
    // ...and no other component's prefix starts like one of them.
    for (const auto& [other, theirs] : doc.prefixes) {
      if (other == component) continue;
      for (const std::string& p : own) {
        for (const std::string& q : theirs) {
          EXPECT_FALSE(p.starts_with(q) || q.starts_with(p))
              << component << "'s " << p << " and " << other << "'s " << q;
        }
      }
    }
  }
}

// The collision issue 27 found, named: the command's queue metrics and the
// in-memory Queue's.
TEST(MetricsNamesTest, TheCommandsQueueMetricsAreNotTheInMemoryQueues) {
  const auto texts = rendered();
  for (const auto& [name, f] : families(texts.at("sluice command"))) {
    EXPECT_FALSE(name.starts_with("sluice_queue_")) << name;
  }
  for (const auto& [name, f] : families(texts.at("Queue"))) {
    EXPECT_TRUE(name.starts_with("sluice_queue_")) << name;
  }
}

}  // namespace
}  // namespace sluice
