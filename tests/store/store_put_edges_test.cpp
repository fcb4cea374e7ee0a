// A store put of many bounds' worth (or many MiB) on the embedded store, and
// what it says when a sync fails: every message once and in order, a put
// that returns Ok made all of it durable, and a put that fails says how many
// went in and how many are in doubt (written, their sync failed: on the disk
// or not), never fewer or more than the disk kept.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "log/fault_file_system.h"
#include "sluice/store.h"
#include "store/dir_store.h"
#include "testutil/temp_dir.h"

namespace sluice::store {
namespace {

using testutil::CutMode;
using testutil::FaultFileSystem;

// A fresh directory on the real disk, removed at the end.
struct Dir {
  std::filesystem::path path = testutil::test_dir("store");
  ~Dir() { std::filesystem::remove_all(path); }
};

Context soon() { return Context().with_timeout(std::chrono::seconds(20)); }

std::string msg(std::size_t i, std::size_t size = 0) {
  std::string m = "m" + std::to_string(i);
  if (m.size() < size) m.resize(size, static_cast<char>('a' + i % 26));
  return m;
}

// Puts `n` messages of about `size` bytes in one call while a reader takes
// and acknowledges them; checks the reader got each once, in order.
void put_while_reading(QueueStore& store, std::uint64_t bound, std::size_t n, std::size_t size) {
  ASSERT_TRUE(store.create("q", bound).ok());
  std::vector<std::string> owned;
  for (std::size_t i = 0; i < n; ++i) owned.push_back(msg(i, size));
  std::vector<std::string_view> batch(owned.begin(), owned.end());

  std::vector<std::string> got;
  std::thread reader([&] {
    auto r = store.reader("q", kDefaultChannel, soon());
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    std::vector<StoreMessage> some;
    while (got.size() < n) {
      some.clear();
      const Status s = (*r)->get(some, 64, soon());
      ASSERT_TRUE(s.ok()) << s.to_string();
      for (auto& m : some) got.push_back(std::move(m.data));
      ASSERT_TRUE((*r)->ack().ok());
    }
  });
  auto w = store.writer("q", soon());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  std::size_t done = 0;
  const Status s = (*w)->put(batch, soon(), &done);
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(done, n);
  EXPECT_EQ((*w)->in_doubt(), 0u);
  reader.join();
  ASSERT_EQ(got.size(), n);
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(got[i], owned[i]) << "message " << i;
  }
  auto info = store.stat("q");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->produced, n);
}

TEST(StorePutEdgesTest, APutOfManyBoundsArrivesOnceAndInOrder) {
  Dir dir;
  auto store = QueueStore::open((dir.path / "s").string(), StoreOptions{});
  ASSERT_TRUE(store.ok());
  // Chunks of 5 (half the bound): 400 of them, each waiting for room.
  put_while_reading(**store, 10, 2000, 0);
}

TEST(StorePutEdgesTest, APutOfSeveralMebibytesArrivesOnceAndInOrder) {
  Dir dir;
  auto store = QueueStore::open((dir.path / "s").string(), StoreOptions{});
  ASSERT_TRUE(store.ok());
  // Unbounded: chunks by bytes (a MiB), 3 MiB of 1 KiB messages.
  put_while_reading(**store, 0, 3000, 1024);
}

TEST(StorePutEdgesTest, OnTheSimulatedDiskWithSlowSyncs) {
  FaultFileSystem fs;
  fs.set_sync_latency(std::chrono::microseconds(200));  // the next chunk is written meanwhile
  auto store = DirStore::open(fs, "/fault/store", StoreOptions{});
  ASSERT_TRUE(store.ok());
  put_while_reading(**store, 8, 500, 0);
}

