// A queue deleted and made again between a writer's open of the topic's
// LOCK and its lock of it. The writer then held a lock on the removed file,
// worked in the new queue's topic, and a second writer took the new LOCK:
// two writers of one topic (each appending at the same seqs). Reproduced in
// one process (LOCK's locks are open-file-description locks: two stores
// here exclude each other as two processes do) through a FileSystem that
// runs the delete and the create right after the writer's open of LOCK.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "log/file_system.h"
#include "sluice/context.h"
#include "sluice/store.h"
#include "store/dir_store.h"
#include "testutil/forwarding_file_system.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Runs `after_lock_open` once, right after the first open of a path ending
// in "/topic/LOCK" (the file is open, not yet locked).
class LockOpenHookFs final : public testutil::ForwardingFileSystem {
 public:
  std::function<void()> after_lock_open;
  Result<std::unique_ptr<log::File>> open(const std::string& path, log::OpenMode mode) override {
    auto f = ForwardingFileSystem::open(path, mode);
    if (f.ok() && path.ends_with("/topic/LOCK") && after_lock_open) {
      auto hook = std::move(after_lock_open);
      after_lock_open = nullptr;
      hook();
    }
    return f;
  }
};

TEST(DirStoreWriterRecreateRaceTest, AQueueRemadeBetweenLockOpenAndLockHasOneWriter) {
  const fs::path dir = testutil::test_dir("store_writer_recreate_race");
  fs::remove_all(dir);
  LockOpenHookFs hooked;
  auto writing = store::DirStore::open(hooked, dir.string(), StoreOptions{});
  ASSERT_TRUE(writing.ok()) << writing.status();
  auto other = QueueStore::open(dir.string(), StoreOptions{});  // another "process"
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_TRUE((*other)->create("q", QueueSpec{}).ok());

  Status removed = Status::Ok();
  Status created = Status::Ok();
  hooked.after_lock_open = [&] {
    removed = (*other)->remove("q");
    created = (*other)->create("q", QueueSpec{});
  };
  auto first = (*writing)->writer("q", with_timeout(0s));
  ASSERT_TRUE(removed.ok()) << removed;  // both ran, between the open and the lock
  ASSERT_TRUE(created.ok()) << created;

  // Whatever the first writer got, queue q has one writer at most.
  auto second = (*other)->writer("q", with_timeout(0s));
  if (first.ok()) {
    EXPECT_FALSE(second.ok()) << "queue q has two writers: the first one locked a removed LOCK";
    if (!second.ok()) {
      EXPECT_EQ(second.code(), StatusCode::kInUse) << second.status();
    }
  } else {
    EXPECT_TRUE(second.ok()) << second.status();
  }
  if (first.ok() && second.ok()) {
    // What two writers do: both append at seq 0.
    std::vector<std::string_view> a{"from-first"};
    std::vector<std::string_view> b{"from-second"};
    EXPECT_TRUE((*first)->put(a, {}, nullptr).ok());
    EXPECT_TRUE((*second)->put(b, {}, nullptr).ok());
  }
  first = Status(StatusCode::kCancelled, "closed");
  second = Status(StatusCode::kCancelled, "closed");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace sluice
