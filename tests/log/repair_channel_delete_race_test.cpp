// repair_topic beside a channel deleted after its look at the position file
// (delete_channel in another process): the channel has nothing left to
// repair, and the repair of the rest goes on. It failed instead (the open of
// the file it had looked at: "No such file"; or, with the delete between its
// open and its lock, the copy of a file that was gone), midway, after
// earlier steps had been applied.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "log/file_system.h"
#include "log/inspect.h"
#include "log/topic_impl.h"
#include "sluice/log/channel.h"
#include "sluice/log/inspect.h"
#include "sluice/log/topic.h"
#include "testutil/forwarding_file_system.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

TopicOptions options() {
  TopicOptions o;
  o.segment_bytes = 1024;
  o.max_message_bytes = 512;
  o.durability = Durability::kPerAppend;
  return o;
}

// Removes `pos` at the repair's first kReadWrite open of it: before the
// open (`after_open` false) or right after it, before the lock.
struct DeleteAtOpen final : testutil::ForwardingFileSystem {
  std::string pos;
  bool after_open = false;
  bool done = false;
  Result<std::unique_ptr<log::File>> open(const std::string& p, log::OpenMode m) override {
    if (done || p != pos || m != log::OpenMode::kReadWrite) return ForwardingFileSystem::open(p, m);
    done = true;
    if (!after_open) {
      EXPECT_TRUE(log::posix_file_system().remove(p).ok());
      return ForwardingFileSystem::open(p, m);
    }
    auto f = ForwardingFileSystem::open(p, m);
    EXPECT_TRUE(log::posix_file_system().remove(p).ok());
    return f;
  }
};

class RepairChannelDeleteRaceTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    dir_ = testutil::test_dir("repair-chan-delete");
    {
      auto t = Topic::open(dir_.string(), options());
      ASSERT_TRUE(t.ok()) << t.status();
      for (std::uint64_t i = 0; i < 10; ++i) ASSERT_TRUE((*t)->append(std::to_string(i)).ok());
      auto c = (*t)->channel("c");
      ASSERT_TRUE(c.ok()) << c.status();
      for (int i = 0; i < 3; ++i) ASSERT_TRUE((*c)->next().ok());
      ASSERT_TRUE((*c)->ack(2).ok());
    }
    pos_ = (dir_ / "channels" / "c.pos").string();
  }
  void TearDown() override {
    fs::remove_all(dir_);
    fs::remove_all(dir_.string() + ".quarantine");
  }

  fs::path dir_;
  std::string pos_;
};

// A slot not in use damaged: repair would copy the file and rewrite it.
TEST_P(RepairChannelDeleteRaceTest, ABadSlotOfADeletedChannel) {
  {
    std::fstream f(pos_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(32 + 16);
    f.write("XXXX", 4);  // slot 1, not the one in use
  }
  DeleteAtOpen disk;
  disk.pos = pos_;
  disk.after_open = GetParam();
  auto r =
      log::repair_topic(disk, dir_.string(), {.dry_run = false, .quarantine_dir = ""}, options());
  ASSERT_TRUE(disk.done);
  EXPECT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(fs::exists(pos_)) << "the deleted channel came back";
}

// No valid slot: repair would move the file to the quarantine.
TEST_P(RepairChannelDeleteRaceTest, ADamagedPositionOfADeletedChannel) {
  {
    std::fstream f(pos_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(16);
    f.write("XXXX", 4);  // slot 0
    f.seekp(32 + 16);
    f.write("XXXX", 4);  // slot 1
  }
  auto look = log::look(log::posix_file_system(), dir_.string(), options());
  ASSERT_TRUE(look.ok()) << look.status();
  ASSERT_EQ(look->out.channels.size(), 1U);
  ASSERT_EQ(look->out.channels[0].state, ChannelInspection::State::kDamaged);
  DeleteAtOpen disk;
  disk.pos = pos_;
  disk.after_open = GetParam();
  auto r =
      log::repair_topic(disk, dir_.string(), {.dry_run = false, .quarantine_dir = ""}, options());
  ASSERT_TRUE(disk.done);
  EXPECT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(fs::exists(pos_));
}

INSTANTIATE_TEST_SUITE_P(BeforeOrAfterItsOpen, RepairChannelDeleteRaceTest, ::testing::Bool());

}  // namespace
}  // namespace sluice
