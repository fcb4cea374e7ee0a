// LogSpillStore's budget and its directory: reopening its own, never wiping
// what is not (a file, a live store, a look-alike), a trim that fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "sluice/log/log_spill_store.h"
#include "sluice/queue.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

class LogSpillStoreEdgesTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testutil::test_dir("spill_edges"); }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// "Its disk use is bounded by a byte budget: a put that would pass it is
// refused (kRejected)." The check counts 16 bytes per record; a record takes
// 24 (format 2 header) and a roll adds a 32-byte segment header.
TEST_F(LogSpillStoreEdgesTest, DiskUseNeverPassesTheBudget) {
  for (std::size_t size : {1, 8, 40, 100, 500, 1000}) {
    fs::remove_all(dir_);
    LogSpillOptions so;
    so.dir = dir_.string();
    so.budget_bytes = 8192;
    so.segment_bytes = 4096;
    auto store = LogSpillStore<std::string>::open(so);
    ASSERT_TRUE(store.ok()) << store.status();
    std::uint64_t most = 0;
    for (int i = 0; i < 100000; ++i) {
      std::string item(size, 'x');
      Status s = (*store)->put(item);
      most = std::max(most, (*store)->disk_bytes());
      if (!s.ok()) {
        ASSERT_EQ(s.code(), StatusCode::kRejected) << s;
        break;
      }
    }
    EXPECT_LE(most, so.budget_bytes) << "items of " << size << " bytes";
  }
}

// open() "wipes" a previous spill store's files: a directory a spill store
// left behind (destroyed with items still in it) must open again.
TEST_F(LogSpillStoreEdgesTest, ReopensTheDirectoryAPreviousSpillStoreLeft) {
  LogSpillOptions so;
  so.dir = dir_.string();
  so.budget_bytes = 64 * 1024;
  so.segment_bytes = 4096;
  {
    auto store = LogSpillStore<std::string>::open(so);
    ASSERT_TRUE(store.ok()) << store.status();
    for (int i = 0; i < 200; ++i) {
      std::string item(100, 'x');
      ASSERT_TRUE((*store)->put(item).ok());
    }
    std::optional<std::string> out;
    ASSERT_TRUE((*store)->take(out).ok());
  }
  auto again = LogSpillStore<std::string>::open(so);
  EXPECT_TRUE(again.ok()) << again.status();
}

// A spill store in use (its topic's LOCK held) is not a leftover: a second
// open of the same directory must not wipe the first one's items.
TEST_F(LogSpillStoreEdgesTest, SecondOpenDoesNotWipeALiveStore) {
  LogSpillOptions so;
  so.dir = dir_.string();
  so.budget_bytes = 64 * 1024;
  so.segment_bytes = 4096;
  auto first = LogSpillStore<std::string>::open(so);
  ASSERT_TRUE(first.ok()) << first.status();
  for (int i = 0; i < 3; ++i) {
    std::string item = "item" + std::to_string(i);
    ASSERT_TRUE((*first)->put(item).ok());
  }
  auto second = LogSpillStore<std::string>::open(so);
  EXPECT_FALSE(second.ok()) << "a second store opened over a live one";
  if (!second.ok()) std::cout << "second open: " << second.status() << "\n";
  second = Status(StatusCode::kInternal, "dropped");
  EXPECT_TRUE(fs::exists(dir_ / "LOCK")) << "the live store's files were wiped";
  // The first store goes on: enough puts to roll to new segments.
  for (int i = 3; i < 200; ++i) {
    std::string item = "item" + std::to_string(i) + std::string(100, '.');
    Status s = (*first)->put(item);
    ASSERT_TRUE(s.ok()) << i << ": " << s;
  }
  for (int i = 0; i < 3; ++i) {
    std::optional<std::string> out;
    Status s = (*first)->take(out);
    ASSERT_TRUE(s.ok()) << i << ": " << s;
    EXPECT_EQ(*out, "item" + std::to_string(i));
  }
}

