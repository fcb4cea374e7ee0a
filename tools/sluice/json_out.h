// The command's JSON output (docs/cli.md): `get --format json` (one object
// per message per line) and `stat --json`. Built with nlohmann::json
// (Debian: nlohmann-json3-dev), never by hand; no I/O, so unit-tested on its
// own (tests/cli/json_out_test.cpp).
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "sluice/store.h"

namespace sluice::cli {

// Appends one line: {"seq":..,"id":..,"time":..,"deliveries":..,"channel":..,
// "data":..} and "\n". Fields the backend does not give are null; data is
// the message as UTF-8 text, or base64 with "encoding":"base64" after it when
// the bytes are not valid UTF-8.
void append_message_json(const StoreMessage& m, std::string_view channel, std::string& out);
void append_message_json(const MessageBatch& b, std::size_t i, std::string_view channel,
                         std::string& out);

// `sluice stat --json`: one object and "\n"; counts the backend cannot give
// are null.
std::string stat_json(const QueueInfo& info);

// RFC 3339 in UTC with microseconds: "2026-11-26T01:02:03.456789Z".
std::string rfc3339(std::chrono::system_clock::time_point t);

// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates or code
// points past U+10FFFF).
bool valid_utf8(std::string_view s);

// Standard base64 (RFC 4648, with padding).
std::string base64(std::string_view s);

}  // namespace sluice::cli
