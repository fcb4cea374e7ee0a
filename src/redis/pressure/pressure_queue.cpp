#include "sluice/redis/pressure_queue.h"

#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <string>
#include <utility>

#include "redis/pressure/pressure_script.h"
#include "redis/transport/connection.h"
#include "redis/transport/host_id.h"

namespace sluice {
namespace {

using redis::CallError;
using redis::Reply;

// Key order shared with pressure.lua.
enum Key : std::size_t {
  kData,
  kBound,
  kProducer,
  kConsumer,
  kProducerFree,
  kConsumerFree,
  kProducedMessages,
  kProducedBytes,
  kConsumedMessages,
  kConsumedBytes,
  kNotFull,
  kClosedKey,
  kKeyCount
};
constexpr std::array<std::string_view, kKeyCount> kSuffix = {"",
                                                             ":bound",
                                                             ":producer",
                                                             ":consumer",
                                                             ":producer_free",
                                                             ":consumer_free",
                                                             ":stats:produced_messages",
                                                             ":stats:produced_bytes",
                                                             ":stats:consumed_messages",
                                                             ":stats:consumed_bytes",
                                                             ":not_full",
                                                             ":closed"};

// A batch put is cut into scripts of at most this many messages / bytes, so
// one script never stalls the server for long.
constexpr std::size_t kChunkMessages = 1024;
constexpr std::size_t kChunkBytes = std::size_t{8} << 20;

std::string process_id() { return redis::host_id() + "_pid" + std::to_string(getpid()); }

std::string_view text(const redisReply* r) {
  return r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
                 r->type == REDIS_REPLY_ERROR
             ? std::string_view(r->str, r->len)
             : std::string_view();
}

std::uint64_t integer(const redisReply* r) {
  if (r->type == REDIS_REPLY_INTEGER) return static_cast<std::uint64_t>(std::max(r->integer, 0LL));
  std::uint64_t v = 0;
  std::string_view s = text(r);
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}

// The script's reply: an array whose first element is a status word.
struct Answer {
  Reply reply;
  std::string_view word;
  std::size_t size() const { return reply->elements; }
  const redisReply* at(std::size_t i) const { return reply->element[i]; }
};

Status unexpected(const redisReply* r) {
  if (r->type == REDIS_REPLY_ERROR) {
    return {StatusCode::kInternal, "redis error: " + std::string(text(r))};
  }
  return {StatusCode::kInternal, "redis: unexpected reply to the pressure script"};
}

}  // namespace

namespace {

enum Role : std::uint8_t { kProducerRole, kConsumerRole };
constexpr std::array<std::string_view, 2> kRoleName = {"producer", "consumer"};

// How long a call waits for a role held by someone else before it checks
// whether the holder is provably gone (and then again as often).
constexpr std::chrono::seconds kRecoverEvery{1};

// Whether the client that recorded `holder` ("<host>_pid<N>[_tid<M>]") is
// gone: true/false when provable, nullopt when it cannot be told.
// `client_list` returns CLIENT LIST (nullopt if it cannot be read); it is
// called only for holders on other hosts.
template <class ClientList>
std::optional<bool> holder_gone(std::string_view holder, ClientList&& client_list) {
  const auto at = holder.rfind("_pid");
  if (holder.empty() || at == std::string_view::npos) return std::nullopt;
  std::string_view host = holder.substr(0, at);
  std::string_view rest = holder.substr(at + 4);
  long pid = 0;
  auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), pid);
  if (ec != std::errc() || pid <= 0) return std::nullopt;
  if (host == redis::host_id()) {
    // The process table is the truth here, and has no lag: the server may
    // still list a killed process's connection for a moment.
    return kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
  }
  // `holder` may be cut from a longer name at the wrong place (requeue_orphans
  // with a tag that is a prefix of another: "ingest" and "ingest-retry" read
  // "-retry<host>_pid<N>"): the process whose name ends it may be alive.
  const bool alive_here = kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
  if (host.ends_with(redis::host_id()) && alive_here) return false;
  const std::optional<std::string> clients = client_list();
  if (!clients) return std::nullopt;
  const std::string proc = std::string(host) + "_pid" + std::to_string(pid);
  for (std::size_t at_name = clients->find("name="); at_name != std::string::npos;
       at_name = clients->find("name=", at_name + 5)) {
    const std::size_t from = at_name + 5;
    const std::size_t to = clients->find_first_of(" \n", from);
    const std::string_view conn_name =
        std::string_view(*clients).substr(from, to == std::string::npos ? to : to - from);
    if (!conn_name.empty() && std::string_view(proc).ends_with(conn_name) &&
        conn_name.find("_pid") != std::string_view::npos) {
      return false;  // that process, or one whose name ends it: alive
    }
  }
  // sluice ids end in _tid<M>, and sluice names every connection after its
  // process: none open means it is gone. The existing clients name none.
  if (std::string_view(p, rest.data() + rest.size()).starts_with("_tid")) return true;
  return std::nullopt;
}

}  // namespace

