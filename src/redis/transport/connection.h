// Connection: the Redis transport. One blocking hiredis connection with lazy
// (re)connect, AUTH, SELECT and the loading of the scripts its client
// declared, and calls that say whether a failed request reached the server.
// It knows no client's protocol: the pressure queues and the Streams topics
// each declare their own Script. Private to the redis module; not
// thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/context.h"
#include "sluice/redis/redis_options.h"
#include "sluice/status.h"

struct redisContext;
struct redisReply;

namespace sluice::redis {

struct ReplyDeleter {
  void operator()(redisReply* r) const noexcept;
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

// A failed call: its status, and whether the request may have been executed
// (false: the request was not fully written, so Redis never ran it).
struct CallError {
  Status status;
  bool maybe_ran = false;
};

// A Lua script a client of the transport runs: declared to a Connection at
// construction, it is loaded (SCRIPT LOAD) in the set-up pipeline of every
// connect (no round trip of its own), then run with EVALSHA; on NOSCRIPT
// (the server lost its script cache: a restart, SCRIPT FLUSH) the transport
// runs it with EVAL, which caches it again. Every member has static storage:
// each is generated at build time from the script's .lua file (its SHA1 by
// CMake, checked against SCRIPT LOAD's answer at every connect).
struct Script {
  std::string_view name;    // for messages: "pressure", "stream"
  std::string_view source;  // the Lua text
  std::string_view sha;     // SHA1 of `source`, 40 lowercase hex digits
};

class Connection {
 public:
  // `name` is sent as CLIENT SETNAME (so repair can tell a live client).
  // `scripts`: those this connection's client runs (each outlives it).
  Connection(RedisOptions options, std::string name, std::vector<const Script*> scripts = {});
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Runs one command and returns its reply (which may be a Redis error reply).
  // On failure the connection is dropped; the next call reconnects. On Redis
  // Cluster it follows MOVED (reconnecting to the slot's node for good) and
  // ASK (this command only): every key of one command must share a slot.
  // A node that cannot be reached at a reconnect is replaced by the first
  // other node that can (the seed, then the nodes CLUSTER SLOTS listed at
  // the last connect, replicas included), which redirects to the slot's
  // primary: so a handle outlives a failover. Until the cluster has named
  // the new primary, calls fail with kUnavailable.
  // A server that answers READONLY (a plain primary demoted to a replica:
  // FAILOVER, REPLICAOF, Sentinel) is asked ROLE, and the command (which
  // did not run there) goes to the primary it names, for good; if that
  // cannot be reached, the call fails with kUnavailable naming both.
  // TRYAGAIN (a multi-key command while its slot migrates) is retried with
  // a short backoff for up to io_timeout; so is a command that nodes keep
  // sending round with MOVED (they disagree who owns its slot as a move ends).
  Reply call(std::span<const std::string_view> argv, CallError& err);
  // call() for a command that blocks on the server (BLMOVE, XREADGROUP ...
  // BLOCK) with a timeout of its own that ends by ctx's deadline. Redis ends
  // a blocked command at its first tick after that timeout (hz 10: up to
  // 100 ms late) and knows nothing of ctx's stop, so this also waits on the
  // client side: at ctx's deadline, or once its stop is requested, it asks
  // the server to end the command as its timeout would (CLIENT UNBLOCK, on a
  // second connection to the same node, opened at first need and kept) and
  // reads the command's reply: the timeout's, or the answer if it was
  // already on its way (kept: nothing is lost). Where that cannot be done
  // (no CLIENT ID at connect, UNBLOCK refused by an ACL, the second
  // connection fails), the server's own timeout ends the command.
  // Once the stop of the last call_blocking()'s context is requested (the
  // caller is stopping), a connection whose server did not answer the last
  // call within io_timeout (a hung server) is not made again for io_timeout
  // after that: calls then fail at once with kUnavailable instead of each
  // waiting io_timeout on the connect, so the caller's cleanup (giving back
  // what it holds) ends promptly. A call_blocking() with another context
  // ends that.
  Reply call_blocking(std::span<const std::string_view> argv, const Context& ctx, CallError& err);
  // Takes `stop` as call_blocking() takes its context's: a connection that
  // never waits (a helper thread's) learns its owner's stop.
  void stop_with(std::stop_token stop) noexcept { stop_ = std::move(stop); }
  // Runs a script as call() runs a command: EVALSHA, and on NOSCRIPT (the
  // script did not run) EVAL, which runs it and caches it again. A script
  // not declared at construction works too, by the same fallback.
  Reply eval(const Script& script, std::span<const std::string_view> keys,
             std::span<const std::string_view> args, CallError& err);

  // eval(), with `then` (a command on no key, e.g. WAIT) sent right behind
  // the script in the same round trip when it can be: the script declared
  // (so loaded at connect), and the connection up. *then_reply is then
  // its reply; if that reply was lost (the connection broke after the
  // script's), *then_reply is null and then_err says why. Otherwise (and
  // when the script did not run: a redirection, TRYAGAIN or NOSCRIPT, which
  // eval() then handles) *then_reply is null with then_err OK: `then` was
  // not run, and the caller sends it itself if it still wants it.
  Reply eval_then(const Script& script, std::span<const std::string_view> keys,
                  std::span<const std::string_view> args, std::span<const std::string_view> then,
                  Reply& then_reply, CallError& err, CallError& then_err);

