// Stage::stats() while the workers run: one snapshot never shows more
// results written than items taken (items_out <= items_in), in any
// ordering. A result is counted in `out` only after its item was counted in
// `in` (possibly by another worker: ordered modes write others' results,
// per-key's dispatcher counts what the workers write), so stats() must read
// the `out` counters before the `in` ones.
#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "sluice/queue.h"
#include "sluice/stage.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;

// Runs a stage of `width` over cheap items for about `run` while another
// thread takes snapshots as fast as it can; returns the snapshots that had
// out > in. Many workers on few cores make the gap between reading one
// worker's counters and another's wide.
std::uint64_t snapshots_with_out_above_in(Ordering ordering, std::size_t width,
                                          std::chrono::milliseconds run) {
  Queue<int> in(1024);
  StageOptions<int> o;
  o.width = width;
  o.ordering = ordering;
  if (ordering == Ordering::kPerKey)
    o.key = [](const int& v) { return static_cast<std::uint64_t>(v); };
  auto made = Stage<int, int>::create(
      in, [](int&& v, const Context&) -> Result<int> { return v; }, std::move(o));
  EXPECT_TRUE(made.ok()) << made.status();
  if (!made.ok()) return 0;
  std::unique_ptr<Stage<int, int>> stage = std::move(made).value();
  std::atomic<bool> done{false};
  std::uint64_t bad = 0, looks = 0;
  std::uint64_t fed = 0;
  std::jthread feeder([&] {
    const auto until = std::chrono::steady_clock::now() + run;
    for (int i = 0; std::chrono::steady_clock::now() < until; ++i) {
      if (!in.push(int{i}).ok()) break;
      ++fed;
    }
    in.close();
  });
  std::jthread drainer([&] {
    for (auto& r : stage->output()) (void)r;
    done.store(true);
  });
  std::jthread watcher([&] {
    // Lowest priority: the workers preempt it at any point of stats(),
    // so a worker makes progress between two of its reads.
    sched_param none{};
    sched_setscheduler(0, SCHED_IDLE, &none);
    while (!done.load()) {
      const StageStats s = stage->stats();
      ++looks;
      if (s.items_out > s.items_in) ++bad;
    }
  });
  watcher.join();
  drainer.join();
  feeder.join();
  EXPECT_TRUE(stage->wait().ok());
  const StageStats end = stage->stats();
  EXPECT_EQ(end.items_in, fed);
  EXPECT_EQ(end.items_out, fed);
  EXPECT_GT(looks, 0u);
  return bad;
}

TEST(StageStatsSnapshotTest, OutNeverAboveInWhileWorkersRun) {
  for (const Ordering ordering : {Ordering::kUnordered, Ordering::kStrict, Ordering::kPerKey}) {
    for (const std::size_t width : {std::size_t{16}}) {
      SCOPED_TRACE("ordering " + std::to_string(static_cast<int>(ordering)) + " width " +
                   std::to_string(width));
      EXPECT_EQ(snapshots_with_out_above_in(ordering, width, 1500ms), 0u);
    }
  }
}

}  // namespace
}  // namespace sluice
