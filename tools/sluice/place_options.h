// A place in a channel on the command line: seek's --to-* and get's --from-*
// (seq, id, time, start, end). One set of options and one parser for both.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <iostream>
#include <optional>
#include <string>

#include "args.h"
#include "options.h"
#include "sluice/store.h"

namespace sluice::cli {

struct PlaceArgs {
  std::optional<std::uint64_t> seq;
  std::string id;
  std::string time;
  bool start = false;
  bool end = false;

  // The place given: empty if none (kInvalidArgument if `required`);
  // kInvalidArgument for two, or a bad time. `prefix` ("--to" or "--from")
  // names the options in the message.
  Result<std::optional<SeekTarget>> target(const std::string& prefix, bool required = false) const {
    SeekTarget to;
    int given = 0;
    if (seq) {
      to.kind = SeekTarget::Kind::kSeq;
      to.seq = *seq;
      ++given;
    }
    if (!id.empty()) {
      to.kind = SeekTarget::Kind::kId;
      to.id = id;
      ++given;
    }
    if (!time.empty()) {
      std::string why;
      auto t = parse_time(time, &why);
      if (!t) return Status(StatusCode::kInvalidArgument, prefix + "-time: " + why);
      to.kind = SeekTarget::Kind::kTime;
      to.time = *t;
      ++given;
    }
    if (start) {
      to.kind = SeekTarget::Kind::kStart;
      ++given;
    }
    if (end) {
      to.kind = SeekTarget::Kind::kEnd;
      ++given;
    }
    if (given > 1 || (given == 0 && required)) {
      return Status(StatusCode::kInvalidArgument, "give one place: " + prefix + "-seq N, " +
                                                      prefix + "-id ID, " + prefix + "-time T, " +
                                                      prefix + "-start or " + prefix + "-end");
    }
    if (given == 0) return std::optional<SeekTarget>();
    return std::optional<SeekTarget>(to);
  }
};

// PREFIX-seq, -id, -time, -start and -end on `cmd`; `what` finishes each
// help line's subject ("deliver", "start at").
inline void add_place_options(CLI::App* cmd, PlaceArgs& p, const std::string& prefix,
                              const std::string& what) {
  cmd->add_option(prefix + "-seq", p.seq, "embedded store: " + what + " the message with this seq")
      ->check(whole_number(0));
  cmd->add_option(prefix + "-id", p.id,
                  "Redis Streams topic: " + what + " what comes after this id");
  cmd->add_option(prefix + "-time", p.time,
                  what + " the first message put at or after T (RFC 3339, or @UNIX-SECONDS)");
  cmd->add_flag(prefix + "-start", p.start, what + " the oldest message retained");
  cmd->add_flag(prefix + "-end", p.end,
                what + " what is put from now on (skip everything there is)");
}

// get --from-* places a new channel: says so on stderr if `channel` exists
// already (it keeps its position), so a replay that did not happen is not
// silent. A stat that fails says nothing: the reader's open will tell.
inline void note_kept_position(QueueStore& store, const std::string& name,
                               const std::string& channel) {
  auto info = store.stat(name);
  if (!info.ok()) return;
  if (std::find(info->channels.begin(), info->channels.end(), channel) == info->channels.end()) {
    return;
  }
  std::cerr << "sluice get: channel '" << channel << "' of queue '" << name
            << "' exists: it keeps its position (--from-* places a new channel; sluice seek "
               "moves one)\n";
}

}  // namespace sluice::cli
