// The embedded store, a second look: a writer, a close or a seek racing a
// delete of the same queue.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "log/file_system.h"
#include "sluice/store.h"
#include "store/dir_store.h"
#include "testutil/forwarding_file_system.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

// The real file system, with a hook run before is_dir() looks.
class HookedFs final : public testutil::ForwardingFileSystem {
 public:
  std::function<void(const std::string&)> before_is_dir;
  std::function<void(const std::string&)> after_is_dir;
  bool is_dir(const std::string& p) override {
    if (before_is_dir) before_is_dir(p);
    const bool r = ForwardingFileSystem::is_dir(p);
    if (after_is_dir) after_is_dir(p);
    return r;
  }
};

// A store opened twice: `racer` through HookedFs, `other` (another
// "process") on the real disk, with queue "q" made.
class StoreSecondLookTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto r = store::DirStore::open(hooked, dir.string(), StoreOptions{});
    ASSERT_TRUE(r.ok()) << r.status();
    racer = std::move(*r);
    auto o = QueueStore::open(dir.string(), StoreOptions{});
    ASSERT_TRUE(o.ok()) << o.status();
    other = std::move(*o);
    ASSERT_TRUE(other->create("q", QueueSpec{}).ok());
  }
  void TearDown() override { fs::remove_all(dir); }
  // A hook deleting "q" (through `other`) the first time it sees a path
  // ending with `suffix`; `deleted` says it ran.
  std::function<void(const std::string&)> delete_at(std::string suffix) {
    return [this, suffix = std::move(suffix)](const std::string& p) {
      if (deleted || !p.ends_with(suffix)) return;
      deleted = true;
      Status s = other->remove("q");
      ASSERT_TRUE(s.ok()) << s;
    };
  }

  const fs::path dir = testutil::test_dir("store_second_look");
  HookedFs hooked;
  std::unique_ptr<QueueStore> racer;
  std::unique_ptr<QueueStore> other;
  bool deleted = false;
};

// A writer that has read queue.meta and is about to open the topic when
// another process deletes the queue: the writer's open made the queue's
// topic directory again (queues/q/topic, no queue.meta), a half queue that
// `ls` lists, `stat` and `put` call missing and `create` calls existing.
TEST_F(StoreSecondLookTest, WriterRacingADeleteLeavesNoHalfQueue) {
  hooked.before_is_dir = delete_at("/queues/q/topic/channels");
  {
    auto w = racer->writer("q", {});  // dropped (with any lock) before looking
    ASSERT_TRUE(deleted);
    hooked.before_is_dir = nullptr;
    EXPECT_EQ(w.status().code(), StatusCode::kNotFound) << w.status();
  }

  EXPECT_FALSE(fs::exists(dir / "queues" / "q")) << "the delete left a half queue behind";
  auto names = other->list();
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_EQ(std::count(names->begin(), names->end(), "q"), 0);
  Status again = other->create("q", QueueSpec{});
  EXPECT_TRUE(again.ok()) << "create after delete: " << again;
}

// The same for close(), which opens the topic as its writer too.
TEST_F(StoreSecondLookTest, CloseRacingADeleteLeavesNoHalfQueue) {
  hooked.before_is_dir = delete_at("/queues/q/topic/channels");
  Status c = racer->close("q", {});
  ASSERT_TRUE(deleted);
  hooked.before_is_dir = nullptr;
  EXPECT_EQ(c.code(), StatusCode::kNotFound) << c;
  EXPECT_FALSE(fs::exists(dir / "queues" / "q")) << "the delete left a half queue behind";
  Status again = other->create("q", QueueSpec{});
  EXPECT_TRUE(again.ok()) << "create after delete: " << again;
}

// stat of a queue deleted after its queue.meta was read: "no queue"
// (kNotFound, which `sluice ls -l` skips), not the I/O error of resolving
// a topic directory that is gone.
TEST_F(StoreSecondLookTest, StatRacingADeleteSaysNoQueue) {
  hooked.after_is_dir = delete_at("/queues/q/topic");
  auto info = racer->stat("q");
  ASSERT_TRUE(deleted);
  hooked.after_is_dir = nullptr;
  EXPECT_EQ(info.status().code(), StatusCode::kNotFound) << info.status();
}

}  // namespace
}  // namespace sluice
