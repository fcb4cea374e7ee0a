// The embedded store's delete racing a reader of a new channel.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <iostream>
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

// The real file system, with a hook that runs after list() has read a
// directory and before its names are returned.
class HookedFs final : public testutil::ForwardingFileSystem {
 public:
  std::function<void(const std::string&)> after_list;
  Result<std::vector<std::string>> list(const std::string& d) override {
    auto r = ForwardingFileSystem::list(d);
    if (after_list) after_list(d);
    return r;
  }
};

// docs/cli.md, "Store layout": delete takes every channel's reader lock and
// holds them across the rename, so "a queue that a put or get has open is
// not deleted (exit 6)". A reader of a new channel that takes its role after
// delete listed readers/ and before its rename is not seen: the queue is
// deleted under a live reader, whose acknowledgements then succeed in files
// nobody can reach.
TEST(DirStoreDeleteRaceTest, DeleteDoesNotRemoveAQueueWithALiveReaderOfANewChannel) {
  const fs::path dir = testutil::test_dir("store_delete_race");
  fs::remove_all(dir);
  HookedFs hooked;
  auto deleter = store::DirStore::open(hooked, dir.string(), StoreOptions{});
  ASSERT_TRUE(deleter.ok()) << deleter.status();
  auto other = QueueStore::open(dir.string(), StoreOptions{});  // another "process"
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_TRUE((*other)->create("q", QueueSpec{}).ok());
  {
    auto w = (*other)->writer("q", {});
    ASSERT_TRUE(w.ok()) << w.status();
    std::vector<std::string_view> batch{"m0", "m1"};
    ASSERT_TRUE((*w)->put(batch, {}, nullptr).ok());
  }

  std::unique_ptr<QueueReader> reader;
  hooked.after_list = [&](const std::string& d) {
    if (reader || !d.ends_with("/readers")) return;
    auto r = (*other)->reader("q", "late", {});
    ASSERT_TRUE(r.ok()) << r.status();
    reader = std::move(*r);
  };
  Status s = (*deleter)->remove("q");
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInUse) << "deleted under a live reader: " << s;

  // What the live reader sees: the queue is gone, yet it reads and acks.
  std::vector<StoreMessage> got;
  Status g = reader->get(got, 10, {});
  Status a = reader->ack();
  std::cout << "reader after delete: get=" << g << " (" << got.size() << " messages), ack=" << a
            << ", queue exists=" << fs::exists(dir / "queues" / "q") << "\n";
  reader.reset();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace sluice
