// A channel opened while another Topic deletes it: the opener's open() of
// channels/<name>.pos comes before the delete's remove, its lock() after the
// delete let go. It then held a lock on a file no name reaches any more,
// and a later opener made a fresh .pos beside it: two consumers of one
// channel, the first one's acknowledgements written nowhere, and retention
// no longer waiting for it. Reproduced in one process (the locks are
// open-file-description locks: two Topics here exclude each other as two
// processes do) through a FileSystem that runs the delete right after the
// opener's open().
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "log/file_system.h"
#include "log/topic_impl.h"
#include "sluice/log/channel.h"
#include "sluice/log/topic.h"
#include "testutil/forwarding_file_system.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

// Runs `after_open` once, right after the first kReadWrite open of a path
// ending in `suffix` (the file is open, not yet locked).
class OpenHookFileSystem final : public testutil::ForwardingFileSystem {
 public:
  OpenHookFileSystem(std::string suffix, std::function<void()> after_open)
      : suffix_(std::move(suffix)), after_open_(std::move(after_open)) {}

  Result<std::unique_ptr<log::File>> open(const std::string& path, log::OpenMode mode) override {
    auto f = ForwardingFileSystem::open(path, mode);
    if (f.ok() && mode == log::OpenMode::kReadWrite && path.ends_with(suffix_) && after_open_) {
      auto hook = std::move(after_open_);
      after_open_ = nullptr;
      hook();
    }
    return f;
  }

 private:
  std::string suffix_;
  std::function<void()> after_open_;
};

TopicOptions options() {
  TopicOptions o;
  o.segment_bytes = 4096;
  o.max_message_bytes = 1024;
  o.durability = Durability::kNone;
  return o;
}

class ChannelOpenDeleteRaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testutil::test_dir("chandelrace");
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir() const { return (dir_ / "t").string(); }

  fs::path dir_;
};

TEST_F(ChannelOpenDeleteRaceTest, AChannelDeletedBetweenItsOpenAndItsLockIsNotOpenedTwice) {
  auto w = Topic::open(dir(), options());
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->channel("c").ok());  // made, then closed: c.pos is there
  for (int i = 0; i < 5; ++i) ASSERT_TRUE((*w)->append("m" + std::to_string(i)).ok());

  Status deleted = Status::Ok();
  OpenHookFileSystem hooked("/channels/c.pos", [&] { deleted = (*w)->delete_channel("c"); });
  TopicOptions ro = options();
  ro.read_only = true;
  auto r = log::open_topic(hooked, dir(), ro);
  ASSERT_TRUE(r.ok()) << r.status();
  auto first = (*r)->channel("c");
  ASSERT_TRUE(deleted.ok()) << deleted;  // the delete ran, between open and lock

  // Whatever the first opener got, channel 'c' has one consumer at most.
  auto second = (*w)->channel("c");
  if (first.ok()) {
    EXPECT_FALSE(second.ok()) << "channel 'c' opened twice: the first one on a deleted file";
    if (!second.ok()) {
      EXPECT_EQ(second.code(), StatusCode::kInUse) << second.status();
    }
    // And the first one's position is in the topic's channels/ (retention
    // and `channels()` see it).
    auto names = (*w)->channels();
    ASSERT_TRUE(names.ok()) << names.status();
    EXPECT_NE(std::find(names->begin(), names->end(), "c"), names->end());
  } else {
    EXPECT_TRUE(second.ok()) << second.status();
  }
}

}  // namespace
}  // namespace sluice
