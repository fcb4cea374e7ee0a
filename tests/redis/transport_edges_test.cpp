// The Redis transport at its edges (src/redis/transport): a blocking call on
// a hung server waits io_timeout once, not twice; IPv6 URLs; passwords never
// shown. Each test failed on the code before its fix.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <stop_token>
#include <string>
#include <string_view>

#include "redis/transport/connection.h"
#include "sluice/context.h"
#include "sluice/redis/redis_options.h"
#include "testutil/redis_server.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using testutil::RawRedis;
using testutil::RedisServer;
using Clock = std::chrono::steady_clock;

// RedisOptions::io_timeout promises: "Longest wait for one reply. A reply
// that does not come in time fails the call". A blocking call on a hung
// server (SIGSTOP) under a context that can end (a stop token, as every CLI
// get has) waits io_timeout in await_reply() and then io_timeout again in
// read_reply(): twice the promised bound.
TEST(TransportEdges, BlockingCallOnAHungServerTakesIoTimeoutNotTwice) {
  RedisServer server;
  RedisOptions o = server.options();
  o.io_timeout = std::chrono::milliseconds(600);
  redis::Connection conn(o, "edges");
  redis::CallError err;
  const std::string_view ping[] = {"PING"};
  ASSERT_TRUE(conn.call(ping, err)) << err.status;  // connected

  server.pause();
  std::stop_source stop;  // never requested: only makes the context endable
  const Context ctx(stop.get_token());
  const std::string_view blpop[] = {"BLPOP", "nothing", "0.05"};
  const auto t0 = Clock::now();
  redis::Reply r = conn.call_blocking(blpop, ctx, err);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
  server.resume();
  EXPECT_FALSE(r);
  EXPECT_EQ(err.status.code(), StatusCode::kUnavailable) << err.status;
  EXPECT_LT(took.count(), 600 + 300) << "io_timeout is 600 ms; " << err.status;
}

// The same, with a deadline: at the deadline the client tries CLIENT UNBLOCK
// on a side connection; on a hung server that waits io_timeout, then the
// read waits io_timeout again.
TEST(TransportEdges, BlockingCallWithDeadlineOnAHungServerEndsWithinIoTimeout) {
  RedisServer server;
  RedisOptions o = server.options();
  o.io_timeout = std::chrono::milliseconds(600);
  redis::Connection conn(o, "edges");
  redis::CallError err;
  const std::string_view ping[] = {"PING"};
  ASSERT_TRUE(conn.call(ping, err)) << err.status;

  server.pause();
  const Context ctx = Context().with_timeout(std::chrono::milliseconds(100));
  const std::string_view blpop[] = {"BLPOP", "nothing", "0.05"};
  const auto t0 = Clock::now();
  redis::Reply r = conn.call_blocking(blpop, ctx, err);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
  server.resume();
  EXPECT_FALSE(r);
  EXPECT_LT(took.count(), 600 + 300) << "io_timeout is 600 ms, deadline 100 ms; " << err.status;
}

// A stopped wait is ended by CLIENT UNBLOCK. A passing error reply to it
// (BUSY: another client's script runs past busy-reply-threshold) turned
// unblocking off for the connection's life: every later stop then waited
// for the server's timeout or io_timeout. Only a refusal (an ACL, a renamed
// command) is for good.
TEST(TransportEdges, ABusyServerRefusingOneUnblockDoesNotTurnUnblockingOff) {
  RedisServer server;
  RawRedis admin(server.port());
  admin.cmd({"CONFIG", "SET", "busy-reply-threshold", "50"});
  RedisOptions o = server.options();
  o.io_timeout = std::chrono::milliseconds(1500);
  redis::Connection conn(o, "edges");
  const std::string_view blpop[] = {"BLPOP", "nothing", "30"};
  const auto wait_until_stopped = [&](std::stop_source& stop) {
    return std::async(std::launch::async, [&conn, &blpop, &stop] {
      redis::CallError err;
      redis::Reply r = conn.call_blocking(blpop, Context(stop.get_token()), err);
      return std::make_pair(std::move(r), err.status);
    });
  };

  // 1. The wait's stop comes while a script keeps the server busy: UNBLOCK
  // is answered BUSY, and the wait ends at io_timeout.
  std::stop_source first;
  auto waiting = wait_until_stopped(first);
  ASSERT_TRUE(testutil::eventually([&] { return admin.blocked_in("blpop"); }));
  auto script = std::async(std::launch::async, [port = server.port()] {
    RawRedis(port).cmd({"EVAL", "while true do end", "0"});  // until SCRIPT KILL
  });
  ASSERT_TRUE(testutil::eventually([&] {
    auto r = admin.cmd({"PING"});
    return r->type == REDIS_REPLY_ERROR && std::string_view(r->str, r->len).starts_with("BUSY");
  }));
  first.request_stop();
  auto [r1, s1] = waiting.get();
  EXPECT_FALSE(r1);  // nothing answers a busy server
  admin.cmd({"SCRIPT", "KILL"});
  script.get();

  // 2. The server answers again: a stop ends the next wait at once, by
  // UNBLOCK, with the wait's reply (nil), not at io_timeout with none.
  std::stop_source second;
  waiting = wait_until_stopped(second);
  ASSERT_TRUE(testutil::eventually([&] { return admin.blocked_in("blpop"); }));
  second.request_stop();
  auto [r2, s2] = waiting.get();
  ASSERT_TRUE(r2) << "UNBLOCK was not tried: " << s2;
  EXPECT_EQ(r2->type, REDIS_REPLY_NIL);
}