struct PressureQueue::Impl {
  Impl(RedisOptions o, std::string n)
      : name(std::move(n)), conn(std::move(o), process_id(), {&redis::pressure_script()}) {
    const std::string base = conn.options().prefix + ":" + name;
    for (std::size_t i = 0; i < kKeyCount; ++i) keys[i] = base + std::string(kSuffix[i]);
    for (std::size_t i = 0; i < kKeyCount; ++i) key_views[i] = keys[i];
    purged_key = keys[kData] + ":purged";
  }
  // Best effort: give back a role a failed call could not (see `owed`).
  ~Impl() { settle(); }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  std::string name;
  redis::Connection conn;
  std::atomic<std::int64_t> bound_wait_ns{0};  // read by bound_wait() from any thread
  std::array<std::string, kKeyCount> keys;
  std::array<std::string_view, kKeyCount + 1> key_views;
  // KEYS[13] for one run(): a reliable consumer's in-flight list, or the
  // purged count (purged_key) for create, delete, stats and purge.
  std::string key13;
  std::string purged_key;
  std::vector<std::string_view> args;
  // A role a call took and could not give back because Redis could not be
  // reached, with the id it was taken under. The next call (or the
  // destructor) gives it back first; if the process dies, repair does.
  std::array<std::string, 2> owed;
  // recover(): a gone holder seen at the last check, per role.
  std::array<std::string, 2> suspect;

  // Made again after a fork(): the child is another process (and its
  // thread another thread) than the one that made the cached id.
  static std::string client_id() {
    thread_local pid_t pid = -1;
    thread_local std::string id;
    if (const pid_t now = getpid(); now != pid) {
      pid = now;
      id = process_id() + "_tid" + std::to_string(static_cast<long>(syscall(SYS_gettid)));
    }
    return id;
  }