  // The script and then `then` (a command on the script's slot) as one
  // transaction, MULTI, EVALSHA, `then`, EXEC, in one round trip: no other
  // client's command runs between them. Returns EXEC's reply, an array of
  // the two replies (either may be an error reply). Only when the script is
  // declared (so loaded at connect) and the connection is up; otherwise, and when
  // the transaction did not run or its script did not (a redirection,
  // TRYAGAIN or NOSCRIPT: Redis Cluster refuses a queued command on a slot
  // elsewhere), it returns null with err.status OK: the caller takes its
  // other path (eval(), which follows, retries or loads). Null with an error
  // status: the connection broke (err.maybe_ran as for call()). For reads
  // that must see one state: the script may change nothing `then` relies on.
  Reply eval_multi(const Script& script, std::span<const std::string_view> keys,
                   std::span<const std::string_view> args, std::span<const std::string_view> then,
                   CallError& err);

  // A command on no key (WAIT) on the node that ran the previous call():
  // the ASK target if that call was asked there (kept until the next
  // command), else this connection's node, as call(). WAIT after a write
  // must go where the write ran.
  Reply call_there(std::span<const std::string_view> argv, CallError& err);

  // The Status for a Redis error reply: authentication and permission
  // errors name the server and say what to fix (kInvalidArgument); any
  // other is kInternal.
  Status error_reply(std::string_view text) const;
  // "host:port", for messages.
  std::string address() const;

  const RedisOptions& options() const noexcept { return options_; }
  std::uint64_t round_trips() const noexcept { return round_trips_; }
  // Redis Cluster redirections followed (MOVED, ASK) by call() and eval().
  std::uint64_t redirects() const noexcept { return redirects_; }

 private:
  // Connects if not connected; `fall_back`: to another known node if this
  // one cannot be reached.
  Status ensure(bool fall_back = true);
  Status connect();  // to options_'s host and port, with the set-up commands
  void drop() noexcept;
  // `wait`: a blocking command's context (call_blocking), else null.
  Reply roundtrip(std::span<const std::string_view> argv, CallError& err,
                  const Context* wait = nullptr);
  // Between a blocking command's write and its read: returns once its reply
  // can be read, after ending it early (unblock()) if ctx ends first.
  // `hung`: io_timeout after the write; nothing here waits past it.
  void await_reply(const Context& ctx, Context::Clock::time_point hung);
  // CLIENT UNBLOCK for this connection, from side_; whether the server
  // unblocked it (false: it was not blocked, or that cannot be done).
  bool unblock(Context::Clock::time_point hung);
  // AUTH with the options' user and password; empty when none is set.
  std::vector<std::string> auth_command() const;
  // The pieces of roundtrip(): queue a command, write everything queued (a
  // failure means Redis ran none of it), read the next reply.
  bool queue(std::span<const std::string_view> argv, CallError& err);
  bool flush(std::string_view what, CallError& err);
  Reply read_reply(std::string_view what, CallError& err);
  // Whether `script` was declared at construction (so loaded by connect()).
  bool declared(const Script& script) const noexcept;
  // ROLE on this connection: the primary this server replicates; an empty
  // host if it is a primary itself; nullopt if that cannot be told.
  std::optional<std::pair<std::string, int>> primary_of();
  // call() without its TRYAGAIN retries.
  Reply call_redirected(std::span<const std::string_view> argv, CallError& err,
                        const Context* wait = nullptr);
  // Notes in hung_at_ a read or write that failed as io_timeout passed.
  void note_timeout(int err_no) noexcept;
  // Why a read or write failed; `err_no` is errno right after it.
  std::string io_failure(const std::string& doing, int err_no) const;

  RedisOptions options_;
  std::string name_;
  redisContext* ctx_ = nullptr;
  long long client_id_ = -1;  // CLIENT ID at the last connect; -1 unknown
  // call_blocking()'s second connection, to side_node_.
  redisContext* side_ = nullptr;
  std::pair<std::string, int> side_node_;
  bool unblock_refused_ = false;  // CLIENT UNBLOCK refused (ACL, renamed): never again
  // The last call_blocking()'s stop, and when the server last failed to
  // answer within io_timeout (a reply clears it): ensure() does not connect
  // while the stop is requested and that was less than io_timeout ago.
  static constexpr Context::Clock::time_point kNever = Context::Clock::time_point::min();
  std::stop_token stop_;
  Context::Clock::time_point hung_at_ = kNever;
  std::vector<const Script*> scripts_;  // declared: loaded at every connect
  // Redis Cluster nodes to fall back on: the seed (the address given), then
  // those CLUSTER SLOTS listed at the last connect.
  std::vector<std::pair<std::string, int>> nodes_;
  // The ASK target the last command ran on (call_there()); reset by the next.
  std::unique_ptr<Connection> asked_;
  std::vector<const char*> argv_;
  std::vector<std::size_t> lens_;
  std::uint64_t round_trips_ = 0;
  std::uint64_t redirects_ = 0;
};

// Every key matching "<literal prefix><glob tail>" (SCAN, so the server is
// never stalled; keys SCAN repeats are returned once), sorted. `literal` is
// escaped for the glob; `tail` is a glob. `type` (e.g. "string"), if given,
// keeps only keys of that type (SCAN's TYPE).
Result<std::vector<std::string>> scan_keys(Connection& conn, std::string_view literal,
                                           std::string_view tail, std::string_view type = {});

}  // namespace sluice::redis
