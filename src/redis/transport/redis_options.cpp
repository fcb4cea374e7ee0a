#include "sluice/redis/redis_options.h"

#include <charconv>
#include <cstdlib>
#include <string>

namespace sluice {
namespace {

bool parse_int(std::string_view s, int& out) {
  if (s.empty()) return false;
  const auto* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, out);
  return ec == std::errc() && p == end;
}

const char* env(const char* name) {
  const char* v = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read-only use
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// %XX escapes (RFC 3986), so a password may hold '@', ':' or '/'; false on
// a malformed escape.
bool percent_decode(std::string_view in, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out += in[i];
      continue;
    }
    unsigned v = 0;
    if (i + 2 >= in.size()) return false;
    auto [p, ec] = std::from_chars(in.data() + i + 1, in.data() + i + 3, v, 16);
    if (ec != std::errc() || p != in.data() + i + 3) return false;
    out += static_cast<char>(v);
    i += 2;
  }
  return true;
}

}  // namespace

std::string RedisOptions::endpoint() const {
  return host + ":" + std::to_string(port) + "/" + std::to_string(db);
}

Result<RedisOptions> RedisOptions::from_url(std::string_view url, RedisOptions base) {
  // The URL as messages show it: a password replaced by "***".
  std::string shown(url);
  if (const auto at = shown.rfind('@'), scheme = shown.find("://");
      at != std::string::npos && scheme != std::string::npos && at > scheme) {
    const auto colon = shown.find(':', scheme + 3);
    const auto from = colon < at ? colon + 1 : scheme + 3;
    shown.replace(from, at - from, "***");
  } else if (at != std::string::npos) {
    // No "://" (a malformed scheme): still never show what precedes the '@'.
    shown.replace(0, at, "***");
  }
  const auto bad = [&](std::string_view why) {
    return Status(StatusCode::kInvalidArgument,
                  "bad redis URL '" + shown + "': " + std::string(why));
  };
  constexpr std::string_view kScheme = "redis://";
  if (!url.starts_with(kScheme)) return bad("expected redis://[[user]:password@]host[:port][/db]");
  std::string_view rest = url.substr(kScheme.size());
  if (auto at = rest.rfind('@'); at != std::string_view::npos) {
    std::string_view cred = rest.substr(0, at);
    rest = rest.substr(at + 1);
    std::string_view user;
    std::string_view pass = cred;
    if (auto colon = cred.find(':'); colon != std::string_view::npos) {
      user = cred.substr(0, colon);
      pass = cred.substr(colon + 1);
    }
    if (!percent_decode(user, base.user) || !percent_decode(pass, base.password)) {
      return bad("malformed %XX escape in the user or password");
    }
  }
  std::string_view hostport = rest;
  if (auto slash = rest.find('/'); slash != std::string_view::npos) {
    hostport = rest.substr(0, slash);
    std::string_view db = rest.substr(slash + 1);
    if (!db.empty() && (!parse_int(db, base.db) || base.db < 0)) return bad("db is not a number");
  }
  std::string_view portpart;
  bool has_port = false;
  if (hostport.starts_with('[')) {  // an IPv6 literal (RFC 3986): [addr][:port]
    const auto close = hostport.find(']');
    if (close == std::string_view::npos) return bad("no ']' after the IPv6 address");
    std::string_view after = hostport.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return bad("expected ':port' after the IPv6 address");
      has_port = true;
      portpart = after.substr(1);
    }
    hostport = hostport.substr(1, close - 1);
  } else if (auto colon = hostport.rfind(':'); colon != std::string_view::npos) {
    if (hostport.find(':') != colon) {
      return bad("an IPv6 address is written in brackets: redis://[::1]:6379");
    }
    has_port = true;
    portpart = hostport.substr(colon + 1);
    hostport = hostport.substr(0, colon);
  }
  if (has_port && (!parse_int(portpart, base.port) || base.port <= 0 || base.port > 65535)) {
    return bad("port is not a number in 1..65535");
  }
  if (hostport.empty()) return bad("no host");
  base.host = std::string(hostport);
  return base;
}

Result<RedisOptions> RedisOptions::from_env(RedisOptions base) {
  if (const char* url = env("REDIS_URL")) {
    auto r = from_url(url, std::move(base));
    if (!r.ok()) return r.status();
    base = std::move(*r);
  }
  if (const char* v = env("REDIS_SERVER")) base.host = v;
  if (const char* v = env("REDIS_PORT")) {
    if (!parse_int(v, base.port) || base.port <= 0 || base.port > 65535) {
      return Status(StatusCode::kInvalidArgument,
                    std::string("REDIS_PORT='") + v + "' is not a port number");
    }
  }
  if (const char* v = env("REDIS_DB")) {
    if (!parse_int(v, base.db) || base.db < 0) {
      return Status(StatusCode::kInvalidArgument,
                    std::string("REDIS_DB='") + v + "' is not a database number");
    }
  }
  if (const char* v = env("PRESSURE_PREFIX")) base.prefix = v;
  // Credentials, which the protocol does not name: the usual variables.
  if (const char* v = env("REDIS_USERNAME")) base.user = v;
  if (const char* v = env("REDIS_PASSWORD")) base.password = v;
  return base;
}

Result<RedisOptions> RedisOptions::from_env() { return from_env(RedisOptions()); }
Result<RedisOptions> RedisOptions::from_url(std::string_view url) {
  return from_url(url, RedisOptions());
}

}  // namespace sluice
