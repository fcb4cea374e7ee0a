#include "redis/transport/connection.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <poll.h>
#include <sys/time.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "detail/stop_fd.h"

namespace sluice::redis {
namespace {

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

std::string_view reply_text(const redisReply* r) { return {r->str, r->len}; }

// hiredis 0.14 opens its socket without SOCK_CLOEXEC: a process the program
// starts (sluice get --exec) would hold the connection, keeping the client
// alive in the server after the program is gone. Set at once after the
// connect (a spawn by another thread during the connect itself may still
// inherit it; hiredis offers no way to open the socket close-on-exec).
void set_cloexec(int fd) {
  const int flags = ::fcntl(fd, F_GETFD);
  if (flags >= 0) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

// A command's arguments as hiredis's *Argv calls take them.
struct Argv {
  explicit Argv(const std::vector<std::string>& cmd) {
    for (const auto& a : cmd) {
      ptrs.push_back(a.data());
      lens.push_back(a.size());
    }
  }
  int count() const { return static_cast<int>(ptrs.size()); }
  std::vector<const char*> ptrs;
  std::vector<std::size_t> lens;
};

std::string millis(std::chrono::milliseconds ms) { return std::to_string(ms.count()) + " ms"; }

using Node = std::pair<std::string, int>;

// The nodes in a CLUSTER SLOTS reply, each once, in reply order: primaries
// only, or every node (replicas too). An empty host is the node answering
// (`self_host`), as Redis says when it does not know its own address.
std::vector<Node> slot_nodes(const redisReply* r, const std::string& self_host, bool replicas) {
  std::vector<Node> out;
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY) return out;  // an error: not a cluster
  for (std::size_t i = 0; i < r->elements; ++i) {
    const redisReply* range = r->element[i];
    if (range->type != REDIS_REPLY_ARRAY || range->elements < 3) continue;
    const std::size_t last = replicas ? range->elements : 3;
    for (std::size_t j = 2; j < last; ++j) {
      const redisReply* node = range->element[j];
      if (node->type != REDIS_REPLY_ARRAY || node->elements < 2 ||
          node->element[1]->type != REDIS_REPLY_INTEGER) {
        continue;
      }
      std::string host(reply_text(node->element[0]));
      const int port = static_cast<int>(node->element[1]->integer);
      if (host.empty()) host = self_host;
      if (host == "?" || port <= 0) continue;  // an endpoint the node does not know
      const bool known = std::any_of(out.begin(), out.end(), [&](const Node& n) {
        return n.second == port && n.first == host;
      });
      if (!known) out.emplace_back(std::move(host), port);
    }
  }
  return out;
}

bool is_auth_error(std::string_view e) {
  return e.starts_with("NOAUTH") || e.starts_with("WRONGPASS") || e.starts_with("ERR AUTH") ||
         e.starts_with("ERR invalid password") || e.starts_with("ERR Client sent AUTH");
}

}  // namespace

void ReplyDeleter::operator()(redisReply* r) const noexcept { freeReplyObject(r); }

Connection::Connection(RedisOptions options, std::string name, std::vector<const Script*> scripts)
    : options_(std::move(options)), name_(std::move(name)), scripts_(std::move(scripts)) {
  nodes_.emplace_back(options_.host, options_.port);
  for (char& c : name_) {
    if (c == ' ' || c == '\n' || c == '\r') c = '_';  // CLIENT SETNAME refuses spaces
  }
}

Connection::~Connection() {
  drop();
  if (side_ != nullptr) redisFree(side_);
}

void Connection::drop() noexcept {
  if (ctx_ != nullptr) redisFree(ctx_);
  ctx_ = nullptr;
}

Status Connection::ensure(bool fall_back) {
  if (ctx_ != nullptr) return Status::Ok();
  if (stop_.stop_requested() && Context::Clock::now() < hung_at_ + options_.io_timeout) {
    // A connect would wait io_timeout again for the server that did not
    // answer the last call: the caller is stopping, and its cleanup is best
    // effort. For io_timeout, not for good: a caller that stopped one call
    // and goes on (its stop stays requested) reaches the server again.
    return {StatusCode::kUnavailable,
            "redis: " + address() + " did not answer within " + millis(options_.io_timeout) +
                " (RedisOptions::io_timeout); not tried again after a stop"};
  }
  Status s = connect();
  if (s.ok() || !fall_back || s.code() != StatusCode::kUnavailable) return s;
  // Redis Cluster: the node is gone (a failover gave its slots to a
  // replica). Any node we know of redirects us to whoever serves them now.
  const Node here{options_.host, options_.port};
  const std::vector<Node> others = nodes_;  // connect() relearns nodes_
  for (const auto& [host, port] : others) {
    if (host == here.first && port == here.second) continue;
    options_.host = host;
    options_.port = port;
    if (connect().ok()) return Status::Ok();
  }
  options_.host = here.first;
  options_.port = here.second;
  return s;
}

Status Connection::connect() {
  redisContext* c = redisConnectWithTimeout(options_.host.c_str(), options_.port,
                                            to_timeval(options_.connect_timeout));
  const int connect_errno = errno;  // hiredis leaves connect()'s errno
  if (c == nullptr) return {StatusCode::kUnavailable, "redis: out of memory"};
  if (c->err != 0) {
    std::string msg;
    if (c->err == REDIS_ERR_IO && connect_errno == ECONNREFUSED) {
      msg = "redis: connection refused at " + address() + " (is redis-server running there?)";
    } else if (c->err == REDIS_ERR_IO && connect_errno == ETIMEDOUT) {
      hung_at_ = Context::Clock::now();
      msg = "redis: timed out after " + millis(options_.connect_timeout) + " connecting to " +
            address() + " (RedisOptions::connect_timeout)";
    } else {
      msg = "redis: cannot connect to " + address() + ": " + c->errstr;
    }
    redisFree(c);
    return {StatusCode::kUnavailable, msg};
  }
  set_cloexec(c->fd);
  redisSetTimeout(c, to_timeval(options_.io_timeout));
  redisEnableKeepAlive(c);
  ctx_ = c;

  // Set-up commands, pipelined: one round trip.
  std::vector<std::vector<std::string>> cmds;
  if (std::vector<std::string> auth = auth_command(); !auth.empty())
    cmds.push_back(std::move(auth));
  if (options_.db != 0) cmds.push_back({"SELECT", std::to_string(options_.db)});
  cmds.push_back({"CLIENT", "SETNAME", name_});
  cmds.push_back({"CLIENT", "ID"});  // for call_blocking()'s CLIENT UNBLOCK
  // The client's scripts, so EVALSHA finds them (a reconnect may be to a
  // node, or a restarted server, that never saw them).
  for (const Script* script : scripts_) {
    cmds.push_back({"SCRIPT", "LOAD", std::string(script->source)});
  }
  // The cluster's nodes, primaries and replicas, for ensure() to fall back
  // on. Pipelined: no extra round trip. An error reply (not a cluster, or an
  // ACL without CLUSTER) leaves only the seed.
  cmds.push_back({"CLUSTER", "SLOTS"});
  for (const auto& cmd : cmds) {
    Argv argv(cmd);  // not const: hiredis 0.14 takes const char**
    redisAppendCommandArgv(ctx_, argv.count(), argv.ptrs.data(), argv.lens.data());
  }
  ++round_trips_;
  std::size_t next_script = 0;  // the script whose SCRIPT LOAD answers next
  for (const auto& cmd : cmds) {
    void* raw = nullptr;
    if (redisGetReply(ctx_, &raw) != REDIS_OK) {
      note_timeout(errno);
      const std::string what =
          cmd[0] == "CLIENT" || cmd[0] == "SCRIPT" ? cmd[0] + " " + cmd[1] : cmd[0];
      std::string msg = io_failure("connection set-up: no reply to " + what, errno);
      drop();
      return {StatusCode::kUnavailable, msg};
    }
    Reply r(static_cast<redisReply*>(raw));
    hung_at_ = kNever;                           // it answers
    if (cmd[0] == "CLIENT" && cmd[1] == "ID") {  // refused (an ACL): the server's timeouts then
      client_id_ = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
      continue;
    }
    if (cmd[0] == "CLUSTER") {
      std::vector<Node> learned = slot_nodes(r.get(), options_.host, true);
      nodes_.resize(1);  // the seed first, then the cluster as it is now
      for (auto& n : learned) {
        if (n != nodes_.front()) nodes_.push_back(std::move(n));
      }
      continue;
    }
    if (r->type == REDIS_REPLY_ERROR) {
      // After a refused AUTH (or none) every later command says NOAUTH: the
      // first error is the one to report.
      Status s = error_reply(reply_text(r.get()));
      if (s.code() == StatusCode::kInternal) {
        const std::string text(reply_text(r.get()));
        s = cmd[0] == "SELECT"
                ? Status(StatusCode::kInvalidArgument, "redis: cannot use database " +
                                                           std::to_string(options_.db) + " at " +
                                                           address() + ": " + text)
                : Status(StatusCode::kUnavailable,
                         "redis: " + cmd[0] + " failed at " + address() + ": " + text);
      }
      drop();
      return s;
    }
    if (cmd[0] == "SCRIPT") {
      const Script& script = *scripts_[next_script++];
      if (reply_text(r.get()) != script.sha) {
        // The build's SHA1 of the text is not the server's: EVALSHA would
        // always miss (and every call fall back to EVAL). A build fault.
        std::string msg = "redis: the " + std::string(script.name) + " script loaded at " +
                          address() + " as " + std::string(reply_text(r.get())) +
                          ", not as the SHA1 built in (" + std::string(script.sha) + ")";
        drop();
        return {StatusCode::kInternal, msg};
      }
    }
  }
  return Status::Ok();
}

bool Connection::queue(std::span<const std::string_view> argv, CallError& err) {
  argv_.clear();
  lens_.clear();
  for (std::string_view a : argv) {
    argv_.push_back(a.data());
    lens_.push_back(a.size());
  }
  if (redisAppendCommandArgv(ctx_, static_cast<int>(argv_.size()), argv_.data(), lens_.data()) !=
      REDIS_OK) {
    err.status = {StatusCode::kInternal, "redis: cannot format the command (out of memory)"};
    drop();
    return false;
  }
  return true;
}

bool Connection::flush(std::string_view what, CallError& err) {
  ++round_trips_;
  // Write by hand so a failure can be told apart: Redis runs a command only
  // once it has all of it, so a request not fully written never ran.
  int done = 0;
  while (done == 0) {
    if (redisBufferWrite(ctx_, &done) != REDIS_OK) {
      note_timeout(errno);
      err.status = {StatusCode::kUnavailable, io_failure("sending " + std::string(what), errno)};
      drop();
      return false;
    }
  }
  return true;
}

Reply Connection::read_reply(std::string_view what, CallError& err) {
  void* raw = nullptr;
  if (redisGetReply(ctx_, &raw) != REDIS_OK) {
    err.maybe_ran = true;
    note_timeout(errno);
    err.status = {StatusCode::kUnavailable, io_failure("no reply to " + std::string(what), errno)};
    drop();
    return nullptr;
  }
  hung_at_ = kNever;
  return Reply(static_cast<redisReply*>(raw));
}

Reply Connection::roundtrip(std::span<const std::string_view> argv, CallError& err,
                            const Context* wait) {
  err.maybe_ran = false;
  if (!queue(argv, err) || !flush(argv.front(), err)) return nullptr;
  if (wait == nullptr) return read_reply(argv.front(), err);
  // One reply waits io_timeout in all: the wait here, an UNBLOCK and the
  // read share it (a hung server must not cost io_timeout twice).
  const auto hung = Context::Clock::now() + options_.io_timeout;
  await_reply(*wait, hung);
  const auto left =
      std::max(std::chrono::milliseconds(1),
               std::chrono::ceil<std::chrono::milliseconds>(hung - Context::Clock::now()));
  redisSetTimeout(ctx_, to_timeval(left));
  Reply r = read_reply(argv.front(), err);
  if (ctx_ != nullptr) redisSetTimeout(ctx_, to_timeval(options_.io_timeout));
  return r;
}

Reply Connection::call_blocking(std::span<const std::string_view> argv, const Context& ctx,
                                CallError& err) {
  stop_ = ctx.token();
  return call_redirected(argv, err, &ctx);
}

void Connection::await_reply(const Context& ctx, Context::Clock::time_point hung) {
  if (client_id_ < 0 || unblock_refused_ || !ctx.can_end()) return;
  // A reply already read into hiredis's buffer needs no wait.
  if (ctx_->reader != nullptr && ctx_->reader->pos < ctx_->reader->len) return;
  std::optional<detail::StopFd> stop;
  if (ctx.token().stop_possible()) stop.emplace(ctx.token());
  // The command's own timeout is at most io_timeout / 2 (its callers' slices),
  // so a reply later than io_timeout means a hung server: stop waiting here
  // and let read_reply() time out on it, as any call would.
  const bool by_deadline = ctx.deadline() && *ctx.deadline() < hung;
  const Context::Clock::time_point until = by_deadline ? *ctx.deadline() : hung;
  for (;;) {
    const auto now = Context::Clock::now();
    if (now >= until) {
      if (by_deadline) break;
      return;  // a hung server
    }
    const int ms = static_cast<int>(std::min<std::chrono::milliseconds::rep>(
        std::chrono::ceil<std::chrono::milliseconds>(until - now).count(), INT_MAX));
    std::array<pollfd, 2> fds{{{ctx_->fd, POLLIN, 0}, {stop ? stop->fd() : -1, POLLIN, 0}}};
    const int n = ::poll(fds.data(), fds.size(), stop ? stop->poll_ms(ms) : ms);
    if (n < 0 && errno != EINTR) return;  // read_reply() reports the socket's trouble
    if (fds[0].revents != 0) return;      // the reply (or an error read_reply() reports)
    if (fds[1].revents != 0 || ctx.stop_requested()) break;  // stop requested
  }
  // Ended on our side. The command may not have reached the server's wait
  // yet (UNBLOCK then finds nothing blocked): try again briefly, and let the
  // server's own timeout end it if that keeps happening.
  for (int attempt = 0; attempt < 20; ++attempt) {
    if (Context::Clock::now() >= hung) return;
    if (unblock(hung) || unblock_refused_ || side_ == nullptr) return;
    pollfd fd{ctx_->fd, POLLIN, 0};
    if (::poll(&fd, 1, 1) != 0) return;  // the reply came (or the socket's trouble)
  }
}

bool Connection::unblock(Context::Clock::time_point hung) {
  if (ctx_->connection_type != REDIS_CONN_TCP || ctx_->tcp.host == nullptr) return false;
  std::pair<std::string, int> node{ctx_->tcp.host, ctx_->tcp.port};
  if (side_ != nullptr && side_node_ != node) {
    redisFree(side_);
    side_ = nullptr;
  }
  if (side_ == nullptr) {
    side_ = redisConnectWithTimeout(node.first.c_str(), node.second,
                                    to_timeval(options_.connect_timeout));
    if (side_ == nullptr) return false;
    if (side_->err != 0) {
      redisFree(side_);
      side_ = nullptr;
      return false;
    }
    set_cloexec(side_->fd);
    redisSetTimeout(side_, to_timeval(options_.io_timeout));
    side_node_ = std::move(node);
    if (const std::vector<std::string> auth = auth_command(); !auth.empty()) {
      Argv argv(auth);
      auto* r = static_cast<redisReply*>(
          redisCommandArgv(side_, argv.count(), argv.ptrs.data(), argv.lens.data()));
      if (r == nullptr) {
        redisFree(side_);
        side_ = nullptr;
        return false;
      }
      freeReplyObject(r);  // refused: UNBLOCK then says NOAUTH, and is not tried again
    }
  }
  // No longer than what is left of the blocked call's io_timeout.
  redisSetTimeout(side_, to_timeval(std::max(std::chrono::milliseconds(1),
                                             std::chrono::ceil<std::chrono::milliseconds>(
                                                 hung - Context::Clock::now()))));
  auto* r = static_cast<redisReply*>(redisCommand(side_, "CLIENT UNBLOCK %lld", client_id_));
  if (r == nullptr) {
    redisFree(side_);
    side_ = nullptr;
    return false;
  }
  ++round_trips_;
  const bool done = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
  if (r->type == REDIS_REPLY_ERROR) {
    // Refused (an ACL, a renamed command): never again. A passing error
    // (BUSY with another client's script, LOADING) is for this stop only.
    const std::string_view t(r->str, r->len);
    unblock_refused_ = t.starts_with("NOPERM") || t.starts_with("NOAUTH") ||
                       t.starts_with("WRONGPASS") || t.starts_with("ERR unknown");
  }
  freeReplyObject(r);
  return done;
}

std::vector<std::string> Connection::auth_command() const {
  if (options_.password.empty() && options_.user.empty()) return {};
  if (options_.user.empty()) return {"AUTH", options_.password};
  return {"AUTH", options_.user, options_.password};
}

std::string Connection::address() const {
  return options_.host + ":" + std::to_string(options_.port);
}

void Connection::note_timeout(int err_no) noexcept {
  if (ctx_->err == REDIS_ERR_IO && (err_no == EAGAIN || err_no == EWOULDBLOCK)) {
    hung_at_ = Context::Clock::now();
  }
}

std::string Connection::io_failure(const std::string& doing, int err_no) const {
  // A blocking hiredis read or write that hits SO_RCVTIMEO/SO_SNDTIMEO
  // fails with EAGAIN: that is io_timeout passing, not a broken socket.
  if (ctx_->err == REDIS_ERR_IO && (err_no == EAGAIN || err_no == EWOULDBLOCK)) {
    return "redis: timed out after " + millis(options_.io_timeout) + " talking to " + address() +
           " (" + doing + "; RedisOptions::io_timeout)";
  }
  if (ctx_->err == REDIS_ERR_EOF) {
    return "redis: " + address() + " closed the connection (" + doing + ")";
  }
  return "redis: connection to " + address() + " failed (" + doing + "): " + ctx_->errstr;
}

Status Connection::error_reply(std::string_view text) const {
  if (is_auth_error(text)) {
    std::string hint;
    if (options_.password.empty() && options_.user.empty()) {
      hint =
          "no password was given: set RedisOptions::password (and user, for an ACL user), "
          "REDIS_PASSWORD (and REDIS_USERNAME) or redis://[user]:password@host in REDIS_URL";
    } else if (text.starts_with("ERR AUTH")) {
      hint = "this server has no password: give none";
    } else {
      hint = "check the password for user '" +
             (options_.user.empty() ? std::string("default") : options_.user) +
             "': RedisOptions::user/password, REDIS_USERNAME/REDIS_PASSWORD or REDIS_URL";
    }
    // Not retried into success: the settings are the caller's to fix.
    return {StatusCode::kInvalidArgument, "redis: authentication failed at " + address() + ": " +
                                              std::string(text) + " (" + hint + ")"};
  }
  if (text.starts_with("NOPERM")) {
    return {StatusCode::kInvalidArgument,
            "redis: permission denied at " + address() + " for user '" +
                (options_.user.empty() ? std::string("default") : options_.user) +
                "': " + std::string(text) +
                " (sluice needs EVALSHA, EVAL, SCRIPT LOAD, CLIENT SETNAME/LIST, BLMOVE, LRANGE "
                "and the queue's keys)"};
  }
  return {StatusCode::kInternal, "redis error at " + address() + ": " + std::string(text)};
}

namespace {

// "MOVED <slot> <host>:<port>" or "ASK <slot> <host>:<port>": the node.
bool redirect_target(std::string_view text, std::string& host, int& port) {
  const auto last = text.rfind(' ');
  const auto colon = text.rfind(':');
  if (last == std::string_view::npos || colon == std::string_view::npos || colon < last) {
    return false;
  }
  const std::string_view p = text.substr(colon + 1);
  port = 0;
  for (const char c : p) {
    if (c < '0' || c > '9') return false;
    port = port * 10 + (c - '0');
  }
  host = std::string(text.substr(last + 1, colon - last - 1));
  if (host.empty()) return false;  // Redis says ":port" when it does not know its own address
  return !p.empty() && port > 0 && port < 65536;
}

}  // namespace

namespace {

// Pauses between tries at a cluster's passing state (a slot mid-move): 1 ms
// doubling to 50 ms, for up to `limit` from the first pause, never past the
// caller's deadline or stop.
class Backoff {
 public:
  // False when the time is up (the caller gives its last reply); else
  // sleeps and returns true.
  bool pause(std::chrono::milliseconds limit, const Context* ctx) {
    const auto now = Context::Clock::now();
    if (give_up_ == Context::Clock::time_point{}) give_up_ = now + limit;
    if (ctx != nullptr && (ctx->stop_requested() || ctx->expired(now + pause_))) return false;
    if (now + pause_ > give_up_) return false;
    std::this_thread::sleep_for(pause_);
    pause_ = std::min(pause_ * 2, std::chrono::milliseconds(50));
    return true;
  }

