// Waits (yielding) until a condition holds. For conditions with no event to
// block on, e.g. "two threads are parked in the queue". Fails the test after
// a generous bound instead of hanging.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace sluice::testutil {

template <class Pred>
::testing::AssertionResult eventually(Pred pred,
                                      std::chrono::seconds bound = std::chrono::seconds(30)) {
  const auto until = std::chrono::steady_clock::now() + bound;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > until)
      return ::testing::AssertionFailure() << "condition never held";
    std::this_thread::yield();
  }
  return ::testing::AssertionSuccess();
}

}  // namespace sluice::testutil
