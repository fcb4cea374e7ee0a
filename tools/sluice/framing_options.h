// How messages are framed on the command line: --framing, -0, -b (put's
// input, get's and peek's output) and, on output, --format json. One set of
// options and one writer for every command that has them.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <string_view>

#include "framing.h"
#include "json_out.h"
#include "sluice/store.h"

namespace sluice::cli {

struct FramingArgs {
  std::string framing_opt;  // --framing; empty: line unless -0 or -b
  bool nul = false;         // -0: --framing nul
  bool binary = false;      // -b: --framing binary
  std::string format;       // --format: "json", or empty (the framing)

  Framing framing() const {
    if (nul) return Framing::kNul;
    if (binary) return Framing::kBinary;
    return parse_framing(framing_opt).value_or(Framing::kLine);
  }
  // Appends one message as these options write it.
  void append(const StoreMessage& m, std::string_view channel, std::string& out) const {
    if (format == "json") {
      append_message_json(m, channel, out);
    } else {
      append_frame(framing(), m.data, out);
    }
  }
  void append(const MessageBatch& b, std::size_t i, std::string_view channel,
              std::string& out) const {
    if (format == "json") {
      append_message_json(b, i, channel, out);
    } else {
      append_frame(framing(), b.data(i), out);
    }
  }
};

// --framing, -0 and -b on `cmd` (one of them at most); with `output`, also
// --format json, exclusive with them.
inline void add_framing_options(CLI::App* cmd, FramingArgs& f, const char* verb, bool output) {
  auto* fr = cmd->add_option("--framing", f.framing_opt,
                             std::string("how messages are ") + verb +
                                 ": line (default), nul, or binary (netstrings, "
                                 "\"LEN:BYTES,\"; any bytes)")
                 ->check(CLI::IsMember({"line", "nul", "binary", "netstring"}));
  auto* nul = cmd->add_flag("-0,--null", f.nul, "--framing nul")->excludes(fr);
  auto* bin =
      cmd->add_flag("-b,--binary", f.binary, "--framing binary")->excludes(fr)->excludes(nul);
  if (!output) return;
  cmd->add_option("--format", f.format,
                  "json: one JSON object per line per message (seq or id, time, deliveries, "
                  "channel, data; null where the store does not know; data in base64 with "
                  "\"encoding\":\"base64\" when not UTF-8)")
      ->check(CLI::IsMember({"json"}))
      ->excludes(fr)
      ->excludes(nul)
      ->excludes(bin);
}

}  // namespace sluice::cli
