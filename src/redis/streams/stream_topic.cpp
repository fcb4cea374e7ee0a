#include "sluice/redis/stream_topic.h"

#include <hiredis/hiredis.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "redis/streams/stream_script.h"
#include "redis/transport/connection.h"
#include "redis/transport/host_id.h"

namespace sluice {
namespace {

using redis::CallError;
using redis::Reply;

// Key order shared with stream.lua.
constexpr std::array<std::string_view, 6> kSuffix = {":stream", ":meta", ":acked",
                                                     ":wake",   ":dead", ":index"};
enum Key : std::size_t { kStream, kMeta, kAcked, kWake, kDead, kIndex };

// The keys as the scripts take them (KEYS), in stream.lua's order.
std::array<std::string_view, kSuffix.size()> key_views(const std::vector<std::string>& keys) {
  std::array<std::string_view, kSuffix.size()> k;
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = keys[i];
  return k;
}

// Messages per append script (and ids per ack or nack): one script never
// stalls the server for long, and Lua's unpack() stays within its limit.
constexpr std::size_t kChunk = 1024;
// Appends between two retention passes.
constexpr std::uint64_t kTrimEvery = 1024;

std::string_view text(const redisReply* r) {
  return r != nullptr && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
                          r->type == REDIS_REPLY_ERROR)
             ? std::string_view(r->str, r->len)
             : std::string_view();
}

std::uint64_t integer(const redisReply* r) {
  if (r == nullptr) return 0;
  if (r->type == REDIS_REPLY_INTEGER) return static_cast<std::uint64_t>(std::max(r->integer, 0LL));
  std::uint64_t v = 0;
  const std::string_view s = text(r);
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}

Status unexpected(const redis::Connection& conn, std::string_view what) {
  return {StatusCode::kInternal,
          "redis at " + conn.address() + ": unexpected reply to " + std::string(what)};
}

// Error replies that say "not now" rather than "never": the server is
// loading its data, out of memory, running a long script, or not the
// primary (any more). The call did not run. UNBLOCKED (other than for a
// deleted stream, which failed() tells first): a blocking call (XREADGROUP,
// BLPOP) ended by the server becoming a replica, as in a failover.
bool transient(std::string_view t) {
  const std::string_view word = t.substr(0, t.find(' '));
  return word == "LOADING" || word == "OOM" || word == "BUSY" || word == "MASTERDOWN" ||
         word == "TRYAGAIN" || word == "CLUSTERDOWN" || word == "READONLY" || word == "MOVED" ||
         word == "ASK" ||  // redirections still going round: a slot in flux
         word == "UNBLOCKED";
}

std::chrono::milliseconds millis(const redisReply* r) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(
      std::min<std::uint64_t>(integer(r), static_cast<std::uint64_t>(INT64_MAX))));
}

// "ms-seq" as two numbers, for putting ids in stream order.
std::pair<std::uint64_t, std::uint64_t> id_parts(std::string_view id) {
  std::uint64_t ms = 0, seq = 0;
  const auto dash = id.find('-');
  std::from_chars(id.data(), id.data() + std::min(dash, id.size()), ms);
  if (dash != std::string_view::npos)
    std::from_chars(id.data() + dash + 1, id.data() + id.size(), seq);
  return {ms, seq};
}

// An entry id as the scripts take it, "ms-seq" ("ms" is "ms-0"): digits,
// each part within 64 bits. nullopt if `id` is not one.
std::optional<std::string> normal_id(std::string_view id) {
  const auto part = [](std::string_view p, std::uint64_t& v) {
    if (p.empty() || p.size() > 20) return false;
    auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), v);
    return ec == std::errc() && end == p.data() + p.size();
  };
  std::uint64_t ms = 0, seq = 0;
  const auto dash = id.find('-');
  if (!part(id.substr(0, dash), ms)) return std::nullopt;
  if (dash != std::string_view::npos && !part(id.substr(dash + 1), seq)) return std::nullopt;
  return std::to_string(ms) + "-" + std::to_string(seq);
}

Status bad_id(std::string_view what, std::string_view id) {
  return {StatusCode::kInvalidArgument,
          std::string(what) + ": '" + std::string(id) +
              "' is not a stream entry id (\"<ms>-<seq>\" or \"<ms>\")"};
}

// A stream entry {id, {field, value, ...}} as a message (payload: field d);
// false if the reply has another shape.
bool parse_entry(const redisReply* e, StreamMessage& m) {
  if (e == nullptr || e->type != REDIS_REPLY_ARRAY || e->elements != 2) return false;
  m.id = std::string(text(e->element[0]));
  const redisReply* fields = e->element[1];
  for (std::size_t f = 0; fields->type == REDIS_REPLY_ARRAY && f + 1 < fields->elements; f += 2) {
    if (text(fields->element[f]) == "d") m.payload = std::string(text(fields->element[f + 1]));
  }
  return true;
}

// Names go inside a hash tag and key names: no braces, no blanks.
Status check_name(std::string_view kind, std::string_view name) {
  const bool bad =
      name.empty() || name.size() > 200 || std::any_of(name.begin(), name.end(), [](char c) {
        return c == '{' || c == '}' || static_cast<unsigned char>(c) <= ' ';
      });
  if (!bad) return Status::Ok();
  return {StatusCode::kInvalidArgument, "bad " + std::string(kind) + " name '" + std::string(name) +
                                            "': 1-200 characters, no braces or blanks"};
}

std::string consumer_name() {
  static std::atomic<unsigned> counter{0};
  return redis::host_id() + "_pid" + std::to_string(getpid()) + "_c" +
         std::to_string(counter.fetch_add(1, std::memory_order_relaxed));  // only unique
}

// The Status for a failed call: a lost connection as Connection reports
// it; an error reply by what it means, naming the server.
Status failed(const redis::Connection& conn, const redisReply* r, std::string_view what) {
  if (r->type != REDIS_REPLY_ERROR) return unexpected(conn, what);
  const std::string_view t = text(r);
  if (t.starts_with("NOTOPIC")) {
    return {StatusCode::kNotFound, "redis at " + conn.address() + " (" + std::string(what) +
                                       "): " + std::string(t.substr(8))};
  }
  if (t.starts_with("CLOSED")) {
    return {StatusCode::kClosed, "redis at " + conn.address() + " (" + std::string(what) +
                                     "): " + std::string(t.substr(7))};
  }
  if (t.starts_with("UNBLOCKED the stream key no longer exists")) {
    // A read blocked on the server when another client deleted the topic.
    return {StatusCode::kNotFound, "redis at " + conn.address() + " (" + std::string(what) +
                                       "): the topic was deleted while this read waited"};
  }
  if (t.starts_with("NOGROUP")) {
    return {StatusCode::kNotFound,
            "redis at " + conn.address() + " (" + std::string(what) +
                "): the channel does not exist (deleted?): " + std::string(t)};
  }
  if (transient(t)) {
    return {StatusCode::kUnavailable, "redis at " + conn.address() + " cannot take " +
                                          std::string(what) + " now: " + std::string(t)};
  }
  Status s = conn.error_reply(t);  // authentication, permissions: kInvalidArgument
  if (s.code() != StatusCode::kInternal) return s;
  return {StatusCode::kInternal,
          "redis error at " + conn.address() + " (" + std::string(what) + "): " + std::string(t)};
}