 private:
  Context::Clock::time_point give_up_{};
  std::chrono::milliseconds pause_{1};
};

}  // namespace

Reply Connection::call(std::span<const std::string_view> argv, CallError& err) {
  // Redis Cluster, while a slot migrates: a command on several keys of it,
  // some of which are not there (yet), gets TRYAGAIN and did not run. A
  // resharding moves a slot in milliseconds: retry with a short backoff for
  // up to io_timeout before giving the caller the error.
  Backoff backoff;
  for (;;) {
    Reply r = call_redirected(argv, err);
    if (!r || r->type != REDIS_REPLY_ERROR || !reply_text(r.get()).starts_with("TRYAGAIN")) {
      return r;
    }
    if (!backoff.pause(options_.io_timeout, nullptr)) return r;
  }
}

Reply Connection::call_redirected(std::span<const std::string_view> argv, CallError& err,
                                  const Context* wait) {
  // Redis Cluster: a node that does not serve the key's slot answers MOVED
  // (the slot lives elsewhere now: follow it for good) or ASK (the slot is
  // migrating: ask the target this once, after ASKING). Neither ran the
  // command. Every key of one call shares a hash tag, so one node serves it.
  constexpr int kMaxRedirects = 5;
  bool redirected = false;
  Backoff backoff;
  asked_.reset();
  for (int hop = 0;; ++hop) {
    err = {};
    // Right after a MOVED, no falling back: the node the cluster names is the
    // one to ask (another would only send us back); if it cannot be reached,
    // the caller hears so and its next call starts over from any node.
    if (Status s = ensure(!redirected); !s.ok()) {
      err.status = std::move(s);
      return nullptr;
    }
    Reply r = roundtrip(argv, err, wait);
    if (!r || r->type != REDIS_REPLY_ERROR) return r;
    const std::string_view t = reply_text(r.get());
    if (t.starts_with("UNBLOCKED force unblock")) {
      // A blocking command ended as its server became a replica (a
      // failover): the server closes the connection after this reply. Drop
      // it now, so the next call reconnects (and is redirected) instead of
      // being written into a closed socket and left unanswered.
      drop();
      return r;
    }
    if (hop == kMaxRedirects) {
      // Still MOVED: nodes that send a command round disagree who owns its
      // slot. A slot's move ends with CLUSTER SETSLOT NODE sent to every node
      // in turn (redis-cli --cluster in its own order), and until the last
      // one, two may each name the other. That lasts milliseconds: wait for
      // them to agree, as for TRYAGAIN, up to io_timeout.
      if (!t.starts_with("MOVED ") || !backoff.pause(options_.io_timeout, wait)) return r;
      hop = -1;
      continue;
    }
    if (t.starts_with("READONLY")) {
      // A primary demoted without Cluster (FAILOVER, REPLICAOF: Sentinel's
      // way): nothing ran, as a replica takes no write. ROLE names its
      // primary: follow it for good, as a MOVED, and run the command there.
      std::optional<Node> primary = primary_of();
      if (!primary) return r;                // ROLE refused, or the connection broke: "not now"
      if (primary->first.empty()) continue;  // a primary again by now: run it here
      std::string why(t.substr(0, t.find(" script:")));
      const std::string was = address();
      drop();
      options_.host = primary->first;
      options_.port = primary->second;
      ++redirects_;
      redirected = true;
      if (Status s = ensure(false); !s.ok()) {
        // The next call starts over from the seed, which says the same.
        err.status = {StatusCode::kUnavailable,
                      "redis: " + was + " is a replica of " + address() + " (" + why +
                          "), which cannot be reached: " + std::string(s.message())};
        return nullptr;
      }
      continue;
    }
    const bool moved = t.starts_with("MOVED ");
    if (!moved && !t.starts_with("ASK ")) return r;
    std::string host;
    int port = 0;
    if (!redirect_target(t, host, port)) return r;
    if (moved) {
      drop();
      options_.host = std::move(host);
      options_.port = port;
      ++redirects_;
      redirected = true;
      continue;
    }
    RedisOptions there = options_;
    there.host = std::move(host);
    there.port = port;
    auto target = std::make_unique<Connection>(std::move(there), name_, scripts_);
    const std::string_view asking[] = {"ASKING"};
    Reply ok = target->call(asking, err);
    Reply answer = ok ? target->roundtrip(argv, err) : std::move(ok);
    ++redirects_;
    round_trips_ += target->round_trips_;
    asked_ = std::move(target);  // for call_there(): where this command ran
    return answer;
  }
}

std::optional<std::pair<std::string, int>> Connection::primary_of() {
  const std::string_view argv[] = {"ROLE"};
  CallError err;
  Reply r = roundtrip(argv, err);
  if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
      r->element[0]->type != REDIS_REPLY_STRING) {
    return std::nullopt;
  }
  const std::string_view role = reply_text(r->element[0]);
  if (role == "master") return Node{};
  // "slave", host, port, link state, offset.
  if (role != "slave" || r->elements < 3 || r->element[1]->type != REDIS_REPLY_STRING ||
      r->element[2]->type != REDIS_REPLY_INTEGER) {
    return std::nullopt;
  }
  const long long port = r->element[2]->integer;
  if (r->element[1]->len == 0 || port <= 0 || port > 65535) return std::nullopt;
  return Node{std::string(reply_text(r->element[1])), static_cast<int>(port)};
}

