#include "redis/connection.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <cstring>
#include <string>
#include <utility>

namespace sluice::redis {
namespace {

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

std::string_view reply_text(const redisReply* r) { return {r->str, r->len}; }

}  // namespace

void ReplyDeleter::operator()(redisReply* r) const noexcept { freeReplyObject(r); }

Connection::Connection(RedisOptions options, std::string name)
    : options_(std::move(options)), name_(std::move(name)) {
  for (char& c : name_) {
    if (c == ' ' || c == '\n' || c == '\r') c = '_';  // CLIENT SETNAME refuses spaces
  }
}

Connection::~Connection() { drop(); }

void Connection::drop() noexcept {
  if (ctx_ != nullptr) redisFree(ctx_);
  ctx_ = nullptr;
}

Status Connection::ensure() {
  if (ctx_ != nullptr) return Status::Ok();
  redisContext* c = redisConnectWithTimeout(options_.host.c_str(), options_.port,
                                            to_timeval(options_.connect_timeout));
  if (c == nullptr) return {StatusCode::kUnavailable, "redis: out of memory"};
  if (c->err != 0) {
    std::string msg = "redis at " + options_.endpoint() + " is unreachable: " + c->errstr;
    redisFree(c);
    return {StatusCode::kUnavailable, msg};
  }
  redisSetTimeout(c, to_timeval(options_.io_timeout));
  redisEnableKeepAlive(c);
  ctx_ = c;

  // Set-up commands, pipelined: one round trip.
  std::vector<std::vector<std::string>> cmds;
  if (!options_.password.empty()) {
    if (options_.user.empty()) {
      cmds.push_back({"AUTH", options_.password});
    } else {
      cmds.push_back({"AUTH", options_.user, options_.password});
    }
  }
  if (options_.db != 0) cmds.push_back({"SELECT", std::to_string(options_.db)});
  cmds.push_back({"CLIENT", "SETNAME", name_});
  cmds.push_back({"SCRIPT", "LOAD", std::string(pressure_script())});
  for (const auto& cmd : cmds) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& a : cmd) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    redisAppendCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data());
  }
  ++round_trips_;
  for (const auto& cmd : cmds) {
    void* raw = nullptr;
    if (redisGetReply(ctx_, &raw) != REDIS_OK) {
      std::string msg =
          "redis at " + options_.endpoint() + ": connection set-up failed: " + ctx_->errstr;
      drop();
      return {StatusCode::kUnavailable, msg};
    }
    Reply r(static_cast<redisReply*>(raw));
    if (r->type == REDIS_REPLY_ERROR) {
      std::string msg = "redis at " + options_.endpoint() + ": " + cmd[0] +
                        " failed: " + std::string(reply_text(r.get()));
      drop();
      // A refused password or database number is the caller's to fix.
      return {cmd[0] == "SCRIPT" ? StatusCode::kUnavailable : StatusCode::kInvalidArgument, msg};
    }
    if (cmd[0] == "SCRIPT") sha_.assign(r->str, r->len);
  }
  return Status::Ok();
}

Reply Connection::roundtrip(std::span<const std::string_view> argv, CallError& err) {
  argv_.clear();
  lens_.clear();
  for (std::string_view a : argv) {
    argv_.push_back(a.data());
    lens_.push_back(a.size());
  }
  err.maybe_ran = false;
  if (redisAppendCommandArgv(ctx_, static_cast<int>(argv_.size()), argv_.data(), lens_.data()) !=
      REDIS_OK) {
    err.status = {StatusCode::kInternal, "redis: cannot format the command (out of memory)"};
    drop();
    return nullptr;
  }
  ++round_trips_;
  // Write by hand so a failure can be told apart: Redis runs a command only
  // once it has all of it, so a request not fully written never ran.
  int done = 0;
  while (done == 0) {
    if (redisBufferWrite(ctx_, &done) != REDIS_OK) {
      err.status = {
          StatusCode::kUnavailable,
          "redis at " + options_.endpoint() + ": connection lost while sending: " + ctx_->errstr};
      drop();
      return nullptr;
    }
  }
  void* raw = nullptr;
  if (redisGetReply(ctx_, &raw) != REDIS_OK) {
    err.maybe_ran = true;
    err.status = {StatusCode::kUnavailable,
                  "redis at " + options_.endpoint() +
                      ": no reply (connection lost or timed out: " + ctx_->errstr + ")"};
    drop();
    return nullptr;
  }
  return Reply(static_cast<redisReply*>(raw));
}

Reply Connection::call(std::span<const std::string_view> argv, CallError& err) {
  err = {};
  if (Status s = ensure(); !s.ok()) {
    err.status = std::move(s);
    return nullptr;
  }
  return roundtrip(argv, err);
}

Reply Connection::eval_script(std::span<const std::string_view> keys,
                              std::span<const std::string_view> args, CallError& err) {
  err = {};
  if (Status s = ensure(); !s.ok()) {
    err.status = std::move(s);
    return nullptr;
  }
  const std::string nkeys = std::to_string(keys.size());
  std::vector<std::string_view> argv;
  argv.reserve(3 + keys.size() + args.size());
  argv.push_back("EVALSHA");
  argv.push_back(sha_);
  argv.push_back(nkeys);
  argv.insert(argv.end(), keys.begin(), keys.end());
  argv.insert(argv.end(), args.begin(), args.end());
  Reply r = roundtrip(argv, err);
  if (r && r->type == REDIS_REPLY_ERROR && reply_text(r.get()).starts_with("NOSCRIPT")) {
    // The server lost its script cache (restart, SCRIPT FLUSH): the script did
    // not run; EVAL runs it and caches it again.
    argv[0] = "EVAL";
    argv[1] = pressure_script();
    r = roundtrip(argv, err);
  }
  return r;
}

}  // namespace sluice::redis