Status failed(const redis::Connection& conn, const Reply& r, const CallError& err,
              std::string_view what) {
  if (!r) return err.status;
  return failed(conn, r.get(), what);
}

// Runs the topic's script: keys in stream.lua's order, then the operation
// and its arguments.
Reply run(redis::Connection& conn, const std::vector<std::string>& keys,
          std::span<const std::string_view> args, CallError& err) {
  const auto k = key_views(keys);
  return conn.eval(redis::stream_script(), k, args, err);
}

// run(), with `then` pipelined behind the script (Connection::eval_then).
Reply run_then(redis::Connection& conn, const std::vector<std::string>& keys,
               std::span<const std::string_view> args, std::span<const std::string_view> then,
               Reply& then_reply, CallError& err, CallError& then_err) {
  const auto k = key_views(keys);
  return conn.eval_then(redis::stream_script(), k, args, then, then_reply, err, then_err);
}

// Why an append's WAIT did not confirm `want` replicas (OK if it did):
// its reply, an error reply, or the connection breaking before it came.
Status replicated(const redis::Connection& conn, const Reply& w, const CallError& werr,
                  std::uint32_t want, std::int64_t wait_ms) {
  if (!w) return werr.status;
  if (w->type == REDIS_REPLY_INTEGER && w->integer >= static_cast<long long>(want)) {
    return Status::Ok();
  }
  if (w->type == REDIS_REPLY_INTEGER) {
    return {StatusCode::kUnavailable,
            "redis at " + conn.address() + ": only " + std::to_string(w->integer) + " of the " +
                std::to_string(want) + " replicas the topic asks for acknowledged the " +
                "append within " + std::to_string(wait_ms) + " ms"};
  }
  return {StatusCode::kUnavailable,
          "redis at " + conn.address() +
              ": WAIT for the replicas failed: " + std::string(text(w.get()))};
}

// One wait slice: the smaller of wait_slice, io_timeout / 2 (a quiet wait
// must not look like a dead server) and what is left before the deadline.
// False, with *s set, if ctx has ended.
bool slice_left(const Context& ctx, const RedisOptions& o, std::chrono::milliseconds& out,
                Status* s) {
  if (StatusCode e = ctx.err(); e != StatusCode::kOk) {
    *s = Status(e);
    return false;
  }
  out = std::min(o.wait_slice, o.io_timeout / 2);
  if (ctx.deadline()) {
    out = std::min(
        out, std::chrono::ceil<std::chrono::milliseconds>(*ctx.deadline() - Context::Clock::now()));
  }
  out = std::max(out, std::chrono::milliseconds(1));  // 0 would wait for ever
  return true;
}

}  // namespace

std::chrono::system_clock::time_point stream_id_time(std::string_view id) noexcept {
  using std::chrono::system_clock;
  std::uint64_t ms = 0;
  const std::string_view head = id.substr(0, id.find('-'));
  auto [end, ec] = std::from_chars(head.data(), head.data() + head.size(), ms);
  if (head.empty() || ec != std::errc() || end != head.data() + head.size()) return {};
  // Past what the clock's type holds (year 2262 with nanoseconds): its end.
  constexpr auto kMost =
      std::chrono::duration_cast<std::chrono::milliseconds>(system_clock::duration::max()).count();
  if (ms > static_cast<std::uint64_t>(kMost)) return system_clock::time_point::max();
  return system_clock::time_point(std::chrono::duration_cast<system_clock::duration>(
      std::chrono::milliseconds(static_cast<std::int64_t>(ms))));
}

// ---- StreamTopic ----

StreamTopic::StreamTopic(RedisOptions redis, std::string name, StreamTopicOptions options)
    : name_(std::move(name)), opt_(std::move(options)) {
  const std::string base = opt_.prefix + ":{" + name_ + "}";
  for (std::string_view s : kSuffix) keys_.push_back(base + std::string(s));
  conn_ = std::make_unique<redis::Connection>(std::move(redis), consumer_name(),
                                              std::vector{&redis::stream_script()});
}

StreamTopic::~StreamTopic() = default;
StreamTopic::StreamTopic(StreamTopic&&) noexcept = default;
StreamTopic& StreamTopic::operator=(StreamTopic&&) noexcept = default;

Status StreamTopic::validate() const {
  // A moved-from handle refuses every call instead of crashing.
  if (!conn_) return {StatusCode::kInvalidArgument, "this StreamTopic handle was moved from"};
  if (Status s = check_name("topic", name_); !s.ok()) return s;
  if (opt_.prefix.find_first_of("{}") != std::string::npos) {
    return {StatusCode::kInvalidArgument,
            "StreamTopicOptions::prefix '" + opt_.prefix + "' has a brace"};
  }
  if (opt_.visibility_timeout <= std::chrono::milliseconds(0)) {
    return {StatusCode::kInvalidArgument, "StreamTopicOptions::visibility_timeout must be > 0"};
  }
  if (opt_.max_retained_age < std::chrono::milliseconds(0)) {
    return {StatusCode::kInvalidArgument, "StreamTopicOptions::max_retained_age must be >= 0"};
  }
  if (opt_.max_deliveries == 0) {
    return {StatusCode::kInvalidArgument, "StreamTopicOptions::max_deliveries must be >= 1"};
  }
  return Status::Ok();
}

Result<std::string> StreamTopic::append(std::string_view payload, const Context& ctx) {
  std::string id;
  std::size_t done = 0;
  const std::string_view one[] = {payload};
  Status s = append_impl(one, ctx, &done, &id);
  if (!s.ok()) return s;
  return id;
}

Status StreamTopic::append_batch(std::span<const std::string_view> batch, const Context& ctx,
                                 std::size_t* done) {
  std::size_t n = 0;
  Status s = append_impl(batch, ctx, &n, nullptr);
  if (done != nullptr) *done = n;
  return s;
}

