// Recovery's edges (docs/log_format.md, "Recovery on open", "Segment
// summaries"): what the scan reports, what the writer's open keeps and
// writes after it, on the real disk in a temporary directory.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "log/fault_file_system.h"
#include "log/format.h"
#include "log/synced_topic_test.h"
#include "log/topic_impl.h"
#include "sluice/log/channel.h"
#include "sluice/log/topic.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Small segments (64 KiB).
class RecoveryEdgesTest : public testutil::SyncedTopicTest<64 * 1024> {
 protected:
  static constexpr std::uint64_t kRec = log::kRecordHeaderSize + 1000;
  void fill(int n) {
    auto t = open();
    for (int i = 0; i < n; ++i) ASSERT_TRUE(t->append(msg(static_cast<std::uint64_t>(i))).ok());
  }
};

// An older segment recovery read and found damaged gets no summary from the
// writer's open: the next open would take it unread and no longer report
// the damage it knows of (the open wrote one: the skips it tested had been
// moved into the topic's segments already).
TEST_F(RecoveryEdgesTest, AnOlderSegmentFoundDamagedGetsNoSummaryAndStaysReported) {
  fill(200);
  const auto segs = files(".seg");
  ASSERT_GE(segs.size(), 3U);
  // Record 2 of the first segment: a byte of its payload.
  overwrite(segs[0], log::kSegmentHeaderSize + 2 * kRec + log::kRecordHeaderSize + 1, "X");
  const fs::path sum = fs::path(segs[0]).replace_extension(".sum");
  ASSERT_TRUE(fs::remove(sum));  // an older sluice's topic, or a roll in kNone
  {
    auto t = open();
    ASSERT_EQ(t->recovery().corrupt.size(), 1U);
    EXPECT_EQ(t->recovery().corrupt[0].file, segs[0].string());
  }
  EXPECT_FALSE(fs::exists(sum));
  auto t = open();
  ASSERT_EQ(t->recovery().corrupt.size(), 1U);
  EXPECT_EQ(t->recovery().corrupt[0].file, segs[0].string());
  EXPECT_EQ(t->recovery().summarized, segs.size() - 1);
  auto c = std::move(*t->channel("r"));
  std::uint64_t n = 0;
  for (;;) {
    auto m = c->next(with_timeout(0ms));
    if (!m.ok()) break;
    EXPECT_NE(m->seq, 2U);
    ++n;
  }
  EXPECT_EQ(n, 199U);
  EXPECT_EQ(c->skipped_corrupt(), 1U);
}

// Zeros over the last records of a segment taken from its summary (a disk's
// damage: the summary was written after the records were synced). A reader
// that meets them reads the segment as recovery would; that scan takes a
// zero tail for reserved space, which below the summary's end it cannot be.
// The channel must skip and count those records, as an open without the
// summary does, not stop at them for good.
TEST_F(RecoveryEdgesTest, ZerosOverTheTailOfASummarizedSegmentAreSkippedAndCounted) {
  fill(200);
  const auto segs = files(".seg");
  ASSERT_GE(segs.size(), 3U);
  const std::uint64_t size = fs::file_size(segs[0]);
  const std::uint64_t in_first = (size - log::kSegmentHeaderSize) / kRec;
  ASSERT_EQ(log::kSegmentHeaderSize + in_first * kRec, size);
  overwrite(segs[0], size - 3 * kRec, std::string(3 * kRec, '\0'));
  for (const bool with_summary : {true, false}) {
    SCOPED_TRACE(with_summary ? "summarized" : "read at open");
    if (!with_summary) fs::remove(fs::path(segs[0]).replace_extension(".sum"));
    TopicOptions o = synced();
    o.durability = Durability::kNone;  // writes no summary at the open
    auto t = open(o);
    if (with_summary) {
      EXPECT_EQ(t->recovery().summarized, segs.size());
    }
    auto c = std::move(*t->channel(with_summary ? "a" : "b"));
    std::vector<std::uint64_t> got;
    Status last;
    for (;;) {
      auto m = c->next(with_timeout(0ms));
      if (!m.ok()) {
        last = m.status();
        break;
      }
      EXPECT_EQ(m->payload, msg(m->seq));
      got.push_back(m->seq);
    }
    EXPECT_EQ(last.code(), StatusCode::kDeadlineExceeded) << last;
    EXPECT_EQ(got.size(), 197U);
    EXPECT_EQ(c->skipped_corrupt(), 3U);
  }
}

// A known bug, left for a design choice (docs/design.md, "What is next" (3)):
// a power cut while a group commit's batch is written but not yet synced
// tears it by sector: a sector of zeros (old) may come before one with whole
// records (new). None of them was acknowledged; what recovery finds is the
// trace of a crash, which in the durable modes it must not call damage (the
// crash-point tests' rule). Fails in about half of its cuts; run it with
// --gtest_also_run_disabled_tests.
TEST_F(RecoveryEdgesTest, DISABLED_APowerCutTearingAnUnsyncedBatchIsNotReportedAsDamage) {
  int torn_as_damage = 0, cuts = 0;
  for (std::uint64_t k = 1; k <= 4; ++k) {
    testutil::FaultFileSystem disk;
    TopicOptions o = synced();
    o.segment_bytes = 1 << 20;
    auto t = log::open_topic(disk, "/fault/topic", o);
    ASSERT_TRUE(t.ok()) << t.status();
    for (int i = 0; i < 10; ++i) ASSERT_TRUE((*t)->append("before " + std::to_string(i)).ok());
    std::vector<std::string> batch;
    for (int i = 0; i < 60; ++i)
      batch.push_back("batch " + std::to_string(i) + std::string(90, 'b'));
    std::vector<std::string_view> views(batch.begin(), batch.end());
    disk.cut_at(disk.calls() + k);
    if ((*t)->append_batch(views).ok()) continue;  // the cut came after its sync
    for (std::uint64_t seed = 0; seed < 32; ++seed) {
      auto after = disk.after_cut(testutil::CutMode::kTorn, seed);
      auto r = log::open_topic(*after, "/fault/topic", o);
      ASSERT_TRUE(r.ok()) << r.status();
      ++cuts;
      ASSERT_GE((*r)->next_seq(), 10U);
      if (!(*r)->recovery().corrupt.empty()) {
        ++torn_as_damage;
        if (torn_as_damage == 1) {
          ADD_FAILURE() << "cut at call +" << k << " seed " << seed << ": "
                        << (*r)->recovery().corrupt[0].what << " at offset "
                        << (*r)->recovery().corrupt[0].offset;
        }
      }
    }
  }
  EXPECT_GT(cuts, 0);
  EXPECT_EQ(torn_as_damage, 0) << "of " << cuts << " cuts";
}

}  // namespace
}  // namespace sluice
