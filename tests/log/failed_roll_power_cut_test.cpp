// A roll that fails part-way (the new segment's header sync fails, the
// directory sync fails) and takes its new segment back, then a power cut:
// the directory entry of the removed segment may have reached the disk
// without its removal (on ext4 an fsync of a new file commits the journal
// transaction that created it). The simulated disk keeps what was synced;
// the topic must reopen with every record reported durable, no damage, and
// take appends and rolls again.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "log/fault_file_system.h"
#include "log/format.h"
#include "log/inspect.h"
#include "log/topic_impl.h"
#include "sluice/log/channel.h"
#include "sluice/log/topic.h"
#include "testutil/forwarding_file_system.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;

constexpr const char* kDir = "/fault/topic";

// The simulated disk, with one file's syncs made to fail: its first sync
// makes its directory entry durable (a journal commit), then fails. The
// next `fail_dir_syncs` directory syncs fail.
class RollFaults final : public testutil::ForwardingFileSystem {
 public:
  explicit RollFaults(testutil::FaultFileSystem& disk) : ForwardingFileSystem(disk), disk_(disk) {}
  std::string target;       // the file whose syncs commit its entry (then fail)
  bool fail_target = true;  // false: its sync commits the entry and succeeds
  int fail_dir_syncs = 0;

  Status sync_dir(const std::string& d) override {
    if (fail_dir_syncs > 0) {
      --fail_dir_syncs;
      return {StatusCode::kIOError, "fsync " + d + ": Input/output error"};
    }
    return ForwardingFileSystem::sync_dir(d);
  }

 protected:
  std::unique_ptr<log::File> wrap(std::unique_ptr<log::File> f) override {
    if (f->path() != target) return f;
    return std::make_unique<File>(std::move(f), *this);
  }

 private:
  class File final : public testutil::ForwardingFile {
   public:
    File(std::unique_ptr<log::File> f, RollFaults& fs) : ForwardingFile(std::move(f)), fs_(fs) {}
    Status sync() override {
      (void)fs_.disk_.sync_dir(kDir);  // the creation reached the disk
      if (fs_.fail_target) return {StatusCode::kIOError, "fdatasync " + path() + ": I/O error"};
      return ForwardingFile::sync();
    }

   private:
    RollFaults& fs_;
  };

  testutil::FaultFileSystem& disk_;
};

TopicOptions options() {
  TopicOptions o;
  o.durability = Durability::kPerAppend;
  o.max_message_bytes = 1000;
  o.segment_bytes = 4096;  // three records of 1,000 bytes
  return o;
}

std::string big(std::uint64_t i) {
  std::string s = std::to_string(i);
  return s + std::string(1000 - s.size(), 'b');
}
std::string small(std::uint64_t i) { return "small " + std::to_string(i); }