Status StreamTopic::append_impl(std::span<const std::string_view> batch, const Context& ctx,
                                std::size_t* done, std::string* first_id) {
  *done = 0;
  in_doubt_ = 0;
  if (Status s = validate(); !s.ok()) return s;
  if (StatusCode e = ctx.err(); e != StatusCode::kOk) return e;
  const std::string bound = std::to_string(opt_.max_unconsumed);
  const std::string cap = std::to_string(opt_.max_retained_messages);
  const std::string age = std::to_string(opt_.max_retained_age.count());
  // WAIT's own timeout, inside the connection's (io_timeout), so its reply
  // comes before the socket gives up on it.
  const std::int64_t wait_ms =
      std::max<std::int64_t>(conn_->options().io_timeout.count() * 3 / 4, 1);
  const std::string wait_timeout = std::to_string(wait_ms);
  std::vector<std::string_view> args;
  bool waited = false;
  while (*done < batch.size()) {
    const std::size_t take = std::min(kChunk, batch.size() - *done);
    args.assign(
        {"append", bound, cap, age, waited ? "1" : "0", opt_.create_if_missing ? "0" : "1"});
    args.insert(args.end(), batch.begin() + static_cast<std::ptrdiff_t>(*done),
                batch.begin() + static_cast<std::ptrdiff_t>(*done + take));
    CallError err;
    CallError wait_err;
    Reply waited_for;
    // The replicas to wait for, as far as this handle knows (the topic's
    // recorded value came with the last append's reply): WAIT goes in the
    // script's round trip. Not after a wait at the bound, when the script
    // may add nothing and a WAIT would wait for nothing.
    const std::uint32_t asked = std::max(opt_.replicas, recorded_replicas_);
    const std::string asked_text = std::to_string(asked);
    const std::string_view wait_asked[] = {"WAIT", asked_text, wait_timeout};
    Reply r = asked > 0 && !waited
                  ? run_then(*conn_, keys_, args, wait_asked, waited_for, err, wait_err)
                  : run(*conn_, keys_, args, err);
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 5) {
      Status s = failed(*conn_, r, err, "append");
      if (!r && err.maybe_ran) {
        in_doubt_ = take;
        return {s.code(), std::string(s.message()) + "; " + std::to_string(take) +
                              " messages after the first " + std::to_string(*done) +
                              " may or may not have been appended"};
      }
      return s;
    }
    const std::size_t added = integer(r->element[0]);
    recorded_replicas_ =
        static_cast<std::uint32_t>(std::min<std::uint64_t>(integer(r->element[4]), UINT32_MAX));
    if (const std::uint32_t want = std::max(opt_.replicas, recorded_replicas_);
        added > 0 && want > 0) {
      // Not pipelined (or for too few): WAIT now, one more round trip.
      if ((!waited_for && wait_err.status.ok()) || (waited_for && want > asked)) {
        const std::string want_text = std::to_string(want);
        const std::string_view wait_want[] = {"WAIT", want_text, wait_timeout};
        // Where the script ran: the slot's importing node if it was asked
        // there (a slot migrating), whose replicas are the ones to count.
        waited_for = conn_->call_there(wait_want, wait_err);
      }
      if (Status rs = replicated(*conn_, waited_for, wait_err, want, wait_ms); !rs.ok()) {
        // On the primary, not (known to be) on enough replicas: a failover
        // now could lose them, so they are not acknowledged.
        in_doubt_ = added;
        return {StatusCode::kUnavailable,
                std::string(rs.message()) + "; " + std::to_string(added) +
                    " messages after the first " + std::to_string(*done) +
                    " were appended on the primary and may or may not survive its failover"};
      }
    }
    if (added > 0 && first_id != nullptr && first_id->empty()) {
      *first_id = std::string(text(r->element[2]));
    }
    *done += added;
    since_trim_ += added;
    if (added == take) continue;
    // At the bound: the rest waits for acknowledgements.
    if (opt_.on_bound == BoundPolicy::kFail) {
      return {StatusCode::kRejected, "topic '" + name_ + "' at " + conn_->address() +
                                         " is at its bound of " + bound +
                                         " messages not acknowledged by its slowest channel"};
    }
    std::chrono::milliseconds slice{};
    Status why;
    if (!slice_left(ctx, conn_->options(), slice, &why)) return why;
    std::array<char, 32> secs{};
    std::snprintf(secs.data(), secs.size(), "%.3f", static_cast<double>(slice.count()) / 1e3);
    const std::string_view wait[] = {"BLPOP", keys_[kWake], secs.data()};
    CallError werr;
    const auto t0 = std::chrono::steady_clock::now();
    Reply w = conn_->call_blocking(wait, ctx, werr);  // ends at ctx's deadline or stop
    bound_wait_ns_->fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count(),
        std::memory_order_relaxed);
    if (!w) return werr.status;  // nothing was appended by the wait: nothing in doubt
    if (w->type == REDIS_REPLY_ERROR) return failed(*conn_, w, werr, "BLPOP");
    waited = true;
  }
  if (since_trim_ >= kTrimEvery) {
    since_trim_ = 0;
    (void)trim();  // retention is best effort here: a failure shows at the next call
  }
  return Status::Ok();
}

Status StreamTopic::create(std::span<const std::string> channels) {
  if (Status s = validate(); !s.ok()) return s;
  for (const std::string& c : channels) {
    if (Status s = check_name("channel", c); !s.ok()) return s;
  }
  const std::string bound = std::to_string(opt_.max_unconsumed);
  const std::string cap = std::to_string(opt_.max_retained_messages);
  const std::string age = std::to_string(opt_.max_retained_age.count());
  const std::string replicas = std::to_string(opt_.replicas);
  std::vector<std::string_view> args = {"create", bound, cap, age, replicas};
  args.insert(args.end(), channels.begin(), channels.end());
  CallError err;
  Reply r = run(*conn_, keys_, args, err);
  if (!r || r->type != REDIS_REPLY_INTEGER) return failed(*conn_, r, err, "create");
  if (r->integer == 0) {
    return {StatusCode::kAlreadyExists,
            "topic '" + name_ + "' at " + conn_->address() + " already exists"};
  }
  return Status::Ok();
}

Status StreamTopic::close() {
  if (Status s = validate(); !s.ok()) return s;
  const std::string_view args[] = {"close"};
  CallError err;
  Reply r = run(*conn_, keys_, args, err);
  if (!r || r->type != REDIS_REPLY_INTEGER) return failed(*conn_, r, err, "close");
  if (r->integer == 0) {
    return {StatusCode::kNotFound,
            "topic '" + name_ + "' at " + conn_->address() + " does not exist"};
  }
  return Status::Ok();
}

Result<std::uint64_t> StreamTopic::trim() {
  if (Status s = validate(); !s.ok()) return s;
  const std::string age = std::to_string(opt_.max_retained_age.count());
  const std::string_view args[] = {"trim", age};
  CallError err;
  Reply r = run(*conn_, keys_, args, err);
  if (!r || r->type != REDIS_REPLY_INTEGER) return failed(*conn_, r, err, "trim");
  return integer(r.get());
}

