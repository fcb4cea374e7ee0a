// sluice: named, bounded, durable queues from the shell (docs/cli.md).
#include <pthread.h>

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "cli.h"

namespace sluice::cli {

std::string store_location(const Globals& g) {
  if (!g.store.empty()) return g.store;
  if (const char* env = std::getenv("SLUICE_STORE"); env != nullptr && *env != '\0') return env;
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::string(xdg) + "/sluice";
  }
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : ".") + "/.local/share/sluice";
}

std::unique_ptr<QueueStore> open_store(const Globals& g, std::string_view cmd, int* rc) {
  const std::string loc = store_location(g);
  auto s = QueueStore::open(loc);
  if (!s.ok()) {
    *rc = fail(cmd, "store " + loc, s.status());
    return nullptr;
  }
  return std::move(*s);
}

int fail(std::string_view cmd, std::string_view what, const Status& s) {
  std::string hint;
  switch (s.code()) {
    case StatusCode::kNotFound:
      hint = "list queues with `sluice ls`, create one with `sluice create NAME`";
      break;
    case StatusCode::kAlreadyExists:
      hint = "pick another name, or `sluice delete NAME` first";
      break;
    case StatusCode::kInUse:
      hint = "another process has it; wait for it, or drop --no-wait to wait your turn";
      break;
    case StatusCode::kIOError:
      hint = "check free space and permissions of the store (--store, SLUICE_STORE)";
      break;
    case StatusCode::kClosed:
      hint = "the queue takes no more messages; create a new one";
      break;
    case StatusCode::kInvalidArgument:
      hint = "see `sluice " + std::string(cmd) + " --help`";
      break;
    case StatusCode::kCorruption:
      hint = "see `sluice log verify`; `sluice repair NAME` moves the damage aside";
      break;
    default:
      break;
  }
  const std::string msg =
      s.message().empty() ? std::string(status_code_name(s.code())) : std::string(s.message());
  // Store messages often name the queue already: say it once.
  const bool named = msg.find(std::string(what)) != std::string::npos;
  std::cerr << "sluice " << cmd << ": " << (named ? "" : std::string(what) + ": ") << msg
            << (hint.empty() ? "" : " (" + hint + ")") << "\n";
  return exit_code_for(s);
}

std::stop_token stop_on_signals() {
  static std::stop_source source;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // inherited by threads started later
  std::thread([set] {
    int sig = 0;
    sigwait(&set, &sig);
    source.request_stop();
  }).detach();  // lives until exit: the process ends with main
  return source.get_token();
}

}  // namespace sluice::cli

int main(int argc, char** argv) {
  using namespace sluice::cli;
  CLI::App app{"sluice: named, bounded, durable queues between processes (docs/cli.md)", "sluice"};
  app.require_subcommand(1);
  app.fallthrough();  // --store may come after the subcommand too
  Globals g;
  app.add_option("--store", g.store,
                 "store directory (or file:PATH); default $SLUICE_STORE, else "
                 "${XDG_DATA_HOME:-~/.local/share}/sluice");
  app.footer(
      "Exit status: 0 ok, 1 other error, 2 usage, 3 unknown queue, 4 queue exists, 5 queue "
      "closed,\n"
      "6 role held elsewhere, 7 I/O error, 8 message too large, 9 timed out, 11 damage found\n"
      "(log verify), 130 interrupted.");
  add_queue_commands(app, g);
  add_io_commands(app, g);
  add_log_commands(app, g);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }
  return g.rc;
}
