// run_pipeline: serial source -> parallel fn -> serial sink on `width` threads.
#include "sluice/run_pipeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <stop_token>
#include <thread>
#include <vector>

#include "testutil/threads.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;

// A source of 0..n-1.
auto counter(std::uint64_t n) {
  return [n, i = std::uint64_t{0}]() mutable -> std::optional<std::uint64_t> {
    if (i == n) return std::nullopt;
    return i++;
  };
}

// fn: sleeps a random few microseconds (so completions interleave), then
// returns 2v.
auto jittery() {
  return [](std::uint64_t v, const Context&) -> Result<std::uint64_t> {
    thread_local std::minstd_rand rng(std::random_device{}());
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 50));
    return 2 * v;
  };
}

using testutil::eventually;
using testutil::thread_baseline;
using testutil::thread_count;

TEST(RunPipelineTest, StrictOrderDeliversEveryResultOnceInSourceOrder) {
  for (std::size_t width : {1, 2, 4}) {
    std::vector<std::uint64_t> out;
    auto r = run_pipeline(counter(2000), jittery(),
                          [&](Result<std::uint64_t>&& v) {
                            out.push_back(*v);
                            return Status::Ok();
                          },
                          {.width = width});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->items, 2000U);
    EXPECT_EQ(r->sunk, 2000U);
    ASSERT_EQ(out.size(), 2000U);
    for (std::uint64_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], 2 * i) << "width " << width;
  }
}

// A cheap fn makes threads take batches from the source: order and counts
// must hold all the same.
TEST(RunPipelineTest, CheapWorkIsBatchedAndStillExactlyOnceInOrder) {
  for (const Ordering ord : {Ordering::kStrict, Ordering::kUnordered}) {
    for (std::size_t width : {2, 4}) {
      std::vector<std::uint64_t> out;
      out.reserve(200000);
      auto r = run_pipeline(
          counter(200000),
          [](std::uint64_t v, const Context&) -> Result<std::uint64_t> { return v + 1; },
          [&](Result<std::uint64_t>&& v) {
            out.push_back(*v);
            return Status::Ok();
          },
          {.width = width, .ordering = ord});
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->sunk, 200000U);
      if (ord == Ordering::kUnordered) std::sort(out.begin(), out.end());
      ASSERT_EQ(out.size(), 200000U);
      for (std::uint64_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], i + 1) << width;
    }
  }
}

TEST(RunPipelineTest, UnorderedDeliversEveryResultExactlyOnce) {
  std::vector<std::uint64_t> out;
  auto r = run_pipeline(counter(2000), jittery(),
                        [&](Result<std::uint64_t>&& v) {
                          out.push_back(*v);
                          return Status::Ok();
                        },
                        {.width = 4, .ordering = Ordering::kUnordered});
  ASSERT_TRUE(r.ok()) << r.status();
  std::sort(out.begin(), out.end());
  ASSERT_EQ(out.size(), 2000U);
  for (std::uint64_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], 2 * i);
}

TEST(RunPipelineTest, AnEmptySourceSinksNothing) {
  int sunk = 0;
  auto r = run_pipeline(counter(0), jittery(),
                        [&](Result<std::uint64_t>&&) {
                          ++sunk;
                          return Status::Ok();
                        },
                        {.width = 3});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->items, 0U);
  EXPECT_EQ(sunk, 0);
}

TEST(RunPipelineTest, NoMoreThanTokensItemsAreInFlight) {
  std::atomic<std::int64_t> in_flight{0};
  std::int64_t most = 0;
  std::atomic<std::uint64_t> taken{0};
  auto source = [&, i = 0]() mutable -> std::optional<int> {
    if (i == 3000) return std::nullopt;
    in_flight.fetch_add(1);
    taken.fetch_add(1);
    return i++;
  };
  auto r = run_pipeline(
      source,
      [](int v, const Context&) -> Result<int> {
        if (v % 100 == 0) std::this_thread::sleep_for(1ms);  // a slow oldest item
        return v;
      },
      [&](Result<int>&&) {
        most = std::max(most, in_flight.fetch_sub(1));
        return Status::Ok();
      },
      {.width = 4, .tokens = 5});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LE(most, 5);
  EXPECT_GE(most, 2);  // there was parallelism to bound
}