Result<StreamTopicStats> StreamTopic::stats() {
  if (Status s = validate(); !s.ok()) return s;
  const std::string_view args[] = {"stats"};
  CallError err;
  Reply r = run(*conn_, keys_, args, err);
  if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 13 ||
      r->element[5]->type != REDIS_REPLY_ARRAY) {
    return failed(*conn_, r, err, "stats");
  }
  StreamTopicStats st;
  st.appended = integer(r->element[0]);
  st.retained = integer(r->element[1]);
  st.trimmed = integer(r->element[2]);
  st.dead_letters = integer(r->element[3]);
  st.records_dropped = integer(r->element[4]);
  st.bound = integer(r->element[6]);
  st.closed = integer(r->element[7]) != 0;
  st.exists = integer(r->element[8]) != 0;
  st.max_retained_messages = integer(r->element[9]);
  st.max_retained_age = millis(r->element[10]);
  st.replicas =
      static_cast<std::uint32_t>(std::min<std::uint64_t>(integer(r->element[11]), UINT32_MAX));
  if (r->element[12]->type == REDIS_REPLY_INTEGER && r->element[12]->integer >= 0) {
    st.appended_bytes = static_cast<std::uint64_t>(r->element[12]->integer);
  }
  const redisReply* chans = r->element[5];
  for (std::size_t i = 0; i < chans->elements; ++i) {
    const redisReply* c = chans->element[i];
    if (c->type != REDIS_REPLY_ARRAY || c->elements != 7) return unexpected(*conn_, "stats");
    StreamChannelStats cs;
    cs.name = std::string(text(c->element[0]));
    const std::uint64_t acked = integer(c->element[1]);
    cs.unacknowledged = st.appended > acked ? st.appended - acked : 0;
    cs.pending = integer(c->element[2]);
    cs.dead_lettered = integer(c->element[3]);
    cs.skipped_retention = integer(c->element[4]);
    cs.visibility_timeout = millis(c->element[5]);
    cs.purged = integer(c->element[6]);
    st.channels.push_back(std::move(cs));
  }
  std::sort(st.channels.begin(), st.channels.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  return st;
}

Result<StreamChannel> StreamTopic::channel(std::string_view name) {
  if (Status s = validate(); !s.ok()) return s;
  StreamChannel c(conn_->options(), name_, std::string(name), opt_);
  if (Status s = c.join(); !s.ok()) return s;
  return c;
}

Result<std::vector<std::string>> StreamTopic::channels() {
  if (Status s = validate(); !s.ok()) return s;
  const std::string_view args[] = {"channels"};
  CallError err;
  Reply r = run(*conn_, keys_, args, err);
  if (!r || r->type != REDIS_REPLY_ARRAY) return failed(*conn_, r, err, "channels");
  std::vector<std::string> out;
  for (std::size_t i = 0; i < r->elements; ++i) out.emplace_back(text(r->element[i]));
  std::sort(out.begin(), out.end());
  return out;
}

Status StreamTopic::delete_channel(std::string_view name) {
  if (Status s = validate(); !s.ok()) return s;
  if (Status s = check_name("channel", name); !s.ok()) return s;
  const std::string_view args[] = {"leave", name};
  CallError err;
  Reply r = run(*conn_, keys_, args, err);
  if (!r || r->type != REDIS_REPLY_INTEGER) return failed(*conn_, r, err, "delete_channel");
  if (r->integer == 0) {
    return {StatusCode::kNotFound, "topic '" + name_ + "' at " + conn_->address() +
                                       " has no channel '" + std::string(name) + "'"};
  }
  return Status::Ok();
}

Status StreamTopic::destroy() {
  if (Status s = validate(); !s.ok()) return s;
  const std::string_view args[] = {"destroy"};
  CallError err;
  Reply r = run(*conn_, keys_, args, err);
  if (!r || r->type != REDIS_REPLY_INTEGER) return failed(*conn_, r, err, "destroy");
  return Status::Ok();
}

Result<std::string> StreamTopic::newest_id() {
  if (Status s = validate(); !s.ok()) return s;
  const std::string_view argv[] = {"XREVRANGE", keys_[kStream], "+", "-", "COUNT", "1"};
  CallError err;
  Reply r = conn_->call(argv, err);
  if (!r || r->type != REDIS_REPLY_ARRAY) return failed(*conn_, r, err, "XREVRANGE");
  if (r->elements == 0) return std::string("0-0");
  const redisReply* e = r->element[0];
  if (e->type != REDIS_REPLY_ARRAY || e->elements < 1 ||
      e->element[0]->type != REDIS_REPLY_STRING) {
    return unexpected(*conn_, "XREVRANGE");
  }
  return std::string(text(e->element[0]));
}

Result<std::vector<StreamMessage>> StreamTopic::peek(std::string_view channel,
                                                     std::string_view after_id, std::size_t max,
                                                     std::string_view until_id) {
  if (Status s = validate(); !s.ok()) return s;
  if (Status s = check_name("channel", channel); !s.ok()) return s;
  if (max == 0) return Status{StatusCode::kInvalidArgument, "StreamTopic::peek: max is 0"};
  std::string after;
  if (!after_id.empty()) {
    auto id = normal_id(after_id);
    if (!id) return bad_id("StreamTopic::peek", after_id);
    after = std::move(*id);
  }
  std::optional<std::pair<std::uint64_t, std::uint64_t>> until;
  if (!until_id.empty()) {
    auto id = normal_id(until_id);
    if (!id) return bad_id("StreamTopic::peek", until_id);
    until = id_parts(*id);
  }
  // The script's counts are Lua numbers: keep them well inside 2^53.
  const std::string count = std::to_string(std::min<std::size_t>(max, INT32_MAX));
  CallError err;
  // Paging (after an id): the script for the pending ones and the channel's
  // position, and a plain XRANGE for those after `after_id`, in one
  // MULTI/EXEC (a snapshot). XRANGE's reply through Lua would cost the
  // server three times as much. The script says when the XRANGE is of no
  // use (`after_id` before the channel's position) and reads them itself.
  Reply multi;
  const redisReply* r = nullptr;
  const redisReply* fresh = nullptr;
  if (!after.empty()) {
    const std::string from = "(" + after;
    const std::string_view args[] = {"peek", channel, after, count, "1"};
    const std::string_view xrange[] = {"XRANGE", keys_[kStream], from, "+", "COUNT", count};
    const auto k = key_views(keys_);
    multi = conn_->eval_multi(redis::stream_script(), k, args, xrange, err);
    if (!multi && !err.status.ok()) return err.status;
    if (multi) {
      r = multi->element[0];
      if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
          r->element[1]->type == REDIS_REPLY_INTEGER) {
        fresh = multi->element[1];
        if (fresh->type != REDIS_REPLY_ARRAY) return unexpected(*conn_, "peek's XRANGE");
      }
    }
  }
  Reply single;
  if (r == nullptr) {
    const std::string_view args[] = {"peek", channel, after, count};
    single = run(*conn_, keys_, args, err);
    if (!single) return failed(*conn_, single, err, "peek");
    r = single.get();
  }
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
      r->element[0]->type != REDIS_REPLY_ARRAY || r->element[0]->elements % 3 != 0 ||
      (fresh == nullptr && r->element[1]->type != REDIS_REPLY_ARRAY)) {
    return failed(*conn_, r, "peek");
  }
  if (fresh == nullptr) fresh = r->element[1];
  // Pending ones (with their delivery counts) and those not delivered yet,
  // each in id order: merged, an id in both counted as pending.
  const redisReply* held = r->element[0];
  std::vector<StreamMessage> out;
  out.reserve(std::min<std::size_t>(max, held->elements / 3 + fresh->elements));
  std::size_t h = 0, f = 0;
  StreamMessage next_fresh;
  bool have_fresh = false;
  while (out.size() < max) {
    if (!have_fresh && f < fresh->elements) {
      if (!parse_entry(fresh->element[f++], next_fresh)) return unexpected(*conn_, "peek");
      next_fresh.deliveries = 0;
      have_fresh = true;
    }
    const bool have_held = h < held->elements;
    if (!have_held && !have_fresh) break;
    if (have_held) {
      const std::string_view id = text(held->element[h]);
      if (!have_fresh || id_parts(id) <= id_parts(next_fresh.id)) {
        if (have_fresh && id == next_fresh.id) have_fresh = false;  // pending wins
        out.push_back({std::string(id), std::string(text(held->element[h + 1])),
                       static_cast<std::uint32_t>(
                           std::min<std::uint64_t>(integer(held->element[h + 2]), UINT32_MAX))});
        h += 3;
        continue;
      }
    }
    out.push_back(std::move(next_fresh));
    next_fresh = StreamMessage{};
    have_fresh = false;
  }
  if (until) {  // in id order: the rest is past it
    const auto past = std::find_if(out.begin(), out.end(),
                                   [&](const StreamMessage& m) { return id_parts(m.id) > *until; });
    out.erase(past, out.end());
  }
  return out;
}

