// A power cut that takes a sealed segment's unsynced records. In mode none a
// roll seals the segment without syncing it (docs/durability.md, "Rolls"):
// losing its tail, or sectors of it, is what a power cut does there, and
// recovery and inspect must say so, not call it damage ("a crash does not do
// this"). In the other modes a roll syncs the segment before it seals it:
// the same loss there is damage.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "log/fault_file_system.h"
#include "log/format.h"
#include "log/inspect.h"
#include "log/topic_impl.h"
#include "sluice/log/channel.h"
#include "sluice/log/inspect.h"
#include "sluice/log/topic.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;

constexpr const char* kDir = "/fault/topic";

TopicOptions options(Durability d) {
  TopicOptions o;
  o.durability = d;
  o.max_message_bytes = 1000;
  o.segment_bytes = 4096;  // three records of 1,000 bytes
  return o;
}

std::string record(std::uint64_t i) {
  std::string s = "record " + std::to_string(i) + " ";
  return s + std::string(1000 - s.size(), 'r');
}

// Records 0..9: three sealed segments of three, the tenth alone in the
// newest. Nothing synced in mode none (but the headers, at the rolls). The
// power goes while the topic is open (the disk is taken as it is now).
std::unique_ptr<Topic> write(testutil::FaultFileSystem& disk, Durability d) {
  auto t = log::open_topic(disk, kDir, options(d));
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return nullptr;
  for (std::uint64_t i = 0; i < 10; ++i) {
    auto seq = (*t)->append(record(i));
    EXPECT_TRUE(seq.ok()) << seq.status();
    EXPECT_EQ(seq.ok() ? *seq : 0, i);
  }
  return std::move(*t);
}

// What a reader of the reopened topic gets: whole records, in order, none
// twice; returns how many.
std::uint64_t read_all(Topic& t) {
  auto c = t.channel("c");
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return 0;
  std::uint64_t n = 0;
  std::uint64_t last = 0;
  for (;;) {
    auto m = (*c)->next(with_timeout(0ms));
    if (!m.ok()) {
      EXPECT_EQ(m.status().code(), StatusCode::kDeadlineExceeded) << m.status();
      break;
    }
    EXPECT_EQ(m->payload, record(m->seq));
    if (n > 0) {
      EXPECT_GT(m->seq, last);
    }
    last = m->seq;
    ++n;
  }
  return n;
}

TEST(SealedUnsyncedTailTest, APowerCutInModeNoneIsALostUnsyncedTailNotDamage) {
  testutil::FaultFileSystem disk;
  auto writer = write(disk, Durability::kNone);
  ASSERT_NE(writer, nullptr);
  int losses = 0;
  for (const auto mode :
       {testutil::CutMode::kDropUnsynced, testutil::CutMode::kZeroFill, testutil::CutMode::kTorn}) {
    for (std::uint64_t seed = 0; seed < 16; ++seed) {
      SCOPED_TRACE(std::string(testutil::to_string(mode)) + " seed " + std::to_string(seed));
      auto after = disk.after_cut(mode, seed);
      auto look = log::look(*after, kDir, options(Durability::kNone));
      ASSERT_TRUE(look.ok()) << look.status();
      for (const LogFinding& f : look->out.findings) {
        EXPECT_NE(f.severity, LogFinding::Severity::kDamage)
            << f.file << " @" << f.offset << ": " << f.what << " (" << f.advice << ")";
      }
      auto r = log::open_topic(*after, kDir, options(Durability::kNone));
      ASSERT_TRUE(r.ok()) << r.status();
      const RecoveryReport& report = (*r)->recovery();
      for (const LogDamage& d : report.corrupt) {
        ADD_FAILURE() << "reported as damage: " << d.file << " @" << d.offset << ": " << d.what;
      }
      EXPECT_GE((*r)->next_seq(), 9U);  // the newest segment's name keeps the count
      const std::uint64_t n = read_all(**r);
      if (n < 10) {
        ++losses;
        EXPECT_FALSE(report.truncated.empty()) << "records lost, and recovery said nothing";
      }
    }
  }
  EXPECT_GT(losses, 0);  // the cuts took something
}

