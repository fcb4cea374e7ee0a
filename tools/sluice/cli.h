// What the sluice subcommands share: the store location, error reporting,
// and a stop source fed by SIGINT/SIGTERM.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>

#include "exit_codes.h"
#include "sluice/store.h"

namespace sluice::cli {

struct Globals {
  std::string store;          // --store or --redis (the same option), else store_location()'s rules
  int rc = kExitOk;           // set by the subcommand that ran
  bool no_sync = false;       // --no-sync: embedded puts and acks without fdatasync
  bool quiet = false;         // -q: no progress line, even on a terminal
  bool stdin_closed = false;  // fd 0 was not open at start (now /dev/null, kept from the store)
  bool stdout_closed = false;  // fd 1 was not open at start (now /dev/null, kept from the store)
};

// --store/--redis, else $SLUICE_STORE, else $SLUICE_REDIS, else Redis at
// $REDIS_SERVER:$REDIS_PORT/$REDIS_DB if any of the three is set (the
// pressure protocol's variables; REDIS_USERNAME, REDIS_PASSWORD too), else
// ${XDG_DATA_HOME:-~/.local/share}/sluice.
std::string store_location(const Globals& g);
// The location with a password in it replaced by "***", for messages.
std::string store_label(const Globals& g);

// "queue 'NAME'", for messages.
inline std::string queue_label(std::string_view name) {
  return "queue '" + std::string(name) + "'";
}

// Opens the store; on failure prints the error and sets *rc.
std::unique_ptr<QueueStore> open_store(const Globals& g, std::string_view cmd, int* rc);

// Prints "sluice <cmd>: <what>: <message> (<hint>)" on stderr and returns the
// exit status for s.
int fail(std::string_view cmd, std::string_view what, const Status& s);
// fail() for a role take_role() did not get: a kInUse's hint says what the
// command tried (with --no-wait: no wait; without: a wait until --timeout).
int fail_role(std::string_view cmd, std::string_view what, const Status& s, bool no_wait);

// After a reader's get: if the reader passed over damaged messages since
// the last call (`seen` keeps the count), says how many on stderr, -q or
// not: a loss is never silent. "sluice get: queue 'q': 1 damaged message
// skipped (lost; `sluice log verify q` says where)".
void note_damage_skipped(std::string_view queue, const QueueReader& reader, std::uint64_t& seen);

// A stop token requested on SIGINT or SIGTERM (which are blocked in the
// calling thread and handled by a helper thread: no work in a signal
// handler). Call before starting other threads.
std::stop_token stop_on_signals();

void add_queue_commands(CLI::App& app, Globals& g);  // create, close, delete, ls, stat
void add_io_commands(CLI::App& app, Globals& g);     // put, get
void add_log_commands(CLI::App& app, Globals& g);    // log verify, log inspect, repair
void add_look_commands(CLI::App& app, Globals& g);   // peek, seek, purge

}  // namespace sluice::cli