Status StreamTopic::seek_impl(std::string_view channel, const std::string& id,
                              StreamSeekResult* where) {
  const std::string_view args[] = {"seek", channel, id};
  CallError err;
  Reply r = run(*conn_, keys_, args, err);
  if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 6) {
    Status s = failed(*conn_, r, err, "seek");
    if (!r && err.maybe_ran) {
      return {s.code(), std::string(s.message()) + "; whether channel '" + std::string(channel) +
                            "' moved is unknown (seek again: it lands at the same place)"};
    }
    return s;
  }
  if (where != nullptr) {
    where->position = std::string(text(r->element[0]));
    where->next_id = std::string(text(r->element[1]));
    where->clamped = integer(r->element[2]) != 0;
    where->dropped_pending = integer(r->element[3]);
    where->unacknowledged = integer(r->element[4]);
    where->unacknowledged_before = integer(r->element[5]);
  }
  return Status::Ok();
}

Status StreamTopic::seek(std::string_view channel, std::string_view id, StreamSeekResult* where) {
  if (Status s = validate(); !s.ok()) return s;
  if (Status s = check_name("channel", channel); !s.ok()) return s;
  if (id == "$") return seek_impl(channel, "$", where);
  auto normal = normal_id(id);
  if (!normal) return bad_id("StreamTopic::seek", id);
  return seek_impl(channel, *normal, where);
}

Status StreamTopic::seek_time(std::string_view channel, std::chrono::system_clock::time_point t,
                              StreamSeekResult* where) {
  if (Status s = validate(); !s.ok()) return s;
  if (Status s = check_name("channel", channel); !s.ok()) return s;
  // The first entry of millisecond T is T-0: the position is the last
  // possible id of T - 1.
  const auto ms = std::chrono::floor<std::chrono::milliseconds>(t.time_since_epoch()).count();
  if (ms <= 0) return seek_impl(channel, "0-0", where);
  return seek_impl(channel, std::to_string(ms - 1) + "-" + std::to_string(UINT64_MAX), where);
}

Result<std::uint64_t> StreamTopic::purge(std::string_view channel) {
  if (Status s = validate(); !s.ok()) return s;
  if (Status s = check_name("channel", channel); !s.ok()) return s;
  const std::string_view args[] = {"purge", channel};
  CallError err;
  Reply r = run(*conn_, keys_, args, err);
  if (!r || r->type != REDIS_REPLY_INTEGER) {
    Status s = failed(*conn_, r, err, "purge");
    if (!r && err.maybe_ran) {
      return Status{s.code(), std::string(s.message()) + "; whether channel '" +
                                  std::string(channel) + "' was purged is unknown"};
    }
    return s;
  }
  return integer(r.get());
}

