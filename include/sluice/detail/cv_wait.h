// Waiting on a condition variable under a Context: its stop token and its
// deadline both end the wait.
#pragma once

#include <condition_variable>
#include <mutex>

#include "sluice/context.h"

namespace sluice::detail {

// Waits until pred() holds, the context's token stops, or its deadline
// passes. Returns pred() at the end (true: the condition holds).
template <class Pred>
bool wait_for(std::condition_variable_any& cv, std::unique_lock<std::mutex>& lock,
              const Context& ctx, Pred pred) {
  if (ctx.deadline()) return cv.wait_until(lock, ctx.token(), *ctx.deadline(), pred);
  return cv.wait(lock, ctx.token(), pred);
}

}  // namespace sluice::detail