  // Runs the script with ARGV = op, client id (or `as`), [mode], extra...;
  // fills `answer` or returns the failure (err.maybe_ran says whether it
  // may have run).
  Status run(std::string_view op, std::span<const std::string_view> extra, Answer& answer,
             CallError& err, std::string_view mode = {}, std::string_view as = {}) {
    if (as.empty() && (!owed[0].empty() || !owed[1].empty())) settle();
    const std::string id = as.empty() ? client_id() : std::string(as);
    args.clear();
    args.push_back(op);
    args.push_back(id);
    if (!mode.empty()) args.push_back(mode);
    args.insert(args.end(), extra.begin(), extra.end());
    std::span<const std::string_view> ks(key_views.data(), key13.empty() ? 12 : 13);
    if (!key13.empty()) key_views[12] = key13;
    answer.reply = conn.eval(redis::pressure_script(), ks, args, err);
    key13.clear();
    if (!answer.reply) return err.status;
    const redisReply* r = answer.reply.get();
    if (r->type == REDIS_REPLY_ERROR) return error_reply(op, text(r));
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) return unexpected(r);
    answer.word = text(r->element[0]);
    if (answer.word == "NOQUEUE") {
      return {StatusCode::kNotFound, "pressure queue '" + name + "' does not exist"};
    }
    if (answer.word == "DELETED") {  // closed by a delete that is waiting for a role
      return {StatusCode::kNotFound, "pressure queue '" + name + "' is being deleted"};
    }
    return Status::Ok();
  }

  // An error reply. Those that say "not now" (the call did not run) are
  // kUnavailable, as the Streams client has them, so callers retry.
  // UNBLOCKED: a wait (BLMOVE) ended by its server becoming a replica.
  Status error_reply(std::string_view op, std::string_view t) const {
    const std::string_view word = t.substr(0, t.find(' '));
    if (word == "LOADING" || word == "OOM" || word == "BUSY" || word == "MASTERDOWN" ||
        word == "TRYAGAIN" || word == "READONLY" || word == "UNBLOCKED") {
      return {StatusCode::kUnavailable, "redis at " + conn.address() + " cannot take " +
                                            std::string(op) + " now: " + std::string(t)};
    }
    return conn.error_reply(t);
  }

  Status run(std::string_view op, Answer& answer) {
    CallError err;
    return run(op, {}, answer, err);
  }

  // Gives back `role`, taken under `id`, if it is still held under it.
  // Remembers it in `owed` when Redis cannot be reached.
  void give_back(Role role, std::string id) {
    const std::array<std::string_view, 1> extra = {kRoleName[role]};
    Answer a;
    CallError err;
    // NOTHELD is fine too: a script that timed out gave it back, or repair did.
    const bool done = run("release", extra, a, err, {}, id).ok();
    owed[role] = done ? std::string() : std::move(id);
  }

  void settle() {
    const std::string keep = std::move(key13);  // the caller's run() needs it
    key13.clear();
    for (Role role : {kProducerRole, kConsumerRole}) {
      if (!owed[role].empty()) give_back(role, owed[role]);
    }
    key13 = keep;
  }

  // Restores `role`'s token if its recorded holder is provably gone (killed
  // while it held the role). Errors are left to the caller's next step.
  void recover(Role role) {
    const std::array<std::string_view, 1> extra = {kRoleName[role]};
    Answer a;
    CallError err;
    if (!run("holder", extra, a, err).ok() || a.word != "OK" || a.size() != 3) return;
    if (integer(a.at(1)) > 0) return;  // free by now
    const std::string holder(text(a.at(2)));
    if (holder_gone(holder, [&] { return client_list(); }) != std::optional<bool>(true)) {
      suspect[role].clear();
      return;
    }
    // The existing clients write their id one round trip after they pop the
    // token: a missing token under a gone holder's id may be a live client
    // between the two. Restore only if it is still so a second later.
    if (suspect[role] != holder) {
      suspect[role] = holder;
      return;
    }
    suspect[role].clear();
    const std::array<std::string_view, 2> restore = {kRoleName[role], holder};
    Answer b;
    (void)run("restore_token", restore, b, err);
  }

  std::optional<std::string> client_list() {
    const std::array<std::string_view, 2> argv = {"CLIENT", "LIST"};
    CallError err;
    Reply r = conn.call(argv, err);
    if (!r || r->type == REDIS_REPLY_ERROR) return std::nullopt;
    return std::string(text(r.get()));
  }

  // Called before each wait for a role another client holds: once the call
  // has waited kRecoverEvery, and then as often, restore the role if its
  // holder died holding it.
  void waiting_for(Role role, Context::Clock::time_point& next_check) {
    const auto now = Context::Clock::now();
    if (next_check == Context::Clock::time_point()) {
      suspect[role].clear();
      next_check = now + kRecoverEvery;
    } else if (now >= next_check) {
      next_check = now + kRecoverEvery;
      recover(role);
    }
  }

  // run() for an operation that changes the queue: a failure after the
  // request was sent says that its effect (`done`, e.g. "created") is unknown.
  Status change(std::string_view op, std::span<const std::string_view> extra, Answer& answer,
                std::string_view done) {
    CallError err;
    Status s = run(op, extra, answer, err);
    if (!s.ok() && err.maybe_ran) {
      return {StatusCode::kUnavailable, std::string(s.message()) + "; whether the queue was " +
                                            std::string(done) + " is unknown"};
    }
    return s;
  }

  // Waits on the server until `key` holds an element (it moves nothing), for
  // at most one slice. kOk means "look again", not "something is there".
  Status wait_on(Key key, const Context& ctx) {
    if (StatusCode e = ctx.err(); e != StatusCode::kOk) return e;
    // A slice must end well before the socket's reply timeout, or a quiet
    // wait would look like a dead server.
    auto slice = std::chrono::duration_cast<std::chrono::microseconds>(
        std::min(conn.options().wait_slice, conn.options().io_timeout / 2));
    if (const auto& d = ctx.deadline()) {
      slice = std::min(
          slice, std::chrono::duration_cast<std::chrono::microseconds>(*d - Context::Clock::now()));
    }
    slice = std::max(slice, std::chrono::microseconds(1000));  // 0 would mean "forever"
    std::array<char, 32> secs{};
    std::snprintf(secs.data(), secs.size(), "%.3f", static_cast<double>(slice.count()) / 1e6);
    const std::array<std::string_view, 6> argv = {"BLMOVE", keys[key], keys[key],
                                                  "RIGHT",  "RIGHT",   secs.data()};
    CallError err;
    Reply r = conn.call_blocking(argv, ctx, err);  // ends at ctx's deadline or stop, not the tick
    if (!r) return err.status;                     // nothing was moved, so nothing is in doubt
    if (r->type == REDIS_REPLY_ERROR) return error_reply("a wait", text(r.get()));
    return ctx.err();
  }

  // The script's mode (pressure.lua): hold the role across a wait only when
  // the call may wait; a call whose context has already ended just tries.
  static std::string_view mode(bool holding, bool wait, const Context& ctx) {
    if (holding) return "held";
    return wait && ctx.err() == StatusCode::kOk ? "wait" : "try";
  }

  PutResult put(std::span<const std::string_view> msgs, const Context& ctx, bool wait) {
    PutResult res;
    if (ctx.stop_requested()) {
      res.status = StatusCode::kCancelled;
      return res;
    }
    bool holding = false;  // the producer role, kept while waiting for room
    Context::Clock::time_point recover_at{};
    std::size_t i = 0;
    while (i < msgs.size()) {
      std::size_t n = 0;
      std::size_t bytes = 0;
      while (i + n < msgs.size() && n < kChunkMessages &&
             (n == 0 || bytes + msgs[i + n].size() <= kChunkBytes)) {
        bytes += msgs[i + n].size();
        ++n;
      }
      Answer a;
      CallError err;
      if (Status s = run("put", msgs.subspan(i, n), a, err, mode(holding, wait, ctx)); !s.ok()) {
        if (err.maybe_ran) res.in_doubt = n;
        // A 'wait' step whose reply was lost may have kept the role: give it
        // back (release only acts if this client holds it).
        if (err.maybe_ran && wait) holding = true;
        if (s.code() == StatusCode::kNotFound) holding = false;  // the script gave it back
        res.status = std::move(s);
        break;
      }
      if (a.word == "OK") {
        const std::uint64_t done = integer(a.at(1));
        i += done;
        res.enqueued += done;
        holding = integer(a.at(3)) == 1;
        continue;
      }
      holding = false;
      Status why;
      Key gate = kProducerFree;
      if (a.word == "FULL") {
        holding = integer(a.at(2)) == 1;
        why = {StatusCode::kWouldBlock, "pressure queue '" + name + "' is full"};
        gate = kNotFull;
      } else if (a.word == "INUSE") {
        why = {StatusCode::kInUse, "another producer is using pressure queue '" + name + "'"};
        if (wait) waiting_for(kProducerRole, recover_at);
      } else if (a.word == "CLOSED") {
        res.status = {StatusCode::kClosed, "pressure queue '" + name + "' is closed"};
        break;
      } else {
        res.status = unexpected(a.reply.get());
        break;
      }
      if (!wait) {
        res.status = std::move(why);
        break;
      }
      const auto t0 = Context::Clock::now();
      Status s = wait_on(gate, ctx);
      if (gate == kNotFull) {
        bound_wait_ns.fetch_add(
            std::chrono::duration_cast<std::chrono::nanoseconds>(Context::Clock::now() - t0)
                .count(),
            std::memory_order_relaxed);
      }
      if (!s.ok()) {
        res.status = std::move(s);
        break;
      }
    }
    // Returning for any reason (done, cancelled, deadline, error) ends the hold.
    if (holding) give_back(kProducerRole, client_id());
    return res;
  }

  std::string inflight_of(std::string_view consumer) const {
    return keys[kData] + ":inflight:" + std::string(consumer);
  }

  // The script's STALE: `consumer`'s in-flight list was taken from an
  // earlier queue of this name, and dropped (pressure.lua, the mark).
  Status stale(std::string_view consumer, std::uint64_t n) const {
    return {StatusCode::kNotFound,
            "pressure queue '" + name + "' was deleted (by a client that does not know " +
                "sluice's in-flight lists) and made again since consumer '" +
                std::string(consumer) + "' took its " + std::to_string(n) +
                " unacknowledged message(s): they went with the deleted queue"};
  }

  // Runs `requeue` for `consumer`: how many went back, or STALE's status
  // with `*was_stale` set.
  Result<std::uint64_t> requeue(std::string_view consumer, bool* was_stale = nullptr) {
    key13 = inflight_of(consumer);
    const std::array<std::string_view, 1> extra = {consumer};
    Answer a;
    CallError err;
    if (Status s = run("requeue", extra, a, err); !s.ok()) return s;
    if (a.word == "STALE" && a.size() == 2) {
      if (was_stale != nullptr) *was_stale = true;
      return stale(consumer, integer(a.at(1)));
    }
    if (a.word != "OK") return unexpected(a.reply.get());
    return integer(a.at(1));
  }

  // `consumer` non-empty: a reliable get into its in-flight list.
  Status get(std::vector<std::string>& out, std::size_t max, const Context& ctx, bool wait,
             std::string_view consumer = {}) {
    if (max == 0) return {StatusCode::kInvalidArgument, "get_many: max must be at least 1"};
    if (ctx.stop_requested()) return StatusCode::kCancelled;
    bool holding = false;  // the consumer role, kept while waiting for data
    Context::Clock::time_point recover_at{};
    Status result = get_loop(out, max, ctx, wait, consumer, holding, recover_at);
    if (holding) give_back(kConsumerRole, client_id());
    return result;
  }

  Status get_loop(std::vector<std::string>& out, std::size_t max, const Context& ctx, bool wait,
                  std::string_view consumer, bool& holding,
                  Context::Clock::time_point& recover_at) {
    const std::string count = std::to_string(std::min(max, kChunkMessages));
    const std::array<std::string_view, 2> extra_args = {count, consumer};
    const std::span<const std::string_view> extra(extra_args.data(), consumer.empty() ? 1 : 2);
    for (;;) {
      Answer a;
      CallError err;
      if (!consumer.empty()) key13 = inflight_of(consumer);
      if (Status s = run("get", extra, a, err, mode(holding, wait, ctx)); !s.ok()) {
        if (err.maybe_ran && wait) holding = true;               // as in put()
        if (s.code() == StatusCode::kNotFound) holding = false;  // the script gave it back
        if (err.maybe_ran && !consumer.empty()) {
          return {StatusCode::kUnavailable, std::string(s.message()) +
                                                "; messages this get may have taken are in " +
                                                inflight_of(consumer) + " (see inflight())"};
        }
        if (err.maybe_ran) {
          return {StatusCode::kUnavailable,
                  std::string(s.message()) + "; up to " + count +
                      " message(s) may have been taken from the queue by this get and lost"};
        }
        return s;
      }
      holding = false;
      Key gate = kConsumerFree;
      Status why;
      if (a.word == "OK") {
        for (std::size_t k = 2; k < a.size(); ++k) out.emplace_back(text(a.at(k)));
        return Status::Ok();
      }
      if (a.word == "EMPTY") {
        holding = integer(a.at(1)) == 1;
        why = {StatusCode::kWouldBlock, "pressure queue '" + name + "' is empty"};
        gate = kData;
      } else if (a.word == "INUSE") {
        why = {StatusCode::kInUse, "another consumer is using pressure queue '" + name + "'"};
        if (wait) waiting_for(kConsumerRole, recover_at);
      } else if (a.word == "CLOSED") {
        return {StatusCode::kClosed, "pressure queue '" + name + "' is closed and drained"};
      } else if (a.word == "STALE") {
        return stale(consumer, integer(a.at(1)));
      } else if (a.word == "CLASH" && a.size() == 2) {
        // The registry's key holds another queue's messages (pressure.lua).
        return {StatusCode::kInvalidArgument,
                "reliable gets on pressure queue '" + name + "' register their consumers at " +
                    std::string(text(a.at(1))) + ", which holds the messages of another queue, '" +
                    name + ":inflight'; nothing was taken"};
      } else {
        return unexpected(a.reply.get());
      }
      if (!wait) return why;
      // Waiting on the data key does not see a close: the slice bounds that.
      if (Status s = wait_on(gate, ctx); !s.ok()) return s;
    }
  }
};

