// get --exec: runs a command per message (docs/cli.md, "get --exec").
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "cli.h"

namespace sluice::cli {

struct ExecArgs {
  std::string name;
  std::string channel;
  std::uint64_t count = 0;  // 0: no limit
  double timeout = -1;      // seconds; < 0: none
  bool no_wait = false;
  std::size_t batch = 0;  // messages per read and acknowledgement; 0: max(32, 4 x parallel)
  std::string command;    // run as /bin/sh -c COMMAND
  unsigned retries = 3;   // attempts after the first, before dead-lettering
  std::size_t parallel = 1;
  std::string dead_letter;          // empty: NAME.dead
  double grace = 10;                // seconds commands may run on after SIGINT/SIGTERM
  std::string metrics;              // --metrics HOST:PORT; empty: none
  double reconnect = 60;            // seconds an unreachable Redis is retried; 0: not at all
  double visibility = 0;            // get --visibility, seconds (plain get too); 0: the channel's
  std::optional<SeekTarget> start;  // get --from-*: where a new channel starts (plain get too)
};

// The reader options --visibility asks for: whole milliseconds, rounded up
// (a positive timeout never becomes "the channel's").
inline ReaderOptions reader_options(const ExecArgs& a) {
  return {.visibility = std::chrono::ceil<std::chrono::milliseconds>(
              std::chrono::duration<double>(a.visibility)),
          .start = a.start};
}

// Returns the exit status (exit_codes.h).
int run_exec(Globals& g, const ExecArgs& a);

}  // namespace sluice::cli