// A sync fails during a put (the power goes at the n-th sync of a segment):
// the put fails; what it says went in is on the disk after the cut, and what
// the disk kept beyond that is at most what it said was in doubt (a torn cut
// keeps some of the unsynced records whole). Checked for every cut mode and
// for a failure at each of the first syncs.
TEST(StorePutEdgesTest, ASyncFailingDuringAPutSaysWhatWentInAndWhatIsInDoubt) {
  constexpr std::size_t kPerPut = 6000;  // 100 bytes each
  std::vector<std::string> owned;
  for (std::size_t i = 0; i < kPerPut; ++i) owned.push_back(msg(i, 100));
  const std::vector<std::string_view> batch(owned.begin(), owned.end());
  bool kept_some_in_doubt = false;
  for (int failing = 1; failing <= 6; ++failing) {
    for (CutMode mode : {CutMode::kDropUnsynced, CutMode::kZeroFill, CutMode::kTorn}) {
      SCOPED_TRACE("sync " + std::to_string(failing) + ", " + testutil::to_string(mode));
      FaultFileSystem fs;
      std::size_t done = 0;  // in all puts
      std::size_t doubt = 0;
      {
        auto store = DirStore::open(fs, "/fault/store", StoreOptions{});
        ASSERT_TRUE(store.ok());
        ASSERT_TRUE((*store)->create("q", 0).ok());
        auto w = (*store)->writer("q", soon());
        ASSERT_TRUE(w.ok());
        std::atomic<int> segment_syncs{0};
        fs.set_sync_hook([&](const std::string& path) {
          if (path.ends_with(".seg") && ++segment_syncs == failing) fs.cut_at(fs.calls() + 1);
        });
        Status s;
        for (int put = 0; put < 20 && s.ok(); ++put) {
          std::size_t n = 0;
          s = (*w)->put(batch, soon(), &n);
          EXPECT_EQ(n, s.ok() ? kPerPut : n);
          done += n;
          doubt = s.ok() ? 0 : (*w)->in_doubt();
          EXPECT_LE(n + doubt, kPerPut);
        }
        ASSERT_FALSE(s.ok()) << "the power went during a put";
      }
      auto after = fs.after_cut(mode, 7);
      auto store = DirStore::open(*after, "/fault/store", StoreOptions{});
      ASSERT_TRUE(store.ok()) << store.status().to_string();
      auto info = (*store)->stat("q");
      ASSERT_TRUE(info.ok()) << info.status().to_string();
      EXPECT_GE(info->produced, done) << "a message the put said went in is gone";
      EXPECT_LE(info->produced, done + doubt) << "the disk kept more than the put said";
      if (info->produced > done) kept_some_in_doubt = true;
    }
  }
  EXPECT_TRUE(kept_some_in_doubt) << "no cut kept a message in doubt: the test checks nothing";
}

// A put stopped while it waits for room (no reader) returns what went in:
// all of it durable, none in doubt.
TEST(StorePutEdgesTest, AStoppedPutReportsTheChunksThatWentIn) {
  Dir dir;
  auto store = QueueStore::open((dir.path / "s").string(), StoreOptions{});
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->create("q", 6).ok());
  std::vector<std::string> owned;
  for (std::size_t i = 0; i < 20; ++i) owned.push_back(msg(i));
  std::vector<std::string_view> batch(owned.begin(), owned.end());
  auto w = (*store)->writer("q", soon());
  ASSERT_TRUE(w.ok());
  std::size_t done = 0;
  const Status s = (*w)->put(batch, Context().with_timeout(std::chrono::milliseconds(100)), &done);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.to_string();
  EXPECT_EQ(done, 6u) << "the bound's worth went in";
  EXPECT_EQ((*w)->in_doubt(), 0u);
  auto info = (*store)->stat("q");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->produced, 6u);
  auto r = (*store)->reader("q", kDefaultChannel, soon());
  ASSERT_TRUE(r.ok());
  std::vector<StoreMessage> got;
  ASSERT_TRUE((*r)->get(got, 100, soon()).ok());
  ASSERT_EQ(got.size(), 6u);
  for (std::size_t i = 0; i < 6; ++i) EXPECT_EQ(got[i].data, owned[i]);
}

}  // namespace
}  // namespace sluice::store