PressureQueue::PressureQueue(RedisOptions options, std::string name)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(name))) {}
PressureQueue::~PressureQueue() = default;

std::chrono::nanoseconds PressureQueue::bound_wait() const noexcept {
  return std::chrono::nanoseconds(impl_ ? impl_->bound_wait_ns.load(std::memory_order_relaxed) : 0);
}
PressureQueue::PressureQueue(PressureQueue&&) noexcept = default;
PressureQueue& PressureQueue::operator=(PressureQueue&&) noexcept = default;

namespace {

// A moved-from handle refuses every call instead of crashing.
Status moved_from() {
  return {StatusCode::kInvalidArgument, "this PressureQueue handle was moved from"};
}

}  // namespace

const std::string& PressureQueue::name() const noexcept {
  static const std::string kNone;
  return impl_ ? impl_->name : kNone;
}
std::string PressureQueue::client_id() const { return Impl::client_id(); }
std::uint64_t PressureQueue::round_trips() const noexcept {
  return impl_ ? impl_->conn.round_trips() : 0;
}

Status PressureQueue::create(std::uint64_t bound) {
  if (!impl_) return moved_from();
  const std::string b = std::to_string(bound);
  const std::array<std::string_view, 1> extra = {b};
  Answer a;
  impl_->key13 = impl_->purged_key;
  if (Status s = impl_->change("create", extra, a, "created"); !s.ok()) return s;
  if (a.word == "OK") return Status::Ok();  // a.at(1): leftovers' messages removed
  if (a.word == "EXISTS") {
    return {StatusCode::kAlreadyExists, "pressure queue '" + impl_->name + "' already exists"};
  }
  if (a.word == "REMNANTS") {
    std::string keys;
    for (std::size_t k = 1; k < a.size(); ++k) keys += " " + std::string(text(a.at(k)));
    return {StatusCode::kAlreadyExists,
            "keys of a half-deleted pressure queue '" + impl_->name +
                "' remain (a delete is still running, or a client died in one):" + keys};
  }
  return unexpected(a.reply.get());
}

