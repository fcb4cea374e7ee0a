// RedisOptions: where a Redis-backed queue lives and how long its calls may
// take. Plain value type; copy freely.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "sluice/status.h"

namespace sluice {

struct RedisOptions {
  // The pressure protocol's four settings, with its defaults.
  std::string host = "127.0.0.1";       // REDIS_SERVER
  int port = 6379;                      // REDIS_PORT
  int db = 0;                           // REDIS_DB
  std::string prefix = "__pressure__";  // PRESSURE_PREFIX

  // AUTH: password alone (requirepass) or user + password (Redis 6 ACL).
  // A refused AUTH fails every call with kInvalidArgument, "authentication
  // failed at host:port: ...".
  std::string user;      // REDIS_USERNAME
  std::string password;  // REDIS_PASSWORD

  // Longest wait for a TCP connection to be set up ("timed out after X
  // connecting to host:port").
  std::chrono::milliseconds connect_timeout{2000};
  // Longest wait for one reply. A reply that does not come in time fails the
  // call with kUnavailable ("timed out after X talking to host:port") and
  // drops the connection (the next call reconnects); whether its command ran
  // is then unknown.
  std::chrono::milliseconds io_timeout{5000};
  // Longest single server-side wait (BLMOVE, XREADGROUP BLOCK, BLPOP
  // timeout) inside a blocking call. It bounds how late a sluice consumer
  // waiting on an empty queue notices a close. A stop or the caller's
  // deadline does not wait for it: the client ends the wait (CLIENT UNBLOCK).
  // Used up to io_timeout / 2.
  std::chrono::milliseconds wait_slice{50};

  // The protocol's variables from the environment (REDIS_SERVER, REDIS_PORT,
  // REDIS_DB, PRESSURE_PREFIX) and REDIS_USERNAME, REDIS_PASSWORD over
  // `base`; REDIS_URL, if set, is applied first (so the others override it).
  // kInvalidArgument names the variable that does not parse.
  static Result<RedisOptions> from_env(RedisOptions base);
  static Result<RedisOptions> from_env();
  // redis://[[user]:password@]host[:port][/db] over `base`.
  static Result<RedisOptions> from_url(std::string_view url, RedisOptions base);
  static Result<RedisOptions> from_url(std::string_view url);

  // "host:port/db", for messages.
  std::string endpoint() const;
};

}  // namespace sluice