// In mode none too, damage no power cut explains (a changed byte: no sector
// of zeros) is damage, and so is the gap after a segment that holds it.
TEST(SealedUnsyncedTailTest, AChangedByteInASegmentSealedWithoutASyncIsDamage) {
  testutil::FaultFileSystem disk;
  auto writer = write(disk, Durability::kNone);
  ASSERT_NE(writer, nullptr);
  ASSERT_TRUE(writer->sync().ok());
  for (const bool cut_mid_record : {false, true}) {
    SCOPED_TRACE(cut_mid_record ? "cut mid-record" : "a byte changed");
    auto after = disk.after_cut(testutil::CutMode::kDropUnsynced, 0);
    {
      auto f =
          after->open(std::string(kDir) + "/" + log::segment_name(0), log::OpenMode::kReadWrite);
      ASSERT_TRUE(f.ok()) << f.status();
      const std::uint64_t record1 = log::kSegmentHeaderSize + log::kRecordHeaderSize + 1000;
      if (cut_mid_record) {
        ASSERT_TRUE((*f)->truncate(record1 + 100).ok());
      } else {
        ASSERT_TRUE((*f)->pwrite("X", 1, record1 + log::kRecordHeaderSize + 10).ok());
      }
      ASSERT_TRUE((*f)->sync().ok());
    }
    auto look = log::look(*after, kDir, options(Durability::kNone));
    ASSERT_TRUE(look.ok()) << look.status();
    EXPECT_TRUE(look->out.damaged());
    auto t = log::open_topic(*after, kDir, options(Durability::kNone));
    ASSERT_TRUE(t.ok()) << t.status();
    // The segment's damage, and with the cut the gap after it.
    EXPECT_EQ((*t)->recovery().corrupt.size(), cut_mid_record ? 2U : 1U);
    EXPECT_EQ(read_all(**t), cut_mid_record ? 8U : 9U);
  }
}

// The same loss in a mode that syncs at the roll is damage: recovery and
// inspect say so.
TEST(SealedUnsyncedTailTest, ASealedSegmentsLostTailInADurableModeIsDamage) {
  for (const Durability d : {Durability::kInterval, Durability::kGroupCommit}) {
    testutil::FaultFileSystem disk;
    auto writer = write(disk, d);
    ASSERT_NE(writer, nullptr);
    auto after = disk.after_cut(testutil::CutMode::kDropUnsynced, 0);
    // The power cut itself took nothing of the sealed segments.
    {
      auto copy = after->after_cut(testutil::CutMode::kDropUnsynced, 0);
      auto t = log::open_topic(*copy, kDir, options(d));
      ASSERT_TRUE(t.ok()) << t.status();
      EXPECT_TRUE((*t)->recovery().corrupt.empty());
      EXPECT_GE(read_all(**t), 9U);  // kInterval: the newest record may not be synced
    }
    // A disk's loss: the first segment's last record gone.
    {
      auto f =
          after->open(std::string(kDir) + "/" + log::segment_name(0), log::OpenMode::kReadWrite);
      ASSERT_TRUE(f.ok()) << f.status();
      auto size = (*f)->size();
      ASSERT_TRUE(size.ok());
      ASSERT_TRUE((*f)->truncate(*size - 100).ok());
      ASSERT_TRUE((*f)->sync().ok());
    }
    auto look = log::look(*after, kDir, options(d));
    ASSERT_TRUE(look.ok()) << look.status();
    EXPECT_TRUE(look->out.damaged());
    auto t = log::open_topic(*after, kDir, options(d));
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_FALSE((*t)->recovery().corrupt.empty());
  }
}

}  // namespace
}  // namespace sluice