Reply Connection::call_there(std::span<const std::string_view> argv, CallError& err) {
  if (!asked_) return call(argv, err);
  const std::uint64_t before = asked_->round_trips_;
  Reply r = asked_->call(argv, err);
  round_trips_ += asked_->round_trips_ - before;
  return r;
}

bool Connection::declared(const Script& script) const noexcept {
  return std::find(scripts_.begin(), scripts_.end(), &script) != scripts_.end();
}

namespace {

// EVALSHA sha nkeys keys... args... (views into the caller's strings).
std::vector<std::string_view> evalsha_argv(std::string_view sha, std::string_view nkeys,
                                           std::span<const std::string_view> keys,
                                           std::span<const std::string_view> args) {
  std::vector<std::string_view> argv;
  argv.reserve(3 + keys.size() + args.size());
  argv.push_back("EVALSHA");
  argv.push_back(sha);
  argv.push_back(nkeys);
  argv.insert(argv.end(), keys.begin(), keys.end());
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

}  // namespace

Reply Connection::eval_then(const Script& script, std::span<const std::string_view> keys,
                            std::span<const std::string_view> args,
                            std::span<const std::string_view> then, Reply& then_reply,
                            CallError& err, CallError& then_err) {
  then_reply.reset();
  err = {};
  then_err = {};
  asked_.reset();
  if (!declared(script) || ctx_ == nullptr) return eval(script, keys, args, err);
  const std::string nkeys = std::to_string(keys.size());
  const std::vector<std::string_view> argv = evalsha_argv(script.sha, nkeys, keys, args);
  if (!queue(argv, err) || !queue(then, err) || !flush("EVALSHA", err)) return nullptr;
  Reply r = read_reply("EVALSHA", err);
  if (!r) return r;
  then_reply = read_reply(then.front(), then_err);
  if (!then_reply) return r;  // the script ran; what `then` did is unknown
  const std::string_view t =
      r->type == REDIS_REPLY_ERROR ? reply_text(r.get()) : std::string_view();
  if (t.starts_with("MOVED ") || t.starts_with("ASK ") || t.starts_with("TRYAGAIN") ||
      t.starts_with("NOSCRIPT") || t.starts_with("READONLY")) {
    // The script did not run: eval() follows, retries or loads it. `then`
    // ran on its own here, for nothing.
    then_reply.reset();
    return eval(script, keys, args, err);
  }
  return r;
}

Reply Connection::eval_multi(const Script& script, std::span<const std::string_view> keys,
                             std::span<const std::string_view> args,
                             std::span<const std::string_view> then, CallError& err) {
  err = {};
  asked_.reset();
  if (!declared(script) || ctx_ == nullptr) return nullptr;
  const std::string nkeys = std::to_string(keys.size());
  const std::vector<std::string_view> argv = evalsha_argv(script.sha, nkeys, keys, args);
  const std::string_view multi[] = {"MULTI"};
  const std::string_view exec[] = {"EXEC"};
  if (!queue(multi, err) || !queue(argv, err) || !queue(then, err) || !queue(exec, err) ||
      !flush("MULTI", err)) {
    return nullptr;
  }
  // +OK, +QUEUED twice (or an error reply: a command refused while
  // queueing, EXEC then aborts), then EXEC's. All four are read, whatever
  // they say, so the next call reads its own reply.
  bool queued = true;
  for (const std::string_view what :
       {std::string_view("MULTI"), std::string_view("EVALSHA"), then.front()}) {
    Reply r = read_reply(what, err);
    if (!r) return nullptr;
    if (r->type == REDIS_REPLY_ERROR) queued = false;
  }
  Reply r = read_reply("EXEC", err);
  if (!r) return nullptr;
  if (!queued || r->type != REDIS_REPLY_ARRAY || r->elements != 2) return nullptr;
  const redisReply* ran = r->element[0];
  if (ran->type == REDIS_REPLY_ERROR) {
    const std::string_view t = reply_text(ran);
    if (t.starts_with("MOVED ") || t.starts_with("ASK ") || t.starts_with("TRYAGAIN") ||
        t.starts_with("NOSCRIPT") || t.starts_with("READONLY")) {
      return nullptr;  // the script did not run: eval() knows what to do
    }
  }
  return r;
}

Reply Connection::eval(const Script& script, std::span<const std::string_view> keys,
                       std::span<const std::string_view> args, CallError& err) {
  err = {};
  const std::string nkeys = std::to_string(keys.size());
  std::vector<std::string_view> argv = evalsha_argv(script.sha, nkeys, keys, args);
  Reply r = call(argv, err);
  if (r && r->type == REDIS_REPLY_ERROR && reply_text(r.get()).starts_with("NOSCRIPT")) {
    // The server lost its script cache (a restart, SCRIPT FLUSH), or never
    // had it (a script not declared): this one did not run. EVAL runs it
    // and caches it again.
    argv[0] = "EVAL";
    argv[1] = script.source;
    r = call(argv, err);
  }
  return r;
}

namespace {

// SCAN of one node, appending the keys.
Status scan_node(Connection& conn, const std::string& pattern, std::string_view type,
                 std::vector<std::string>& keys) {
  std::string cursor = "0";
  do {
    const std::array<std::string_view, 8> argv = {"SCAN",  cursor, "MATCH", pattern,
                                                  "COUNT", "1000", "TYPE",  type};
    CallError err;
    Reply r = conn.call(std::span<const std::string_view>(argv.data(), type.empty() ? 6 : 8), err);
    if (!r) return err.status;
    if (r->type == REDIS_REPLY_ERROR) return conn.error_reply(reply_text(r.get()));
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[1]->type != REDIS_REPLY_ARRAY) {
      return {StatusCode::kInternal, "redis at " + conn.address() + ": unexpected reply to SCAN"};
    }
    cursor = std::string(reply_text(r->element[0]));
    const redisReply* got = r->element[1];
    for (std::size_t i = 0; i < got->elements; ++i) keys.emplace_back(reply_text(got->element[i]));
  } while (cursor != "0");
  return Status::Ok();
}

}  // namespace

Result<std::vector<std::string>> scan_keys(Connection& conn, std::string_view literal,
                                           std::string_view tail, std::string_view type) {
  std::string pattern;
  for (const char ch : literal) {
    if (ch == '*' || ch == '?' || ch == '[' || ch == ']' || ch == '\\') pattern += '\\';
    pattern += ch;
  }
  pattern += tail;
  // On Redis Cluster each primary has its own keys: scan them all.
  const std::string_view slots[] = {"CLUSTER", "SLOTS"};
  CallError err;
  Reply r = conn.call(slots, err);
  if (!r) return err.status;
  const std::vector<Node> primaries = slot_nodes(r.get(), conn.options().host, false);
  std::vector<std::string> keys;
  if (primaries.empty()) {
    if (Status s = scan_node(conn, pattern, type, keys); !s.ok()) return s;
  }
  for (const auto& [host, port] : primaries) {
    RedisOptions o = conn.options();
    o.host = host;
    o.port = port;
    Connection node(std::move(o), "sluice-scan");
    if (Status s = scan_node(node, pattern, type, keys); !s.ok()) return s;
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

}  // namespace sluice::redis