Result<bool> PressureQueue::exists() {
  if (!impl_) return moved_from();
  Answer a;
  if (Status s = impl_->run("exists", a); !s.ok()) return s;
  if (a.word != "OK") return unexpected(a.reply.get());
  return integer(a.at(1)) == 1;
}

Result<std::uint64_t> PressureQueue::length() {
  if (!impl_) return moved_from();
  Answer a;
  if (Status s = impl_->run("length", a); !s.ok()) return s;
  if (a.word != "OK") return unexpected(a.reply.get());
  return integer(a.at(1));
}

Result<bool> PressureQueue::closed() {
  if (!impl_) return moved_from();
  Answer a;
  if (Status s = impl_->run("closed", a); !s.ok()) return s;
  if (a.word != "OK") return unexpected(a.reply.get());
  return integer(a.at(1)) == 1;
}

Result<PressureStats> PressureQueue::stats() {
  if (!impl_) return moved_from();
  Answer a;
  impl_->key13 = impl_->purged_key;
  if (Status s = impl_->run("stats", a); !s.ok()) return s;
  if (a.word != "OK" || a.size() != 16) return unexpected(a.reply.get());
  PressureStats st;
  st.bound = integer(a.at(1));
  st.length = integer(a.at(2));
  st.closed = integer(a.at(3)) == 1;
  st.produced_messages = integer(a.at(4));
  st.produced_bytes = integer(a.at(5));
  st.consumed_messages = integer(a.at(6));
  st.consumed_bytes = integer(a.at(7));
  st.producer = std::string(text(a.at(8)));
  st.consumer = std::string(text(a.at(9)));
  st.producer_free = integer(a.at(10)) > 0;
  st.consumer_free = integer(a.at(11)) > 0;
  st.not_full = integer(a.at(12)) > 0;
  st.in_flight = integer(a.at(13));
  st.stale_in_flight = integer(a.at(14));
  st.purged = integer(a.at(15));
  return st;
}

