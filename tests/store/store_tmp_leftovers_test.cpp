// What a crash in a create or a delete leaves under the embedded store's
// tmp/ is removed at the next open of the store, and a stage a live process
// works in never is.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
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

// The real file system, with hooks after a rename, a directory's creation,
// and in place of a removal of a tree.
class HookedFs final : public testutil::ForwardingFileSystem {
 public:
  std::function<void(const std::string&)> after_rename;
  std::function<void(const std::string&)> after_mkdir;
  std::function<Status(const std::string&)> remove_tree_instead;

  Status rename_noreplace(const std::string& f, const std::string& t) override {
    Status s = ForwardingFileSystem::rename_noreplace(f, t);
    if (after_rename) after_rename(t);
    return s;
  }
  Status create_dir(const std::string& d) override {
    Status s = ForwardingFileSystem::create_dir(d);
    if (after_mkdir) after_mkdir(d);
    return s;
  }
  Status remove_tree(const std::string& p) override {
    if (remove_tree_instead) return remove_tree_instead(p);
    return ForwardingFileSystem::remove_tree(p);
  }
};

std::vector<std::string> entries(const fs::path& d) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(d)) out.push_back(e.path().filename().string());
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& n : v) s += n + " ";
  return s;
}

void put_two(QueueStore& store, std::string_view q) {
  auto w = store.writer(q, {});
  ASSERT_TRUE(w.ok()) << w.status();
  std::vector<std::string_view> batch{"m0", "m1"};
  ASSERT_TRUE((*w)->put(batch, {}, nullptr).ok());
}

// A delete whose process dies in its final removal (the rename done, part
// of the tree removed): the files stayed under tmp/ for good, whatever
// opened the store later.
TEST(StoreTmpLeftoversTest, ACrashInADeletesRemovalIsCleanedAtTheNextOpen) {
  const fs::path dir = testutil::test_dir("store_tmp_leftovers");
  fs::remove_all(dir);
  {
    HookedFs hooked;
    hooked.remove_tree_instead = [](const std::string& p) {
      // Half done, then the power went: the segments stay.
      fs::remove_all(fs::path(p) / "readers");
      return Status(StatusCode::kIOError, "remove " + p + ": the process died here");
    };
    auto store = store::DirStore::open(hooked, dir.string(), StoreOptions{});
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->create("q", QueueSpec{}).ok());
    put_two(**store, "q");
    ASSERT_FALSE((*store)->remove("q").ok());
    ASSERT_FALSE(entries(dir / "tmp").empty()) << "no leftover made";
  }
  auto again = QueueStore::open(dir.string(), StoreOptions{});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(entries(dir / "tmp").empty()) << "left under tmp/: " << joined(entries(dir / "tmp"));
  auto l = (*again)->list();
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(l->empty());
  // And a queue of that name again works from nothing.
  ASSERT_TRUE((*again)->create("q", QueueSpec{}).ok());
  auto p = (*again)->peek("q", kDefaultChannel);
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<StoreMessage> got;
  ASSERT_TRUE((*p)->next(got, 10).ok());
  EXPECT_TRUE(got.empty());
  fs::remove_all(dir);
}

// Leftovers of a store from before the stages had lock files, and a lock
// file alone (a crash after its stage went): removed too.
TEST(StoreTmpLeftoversTest, StagesWithoutALockFileAndLockFilesAloneAreCleaned) {
  const fs::path dir = testutil::test_dir("store_tmp_leftovers_old");
  fs::remove_all(dir);
  {
    auto store = QueueStore::open(dir.string(), StoreOptions{});
    ASSERT_TRUE(store.ok()) << store.status();
  }
  fs::create_directories(dir / "tmp" / "delete-1-0-q" / "topic");
  std::ofstream(dir / "tmp" / "delete-1-0-q" / "topic" / "x") << "data";
  fs::create_directories(dir / "tmp" / "create-1-1-q.lock");  // a queue name may end so
  std::ofstream(dir / "tmp" / "lock-delete-1-2-q") << "";
  auto again = QueueStore::open(dir.string(), StoreOptions{});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(entries(dir / "tmp").empty()) << "left under tmp/: " << joined(entries(dir / "tmp"));
  fs::remove_all(dir);
}

// An open of the store (another process's) while a create or a delete is
// at work under tmp/ leaves its stage alone: both finish as they would.
TEST(StoreTmpLeftoversTest, AnOpenLeavesTheStagesOfLiveCreatesAndDeletesAlone) {
  const fs::path dir = testutil::test_dir("store_tmp_leftovers_live");
  fs::remove_all(dir);
  HookedFs hooked;
  auto store = store::DirStore::open(hooked, dir.string(), StoreOptions{});
  ASSERT_TRUE(store.ok()) << store.status();
  const std::string tmp = (dir / "tmp").string() + "/";

  int opened = 0;
  const auto open_other = [&](const std::string& stage) {
    auto other = QueueStore::open(dir.string(), StoreOptions{});
    ASSERT_TRUE(other.ok()) << other.status();
    EXPECT_TRUE(fs::exists(stage)) << "an open removed a live stage: " << stage;
    ++opened;
  };
  hooked.after_mkdir = [&](const std::string& d) {
    if (d.starts_with(tmp + "create-") && d.find('/', tmp.size()) == std::string::npos) {
      open_other(d);
    }
  };
  hooked.after_rename = [&](const std::string& to) {
    if (to.starts_with(tmp + "delete-")) open_other(to);
  };
  ASSERT_TRUE((*store)->create("q", QueueSpec{}).ok());
  put_two(**store, "q");
  auto p = (*store)->peek("q", kDefaultChannel);
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<StoreMessage> got;
  ASSERT_TRUE((*p)->next(got, 10).ok());
  EXPECT_EQ(got.size(), 2U);
  EXPECT_TRUE((*store)->remove("q").ok());
  EXPECT_EQ(opened, 2);
  auto l = (*store)->list();
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(l->empty());
  EXPECT_TRUE(entries(dir / "tmp").empty()) << "left under tmp/: " << joined(entries(dir / "tmp"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace sluice
