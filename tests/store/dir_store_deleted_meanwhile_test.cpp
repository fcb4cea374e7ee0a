// The embedded store's peek, reader, seek and purge racing a delete of the
// same queue: "no queue" (kNotFound, the CLI's exit 3), as when the delete
// came first, never the error of a file that went with it.
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

// The real file system; `race` runs once, right after the first call that
// names `at` (an is_dir or an open) has returned.
class RacingFs final : public testutil::ForwardingFileSystem {
 public:
  std::string at;
  std::function<void()> race;
  bool raced = false;

  bool is_dir(const std::string& p) override {
    const bool r = ForwardingFileSystem::is_dir(p);
    after(p);
    return r;
  }
  Result<std::unique_ptr<log::File>> open(const std::string& p, log::OpenMode m) override {
    auto r = ForwardingFileSystem::open(p, m);
    after(p);
    return r;
  }

 private:
  void after(const std::string& p) {
    if (raced || !race || p != at) return;
    raced = true;
    race();
  }
};

using Op = std::function<StatusCode(QueueStore&)>;

// Runs `op` on a store whose queue "q" (two messages, a default channel)
// another store deletes right after `op` touched `at` (relative to the
// queue's directory); returns what `op` said.
StatusCode racing_delete(const std::string& at, const Op& op) {
  const fs::path dir = testutil::test_dir("store_deleted_meanwhile");
  fs::remove_all(dir);
  RacingFs racing;
  auto store = store::DirStore::open(racing, dir.string(), StoreOptions{});
  EXPECT_TRUE(store.ok()) << store.status();
  auto other = QueueStore::open(dir.string(), StoreOptions{});  // another "process"
  EXPECT_TRUE(other.ok()) << other.status();
  if (!store.ok() || !other.ok()) return StatusCode::kInternal;
  EXPECT_TRUE((*other)->create("q", QueueSpec{}).ok());
  {
    auto w = (*other)->writer("q", {});
    EXPECT_TRUE(w.ok()) << w.status();
    std::vector<std::string_view> batch{"m0", "m1"};
    EXPECT_TRUE((*w)->put(batch, {}, nullptr).ok());
  }
  racing.at = (dir / "queues" / "q").string() + "/" + at;
  racing.race = [&] {
    Status s = (*other)->remove("q");
    EXPECT_TRUE(s.ok()) << "the racing delete: " << s;
  };
  const StatusCode code = op(**store);
  EXPECT_TRUE(racing.raced) << "the delete never ran: " << racing.at;
  EXPECT_FALSE(fs::exists(dir / "queues" / "q"));
  fs::remove_all(dir);
  return code;
}

TEST(DirStoreDeletedMeanwhileTest, PeekSaysNoQueue) {
  const StatusCode code = racing_delete("topic", [](QueueStore& s) {
    auto p = s.peek("q", kDefaultChannel);
    if (p.ok()) return StatusCode::kOk;
    std::cout << "peek: " << p.status() << "\n";
    return p.code();
  });
  EXPECT_EQ(code, StatusCode::kNotFound);
}

TEST(DirStoreDeletedMeanwhileTest, ReaderSaysNoQueue) {
  // (Later, once it holds the channel's role, the delete is refused.)
  for (const char* at : {"queue.meta", "readers/late.lock"}) {
    const StatusCode code = racing_delete(at, [](QueueStore& s) {
      auto r = s.reader("q", "late", {});
      if (r.ok()) return StatusCode::kOk;
      std::cout << "reader: " << r.status() << "\n";
      return r.code();
    });
    EXPECT_EQ(code, StatusCode::kNotFound) << "deleted after the reader touched " << at;
  }
}

TEST(DirStoreDeletedMeanwhileTest, SeekSaysNoQueue) {
  const StatusCode code = racing_delete("topic", [](QueueStore& s) {
    auto r = s.seek("q", kDefaultChannel, SeekTarget::end(), {});
    if (r.ok()) return StatusCode::kOk;
    std::cout << "seek: " << r.status() << "\n";
    return r.code();
  });
  EXPECT_EQ(code, StatusCode::kNotFound);
}

TEST(DirStoreDeletedMeanwhileTest, PurgeSaysNoQueue) {
  const StatusCode code = racing_delete("topic", [](QueueStore& s) {
    auto r = s.purge("q", kDefaultChannel, {});
    if (r.ok()) return StatusCode::kOk;
    std::cout << "purge: " << r.status() << "\n";
    return r.code();
  });
  EXPECT_EQ(code, StatusCode::kNotFound);
}

}  // namespace
}  // namespace sluice
