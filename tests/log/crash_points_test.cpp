// Power cuts at every file-system call of a scripted workload, on the
// simulated disk of fault_file_system.h, in every durability mode and with
// every way a cut treats unsynced bytes (dropped, zero-filled, torn). After
// each cut the topic is reopened on what the disk kept and checked against
// what the workload was told (checks listed on check_image).
//
// SLUICE_CRASH_POINTS_EVERY=n checks every n-th call only (default: all; every
// 4th under sanitizers, which run each cut some 30 times slower).
#include "log/crash_points.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "log/fault_file_system.h"
#include "log/topic_impl.h"
#include "sluice/log/channel.h"
#include "sluice/log/topic.h"

namespace sluice::testutil {
namespace {

struct Param {
  Durability durability;
  const char* name;
};

class CrashPointsTest : public ::testing::TestWithParam<Param> {};

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int kEveryByDefault = 4;
#else
constexpr int kEveryByDefault = 1;
#endif

std::uint64_t every() {
  const char* v = std::getenv("SLUICE_CRASH_POINTS_EVERY");  // NOLINT(concurrency-mt-unsafe)
  return v != nullptr ? std::max(1, std::atoi(v)) : kEveryByDefault;
}

// Cuts at every call of the scripted workload with `records_per_life`
// appends per life (it ends in a close()).
void cut_every_call(const Param& p, int records_per_life, std::uint64_t min_calls) {
  const Durability d = p.durability;
  // The calls the workload makes when the power stays on.
  std::uint64_t total = 0;
  {
    FaultFileSystem fs;
    Told told;
    ASSERT_TRUE(run_scripted_workload(fs, d, told, records_per_life).ok());
    ASSERT_TRUE(told.closed);
    total = fs.calls();
    auto image = fs.after_cut(CutMode::kDropUnsynced, 0);
    EXPECT_EQ(check_image(*image, d, told), "") << "no cut at all";
  }
  ASSERT_GT(total, min_calls) << "the workload is too small to mean much";
  int failures = 0;
  std::uint64_t checked = 0;
  for (std::uint64_t k = 1; k <= total + 1 && failures < 5; k += every()) {
    FaultFileSystem fs;
    fs.cut_at(k);
    Told told;
    (void)run_scripted_workload(fs, d, told, records_per_life);  // fails from the cut on
    for (CutMode mode : {CutMode::kDropUnsynced, CutMode::kZeroFill, CutMode::kTorn}) {
      auto image = fs.after_cut(mode, k);
      const std::string why = check_image(*image, d, told);
      ++checked;
      if (!why.empty()) {
        ++failures;
        ADD_FAILURE() << p.name << ": power cut at call " << k << " of " << total << " ("
                      << to_string(mode) << "): " << why << "\nlast calls:\n"
                      << fs.recent_calls(12);
      }
    }
  }
  std::printf("%s: %llu calls, %llu cut images checked\n", p.name,
              static_cast<unsigned long long>(total), static_cast<unsigned long long>(checked));
}

TEST_P(CrashPointsTest, EveryCallOfAScriptedWorkload) { cut_every_call(GetParam(), 30, 100); }

// No record at all: the close flags the empty first segment in place.
TEST_P(CrashPointsTest, EveryCallOfACloseOfAnEmptyTopic) { cut_every_call(GetParam(), 0, 10); }

int random_cuts() {
  const char* v = std::getenv("SLUICE_CRASH_CUTS");  // NOLINT(concurrency-mt-unsafe)
  return v != nullptr ? std::max(1, std::atoi(v)) : 50;
}

// Appenders and an eager consumer race (kGroupCommit: three appenders), so
// the calls differ run to run: cut at random ones, SLUICE_CRASH_CUTS times.
TEST_P(CrashPointsTest, RandomCutsOfConcurrentAppendersAndAnEagerConsumer) {
  const Durability d = GetParam().durability;
  constexpr int kRecords = 300;
  constexpr std::chrono::microseconds kSyncLatency{50};
  std::uint64_t total = 0;
  {
    FaultFileSystem fs;
    fs.set_sync_latency(kSyncLatency);
    Told told;
    ASSERT_TRUE(run_concurrent_workload(fs, d, kRecords, told).ok());
    total = fs.calls();
    EXPECT_EQ(check_image(*fs.after_cut(CutMode::kDropUnsynced, 0), d, told), "");
  }
  std::mt19937_64 rng(std::random_device{}());
  int failures = 0;
  for (int run = 0; run < random_cuts() && failures < 5; ++run) {
    const std::uint64_t k = 1 + rng() % total;
    FaultFileSystem fs;
    fs.set_sync_latency(kSyncLatency);
    fs.cut_at(k);
    Told told;
    (void)run_concurrent_workload(fs, d, kRecords, told);
    const auto mode = static_cast<CutMode>(rng() % 3);
    const std::string why = check_image(*fs.after_cut(mode, rng()), d, told);
    if (!why.empty()) {
      ++failures;
      ADD_FAILURE() << GetParam().name << ": power cut at call " << k << " of about " << total
                    << " (" << to_string(mode) << "): " << why << "\nlast calls:\n"
                    << fs.recent_calls(12);
    }
  }
}

// The same with the consumer in a read-only topic (as in another process):
// it sees records through the writer's high watermark in NOTIFY.
TEST_P(CrashPointsTest, RandomCutsWithTheConsumerInAReadOnlyTopic) {
  const Durability d = GetParam().durability;
  constexpr int kRecords = 300;
  constexpr std::chrono::microseconds kSyncLatency{50};
  std::uint64_t total = 0;
  {
    FaultFileSystem fs;
    fs.set_sync_latency(kSyncLatency);
    Told told;
    ASSERT_TRUE(run_concurrent_workload(fs, d, kRecords, told, true).ok());
    total = fs.calls();
    EXPECT_EQ(check_image(*fs.after_cut(CutMode::kDropUnsynced, 0), d, told), "");
  }
  std::mt19937_64 rng(std::random_device{}());
  int failures = 0;
  for (int run = 0; run < random_cuts() / 2 && failures < 5; ++run) {
    const std::uint64_t k = 1 + rng() % total;
    FaultFileSystem fs;
    fs.set_sync_latency(kSyncLatency);
    fs.cut_at(k);
    Told told;
    (void)run_concurrent_workload(fs, d, kRecords, told, true);
    const auto mode = static_cast<CutMode>(rng() % 3);
    const std::string why = check_image(*fs.after_cut(mode, rng()), d, told);
    if (!why.empty()) {
      ++failures;
      ADD_FAILURE() << GetParam().name << ": power cut at call " << k << " of about " << total
                    << " (" << to_string(mode) << "): " << why << "\nlast calls:\n"
                    << fs.recent_calls(12);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, CrashPointsTest,
                         ::testing::Values(Param{Durability::kNone, "none"},
                                           Param{Durability::kInterval, "interval"},
                                           Param{Durability::kPerAppend, "append"},
                                           Param{Durability::kGroupCommit, "group"}),
                         [](const auto& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace sluice::testutil