TEST(RunPipelineTest, FnErrorsAndExceptionsReachTheSinkAsResults) {
  std::vector<StatusCode> codes;
  auto r = run_pipeline(
      counter(30),
      [](std::uint64_t v, const Context&) -> Result<std::uint64_t> {
        if (v % 10 == 3) return Status(StatusCode::kInvalidArgument, "bad");
        if (v % 10 == 7) throw std::runtime_error("boom");
        return v;
      },
      [&](Result<std::uint64_t>&& v) {
        codes.push_back(v.code());
        return Status::Ok();
      },
      {.width = 2});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(codes.size(), 30U);
  EXPECT_EQ(r->errors, 6U);
  for (std::size_t i = 0; i < codes.size(); ++i) {
    const StatusCode want = i % 10 == 3   ? StatusCode::kInvalidArgument
                            : i % 10 == 7 ? StatusCode::kInternal
                                          : StatusCode::kOk;
    EXPECT_EQ(codes[i], want) << i;
  }
}

TEST(RunPipelineTest, ASinkErrorStopsTakingAndIsReturned) {
  std::atomic<std::uint64_t> taken{0};
  auto source = [&, i = std::uint64_t{0}]() mutable -> std::optional<std::uint64_t> {
    taken.fetch_add(1);
    return i++;  // endless: only the error can stop it
  };
  std::uint64_t sunk = 0;
  auto r = run_pipeline(
      source, [](std::uint64_t v, const Context&) -> Result<std::uint64_t> { return v; },
      [&](Result<std::uint64_t>&& v) {
        ++sunk;
        return *v == 100 ? Status(StatusCode::kIOError, "sink full") : Status::Ok();
      },
      {.width = 3, .tokens = 8});
  EXPECT_EQ(r.code(), StatusCode::kIOError);
  EXPECT_EQ(sunk, 101U);                  // nothing after the error
  EXPECT_LE(taken.load(), 101U + 8 + 3);  // and little more was taken
}

TEST(RunPipelineTest, ASourceThatThrowsStopsThePipeline) {
  auto source = [i = 0]() mutable -> std::optional<int> {
    if (i == 50) throw std::runtime_error("source broke");
    return i++;
  };
  auto r = run_pipeline(
      source, [](int v, const Context&) -> Result<int> { return v; },
      [](Result<int>&&) { return Status::Ok(); }, {.width = 2});
  EXPECT_EQ(r.code(), StatusCode::kInternal);
  EXPECT_NE(r.status().message().find("source broke"), std::string_view::npos);
}

TEST(RunPipelineTest, AStopEndsItPromptlyAndLeavesNoThread) {
  const std::size_t before = thread_baseline();
  for (int round = 0; round < 10; ++round) {
    std::stop_source stop;
    std::atomic<int> started{0};
    auto source = [i = 0]() mutable -> std::optional<int> { return i++; };  // endless
    std::thread stopper([&] {
      while (started.load() < 4) std::this_thread::yield();  // every thread is in fn
      stop.request_stop();
    });
    auto r = run_pipeline(
        source,
        [&](int v, const Context& ctx) -> Result<int> {
          started.fetch_add(1);
          std::mutex m;
          std::condition_variable_any cv;
          std::unique_lock lk(m);
          cv.wait_for(lk, ctx.token(), 10s, [] { return false; });  // honours the stop
          return v;
        },
        [](Result<int>&&) { return Status::Ok(); }, {.width = 4}, Context(stop.get_token()));
    stopper.join();
    EXPECT_EQ(r.code(), StatusCode::kCancelled);
  }
  EXPECT_TRUE(eventually([&] { return thread_count() == before; }));
}

TEST(RunPipelineTest, BadOptionsAreClearErrors) {
  auto noop_fn = [](int v, const Context&) -> Result<int> { return v; };
  auto noop_sink = [](Result<int>&&) { return Status::Ok(); };
  auto src = [] { return std::optional<int>(); };
  EXPECT_EQ(run_pipeline(src, noop_fn, noop_sink, {.width = 0}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      run_pipeline(src, noop_fn, noop_sink, {.width = 2, .ordering = Ordering::kPerKey}).code(),
      StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice
