// The sluice command's exit statuses, one per kind of failure a script may
// want to tell apart (documented in docs/cli.md, "Exit status"). Stable:
// scripts depend on them.
#pragma once

#include "sluice/status.h"

namespace sluice::cli {

enum ExitCode : int {
  kExitOk = 0,
  kExitOther = 1,         // anything not listed below
  kExitUsage = 2,         // bad command line, bad queue name, bad store location
  kExitNoQueue = 3,       // the queue does not exist
  kExitExists = 4,        // create: the queue already exists
  kExitClosed = 5,        // put: the queue is closed
  kExitInUse = 6,         // the role (writer, or the channel's reader) is held elsewhere,
                          // with --no-wait or until --timeout ran out
  kExitIO = 7,            // I/O error: disk full, permissions, stdout closed
  kExitTooLarge = 8,      // put: a message over the size limit
  kExitTimeout = 9,       // --timeout ran out with the role taken (get: before --count or the end)
  kExitUnavailable = 10,  // store unreachable: the Redis server is down or does not answer
  kExitDamaged = 11,      // log verify: damage found (one line per finding on stdout)
  kExitCannotRun = 126,   // get --exec: the command cannot be run (as xargs)
  kExitNotFound = 127,    // get --exec: the command was not found (as xargs)
  kExitInterrupted = 130  // SIGINT/SIGTERM: stopped cleanly, nothing unwritten acknowledged
};

// The exit status for a failed Status (not for kOk).
inline int exit_code_for(const Status& s) {
  switch (s.code()) {
    case StatusCode::kNotFound:
      return kExitNoQueue;
    case StatusCode::kAlreadyExists:
      return kExitExists;
    case StatusCode::kClosed:
      return kExitClosed;
    case StatusCode::kInUse:
      return kExitInUse;
    case StatusCode::kIOError:
      return kExitIO;
    case StatusCode::kInvalidArgument:
      return kExitUsage;
    case StatusCode::kDeadlineExceeded:
      return kExitTimeout;
    case StatusCode::kCancelled:
      return kExitInterrupted;
    case StatusCode::kUnavailable:
      return kExitUnavailable;
    default:
      return kExitOther;
  }
}

}  // namespace sluice::cli