Result<std::vector<std::string>> StreamTopic::list(const RedisOptions& redis,
                                                   std::string_view prefix) {
  redis::Connection conn(redis, consumer_name());
  const std::string head = std::string(prefix) + ":{";
  std::vector<std::string> names;
  // A topic has its stream (made by an append or a channel) or its meta
  // hash (create) or both.
  for (const std::string_view tail : {kSuffix[kStream], kSuffix[kMeta]}) {
    auto keys = redis::scan_keys(conn, head, "*}" + std::string(tail));
    if (!keys.ok()) return keys.status();
    for (const std::string& k : *keys) {
      const std::size_t end = k.size() - tail.size() - 1;  // the closing brace
      if (end > head.size()) names.push_back(k.substr(head.size(), end - head.size()));
    }
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

// ---- StreamChannel::KeepAlive ----

// The ids a keep_alive handle holds, and the thread that keeps them claimed:
// every third of the channel's visibility timeout, a touch script per 1024
// ids (in stream order, so each script's range of the pending list is
// short) on a connection of its own (a hiredis connection is not
// thread-safe). The handle's thread adds ids (next_batch) and removes them
// (ack, nack, give_back).
//
// Locks: mu_ guards the set, the timeout and the schedule; round_mu_ is
// held by a round from before it copies the set until its last reply, and
// a remove() that gives messages back takes it after removing them, so no
// round that still had them runs after the give-back (it would claim them
// back from the channel). Order: round_mu_, then mu_. The thread holds no
// lock while it waits for its next round.
class StreamChannel::KeepAlive {
 public:
  using Clock = std::chrono::steady_clock;

  KeepAlive(RedisOptions redis, std::vector<std::string> keys, std::string channel,
            std::string consumer, std::chrono::milliseconds fallback,
            std::chrono::milliseconds visibility)
      : conn_(std::move(redis), consumer + "_keepalive", {&redis::stream_script()}),
        keys_(std::move(keys)),
        channel_(std::move(channel)),
        consumer_(std::move(consumer)),
        fallback_(std::to_string(fallback.count())),
        visibility_(visibility) {}

  ~KeepAlive() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();  // at most one round in flight: io_timeout
  }
  KeepAlive(const KeepAlive&) = delete;
  KeepAlive& operator=(const KeepAlive&) = delete;

  // Holds out[from...] (just delivered: idle 0). Starts the thread the
  // first time.
  void add(const std::vector<StreamMessage>& out, std::size_t from) {
    {
      std::lock_guard lk(mu_);
      if (held_.empty()) due_ = Clock::now() + period(visibility_);
      for (std::size_t i = from; i < out.size(); ++i) held_[out[i].id] = ++generation_;
    }
    cv_.notify_all();
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }

  // Stops keeping `ids` (all with `all`). `giving_back`: they are about to
  // be given back, so wait for a round in flight, which may still touch
  // them, to end.
  void remove(std::span<const std::string> ids, bool all, bool giving_back) {
    {
      std::lock_guard lk(mu_);
      if (all) {
        held_.clear();
      } else {
        for (const std::string& id : ids) held_.erase(id);
      }
    }
    if (giving_back) {
      std::lock_guard in_flight(round_mu_);  // taken once the round ends, and let go
    }
  }

  // The stop of the handle's last read: once it is requested, a round does
  // not connect again, for io_timeout, to a server that did not answer the
  // last one (the owner is stopping; its destructor waits for a round in
  // flight).
  void stop_with(const std::stop_token& stop) {
    std::lock_guard lk(mu_);
    if (stop != stop_token_) stop_token_ = stop;
  }

  // The channel's timeout, as a read (claim) learned it.
  void set_visibility(std::chrono::milliseconds v) {
    {
      std::lock_guard lk(mu_);
      if (v == visibility_) return;
      visibility_ = v;
      due_ = std::min(due_, last_ + period(v));
    }
    cv_.notify_all();
  }

 private:
  // A third of the timeout: two rounds may fail and the third still comes
  // in time. At least 10 ms, so a tiny timeout does not spin.
  static std::chrono::milliseconds period(std::chrono::milliseconds visibility) {
    return std::max(visibility / 3, std::chrono::milliseconds(10));
  }

  void run() noexcept {
    for (;;) {
      {
        std::unique_lock lk(mu_);
        // Nothing held: sleep until something is. Else until the round is
        // due (add and set_visibility move it earlier, never later).
        cv_.wait(lk, [&] { return stop_ || !held_.empty(); });
        while (!stop_ && !held_.empty() && Clock::now() < due_) {
          cv_.wait_until(lk, due_);
        }
        if (stop_) return;
        if (held_.empty()) continue;
      }
      round();
    }
  }

  // One touch of everything held; best effort: after a failure (the server
  // cannot be reached) the next round tries again, a third of the timeout
  // later; only a whole timeout without a round lets the messages go.
  void round() {
    std::lock_guard in_flight(round_mu_);
    std::vector<std::pair<std::string, std::uint64_t>> ids;
    {
      std::lock_guard lk(mu_);
      if (stop_) return;
      ids.assign(held_.begin(), held_.end());
      conn_.stop_with(stop_token_);
      last_ = Clock::now();
      due_ = last_ + period(visibility_);
    }
    std::sort(ids.begin(), ids.end(),
              [](const auto& a, const auto& b) { return id_parts(a.first) < id_parts(b.first); });
    std::unordered_set<std::string> lost;
    std::chrono::milliseconds learned{0};
    std::vector<std::string_view> args;
    for (std::size_t at = 0; at < ids.size(); at += kChunk) {
      args.assign({"touch", channel_, consumer_, fallback_});
      for (std::size_t i = at; i < std::min(ids.size(), at + kChunk); ++i) {
        args.push_back(ids[i].first);
      }
      CallError err;
      Reply r = run_script(args, err);
      if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
          r->element[1]->type != REDIS_REPLY_ARRAY) {
        break;  // NOGROUP (channel deleted), unreachable: the next round tries again
      }
      learned = millis(r->element[0]);
      const redisReply* gone = r->element[1];
      for (std::size_t i = 0; i < gone->elements; ++i) lost.emplace(text(gone->element[i]));
    }
    std::lock_guard lk(mu_);
    // An id no longer ours (acknowledged by a retried ack, claimed by
    // another after a missed round, dropped) is not kept again, unless it
    // came back to this handle meanwhile (a newer generation).
    for (const auto& [id, gen] : ids) {
      auto it = held_.find(id);
      if (it != held_.end() && it->second == gen && lost.contains(id)) held_.erase(it);
    }
    if (learned.count() > 0 && learned != visibility_) {
      visibility_ = learned;
      due_ = last_ + period(learned);
    }
  }

  Reply run_script(std::span<const std::string_view> args, CallError& err) {
    const auto k = key_views(keys_);
    return conn_.eval(redis::stream_script(), k, args, err);
  }

  redis::Connection conn_;  // the thread's own
  const std::vector<std::string> keys_;
  const std::string channel_;
  const std::string consumer_;
  const std::string fallback_;  // the handle's timeout, for a channel without one (ms)

  std::mutex round_mu_;  // held by a round in flight
  std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<std::string, std::uint64_t> held_;  // id -> generation of its add
  std::uint64_t generation_ = 0;
  std::chrono::milliseconds visibility_;
  Clock::time_point last_{};  // the last round's start
  Clock::time_point due_{};   // the next round's
  bool stop_ = false;
  std::stop_token stop_token_;  // the handle's last read's
  std::thread thread_;          // started by the first add(); joined by the destructor
};

void StreamChannel::KeepAliveDeleter::operator()(KeepAlive* k) const noexcept { delete k; }

// ---- StreamChannel ----

StreamChannel::StreamChannel(RedisOptions redis, std::string topic, std::string channel,
                             StreamTopicOptions options)
    : topic_(std::move(redis), std::move(topic), std::move(options)),
      channel_(std::move(channel)),
      consumer_(consumer_name()),
      visibility_(topic_.opt_.visibility_timeout) {}

StreamChannel::~StreamChannel() = default;
StreamChannel::StreamChannel(StreamChannel&&) noexcept = default;
StreamChannel& StreamChannel::operator=(StreamChannel&&) noexcept = default;

Status StreamChannel::join() {
  // Every call goes through here first; a moved-from handle stops here.
  if (!topic_.conn_) {
    return {StatusCode::kInvalidArgument, "this StreamChannel handle was moved from"};
  }
  if (joined_) return Status::Ok();
  if (Status s = topic_.validate(); !s.ok()) return s;
  if (Status s = check_name("channel", channel_); !s.ok()) return s;
  const std::string_view args[] = {"join", channel_, topic_.opt_.create_if_missing ? "0" : "1",
                                   topic_.opt_.start == StartFrom::kTail ? "$" : "0"};
  CallError err;
  Reply r = run(*topic_.conn_, topic_.keys_, args, err);
  if (!r || r->type != REDIS_REPLY_INTEGER) return failed(*topic_.conn_, r, err, "join");
  joined_ = true;
  made_ = r->integer == 1;
  return Status::Ok();
}

