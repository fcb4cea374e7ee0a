// Google Benchmark micro-benchmarks of single-thread queue costs: the price
// of one push+pull with no contention, and what bulk calls save.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "sluice/queue.h"

namespace {

void BM_PushPull(benchmark::State& state) {
  sluice::Queue<std::uint64_t> q(1024);
  std::uint64_t i = 0;
  for (auto _ : state) {
    (void)q.push(i++);
    benchmark::DoNotOptimize(*q.pull());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PushPull);

void BM_TryPushTryPull(benchmark::State& state) {
  sluice::Queue<std::uint64_t> q(1024);
  std::uint64_t i = 0;
  for (auto _ : state) {
    (void)q.try_push(i++);
    benchmark::DoNotOptimize(*q.try_pull());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TryPushTryPull);

void BM_PushManyPullMany(benchmark::State& state) {
  const auto batch = static_cast<std::size_t>(state.range(0));
  sluice::Queue<std::uint64_t> q(1024);
  std::vector<std::uint64_t> in(batch), out;
  out.reserve(batch);
  for (auto _ : state) {
    (void)q.push_many(in);
    out.clear();
    (void)q.pull_many(std::back_inserter(out), batch);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(batch));
}
BENCHMARK(BM_PushManyPullMany)->Arg(8)->Arg(64)->Arg(512);

void BM_DropOldestOnFullQueue(benchmark::State& state) {
  sluice::Queue<std::uint64_t> q(64, sluice::OverflowPolicy::kDropOldest);
  std::uint64_t i = 0;
  for (auto _ : state) (void)q.push(i++);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DropOldestOnFullQueue);

}  // namespace

BENCHMARK_MAIN();
