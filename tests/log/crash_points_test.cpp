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
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
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

// Cuts at every call of the scripted workload with `records_per_life`
// appends per life (it ends in a close()).
void cut_every_call(const Param& p, int records_per_life, std::uint64_t min_calls,
                    bool from_format1 = false) {
  const Durability d = p.durability;
  // The calls the workload makes when the power stays on.
  std::uint64_t total = 0;
  {
    FaultFileSystem fs;
    Told told;
    ASSERT_TRUE(run_scripted_workload(fs, d, told, records_per_life, from_format1).ok());
    ASSERT_TRUE(told.closed);
    total = fs.calls();
    auto image = fs.after_cut(CutMode::kDropUnsynced, 0);
    EXPECT_EQ(check_image(*image, d, told), "") << "no cut at all";
  }
  ASSERT_GT(total, min_calls) << "the workload is too small to mean much";
  int failures = 0;
  std::uint64_t checked = 0;
  for (std::uint64_t k = 1; k <= total + 1 && failures < 5; k += testutil::crash_points_every()) {
    FaultFileSystem fs;
    fs.cut_at(k);
    Told told;
    (void)run_scripted_workload(fs, d, told, records_per_life,
                                from_format1);  // fails from the cut on
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

// A topic an older sluice wrote (segment format 1, no append times): the
// writer's open moves on to format 2 (a roll), and the workload goes on.
TEST_P(CrashPointsTest, EveryCallOfAScriptedWorkloadOnAFormat1Topic) {
  cut_every_call(GetParam(), 30, 100, /*from_format1=*/true);
}

// No record at all: the close flags the empty first segment in place.
TEST_P(CrashPointsTest, EveryCallOfACloseOfAnEmptyTopic) { cut_every_call(GetParam(), 0, 10); }

// An empty format 1 topic: the writer's open rewrites the empty segment's
// header in format 2, then the close flags it.
TEST_P(CrashPointsTest, EveryCallOfACloseOfAnEmptyFormat1Topic) {
  cut_every_call(GetParam(), 0, 10, /*from_format1=*/true);
}

// A close() cut short by the power: it returns the error, and no append
// follows a mark that may be on disk; the reopened topic is closed or not,
// with every record.
TEST(CloseCutShortTest, AFailedCloseRefusesAppendsAndTheDiskDecides) {
  for (std::uint64_t extra = 1; extra <= 8; ++extra) {
    FaultFileSystem fs;
    std::uint64_t durable_next = 0;
    {
      auto t = log::open_topic(fs, kCutTopicDir, cut_topic_options(Durability::kPerAppend));
      ASSERT_TRUE(t.ok());
      for (int i = 0; i < 3; ++i) ASSERT_TRUE((*t)->append("r" + std::to_string(i)).ok());
      durable_next = (*t)->next_seq();
      fs.cut_at(fs.calls() + extra);
      const Status s = (*t)->close();
      if (s.ok()) break;  // past the close's last call
      // The first call is the sync before the mark: no mark yet, so appends
      // are not refused (they fail on the dead disk). From the mark on: kClosed.
      EXPECT_EQ((*t)->append("after").code(),
                extra == 1 ? StatusCode::kIOError : StatusCode::kClosed)
          << "cut at +" << extra;
      EXPECT_EQ((*t)->close().code(), StatusCode::kIOError);
    }
    auto image = fs.after_cut(CutMode::kTorn, extra);
    auto t = log::open_topic(*image, kCutTopicDir, cut_topic_options(Durability::kPerAppend));
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ((*t)->next_seq(), durable_next);
    EXPECT_EQ((*t)->append("x").code(), (*t)->closed() ? StatusCode::kClosed : StatusCode::kOk);
  }
}

int random_cuts() {
  const char* v = std::getenv("SLUICE_CRASH_CUTS");  // NOLINT(concurrency-mt-unsafe)
  return v != nullptr ? std::max(1, std::atoi(v)) : 50;
}

// Group commit: an appender that rolls a segment syncs (and publishes) past
// the running leader's target. The appenders that wrote after the roll sleep
// until the leader's sync ends; it must wake them although it published
// nothing, or they sleep forever (it hung the random-cut test under TSan).
// The simulated disk holds the leader's sync until every appender sleeps.
bool asleep(pid_t tid) {
  std::ifstream stat("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const auto paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'S';
}

TEST(GroupCommitTest, FollowersWakeWhenARollSyncedPastTheLeader) {
  FaultFileSystem fs;
  auto topic = log::open_topic(fs, kCutTopicDir, cut_topic_options(Durability::kGroupCommit));
  ASSERT_TRUE(topic.ok()) << topic.status().to_string();
  Topic& t = **topic;
  std::mutex m;
  std::condition_variable cv;
  bool release = false;
  int syncs = 0;
  fs.set_sync_hook([&](const std::string&) {
    std::unique_lock lk(m);
    ++syncs;
    cv.notify_all();
    if (syncs == 1) cv.wait(lk, [&] { return release; });  // the leader's
  });
  constexpr int kAppenders = 12;  // some roll, the rest follow
  std::vector<pid_t> tids(kAppenders + 1, 0);
  std::atomic<int> failed{0};
  auto append_as = [&](int i) {
    {
      std::lock_guard lk(m);
      tids[i] = gettid();
    }
    cv.notify_all();
    if (!t.append(std::string(100, 'r')).ok()) failed.fetch_add(1);  // 4 fill a segment
    std::lock_guard lk(m);
    tids[i] = -1;  // done: a later roll synced its record
  };
  std::vector<std::thread> threads;
  threads.emplace_back(append_as, 0);  // leads, and is held in its sync
  {
    std::unique_lock lk(m);
    cv.wait(lk, [&] { return syncs == 1; });
  }
  for (int i = 1; i <= kAppenders; ++i) threads.emplace_back(append_as, i);
  // Every appender asleep (each ends in a wait for the held sync), three
  // looks in a row, before the leader's sync may end.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (int quiet = 0; quiet < 3;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::lock_guard lk(m);
    int awake = 0;
    int waiting = 0;
    for (pid_t tid : tids) {
      if (tid == -1) continue;
      ++waiting;
      awake += tid == 0 || !asleep(tid) ? 1 : 0;
    }
    // The leader and at least one appender that wrote after the last roll.
    quiet = syncs >= 2 && awake == 0 && waiting >= 2 ? quiet + 1 : 0;
    if (std::chrono::steady_clock::now() > give_up) {
      ADD_FAILURE() << "set-up: " << syncs << " syncs, " << waiting << " appenders waiting, "
                    << awake << " of them not asleep";
      std::abort();
    }
  }
  {
    std::lock_guard lk(m);
    release = true;
  }
  cv.notify_all();
  auto joined = std::async(std::launch::async, [&] {
    for (std::thread& th : threads) th.join();
  });
  if (joined.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "appenders still waiting 10 s after the leader's sync ended: a lost wake-up";
    std::abort();  // the sleepers cannot be joined
  }
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(t.next_seq(), std::uint64_t{kAppenders + 1});
  fs.set_sync_hook(nullptr);
}

// Modes none and interval hand each finished `writeback_bytes` of a segment
// to the disk's write-back as it fills: whole pages, in order, no byte
// twice, so a close or an interval's sync finds little left to write. The
// durable modes sync anyway and never ask; 0 turns it off. A hint only: the
// simulated disk keeps nothing of it (what a cut keeps is the cut tests').
TEST(WritebackTest, ModesWithoutASyncPerAppendStartWritingEachChunkBackAsItFills) {
  constexpr std::uint64_t kChunk = 64 << 10;
  for (const Durability d : {Durability::kNone, Durability::kInterval, Durability::kGroupCommit,
                             Durability::kPerAppend}) {
    for (const std::uint64_t chunk : {kChunk, std::uint64_t{0}}) {
      SCOPED_TRACE(std::to_string(static_cast<int>(d)) + " chunk " + std::to_string(chunk));
      FaultFileSystem fs;
      TopicOptions o;
      o.durability = d;
      o.segment_bytes = 900 << 10;  // the fault disk's files hold 1 MiB
      o.max_message_bytes = 4096;
      o.sync_interval = std::chrono::hours(1);
      o.writeback_bytes = chunk;
      auto topic = log::open_topic(fs, kCutTopicDir, o);
      ASSERT_TRUE(topic.ok()) << topic.status().to_string();
      const std::string payload(1000, 'w');
      const std::vector<std::string_view> batch(10, payload);  // ~10 KB an append
      for (int i = 0; i < 60; ++i) ASSERT_TRUE((*topic)->append_batch(batch).ok());
      const std::vector<std::string> wb = fs.writebacks();
      if (chunk == 0 || d == Durability::kGroupCommit || d == Durability::kPerAppend) {
        EXPECT_TRUE(wb.empty()) << wb.front();
        continue;
      }
      // ~600 KB written: 9 chunks of 64 KiB at least, each from where the
      // last ended, page-aligned.
      ASSERT_GE(wb.size(), 8u);
      std::uint64_t end = 0;
      std::string path;
      for (const std::string& w : wb) {
        const auto at = w.find(" @");
        const auto plus = w.find(" +");
        ASSERT_NE(plus, std::string::npos) << w;
        if (path.empty()) path = w.substr(0, at);
        EXPECT_EQ(w.substr(0, at), path);
        const std::uint64_t off = std::stoull(w.substr(at + 2, plus - at - 2));
        const std::uint64_t len = std::stoull(w.substr(plus + 2));
        EXPECT_EQ(off, end) << w;
        EXPECT_EQ(len % 4096, 0u) << w;
        EXPECT_GE(len, kChunk) << w;
        end = off + len;
      }
      EXPECT_GT(end + kChunk + 4096, std::uint64_t{600'000});  // nothing left behind
    }
  }
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
