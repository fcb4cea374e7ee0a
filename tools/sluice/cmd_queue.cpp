// create, close, delete, ls, stat.
#include <iostream>

#include "cli.h"

namespace sluice::cli {
namespace {

struct QueueArgs {
  std::string name;
  std::uint64_t bound = 1000;
  bool json = false;
  bool no_wait = false;
};

}  // namespace

void add_queue_commands(CLI::App& app, Globals& g) {
  auto a = std::make_shared<QueueArgs>();

  auto* create = app.add_subcommand("create", "create an empty queue");
  create->add_option("NAME", a->name, "queue name: 1-200 of A-Z a-z 0-9 . _ -")->required();
  create
      ->add_option("--bound", a->bound,
                   "most messages put and not yet acknowledged; put waits beyond it; 0: unbounded")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  create->callback([&g, a] {
    auto store = open_store(g, "create", &g.rc);
    if (!store) return;
    if (Status s = store->create(a->name, a->bound); !s.ok()) {
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
  ls->callback([&g] {
    auto store = open_store(g, "ls", &g.rc);
    if (!store) return;
    auto names = store->list();
    if (!names.ok()) {
      g.rc = fail("ls", "store " + store_label(g), names.status());
      return;
    }
    for (const std::string& n : *names) std::cout << n << "\n";
  });

  auto* stat = app.add_subcommand(
      "stat", "print a queue's state: name, bound, closed, length, produced, consumed, channels");
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
    std::string channels;
    for (const std::string& c : info->channels) {
      if (a->json) {
        channels += (channels.empty() ? "\"" : ",\"") + c + "\"";  // names need no escaping
      } else {
        channels += (channels.empty() ? "" : ",") + c;
      }
    }
    const char* closed = info->closed ? "true" : "false";
    if (a->json) {
      std::cout << "{\"name\":\"" << info->name << "\",\"bound\":" << info->bound
                << ",\"closed\":" << closed << ",\"length\":" << info->length
                << ",\"produced\":" << info->produced << ",\"consumed\":" << info->consumed
                << ",\"channels\":[" << channels << "]}\n";
    } else {
      std::cout << "name=" << info->name << "\nbound=" << info->bound << "\nclosed=" << closed
                << "\nlength=" << info->length << "\nproduced=" << info->produced
                << "\nconsumed=" << info->consumed << "\nchannels=" << channels << "\n";
    }
  });
}

}  // namespace sluice::cli