Result<std::vector<std::string>> PressureQueue::peek(std::size_t max, std::size_t skip) {
  if (!impl_) return moved_from();
  if (max == 0) return Status{StatusCode::kInvalidArgument, "PressureQueue::peek: max is 0"};
  // LRANGE's indexes count from the right end (the head): -(skip+max) to
  // -(skip+1).
  skip = std::min<std::size_t>(skip, INT64_MAX - 1);
  max = std::min<std::size_t>(max, INT64_MAX - skip);
  const std::string start = "-" + std::to_string(skip + max);
  const std::string end = "-" + std::to_string(skip + 1);
  const std::array<std::string_view, 2> extra = {start, end};
  Answer a;
  CallError err;
  if (Status s = impl_->run("peek", extra, a, err); !s.ok()) return s;
  if (a.word != "OK") return unexpected(a.reply.get());
  std::vector<std::string> out;
  out.reserve(a.size() - 1);
  for (std::size_t k = 1; k < a.size(); ++k) out.emplace_back(text(a.at(k)));
  return out;
}

Result<std::uint64_t> PressureQueue::purge() {
  if (!impl_) return moved_from();
  Answer a;
  impl_->key13 = impl_->purged_key;
  if (Status s = impl_->change("purge", {}, a, "purged"); !s.ok()) return s;
  if (a.word == "CLASH" && a.size() == 2) {
    // The count's key holds another queue's messages (pressure.lua, the top).
    return Status{StatusCode::kInvalidArgument,
                  "cannot purge pressure queue '" + impl_->name + "': its purge count's key " +
                      std::string(text(a.at(1))) + " holds the messages of another queue, '" +
                      impl_->name + ":purged'; nothing was dropped"};
  }
  if (a.word != "OK" || a.size() != 2) return unexpected(a.reply.get());
  return integer(a.at(1));
}

PutResult PressureQueue::put(std::string_view message, const Context& ctx) {
  if (!impl_) return PutResult{moved_from()};
  return impl_->put(std::span<const std::string_view>(&message, 1), ctx, true);
}

PutResult PressureQueue::try_put(std::string_view message) {
  if (!impl_) return PutResult{moved_from()};
  return impl_->put(std::span<const std::string_view>(&message, 1), Context(), false);
}

PutResult PressureQueue::put_many(std::span<const std::string> messages, const Context& ctx) {
  if (!impl_) return PutResult{moved_from()};
  std::vector<std::string_view> views(messages.begin(), messages.end());
  return impl_->put(views, ctx, true);
}

PutResult PressureQueue::try_put_many(std::span<const std::string> messages) {
  if (!impl_) return PutResult{moved_from()};
  std::vector<std::string_view> views(messages.begin(), messages.end());
  return impl_->put(views, Context(), false);
}

Result<std::string> PressureQueue::get(const Context& ctx) {
  if (!impl_) return moved_from();
  std::vector<std::string> out;
  if (Status s = impl_->get(out, 1, ctx, true); !s.ok()) return s;
  return std::move(out.front());
}

Result<std::string> PressureQueue::try_get() {
  if (!impl_) return moved_from();
  std::vector<std::string> out;
  if (Status s = impl_->get(out, 1, Context(), false); !s.ok()) return s;
  return std::move(out.front());
}

Status PressureQueue::get_many(std::vector<std::string>& out, std::size_t max, const Context& ctx) {
  if (!impl_) return moved_from();
  return impl_->get(out, max, ctx, true);
}

Status PressureQueue::try_get_many(std::vector<std::string>& out, std::size_t max) {
  if (!impl_) return moved_from();
  return impl_->get(out, max, Context(), false);
}

