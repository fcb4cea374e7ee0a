// The disk-backed spill store behind a Queue with OverflowPolicy::kSpill.
#include "sluice/log/log_spill_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "sluice/queue.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

class LogSpillStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testutil::test_dir("spill"); }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(LogSpillStoreTest, QueueSpillsToDiskInFifoOrderAndCountsExactly) {
  LogSpillOptions so;
  so.dir = dir_.string();
  so.budget_bytes = 64 * 1024;
  so.segment_bytes = 8 * 1024;
  auto store = LogSpillStore<std::string>::open(so);
  ASSERT_TRUE(store.ok()) << store.status();
  QueueOptions<std::string> o;
  o.capacity = 4;
  o.policy = OverflowPolicy::kSpill;
  o.spill_store = *store;
  Queue<std::string> q(o);
  const std::string pad(100, '.');
  int accepted = 0;
  int refused = 0;
  for (int i = 0; i < 1000; ++i) {
    std::string m = std::to_string(i) + pad;
    Status s = q.push(std::move(m));
    if (s.ok()) {
      ++accepted;
    } else {
      ASSERT_EQ(s.code(), StatusCode::kRejected);  // the disk budget, reported
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_LE((*store)->disk_bytes(), so.budget_bytes);
  QueueStats st = q.stats();
  EXPECT_EQ(st.pushed, static_cast<std::uint64_t>(accepted));
  EXPECT_EQ(st.rejected, static_cast<std::uint64_t>(refused));
  EXPECT_EQ(st.spilled, static_cast<std::uint64_t>(accepted - 4));
  EXPECT_EQ(st.spill_depth, (*store)->size());
  // FIFO: memory first, then the disk, in push order.
  for (int i = 0; i < accepted; ++i) {
    auto m = q.try_pull();
    ASSERT_TRUE(m.ok()) << i;
    EXPECT_EQ(*m, std::to_string(i) + pad);
  }
  EXPECT_EQ((*store)->size(), 0U);
  // Consumed segments were deleted: the disk use fell back to about a segment.
  EXPECT_LE((*store)->disk_bytes(), 2 * so.segment_bytes);
  // And spilling works again.
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(q.push(std::string(pad)).ok());
  EXPECT_EQ(q.stats().spill_depth, 96U);
}

TEST_F(LogSpillStoreTest, TriviallyCopyableItems) {
  LogSpillOptions so;
  so.dir = dir_.string();
  so.budget_bytes = 1 << 20;
  auto store = LogSpillStore<std::uint64_t>::open(so);
  ASSERT_TRUE(store.ok());
  QueueOptions<std::uint64_t> o;
  o.capacity = 2;
  o.policy = OverflowPolicy::kSpill;
  o.spill_store = *store;
  Queue<std::uint64_t> q(o);
  std::jthread consumer([&] {
    for (std::uint64_t i = 0; i < 20000; ++i) {
      auto v = q.pull();
      ASSERT_TRUE(v.ok());
      ASSERT_EQ(*v, i);
    }
  });
  for (std::uint64_t i = 0; i < 20000; ++i) ASSERT_TRUE(q.push(std::uint64_t{i}).ok());
}

TEST_F(LogSpillStoreTest, RefusesToWipeADirectoryThatIsNotOne) {
  fs::create_directories(dir_);
  std::ofstream(dir_ / "precious.txt") << "keep";
  LogSpillOptions so;
  so.dir = dir_.string();
  so.budget_bytes = 1 << 20;
  auto store = LogSpillStore<std::string>::open(so);
  EXPECT_EQ(store.code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(fs::exists(dir_ / "precious.txt"));
  so.budget_bytes = 100;
  EXPECT_EQ(LogSpillStore<std::string>::open(so).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice
