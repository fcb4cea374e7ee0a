// --reconnect: put and get ride through a Redis server that cannot be
// reached for a while (a restart, a Cluster failover) instead of ending the
// command, and with it the pipeline it feeds. Every call they retry is safe
// to repeat: a reader's get and ack resolve what a broken call left (see
// src/store/redis_store.cpp), and a put resends from the first message not
// known to be in, so messages in doubt may go in twice (at least once).
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "sluice/context.h"
#include "sluice/status.h"
#include "sluice/store.h"

namespace sluice::cli {

class Reconnect {
 public:
  using Clock = std::chrono::steady_clock;

  // `limit`: how long one outage may last before the command gives up
  // (<= 0: not at all). `who`: "sluice get: queue 'q'", for messages.
  Reconnect(std::string who, std::chrono::duration<double> limit)
      : who_(std::move(who)), limit_(limit) {}

  // After a failed call: true if it should be made again, once a backoff
  // step has passed (100 ms, doubling to 2 s; never past ctx's deadline).
  // Only kUnavailable is retried, for up to the limit since the outage
  // began; a stop or deadline of ctx ends the wait (false).
  bool again(const Status& s, const Context& ctx) {
    if (s.code() != StatusCode::kUnavailable) return false;
    if (ctx.err() != StatusCode::kOk) {  // ended: no retry to announce
      cut_short_ = s;
      return false;
    }
    if (limit_.count() <= 0) return false;
    const auto now = Clock::now();
    if (!down_) {
      down_ = true;
      since_ = now;
      step_ = std::chrono::milliseconds(100);
      std::fprintf(stderr, "%s: %.*s; retrying for up to %g s (--reconnect)\n", who_.c_str(),
                   static_cast<int>(s.message().size()), s.message().data(), limit_.count());
    }
    if (now - since_ >= limit_) return false;
    auto until = now + step_;
    if (ctx.deadline()) until = std::min(until, *ctx.deadline());
    step_ = std::min(step_ * 2, std::chrono::milliseconds(2000));
    std::mutex m;
    std::condition_variable_any cv;
    std::unique_lock lk(m);
    cv.wait_until(lk, ctx.token(), until, [] { return false; });  // only the stop wakes it
    return ctx.err() == StatusCode::kOk;
  }

  // call() (a Status or a Result), made again while again() allows; a
  // success ends the outage. An outage ctx ended is its end
  // (kDeadlineExceeded, kCancelled), as in get().
  template <class Call>
  auto retry(const Context& ctx, Call call) {
    auto r = call();
    while (!r.ok() && again(status_of(r), ctx)) r = call();
    if (r.ok()) ok();
    if (!r.ok() && status_of(r).code() == StatusCode::kUnavailable &&
        ctx.err() != StatusCode::kOk) {
      r = decltype(r)(Status(ctx.err(), std::string(status_of(r).message())));
    }
    return r;
  }

  // A reader's get through an outage: made again while it got nothing.
  // Messages a failed get did return go out first (the ack after them is
  // retried); an outage the context ended is its end (kDeadlineExceeded,
  // kCancelled).
  template <class Batch>  // std::vector<std::string>, std::vector<StoreMessage>, MessageBatch
  Status get(QueueReader& reader, Batch& out, std::size_t max, const Context& ctx) {
    Status s = read(reader, out, max, ctx);
    while (s.code() == StatusCode::kUnavailable && out.empty() && again(s, ctx)) {
      s = read(reader, out, max, ctx);
    }
    if (!out.empty() && s.code() == StatusCode::kUnavailable) s = Status::Ok();
    if (s.code() == StatusCode::kUnavailable && ctx.err() != StatusCode::kOk) s = ctx.err();
    if (s.ok()) ok();
    return s;
  }

  // The last failure (kUnavailable) that ctx's stop or deadline cut short,
  // unless a call worked since: the command says what it could not do then.
  const Status& cut_short() const noexcept { return cut_short_; }

  // After a call that worked: ends an outage, saying so.
  void ok() {
    cut_short_ = Status::Ok();
    if (!down_) return;
    down_ = false;
    const std::chrono::duration<double> took = Clock::now() - since_;
    std::fprintf(stderr, "%s: reconnected after %.1f s\n", who_.c_str(), took.count());
  }

 private:
  static const Status& status_of(const Status& s) { return s; }
  template <class Message>
  static Status read(QueueReader& r, std::vector<Message>& out, std::size_t max,
                     const Context& ctx) {
    return r.get(out, max, ctx);
  }
  static Status read(QueueReader& r, MessageBatch& out, std::size_t max, const Context& ctx) {
    return r.get_batch(out, max, ctx);
  }
  template <class T>
  static const Status& status_of(const Result<T>& r) {
    return r.status();
  }

  std::string who_;
  std::chrono::duration<double> limit_;
  bool down_ = false;
  Clock::time_point since_{};
  Status cut_short_ = Status::Ok();
  std::chrono::milliseconds step_{100};
};

}  // namespace sluice::cli