Status StreamChannel::claim(std::vector<StreamMessage>& out, std::size_t max) {
  const std::string idle = std::to_string(topic_.opt_.visibility_timeout.count());
  const std::string count = std::to_string(max);
  const std::string deliveries = std::to_string(topic_.opt_.max_deliveries);
  const std::string_view args[] = {"claim", channel_, consumer_, idle, cursor_, count, deliveries};
  CallError err;
  Reply r = run(*topic_.conn_, topic_.keys_, args, err);
  if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 4 ||
      r->element[1]->type != REDIS_REPLY_ARRAY) {
    Status s = failed(*topic_.conn_, r, err, "claim");
    if (s.code() == StatusCode::kNotFound) joined_ = false;
    return s;
  }
  cursor_ = std::string(text(r->element[0]));
  dead_lettered_ += integer(r->element[2]);
  // The channel's own timeout, if it has one, rules every handle.
  if (const auto v = millis(r->element[3]); v.count() > 0) {
    visibility_ = v;
    if (keep_alive_) keep_alive_->set_visibility(v);
  }
  const redisReply* got = r->element[1];
  for (std::size_t i = 0; i < got->elements; ++i) {
    const redisReply* e = got->element[i];
    if (e->type != REDIS_REPLY_ARRAY || e->elements != 3) return unexpected(*topic_.conn_, "claim");
    out.push_back({std::string(text(e->element[0])), std::string(text(e->element[1])),
                   static_cast<std::uint32_t>(integer(e->element[2]))});
  }
  // A full scan found nothing more: look again once a holder could have
  // timed out. Otherwise go on scanning at the next read.
  // Messages given back with a delay are due at retry_due_: look then too.
  const auto now = std::chrono::steady_clock::now();
  if (cursor_ != "0-0") {
    next_claim_ = now;
    return Status::Ok();
  }
  std::erase_if(retry_due_, [&](auto due) { return due <= now; });
  next_claim_ = now + visibility_ / 2;
  for (const auto due : retry_due_) next_claim_ = std::min(next_claim_, due);
  return Status::Ok();
}

Result<StreamMessage> StreamChannel::next(const Context& ctx) {
  std::vector<StreamMessage> one;
  if (Status s = next_batch(one, 1, ctx); !s.ok()) return s;
  return std::move(one.front());
}

Status StreamChannel::next_batch(std::vector<StreamMessage>& out, std::size_t max,
                                 const Context& ctx) {
  const std::size_t before = out.size();
  Status s = read_batch(out, max, ctx);
  if (topic_.opt_.keep_alive && out.size() > before) {
    if (!keep_alive_) {
      keep_alive_.reset(new KeepAlive(topic_.conn_->options(), topic_.keys_, channel_, consumer_,
                                      topic_.opt_.visibility_timeout, visibility_));
    }
    keep_alive_->add(out, before);
  }
  if (keep_alive_) keep_alive_->stop_with(ctx.token());
  return s;
}

Status StreamChannel::read_batch(std::vector<StreamMessage>& out, std::size_t max,
                                 const Context& ctx) {
  if (max == 0) return {StatusCode::kInvalidArgument, "StreamChannel::next_batch: max is 0"};
  if (Status s = join(); !s.ok()) return s;
  const std::size_t before = out.size();
  const std::string count = std::to_string(max);
  for (;;) {
    if (std::chrono::steady_clock::now() >= next_claim_) {
      if (Status s = claim(out, max); !s.ok()) return s;
      if (out.size() > before) return Status::Ok();
    }
    std::chrono::milliseconds slice{};
    Status why;
    if (!slice_left(ctx, topic_.conn_->options(), slice, &why)) return why;
    const std::string block = std::to_string(slice.count());
    const std::string_view argv[] = {
        "XREADGROUP", "GROUP", channel_, consumer_, "COUNT",
        count,        "BLOCK", block,    "STREAMS", topic_.keys_[kStream],
        ">"};
    CallError err;
    Reply r = topic_.conn_->call_blocking(argv, ctx, err);  // ends at ctx's deadline or stop
    if (!r) return err.status;
    if (r->type == REDIS_REPLY_NIL) {  // the slice ended with nothing new
      // Messages this handle gave back with a delay are still to come back
      // (retry_due_): not drained yet, whatever the script says of them.
      if (!retry_due_.empty()) continue;
      if (Status s = drained(); !s.ok()) return s;
      continue;
    }
    if (r->type == REDIS_REPLY_ERROR &&
        text(r.get()).starts_with("UNBLOCKED the stream key no longer exists")) {
      // The stream left this node while the read waited: the topic was
      // deleted, or its slot is migrating (MIGRATE deletes the key from the
      // old node). Read again to tell which: a deleted topic answers NOGROUP
      // (kNotFound), a moved one ASK or MOVED, which the transport follows.
      // Every time: a read that waits again on the new node may see its
      // slot move on (a rebalance), and only NOGROUP says "deleted". Only
      // a read that blocked gets this reply, and the loop looks at ctx's
      // deadline and stop before each read.
      continue;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 1) {
      Status s = failed(*topic_.conn_, r, err, "XREADGROUP");
      if (s.code() == StatusCode::kNotFound) joined_ = false;  // deleted: made again next time
      return s;
    }
    const redisReply* stream = r->element[0];
    if (stream->type != REDIS_REPLY_ARRAY || stream->elements != 2) {
      return unexpected(*topic_.conn_, "XREADGROUP");
    }
    const redisReply* entries = stream->element[1];
    for (std::size_t i = 0; i < entries->elements; ++i) {
      StreamMessage m;
      if (!parse_entry(entries->element[i], m)) return unexpected(*topic_.conn_, "XREADGROUP");
      out.push_back(std::move(m));
    }
    if (out.size() > before) return Status::Ok();
  }
}

Status StreamChannel::drained() {
  const std::string_view args[] = {"drained", channel_, consumer_};
  CallError err;
  Reply r = run(*topic_.conn_, topic_.keys_, args, err);
  if (!r || r->type != REDIS_REPLY_INTEGER) {
    Status s = failed(*topic_.conn_, r, err, "drained");
    if (s.code() == StatusCode::kNotFound) joined_ = false;
    return s;
  }
  if (r->integer == 0) return Status::Ok();
  return {StatusCode::kClosed, "topic '" + topic_.name() + "' at " + topic_.conn_->address() +
                                   " is closed and channel '" + channel_ +
                                   "' has had every message"};
}

Status StreamChannel::ack(std::span<const std::string> ids) {
  if (ids.empty()) return Status::Ok();
  if (Status s = join(); !s.ok()) return s;
  std::vector<std::string_view> args;
  std::size_t refused = 0;  // ids another consumer holds now
  std::string first;        // the first of them, and its holder
  for (std::size_t at = 0; at < ids.size(); at += kChunk) {
    const std::size_t n = std::min(kChunk, ids.size() - at);
    // The script reads this consumer's pending list from the smallest id
    // to the largest (exact here: Lua's numbers are doubles).
    std::size_t lo = at, hi = at;
    for (std::size_t i = at + 1; i < at + n; ++i) {
      if (id_parts(ids[i]) < id_parts(ids[lo])) lo = i;
      if (id_parts(ids[hi]) < id_parts(ids[i])) hi = i;
    }
    args.assign({"ack", channel_, consumer_, ids[lo], ids[hi]});
    args.insert(args.end(), ids.begin() + static_cast<std::ptrdiff_t>(at),
                ids.begin() + static_cast<std::ptrdiff_t>(at + n));
    CallError err;
    Reply r = run(*topic_.conn_, topic_.keys_, args, err);
    // Acknowledging twice is harmless: a caller may retry after any error.
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[1]->type != REDIS_REPLY_ARRAY) {
      return failed(*topic_.conn_, r, err, "ack");
    }
    const redisReply* others = r->element[1];
    refused += others->elements / 2;
    if (first.empty() && others->elements >= 2) {
      first = std::string(text(others->element[0])) + " is held by consumer " +
              std::string(text(others->element[1]));
    }
  }
  // Not kept claimed: acknowledged, or no longer this consumer's.
  if (keep_alive_) keep_alive_->remove(ids, false, false);
  if (refused > 0) {
    return {StatusCode::kInUse,
            "ack: " + std::to_string(refused) + " of the " + std::to_string(ids.size()) +
                " messages are held by another consumer of channel '" + channel_ + "' of topic '" +
                topic_.name() + "' at " + topic_.conn_->address() +
                " now (claimed after this consumer held them past the visibility timeout, or "
                "replayed after a seek), not acknowledged: its ack or nack decides them (" +
                first + "); the others were acknowledged"};
  }
  return Status::Ok();
}