Result<std::string> PressureQueue::get_reliable(std::string_view consumer, const Context& ctx) {
  if (!impl_) return moved_from();
  std::vector<std::string> out;
  if (Status s = get_many_reliable(consumer, out, 1, ctx); !s.ok()) return s;
  return std::move(out.front());
}

Status PressureQueue::get_many_reliable(std::string_view consumer, std::vector<std::string>& out,
                                        std::size_t max, const Context& ctx) {
  if (!impl_) return moved_from();
  if (consumer.empty())
    return {StatusCode::kInvalidArgument, "a reliable get needs a consumer name"};
  return impl_->get(out, max, ctx, true, consumer);
}

Status PressureQueue::ack(std::string_view consumer, std::size_t n) {
  if (!impl_) return moved_from();
  if (consumer.empty() || n == 0) {
    return {StatusCode::kInvalidArgument, "ack needs a consumer name and n >= 1"};
  }
  const std::string count = std::to_string(n);
  const std::array<std::string_view, 2> extra = {count, consumer};
  impl_->key13 = impl_->inflight_of(consumer);
  Answer a;
  CallError err;
  if (Status s = impl_->run("ack", extra, a, err); !s.ok()) {
    // Not idempotent: a retry of one that ran acknowledges n more.
    if (err.maybe_ran) {
      return {StatusCode::kUnavailable,
              std::string(s.message()) + "; whether the " + count +
                  " oldest in-flight message(s) were acknowledged is unknown (see inflight(): a "
                  "retry of an ack that ran acknowledges as many more)"};
    }
    return s;
  }
  if (a.word == "STALE" && a.size() == 2) return impl_->stale(consumer, integer(a.at(1)));
  if (a.word == "NONE") {
    return {StatusCode::kNotFound,
            "consumer '" + std::string(consumer) + "' has nothing in flight"};
  }
  if (a.word != "OK") return unexpected(a.reply.get());
  return Status::Ok();
}

Result<std::vector<std::string>> PressureQueue::inflight(std::string_view consumer) {
  if (!impl_) return moved_from();
  const std::string key = impl_->inflight_of(consumer);
  const std::array<std::string_view, 4> argv = {"LRANGE", key, "0", "-1"};
  CallError err;
  Reply r = impl_->conn.call(argv, err);
  if (!r) return err.status;
  if (r->type == REDIS_REPLY_ERROR) return impl_->conn.error_reply(text(r.get()));
  if (r->type != REDIS_REPLY_ARRAY) return unexpected(r.get());
  std::vector<std::string> out;
  for (std::size_t i = r->elements; i-- > 0;) out.emplace_back(text(r->element[i]));
  return out;
}

Result<std::uint64_t> PressureQueue::requeue_inflight(std::string_view consumer) {
  if (!impl_) return moved_from();
  return impl_->requeue(consumer);
}

Result<std::uint64_t> PressureQueue::requeue_orphans(std::string_view tag) {
  if (!impl_) return moved_from();
  const std::string set_key = impl_->keys[kData] + ":inflight";
  const std::array<std::string_view, 2> argv = {"SMEMBERS", set_key};
  CallError err;
  Reply r = impl_->conn.call(argv, err);
  if (!r) return err.status;
  if (r->type == REDIS_REPLY_ERROR) return impl_->conn.error_reply(text(r.get()));
  if (r->type != REDIS_REPLY_ARRAY) return unexpected(r.get());
  std::vector<std::string> members;
  for (std::size_t i = 0; i < r->elements; ++i) members.emplace_back(text(r->element[i]));
  std::uint64_t total = 0;
  for (const std::string& m : members) {
    if (!std::string_view(m).starts_with(tag)) continue;
    const std::string_view holder = std::string_view(m).substr(tag.size());
    if (holder_gone(holder, [&] { return impl_->client_list(); }) != std::optional<bool>(true)) {
      continue;
    }
    bool was_stale = false;
    auto n = impl_->requeue(m, &was_stale);
    if (was_stale) continue;  // an earlier queue's: dropped, not this queue's to get
    if (!n.ok()) return n.status();
    total += *n;
  }
  return total;
}

Result<std::vector<std::string>> PressureQueue::list(const RedisOptions& options) {
  redis::Connection conn(options, process_id());
  constexpr std::string_view kTail = ":bound";
  // Strings only: a list named so is a queue's data or an in-flight list
  // (of a queue named "N:bound", of a consumer named "bound").
  auto keys = redis::scan_keys(conn, options.prefix + ":", "*:bound", "string");
  if (!keys.ok()) return keys.status();
  const std::size_t head = options.prefix.size() + 1;
  std::vector<std::string> names;
  for (const std::string& k : *keys) {
    // "P:N:bound": P may itself hold ':', so cut by length, not by search.
    if (k.size() <= head + kTail.size()) continue;
    names.push_back(k.substr(head, k.size() - head - kTail.size()));
  }
  std::sort(names.begin(), names.end());  // "a.b:bound" sorts before "a:bound"
  return names;
}