// While a stopped caller cleans up after a hung server, its calls fail at
// once rather than each waiting io_timeout again; but only for io_timeout:
// a caller that stopped one call and goes on with the same handle (its stop
// stays requested) reaches the server again once it answers.
TEST(TransportEdges, AStoppedCallOnAHungServerDoesNotCutTheConnectionOffForGood) {
  RedisServer server;
  RedisOptions o = server.options();
  o.io_timeout = std::chrono::milliseconds(1500);  // the next call comes well within it
  redis::Connection conn(o, "edges");
  redis::CallError err;
  const std::string_view ping[] = {"PING"};
  ASSERT_TRUE(conn.call(ping, err)) << err.status;

  server.pause();
  std::stop_source stop;
  stop.request_stop();  // the call is stopped: it asks UNBLOCK, which gets no answer
  const std::string_view blpop[] = {"BLPOP", "nothing", "5"};
  EXPECT_FALSE(conn.call_blocking(blpop, Context(stop.get_token()), err));
  // Right after: not tried again (a connect would wait io_timeout).
  const auto t0 = Clock::now();
  EXPECT_FALSE(conn.call(ping, err));
  EXPECT_NE(err.status.message().find("not tried again after a stop"), std::string::npos)
      << err.status << " after "
      << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count() << " ms";
  server.resume();
  EXPECT_TRUE(testutil::eventually([&] { return static_cast<bool>(conn.call(ping, err)); }))
      << err.status;
}

// redis://[::1]:6380 is how RFC 3986 writes an IPv6 host; the brackets are
// not part of the address (getaddrinfo("[::1]") fails).
TEST(TransportEdges, UrlWithBracketedIpv6Host) {
  auto o = RedisOptions::from_url("redis://[::1]:6380/2");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->host, "::1");
  EXPECT_EQ(o->port, 6380);
  EXPECT_EQ(o->db, 2);
}

// Without a port: "redis://[::1]" must not read the address's last group as
// the port.
TEST(TransportEdges, UrlWithBracketedIpv6HostAndNoPort) {
  auto o = RedisOptions::from_url("redis://[::1]");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->host, "::1");
  EXPECT_EQ(o->port, 6379);
}

// An unbracketed IPv6 literal is ambiguous: it must be refused, not read as
// host ":" port 1.
TEST(TransportEdges, UrlWithBareIpv6HostIsRefused) {
  auto o = RedisOptions::from_url("redis://::1");
  EXPECT_FALSE(o.ok()) << "parsed as host '" << o->host << "' port " << o->port;
}

// "Messages show the location with the password as ***": also when the
// URL is malformed (a missing slash in the scheme).
TEST(TransportEdges, BadUrlMessageNeverShowsThePassword) {
  for (const char* url :
       {"redis:/:s3cret@host:6379", "redis:/alice:s3cret@host:6379", "redis//alice:s3cret@host"}) {
    auto o = RedisOptions::from_url(url);
    ASSERT_FALSE(o.ok()) << url;
    EXPECT_EQ(o.status().message().find("s3cret"), std::string::npos) << o.status();
  }
}

}  // namespace
}  // namespace sluice