// Three records fill the first segment; a fourth needs a roll, which fails
// as `faults` says; then five small records fit in the first segment and
// are synced (seqs 3..7). The power then goes: every cut mode, a few seeds.
// `comes_back`: whether the removed segment is on the disk after the cut.
void fail_a_roll_then_cut(RollFaults& faults, testutil::FaultFileSystem& disk, int dir_fails,
                          bool comes_back) {
  auto t = log::open_topic(faults, kDir, options());
  ASSERT_TRUE(t.ok()) << t.status();
  for (std::uint64_t i = 0; i < 3; ++i) ASSERT_TRUE((*t)->append(big(i)).ok());
  faults.target = std::string(kDir) + "/" + log::segment_name(3);
  faults.fail_dir_syncs = dir_fails;
  ASSERT_FALSE((*t)->append(big(3)).ok());
  EXPECT_FALSE(disk.exists(faults.target)) << "the failed roll took its segment back";
  faults.fail_dir_syncs = 0;
  for (std::uint64_t i = 3; i < 8; ++i) {
    auto seq = (*t)->append(small(i));
    ASSERT_TRUE(seq.ok()) << seq.status();
    ASSERT_EQ(*seq, i);
  }
  for (const auto mode :
       {testutil::CutMode::kDropUnsynced, testutil::CutMode::kZeroFill, testutil::CutMode::kTorn}) {
    for (std::uint64_t seed = 0; seed < 4; ++seed) {
      SCOPED_TRACE(std::string(testutil::to_string(mode)) + " seed " + std::to_string(seed));
      auto after = disk.after_cut(mode, seed);
      ASSERT_EQ(after->exists(faults.target), comes_back);
      // Not damage: inspect says a crash left it.
      auto look = log::look(*after, kDir, options());
      ASSERT_TRUE(look.ok()) << look.status();
      for (const LogFinding& f : look->out.findings) {
        EXPECT_NE(f.severity, LogFinding::Severity::kDamage) << f.file << ": " << f.what;
      }
      auto r = log::open_topic(*after, kDir, options());
      ASSERT_TRUE(r.ok()) << r.status();
      Topic& topic = **r;
      EXPECT_TRUE(topic.recovery().corrupt.empty()) << topic.recovery().corrupt.front().what;
      EXPECT_EQ(topic.recovery().removed,
                comes_back ? std::vector<std::string>{faults.target} : std::vector<std::string>{});
      EXPECT_FALSE(after->exists(faults.target));
      ASSERT_EQ(topic.next_seq(), 8U);
      auto c = topic.channel("c");
      ASSERT_TRUE(c.ok()) << c.status();
      for (std::uint64_t i = 0; i < 8; ++i) {
        auto m = (*c)->next(with_timeout(0ms));
        ASSERT_TRUE(m.ok()) << "seq " << i << ": " << m.status();
        EXPECT_EQ(m->seq, i);
        EXPECT_EQ(m->payload, i < 3 ? big(i) : small(i));
      }
      EXPECT_EQ((*c)->skipped_corrupt(), 0U);
      // Appends and rolls go on: seqs 8.. in a new segment.
      for (std::uint64_t i = 8; i < 12; ++i) {
        auto seq = topic.append(big(i));
        ASSERT_TRUE(seq.ok()) << seq.status();
        EXPECT_EQ(*seq, i);
      }
      for (std::uint64_t i = 8; i < 12; ++i) {
        auto m = (*c)->next(with_timeout(0ms));
        ASSERT_TRUE(m.ok()) << "seq " << i << ": " << m.status();
        EXPECT_EQ(m->payload, big(i));
      }
    }
  }
}

// The new segment's header sync fails: create_segment removes the file.
// That removal must be durable before appends go on in the old segment past
// its base, or a power cut brings back an empty segment named inside the
// log (the writer's open refused the topic: "overlaps").
TEST(FailedRollPowerCutTest, AFailedHeaderSyncLeavesNoSegmentToComeBack) {
  testutil::FaultFileSystem disk;
  RollFaults faults(disk);
  fail_a_roll_then_cut(faults, disk, 0, /*comes_back=*/false);
}

// The same, and the directory sync after the removal fails too: the empty
// segment may come back after the cut. It holds no record and lies inside
// the log: recovery removes it.
TEST(FailedRollPowerCutTest, AnEmptySegmentBackFromAFailedRollIsRemoved) {
  testutil::FaultFileSystem disk;
  RollFaults faults(disk);
  fail_a_roll_then_cut(faults, disk, 1, /*comes_back=*/true);
}

// The header is synced but the roll's directory sync fails (and the one
// after its removal): a segment with a valid header and no record may come
// back, named inside the log. Not damage: recovery removes it.
TEST(FailedRollPowerCutTest, AHeaderOnlySegmentBackFromAFailedRollIsRemoved) {
  testutil::FaultFileSystem disk;
  RollFaults faults(disk);
  faults.fail_target = false;
  fail_a_roll_then_cut(faults, disk, 2, /*comes_back=*/true);
}

}  // namespace
}  // namespace sluice