Status PressureQueue::close(const Context& ctx) {
  if (!impl_) return moved_from();
  if (ctx.stop_requested()) return StatusCode::kCancelled;
  Context::Clock::time_point recover_at{};
  for (;;) {
    Answer a;
    if (Status s = impl_->change("close", {}, a, "closed"); !s.ok()) return s;
    if (a.word == "OK") return Status::Ok();
    if (a.word == "CLOSED") {
      return {StatusCode::kClosed, "pressure queue '" + impl_->name + "' was already closed"};
    }
    if (a.word != "INUSE") return unexpected(a.reply.get());
    impl_->waiting_for(kProducerRole, recover_at);
    if (Status s = impl_->wait_on(kProducerFree, ctx); !s.ok()) return s;
  }
}

Result<std::uint64_t> PressureQueue::destroy(const Context& ctx) {
  if (!impl_) return moved_from();
  if (ctx.stop_requested()) return StatusCode::kCancelled;
  Context::Clock::time_point recover_at{};
  // How long the script's :deleting mark outlives each step: well past the
  // next one (a wait of at most io_timeout / 2, then a round trip), so that
  // a sluice put or get woken by the close always finds it, and gone soon
  // after a deleter that died (pressure.lua, the top).
  const std::string lease = std::to_string(2 * impl_->conn.options().io_timeout.count() + 1000);
  const std::array<std::string_view, 1> extra = {lease};
  for (;;) {
    Answer a;
    impl_->key13 = impl_->purged_key;
    if (Status s = impl_->change("delete", extra, a, "deleted"); !s.ok()) return s;
    if (a.word == "OK") return integer(a.at(1));
    if (a.word != "BUSY" || a.size() != 3) return unexpected(a.reply.get());
    // Closed and woken; wait for whoever holds a role to give it back.
    const bool producer = integer(a.at(1)) == 0;
    impl_->waiting_for(producer ? kProducerRole : kConsumerRole, recover_at);
    if (Status s = impl_->wait_on(producer ? kProducerFree : kConsumerFree, ctx); !s.ok()) {
      // Given up: the queue stays, closed, and its waiters may end as at
      // a close. Best effort: if Redis cannot be reached, the mark expires.
      Answer b;
      CallError err;
      (void)impl_->run("undelete", {}, b, err);
      return s;
    }
  }
}

Result<RepairReport> PressureQueue::repair(bool force) {
  if (!impl_) return moved_from();
  RepairReport report;
  auto st = stats();
  if (!st.ok()) return st.status();
  // CLIENT LIST only when a holder on another host needs it, and once.
  std::optional<std::string> clients;
  Status list_error;
  bool listed = false;
  const auto client_list = [&]() -> std::optional<std::string> {
    if (!listed) {
      listed = true;
      const std::array<std::string_view, 2> argv = {"CLIENT", "LIST"};
      CallError err;
      Reply r = impl_->conn.call(argv, err);
      if (!r) {
        list_error = err.status;
      } else if (r->type == REDIS_REPLY_ERROR) {
        list_error = impl_->conn.error_reply(text(r.get()));
      } else {
        clients = std::string(text(r.get()));
      }
    }
    return clients;
  };
  struct RoleState {
    const char* name;
    bool free;
    const std::string& holder;
  };
  const std::array<RoleState, 2> roles = {RoleState{"producer", st->producer_free, st->producer},
                                          RoleState{"consumer", st->consumer_free, st->consumer}};
  for (const RoleState& role : roles) {
    if (role.free) continue;
    const std::string who = role.holder.empty() ? std::string("nobody recorded") : role.holder;
    const std::optional<bool> gone = holder_gone(role.holder, client_list);
    if (!list_error.ok()) return list_error;
    if (gone == std::optional<bool>(false)) {
      report.left_alone.push_back(std::string(role.name) + " role is held by " + who +
                                  ", which is alive");
      continue;
    }
    if (!gone && !force) {
      report.left_alone.push_back(std::string(role.name) + " role is held by " + who +
                                  ", which cannot be checked from here (use force)");
      continue;
    }
    const std::array<std::string_view, 2> extra = {role.name, role.holder};
    Answer a;
    CallError err;
    if (Status s = impl_->run("restore_token", extra, a, err); !s.ok()) return s;
    if (a.word == "OK") {
      report.repaired.push_back("restored the " + std::string(role.name) + " token held by " + who +
                                (gone ? " (gone)" : " (forced)"));
    } else {
      report.left_alone.push_back(std::string(role.name) +
                                  " role changed hands while checking; nothing done");
    }
  }
  Answer a;
  if (Status s = impl_->run("tidy", a); !s.ok()) return s;
  if (a.word != "OK") return unexpected(a.reply.get());
  for (std::size_t k = 1; k < a.size(); ++k) report.repaired.emplace_back(text(a.at(k)));
  return report;
}

}  // namespace sluice