// Names alone do not make a directory a spill store's: a user's directory
// named like a segment, or a file of theirs in `channels/`, is refused, not
// wiped (before, only top-level names were checked).
TEST_F(LogSpillStoreEdgesTest, OpenNeverWipesWhatOnlyLooksLikeAStore) {
  for (const std::string what : {"dir named like a segment", "file in channels"}) {
    SCOPED_TRACE(what);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::path precious;
    if (what == "dir named like a segment") {
      fs::create_directories(dir_ / "photos.seg");
      precious = dir_ / "photos.seg" / "a.jpg";
    } else {
      fs::create_directories(dir_ / "channels");
      precious = dir_ / "channels" / "notes.txt";
    }
    std::ofstream(precious) << "keep";
    LogSpillOptions so;
    so.dir = dir_.string();
    so.budget_bytes = 1 << 20;
    auto store = LogSpillStore<std::string>::open(so);
    EXPECT_EQ(store.code(), StatusCode::kAlreadyExists) << store.status().to_string();
    EXPECT_TRUE(fs::is_regular_file(precious)) << "wiped " << precious;
  }
}

// take() acknowledges the item in the topic before it hands it out; ack()
// moves the position first and then trims consumed segments. When the trim
// fails (here a consumed segment that cannot be removed), take() returns the
// error although the item was consumed: it is lost (the next take returns
// the one after it), and size() counts it still.
TEST_F(LogSpillStoreEdgesTest, AFailedTrimLosesNoItem) {
  LogSpillOptions so;
  so.dir = dir_.string();
  so.budget_bytes = 64 * 1024;
  so.segment_bytes = 4096;
  auto store = LogSpillStore<std::string>::open(so);
  ASSERT_TRUE(store.ok()) << store.status();
  constexpr int kItems = 100;
  for (int i = 0; i < kItems; ++i) {
    std::string item = std::to_string(i) + std::string(100, '.');
    ASSERT_TRUE((*store)->put(item).ok());
  }
  std::vector<fs::path> segs;
  for (const auto& e : fs::directory_iterator(dir_)) {
    if (e.path().extension() == ".seg") segs.push_back(e.path());
  }
  std::sort(segs.begin(), segs.end());
  ASSERT_GE(segs.size(), 3u);
  // The oldest segment's name now holds a non-empty directory: its removal
  // fails (an I/O error of the delete). The store keeps the segment open.
  fs::rename(segs[0], dir_ / "moved.bak");
  fs::create_directory(segs[0]);
  std::ofstream(segs[0] / "x") << "x";

  std::vector<int> got;
  int errors = 0;
  // kItems takes (more would block for ever once the topic is exhausted
  // while size() still counts lost items: next() waits for a record).
  for (int tries = 0; tries < kItems && (*store)->size() > 0; ++tries) {
    std::optional<std::string> out;
    Status s = (*store)->take(out);
    if (!s.ok()) {
      ++errors;
      continue;
    }
    got.push_back(std::stoi(*out));
  }
  std::cout << "take errors: " << errors << ", items taken: " << got.size()
            << ", size() now: " << (*store)->size() << "\n";
  // Every item, in order, exactly once.
  for (int i = 0; i < static_cast<int>(got.size()); ++i) {
    ASSERT_EQ(got[i], i) << "item " << i << " lost (" << errors << " take errors)";
  }
  EXPECT_EQ(got.size(), static_cast<std::size_t>(kItems));
  EXPECT_EQ((*store)->size(), 0u) << "size() counts items the topic no longer has: a take now "
                                     "blocks for ever";
  fs::remove_all(segs[0]);
}

// open() "refuses a directory that holds anything but a previous spill
// store's files". Given the path of a file (a mistake in the options), the
// directory listing fails, nothing is refused, and the file is removed.
TEST_F(LogSpillStoreEdgesTest, OpenNeverRemovesAFileAtItsPath) {
  fs::create_directories(dir_);
  const fs::path file = dir_ / "precious.txt";
  std::ofstream(file) << "keep";
  LogSpillOptions so;
  so.dir = file.string();
  so.budget_bytes = 1 << 20;
  auto store = LogSpillStore<std::string>::open(so);
  EXPECT_FALSE(store.ok()) << "opened a spill store over a file";
  EXPECT_TRUE(fs::is_regular_file(file)) << "the file at the path was removed";
}

}  // namespace
}  // namespace sluice
