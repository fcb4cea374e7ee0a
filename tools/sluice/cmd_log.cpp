// log verify, log inspect, repair: the embedded store's files looked at
// directly (sluice/log/inspect.h does the work; this file picks the topics
// and prints).
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli.h"
#include "json_out.h"
#include "sluice/log/inspect.h"

namespace sluice::cli {
namespace {

namespace fs = std::filesystem;

struct LogArgs {
  std::string target;  // a directory, a queue name, or empty: the whole store
  bool json = false;
  bool dry_run = false;
};

// One topic to look at: a queue of a store, or a bare topic directory.
struct Target {
  std::string label;       // "queue 'jobs'" or "topic DIR"
  std::string topic;       // the topic directory
  std::string quarantine;  // where repair moves files ("" for the library's default)
};

Target queue_target(const std::string& qdir, const std::string& name) {
  return {queue_label(name), qdir + "/topic", qdir + "/quarantine"};
}

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

// The topics TARGET names (docs/cli.md, "Inspecting and repairing a store"):
// an existing directory is a store (it has queues/), a queue directory (it
// has queue.meta and topic/) or a topic directory; another argument is a
// queue of the store; none is every queue of the store.
Result<std::vector<Target>> resolve(const Globals& g, std::string target, bool many_ok) {
  // "dir/" is "dir" (as a shell completes it): its last component names the
  // queue, and a bare topic's quarantine goes beside it, not into it.
  while (target.size() > 1 && target.back() == '/') target.pop_back();
  std::string store = store_location(g);
  if (store.starts_with("file:")) store.erase(0, 5);
  const auto whole_store = [&](const std::string& dir) -> Result<std::vector<Target>> {
    if (!many_ok) {
      return Status(StatusCode::kInvalidArgument,
                    dir + " is a store: name one queue (its name, or its directory)");
    }
    std::vector<Target> out;
    std::error_code ec;
    std::vector<std::string> names;
    for (fs::directory_iterator it(dir + "/queues", ec), end; !ec && it != end; it.increment(ec)) {
      const std::string n = it->path().filename().string();
      if (validate_queue_name(n).ok() && is_dir(it->path())) names.push_back(n);
    }
    if (ec) return Status(StatusCode::kIOError, "list " + dir + "/queues: " + ec.message());
    std::sort(names.begin(), names.end());
    for (const std::string& n : names) out.push_back(queue_target(dir + "/queues/" + n, n));
    return out;
  };
  if (target.empty()) {
    if (store.find("://") != std::string::npos) {
      return Status(StatusCode::kInvalidArgument,
                    "store " + store + ": `sluice log` reads the embedded store's files only");
    }
    if (!is_dir(store + "/queues")) {
      return Status(StatusCode::kInvalidArgument, "no store in " + store);
    }
    return whole_store(store);
  }
  std::error_code ec;
  const fs::path p(target);
  if (fs::exists(p, ec)) {
    if (!is_dir(p)) return Status(StatusCode::kInvalidArgument, target + " is not a directory");
    if (is_dir(p / "queues")) return whole_store(target);
    if (fs::exists(p / "queue.meta", ec) && is_dir(p / "topic")) {
      return std::vector<Target>{queue_target(target, p.filename().string())};
    }
    return std::vector<Target>{{"topic " + target, target, ""}};
  }
  if (target.find('/') == std::string::npos && validate_queue_name(target).ok()) {
    const std::string qdir = store + "/queues/" + target;
    if (!is_dir(qdir)) {
      return Status(StatusCode::kNotFound, "no queue '" + target + "' in store " + store +
                                               ", and no directory by that name");
    }
    return std::vector<Target>{queue_target(qdir, target)};
  }
  return Status(StatusCode::kInvalidArgument, "no directory " + target);
}

// "not a topic" is bad input here, not an unknown queue.
int fail_target(std::string_view cmd, const Target& t, const Status& s) {
  if (s.code() == StatusCode::kNotFound) {
    return fail(
        cmd, t.topic,
        {StatusCode::kInvalidArgument,
         t.topic + " is not a topic, queue or store directory (" + std::string(s.message()) + ")"});
  }
  return fail(cmd, t.label, s);
}

const char* severity(const LogFinding& f) {
  return f.severity == LogFinding::Severity::kDamage ? "damage" : "note";
}

// One line: what, where, what to do.
std::string finding_line(const Target& t, const LogFinding& f) {
  std::ostringstream o;
  o << severity(f) << ": " << t.label << ": " << f.file;
  if (f.length > 0 || f.offset > 0) o << " at " << f.offset << " (" << f.length << " bytes)";
  o << ": " << f.what << " -- " << f.advice;
  return o.str();
}

const char* state_name(ChannelInspection::State s) {
  switch (s) {
    case ChannelInspection::State::kValid:
      return "valid";
    case ChannelInspection::State::kUnset:
      return "unset";
    case ChannelInspection::State::kDamaged:
      return "damaged";
  }
  return "?";
}

std::string slot_text(const PositionSlotInspection& s) {
  if (s.valid) {
    return "gen " + std::to_string(s.generation) + " next " + std::to_string(s.next_seq);
  }
  return s.set ? "damaged" : "empty";
}

void print_text(const Target& t, const TopicInspection& x) {
  std::size_t damage = 0;
  for (const LogFinding& f : x.findings) damage += f.severity == LogFinding::Severity::kDamage;
  std::cout << t.label << "\n"
            << "  dir=" << x.dir << "\n"
            << "  first_seq=" << x.first_seq << " next_seq=" << x.next_seq
            << " records=" << x.records << " segments=" << x.segments.size() << " bytes=" << x.bytes
            << "\n"
            << "  high_watermark="
            << (x.has_notify ? std::to_string(x.visible_seq) : std::string("none (no NOTIFY)"))
            << " closed=" << (x.closed ? "yes" : "no") << "\n"
            << "  segments:\n";
  for (const SegmentInspection& g : x.segments) {
    std::cout << "    " << fs::path(g.file).filename().string() << " base=" << g.base_seq;
    if (g.records > 0) {
      std::cout << " seqs=" << g.first_seq << ".." << g.last_seq;
    } else {
      std::cout << " seqs=none";
    }
    std::cout << " records=" << g.records << " bytes=" << g.file_bytes;
    if (g.header_valid) std::cout << " format=" << g.version;
    if (g.first_time) std::cout << " first_time=" << rfc3339(*g.first_time);
    if (g.last_time) std::cout << " last_time=" << rfc3339(*g.last_time);
    if (g.summary) std::cout << " summary";
    if (g.reserved_bytes > 0) std::cout << " preallocated=" << g.reserved_bytes;
    if (g.damaged_bytes > 0) std::cout << " damaged=" << g.damaged_bytes;
    std::cout << (g.header_valid ? "" : " bad-header") << (g.sealed ? " sealed" : " newest")
              << (g.after_gap ? " after-gap" : "") << (g.closed_mark ? " closed-mark" : "") << "\n";
  }
  std::cout << "  channels:" << (x.channels.empty() ? " none" : "") << "\n";
  for (const ChannelInspection& c : x.channels) {
    std::cout << "    " << c.name << " " << state_name(c.state);
    if (c.state == ChannelInspection::State::kValid) {
      std::cout << " next_seq=" << c.next_seq << " unacked=" << c.unacked
                << " slot=" << c.current_slot;
    }
    std::cout << " slot0=" << slot_text(c.slots[0]) << " slot1=" << slot_text(c.slots[1]) << "\n";
  }
  std::cout << "  findings: " << damage << " damage, " << x.findings.size() - damage << " notes\n";
  for (const LogFinding& f : x.findings) std::cout << "    " << finding_line(t, f) << "\n";
}

void print_json(const Target& t, const TopicInspection& x) {
  using Json = nlohmann::ordered_json;  // keys in the order written
  Json j;
  j["target"] = t.label;
  j["dir"] = x.dir;
  j["first_seq"] = x.first_seq;
  j["next_seq"] = x.next_seq;
  j["records"] = x.records;
  j["bytes"] = x.bytes;
  j["high_watermark"] = x.has_notify ? Json(x.visible_seq) : Json(nullptr);
  j["closed"] = x.closed;
  j["damaged"] = x.damaged();
  Json segs = Json::array();
  for (const SegmentInspection& g : x.segments) {
    Json o;
    o["file"] = g.file;
    o["base_seq"] = g.base_seq;
    o["header_valid"] = g.header_valid;
    o["records"] = g.records;
    o["first_seq"] = g.first_seq;
    o["last_seq"] = g.last_seq;
    o["bytes"] = g.file_bytes;
    o["record_bytes"] = g.record_bytes;
    o["preallocated"] = g.reserved_bytes;
    o["damaged_bytes"] = g.damaged_bytes;
    o["sealed"] = g.sealed;
    o["after_gap"] = g.after_gap;
    o["closed_mark"] = g.closed_mark;
    o["format"] = g.header_valid ? Json(g.version) : Json(nullptr);
    o["first_time"] = g.first_time ? Json(rfc3339(*g.first_time)) : Json(nullptr);
    o["last_time"] = g.last_time ? Json(rfc3339(*g.last_time)) : Json(nullptr);
    o["summary"] = g.summary;
    segs.push_back(std::move(o));
  }
  j["segments"] = std::move(segs);
  Json chans = Json::array();
  for (const ChannelInspection& c : x.channels) {
    Json o;
    o["name"] = c.name;
    o["file"] = c.file;
    o["state"] = state_name(c.state);
    o["next_seq"] = c.next_seq;
    o["unacked"] = c.unacked;
    o["current_slot"] = c.current_slot;
    Json slots = Json::array();
    for (const PositionSlotInspection& p : c.slots) {
      Json so;
      so["set"] = p.set;
      so["valid"] = p.valid;
      so["generation"] = p.generation;
      so["next_seq"] = p.next_seq;
      slots.push_back(std::move(so));
    }
    o["slots"] = std::move(slots);
    chans.push_back(std::move(o));
  }
  j["channels"] = std::move(chans);
  Json findings = Json::array();
  for (const LogFinding& f : x.findings) {
    Json o;
    o["severity"] = severity(f);
    o["file"] = f.file;
    o["offset"] = f.offset;
    o["length"] = f.length;
    o["what"] = f.what;
    o["advice"] = f.advice;
    o["repairable"] = f.repairable;
    findings.push_back(std::move(o));
  }
  j["findings"] = std::move(findings);
  // File names and messages are bytes: never fail on one that is not UTF-8.
  std::cout << j.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
}

}  // namespace

void add_log_commands(CLI::App& app, Globals& g) {
  auto a = std::make_shared<LogArgs>();
  const char* target_help =
      "a store, queue or topic directory, or a queue name of the store (--store); "
      "default: every queue of the store";

  auto* log = app.add_subcommand("log", "look at the embedded store's files: verify, inspect");
  log->require_subcommand(1);

  auto* verify = log->add_subcommand(
      "verify", "check every segment and position file, changing nothing; exit 11 on damage");
  verify->add_option("TARGET", a->target, target_help);
  verify->callback([&g, a] {
    auto targets = resolve(g, a->target, true);
    if (!targets.ok()) {
      g.rc = fail("log verify", a->target.empty() ? "store" : a->target, targets.status());
      return;
    }
    // Every queue is looked at: one that cannot be read is said on stderr
    // and the others are still checked; its exit code wins over damage's
    // (that queue was not checked at all).
    bool damaged = false;
    int unread = kExitOk;
    for (const Target& t : *targets) {
      auto x = inspect_topic(t.topic);
      if (!x.ok()) {
        const int rc = fail_target("log verify", t, x.status());
        if (unread == kExitOk) unread = rc;
        continue;
      }
      std::size_t n = 0;
      for (const LogFinding& f : x->findings) {
        std::cout << finding_line(t, f) << "\n";
        n += f.severity == LogFinding::Severity::kDamage;
      }
      damaged |= n > 0;
      std::cout << t.label << ": " << (n > 0 ? "damaged, " + std::to_string(n) + " findings" : "ok")
                << " (segments=" << x->segments.size() << " records=" << x->records
                << " channels=" << x->channels.size() << ")\n";
    }
    g.rc = unread != kExitOk ? unread : damaged ? kExitDamaged : kExitOk;
  });

  auto* inspect = log->add_subcommand(
      "inspect", "describe segments, channels and positions, the closed mark and any damage");
  inspect->add_option("TARGET", a->target, target_help);
  inspect->add_flag("--json", a->json, "one JSON object per topic, one per line");
  inspect->callback([&g, a] {
    auto targets = resolve(g, a->target, true);
    if (!targets.ok()) {
      g.rc = fail("log inspect", a->target.empty() ? "store" : a->target, targets.status());
      return;
    }
    for (const Target& t : *targets) {  // as verify: on past a queue it cannot read
      auto x = inspect_topic(t.topic);
      if (!x.ok()) {
        const int rc = fail_target("log inspect", t, x.status());
        if (g.rc == kExitOk) g.rc = rc;
        continue;
      }
      a->json ? print_json(t, *x) : print_text(t, *x);
    }
  });

  auto* repair = app.add_subcommand(
      "repair",
      "move damage that stops a queue from opening into <queue>/quarantine/ (deletes nothing)");
  repair->add_option("NAME", a->target, "queue name, or a queue or topic directory")->required();
  repair->add_flag("--dry-run", a->dry_run, "say what would be done, change nothing");
  repair->callback([&g, a] {
    auto targets = resolve(g, a->target, false);
    if (!targets.ok()) {
      g.rc = fail("repair", a->target, targets.status());
      return;
    }
    const Target& t = targets->front();
    TopicRepairOptions ro;
    ro.dry_run = a->dry_run;
    ro.quarantine_dir = t.quarantine;
    auto r = repair_topic(t.topic, ro);
    if (!r.ok()) {
      g.rc = fail_target("repair", t, r.status());
      return;
    }
    const char* verb = r->dry_run ? "would " : "";
    for (const TopicRepairAction& act : r->actions) std::cout << verb << act.what << "\n";
    for (const LogFinding& f : r->left)
      std::cout << "left in place: " << finding_line(t, f) << "\n";
    if (r->actions.empty()) {
      std::cout << t.label << ": nothing to repair\n";
    } else {
      std::cout << t.label << ": " << (r->dry_run ? "dry run, nothing changed: " : "repaired: ")
                << r->actions.size() << " actions, " << r->records_lost
                << " records lost from delivery"
                << (r->quarantine.empty() ? "" : ", quarantine " + r->quarantine) << "\n";
    }
  });
}

}  // namespace sluice::cli
