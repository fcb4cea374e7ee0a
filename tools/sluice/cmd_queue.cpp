// create, close, delete, ls, stat.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>

#include "cli.h"
#include "json_out.h"
#include "options.h"

namespace sluice::cli {
namespace {

struct QueueArgs {
  std::string name;
  std::uint64_t bound = 1000;
  double max_age = 0;  // seconds; 0: none
  std::uint32_t replicas = 0;
  bool json = false;
  bool no_wait = false;
  bool stream = false;
  bool long_list = false;
};

// "a,b".
std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) {
    if (!out.empty()) out += ',';
    out += n;
  }
  return out;
}

// A count the backend may not know: `key=N` lines leave it out (JSON: null).
std::string line_count(std::string_view key, const std::optional<std::uint64_t>& n) {
  return n ? std::string(key) + "=" + std::to_string(*n) + "\n" : std::string();
}

}  // namespace

void add_queue_commands(CLI::App& app, Globals& g) {
  auto a = std::make_shared<QueueArgs>();

  auto* create = app.add_subcommand("create", "create an empty queue");
  create->add_option("NAME", a->name, "queue name: 1-200 of A-Z a-z 0-9 . _ -")->required();
  create
      ->add_option("--bound", a->bound,
                   "most messages put and not yet acknowledged; put waits beyond it; 0: unbounded")
      ->capture_default_str()
      ->check(whole_number());
  as_duration(create->add_option(
      "--max-age", a->max_age,
      "delete messages older than this even if a channel has not acknowledged them (a "
      "stopped consumer loses them and holds puts back no longer); approximate, see "
      "docs/cli.md; not on Redis pressure queues; 0: never"));
  create->add_flag("--stream", a->stream,
                   "Redis: a Redis Streams topic (named channels, any number of competing "
                   "readers per channel) instead of a pressure-protocol queue; the embedded "
                   "store's queues have named channels already (it ignores the flag)");
  create
      ->add_option("--replicas", a->replicas,
                   "Redis Streams topics: a put is acknowledged only once N replicas of the "
                   "primary have it (WAIT), so it survives a failover to one of them; else it "
                   "fails with its messages in doubt. Recorded: every writer obeys it")
      ->check(whole_number(0, UINT32_MAX));
  create->callback([&g, a] {
    auto store = open_store(g, "create", &g.rc);
    if (!store) return;
    QueueSpec spec{.bound = a->bound, .kind = a->stream ? QueueKind::kStream : QueueKind::kDefault};
    spec.replicas = a->replicas;
    // Whole milliseconds, rounded up: a positive age never becomes "none".
    spec.max_age =
        std::chrono::ceil<std::chrono::milliseconds>(std::chrono::duration<double>(a->max_age));
    if (Status s = store->create(a->name, spec); !s.ok()) {
      g.rc = fail("create", queue_label(a->name), s);
    }
  });

  auto* close = app.add_subcommand(
      "close", "close a queue: no more puts; readers end once they have every message");
  close->add_option("NAME", a->name, "queue name")->required();
  close->add_flag("--no-wait", a->no_wait, "fail at once if a writer holds the queue");
  close->callback([&g, a] {
    auto store = open_store(g, "close", &g.rc);
    if (!store) return;
    const Context ctx =
        a->no_wait ? with_timeout(std::chrono::seconds(0)) : Context(stop_on_signals());
    if (Status s = store->close(a->name, ctx); !s.ok())
      g.rc = fail("close", queue_label(a->name), s);
  });

  auto* del = app.add_subcommand("delete", "delete a queue and its messages");
  del->add_option("NAME", a->name, "queue name")->required();
  del->callback([&g, a] {
    auto store = open_store(g, "delete", &g.rc);
    if (!store) return;
    if (Status s = store->remove(a->name); !s.ok()) g.rc = fail("delete", queue_label(a->name), s);
  });

  auto* ls = app.add_subcommand("ls", "list the queues, one name per line");
  ls->add_flag("-l,--long", a->long_list,
               "name, kind (log, pressure, stream) and channels, tab-separated");
  ls->callback([&g, a] {
    auto store = open_store(g, "ls", &g.rc);
    if (!store) return;
    auto names = store->list();
    if (!names.ok()) {
      g.rc = fail("ls", "store " + store_label(g), names.status());
      return;
    }
    for (const std::string& n : *names) {
      if (!a->long_list) {
        std::cout << n << "\n";
        continue;
      }
      auto info = store->stat(n);
      if (info.status().code() == StatusCode::kNotFound) continue;  // deleted meanwhile
      if (!info.ok()) {
        g.rc = fail("ls", queue_label(n), info.status());
        return;
      }
      std::cout << n << '\t' << info->kind << '\t' << joined(info->channels) << "\n";
    }
  });

  auto* stat = app.add_subcommand(
      "stat",
      "print a queue's state: name, bound, closed, length (pressure queues: waiting + "
      "in_flight), produced, consumed, produced_bytes and consumed_bytes (where the backend "
      "keeps them), channels, kind, max_age (seconds), replicas, and each channel's lag (not yet "
      "delivered), pending (delivered, not acknowledged), dead letters and purged");
  stat->add_option("NAME", a->name, "queue name")->required();
  stat->add_flag("--json", a->json, "one JSON object instead of key=value lines");
  stat->callback([&g, a] {
    auto store = open_store(g, "stat", &g.rc);
    if (!store) return;
    auto info = store->stat(a->name);
    if (!info.ok()) {
      g.rc = fail("stat", queue_label(a->name), info.status());
      return;
    }
    const std::string channels = joined(info->channels);
    const char* closed = info->closed ? "true" : "false";
    // Seconds, as the option takes them: "3600", "0.25".
    std::string max_age = std::to_string(info->max_age.count() / 1000);
    if (const auto ms = info->max_age.count() % 1000; ms != 0) {
      char frac[8];
      std::snprintf(frac, sizeof frac, ".%03d", static_cast<int>(ms));
      max_age += frac;
      while (max_age.back() == '0') max_age.pop_back();
    }
    if (a->json) {
      std::cout << stat_json(*info);
    } else {
      std::cout << "name=" << info->name << "\nbound=" << info->bound << "\nclosed=" << closed
                << "\nlength=" << info->length << "\n"
                << line_count("waiting", info->waiting) << line_count("in_flight", info->in_flight)
                << "produced=" << info->produced << "\nconsumed=" << info->consumed << "\n"
                << line_count("produced_bytes", info->produced_bytes)
                << line_count("consumed_bytes", info->consumed_bytes) << "channels=" << channels
                << "\nkind=" << info->kind << "\nmax_age=" << max_age
                << "\nreplicas=" << info->replicas << "\n";
      for (const ChannelInfo& c : info->channel_info) {
        const std::string k = "channel." + c.name + ".";
        std::cout << k << "lag=" << c.lag << "\n"
                  << k << "pending=" << c.pending << "\n"
                  << k << "dead_lettered=" << c.dead_lettered << "\n"
                  << k << "purged=" << c.purged << "\n";
      }
    }
  });
}

}  // namespace sluice::cli
