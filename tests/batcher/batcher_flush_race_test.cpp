// flush() racing shutdown(): the flush checks that no shutdown began, then
// queues its request for the run loop. A shutdown that ran to the end in
// between left the request unanswered: flush() waited for ever. This binary
// replaces operator new to hold the flushing thread inside that window (its
// request's allocation), so the race happens every run. (Found by review.)
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <new>
#include <thread>

#include "sluice/batcher.h"

// GCC pairs the free() below with its own idea of operator new.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace {

// Set by the test: the thread's next allocation waits until released.
thread_local bool t_hold_next_alloc = false;
std::atomic<bool> g_held{false};
std::atomic<bool> g_release{false};

}  // namespace

void* operator new(std::size_t n) {
  if (t_hold_next_alloc) {
    t_hold_next_alloc = false;
    g_held = true;
    while (!g_release.load()) std::this_thread::yield();
  }
  if (void* p = std::malloc(n != 0 ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace sluice {
namespace {

using namespace std::chrono_literals;

TEST(BatcherFlushRaceTest, AFlushThatMeetsAShutdownInItsWindowReturnsClosed) {
  BatcherOptions<int> o;
  o.sink = [](std::vector<int>&&, const Context&) { return Status::Ok(); };
  auto b = std::move(*Batcher<int>::create(std::move(o)));
  ASSERT_TRUE(b->add(1).ok());
  auto flushed = std::async(std::launch::async, [&] {
    t_hold_next_alloc = true;  // the request's allocation: past the shutdown check
    return b->flush(with_timeout(30s));
  });
  while (!g_held.load()) std::this_thread::yield();
  ASSERT_TRUE(b->shutdown().ok());  // the run loop answers its last requests and ends
  g_release = true;
  const Status s = flushed.get();
  EXPECT_EQ(s.code(), StatusCode::kClosed) << s;  // was: no answer until the timeout
  EXPECT_EQ(b->stats().flushed_ok, 1u);
}

}  // namespace
}  // namespace sluice
