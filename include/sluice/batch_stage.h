// feed_batcher: the batcher as the last stage of a pipeline. Drains a
// stage's output into a Batcher: values are added (waiting while the
// batcher's input is full, so backpressure reaches the stages), errors from
// upstream go to on_error, so none is dropped silently.
//
// Thread safety: runs on the calling thread; the batcher may be shared.
// Blocking: until `in` is closed and drained, ctx ends, or the batcher shuts
//   down. Returns kOk (drained), the context's error, or kClosed (the batcher
//   shut down first: the value being added is handed to on_error with it).
// Ownership: the caller keeps both the queue and the batcher alive.
#pragma once

#include <functional>

#include "sluice/batcher.h"
#include "sluice/queue.h"

namespace sluice {

template <class T>
Status feed_batcher(Queue<Result<T>>& in, Batcher<T>& batcher,
                    const std::function<void(const Status&)>& on_error, const Context& ctx = {}) {
  for (;;) {
    Result<Result<T>> next = in.pull(ctx);
    if (next.code() == StatusCode::kClosed) return StatusCode::kOk;
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
