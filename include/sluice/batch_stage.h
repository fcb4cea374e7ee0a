// feed_batcher: the batcher as the last stage of a pipeline. Drains a
// stage's output into a Batcher: values are added (waiting while the
// batcher's input is full, so backpressure reaches the stages), errors from
// upstream go to on_error, so none is dropped silently.
//
// Thread safety: runs on the calling thread; the batcher may be shared.
// Blocking: until `in` is closed and drained, ctx ends, or the batcher shuts
//   down (also while waiting for input). Returns kOk (drained), the
//   context's error, or kClosed (the batcher shut down first: a value being
//   added is handed to on_error with it; one still in `in` stays there).
// Ownership: the caller keeps both the queue and the batcher alive.
#pragma once

#include <functional>
#include <memory>
#include <stop_token>

#include "sluice/batcher.h"
#include "sluice/queue.h"

namespace sluice {

template <class T>
Status feed_batcher(Queue<Result<T>>& in, Batcher<T>& batcher,
                    const std::function<void(const Status&)>& on_error, const Context& ctx = {}) {
  // The pull waits on `in`, which the batcher's shutdown does not touch: it
  // waits under a token that either ctx's stop or the shutdown fires.
  // (On the heap: GCC 12 at -O1 takes a local stop_source for uninitialized.)
  const auto either = std::make_shared<std::stop_source>();
  std::stop_callback on_ctx(ctx.token(), [&] { either->request_stop(); });
  std::stop_callback on_shutdown(batcher.shutdown_token(), [&] { either->request_stop(); });
  const Context pull_ctx =
      ctx.deadline() ? Context(either->get_token(), *ctx.deadline()) : Context(either->get_token());
  for (;;) {
    Result<Result<T>> next = in.pull(pull_ctx);
    if (next.code() == StatusCode::kClosed) return StatusCode::kOk;
    if (next.code() == StatusCode::kCancelled && !ctx.stop_requested()) {
      return StatusCode::kClosed;  // the batcher shut down
    }
    if (!next.ok()) return next.status();
    Result<T>& r = *next;
    if (!r.ok()) {
      if (on_error) on_error(r.status());
      continue;
    }
    if (Status s = batcher.add(std::move(*r), ctx); !s.ok()) {
      if (on_error) on_error(s);
      return s;
    }
  }
}

}  // namespace sluice