Status StreamChannel::release(std::span<const std::string> ids, std::chrono::milliseconds delay,
                              bool counted) {
  // No longer kept claimed, before the script gives them back (empty ids:
  // everything this consumer holds); also if it cannot: they come again
  // after the visibility timeout then.
  if (keep_alive_) keep_alive_->remove(ids, ids.empty(), true);
  if (Status s = join(); !s.ok()) return s;
  // What was given back already is told apart in Redis (the release
  // script), not by this handle: a nack's reply may have been lost.
  // Claimable once idle for the visibility timeout: the script sets the
  // idle time that far short of it, and the message waits out the delay first.
  const std::string vis = std::to_string(visibility_.count());
  const std::string wait = std::to_string(delay.count());
  std::vector<std::string_view> args;
  if (ids.empty()) {
    // Everything it holds (not what it gave back: no longer its own).
    args.assign({"release", channel_, consumer_, vis, wait, counted ? "1" : "0"});
    CallError err;
    Reply r = run(*topic_.conn_, topic_.keys_, args, err);
    if (!r || r->type != REDIS_REPLY_INTEGER) return failed(*topic_.conn_, r, err, "nack");
  }
  for (std::size_t at = 0; at < ids.size(); at += kChunk) {
    const std::size_t n = std::min(kChunk, ids.size() - at);
    args.assign({"release", channel_, consumer_, vis, wait, counted ? "1" : "0"});
    args.insert(args.end(), ids.begin() + static_cast<std::ptrdiff_t>(at),
                ids.begin() + static_cast<std::ptrdiff_t>(at + n));
    CallError err;
    Reply r = run(*topic_.conn_, topic_.keys_, args, err);
    if (!r || r->type != REDIS_REPLY_INTEGER) return failed(*topic_.conn_, r, err, "nack");
  }
  // Scan the pending entries again from the start at the next read, or once
  // the delay is over (a few ms late: the server's clock decides idleness).
  cursor_ = "0-0";
  const auto due = std::chrono::steady_clock::now() + delay + std::chrono::milliseconds(5);
  if (delay.count() == 0) {
    next_claim_ = {};
  } else {
    retry_due_.push_back(due);
    next_claim_ = std::min(next_claim_, due);
  }
  return Status::Ok();
}

Status StreamChannel::nack(std::span<const std::string> ids) {
  if (ids.empty()) return Status::Ok();
  return release(ids);
}

Status StreamChannel::nack() { return release({}); }

Status StreamChannel::give_back(std::span<const std::string> ids) {
  if (ids.empty()) return Status::Ok();
  return release(ids, {}, false);
}

Status StreamChannel::give_back() { return release({}, {}, false); }

Status StreamChannel::nack(std::span<const std::string> ids,
                           std::chrono::milliseconds retry_after) {
  if (retry_after.count() < 0 || retry_after > visibility_) {
    return {StatusCode::kInvalidArgument, "nack: retry_after " +
                                              std::to_string(retry_after.count()) +
                                              " ms must be from 0 to the visibility timeout (" +
                                              std::to_string(visibility_.count()) + " ms)"};
  }
  if (ids.empty()) return Status::Ok();
  return release(ids, retry_after);
}

Status StreamChannel::set_visibility_timeout(std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0) {
    return {StatusCode::kInvalidArgument,
            "a visibility timeout must be > 0 (it was " + std::to_string(timeout.count()) + " ms)"};
  }
  if (Status s = join(); !s.ok()) return s;
  const std::string ms = std::to_string(timeout.count());
  const std::string_view args[] = {"visibility", channel_, ms};
  CallError err;
  Reply r = run(*topic_.conn_, topic_.keys_, args, err);
  if (!r || r->type != REDIS_REPLY_INTEGER) {
    Status s = failed(*topic_.conn_, r, err, "set_visibility_timeout");
    if (s.code() == StatusCode::kNotFound) joined_ = false;
    return s;
  }
  visibility_ = timeout;
  if (keep_alive_) keep_alive_->set_visibility(timeout);
  next_claim_ = std::min(next_claim_, std::chrono::steady_clock::now() + timeout / 2);
  return Status::Ok();
}

Status StreamChannel::consume(const std::function<Status(const StreamMessage&)>& handler,
                              const Context& ctx, std::size_t batch) {
  if (batch == 0) return {StatusCode::kInvalidArgument, "StreamChannel::consume: batch is 0"};
  std::vector<StreamMessage> msgs;
  std::vector<std::string> done;
  std::vector<std::string> failed;
  std::vector<std::string> unhandled;  // never handed to the handler: not a failed delivery
  for (;;) {
    msgs.clear();
    if (Status s = next_batch(msgs, batch, ctx); !s.ok()) return s;
    done.clear();
    failed.clear();
    unhandled.clear();
    Status stop;  // ctx ended mid-batch
    for (std::size_t i = 0; i < msgs.size(); ++i) {
      if (StatusCode e = ctx.err(); e != StatusCode::kOk) {
        stop = e;
        for (std::size_t k = i; k < msgs.size(); ++k) unhandled.push_back(std::move(msgs[k].id));
        break;
      }
      bool ok = false;
      try {
        ok = handler(msgs[i]).ok();
      } catch (...) {
        ok = false;  // a throw is a failed delivery, as an error status is
      }
      (ok ? done : failed).push_back(std::move(msgs[i].id));
    }
    // Each of the three is tried even if one before failed, and what could
    // not be acknowledged is no longer kept claimed: else a keep-alive
    // renewed them for as long as the handle lived (delivered to no one),
    // where they must come again after the visibility timeout. nack and
    // give_back stop keeping theirs before their script runs.
    Status acked = ack(done);
    // Handled, but held by another consumer now (this one took longer than
    // the visibility timeout): its delivery decides them; not an error of
    // the loop.
    if (acked.code() == StatusCode::kInUse) acked = Status::Ok();
    if (!acked.ok() && keep_alive_) keep_alive_->remove(done, false, false);
    Status nacked = nack(failed);
    Status back = give_back(unhandled);
    if (!acked.ok()) return acked;
    if (!nacked.ok()) return nacked;
    if (!back.ok()) return back;
    if (!stop.ok()) return stop;
  }
}

}  // namespace sluice
