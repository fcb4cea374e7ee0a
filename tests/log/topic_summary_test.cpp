// Segment summaries (docs/log_format.md, "Segment summaries"): an older
// segment's summary spares the open from reading it; one that does not match
// is ignored; damage in a summarized segment is still skipped, counted and
// never delivered, found when a reader meets it.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "log/format.h"
#include "log/synced_topic_test.h"
#include "sluice/log/channel.h"
#include "sluice/log/topic.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr int kRecords = 2000;  // 1 KiB each: ~10 segments of 4 index entries

class TopicSummaryTest : public testutil::SyncedTopicTest<200 * 1024> {
 protected:
  // kRecords records, 100 per batch; the time before record 1000 in *middle.
  void fill(std::chrono::system_clock::time_point* middle = nullptr) {
    auto t = open();
    for (int b = 0; b < kRecords / 100; ++b) {
      if (b == 10 && middle != nullptr) {
        std::this_thread::sleep_for(2ms);  // the clock must pass it: times are whole µs
        *middle = std::chrono::system_clock::now();
        std::this_thread::sleep_for(2ms);
      }
      std::vector<std::string> batch;
      for (int i = 0; i < 100; ++i) batch.push_back(msg(static_cast<std::uint64_t>(b * 100 + i)));
      std::vector<std::string_view> views(batch.begin(), batch.end());
      ASSERT_TRUE(t->append_batch(views).ok());
    }
  }
  static std::vector<std::uint64_t> drain_seqs(Channel& c) {
    std::vector<std::uint64_t> out;
    for (;;) {
      auto m = c.next(with_timeout(0ms));
      if (!m.ok()) break;
      EXPECT_EQ(m->payload, msg(m->seq));
      out.push_back(m->seq);
    }
    return out;
  }
};

TEST_F(TopicSummaryTest, OlderSegmentsOpenFromTheirSummariesAndReadTheSame) {
  std::chrono::system_clock::time_point middle;
  fill(&middle);
  const auto segs = files(".seg");
  ASSERT_GT(segs.size(), 5U);
  // Every sealed one, and the newest at the writer's clean close.
  EXPECT_EQ(files(".sum").size(), segs.size());
  auto t = open();
  EXPECT_EQ(t->recovery().summarized, segs.size());
  EXPECT_TRUE(t->recovery().clean());
  EXPECT_EQ(t->next_seq(), static_cast<std::uint64_t>(kRecords));
  auto at = t->seq_at_time(middle);
  ASSERT_TRUE(at.ok()) << at.status();
  EXPECT_EQ(*at, 1000U);
  // A read-only topic (another process's reader) takes them too.
  TopicOptions ro = synced();
  ro.read_only = true;
  auto r = Topic::open(dir_.string(), ro);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->recovery().summarized, segs.size());
  auto c = std::move(*t->channel("r"));
  std::vector<std::uint64_t> want(kRecords);
  for (int i = 0; i < kRecords; ++i)
    want[static_cast<std::size_t>(i)] = static_cast<std::uint64_t>(i);
  EXPECT_EQ(drain_seqs(*c), want);
  // Through a summary's index (a seek forward acknowledges: last).
  for (const std::uint64_t seq : {150U, 1000U, 1999U}) {
    ASSERT_TRUE(c->seek(seq).ok());
    auto m = c->next(with_timeout(0ms));
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->seq, seq);
    EXPECT_EQ(m->payload, msg(seq));
  }
}

// Damage after the summary was written: the open does not see it, the first
// reader to meet it reads the segment as recovery would and skips it.
TEST_F(TopicSummaryTest, DamageInASummarizedSegmentIsSkippedWhenAReaderMeetsIt) {
  std::chrono::system_clock::time_point middle;
  fill(&middle);
  const auto segs = files(".seg");
  // Record 2 of the first segment: its payload (the CRC then fails).
  const std::uint64_t rec = log::kRecordHeaderSize + msg(0).size();
  overwrite(segs[0], log::kSegmentHeaderSize + 2 * rec + log::kRecordHeaderSize + 1, "X");
  auto t = open();
  EXPECT_EQ(t->recovery().summarized, segs.size());
  EXPECT_TRUE(t->recovery().corrupt.empty());  // not read at open
  auto c = std::move(*t->channel("r"));
  auto first = c->next(with_timeout(0ms));  // record 0: before the damage
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(first->time.has_value());
  // A search through the damage (batch 1 starts at 100, in this segment).
  auto at = t->seq_at_time(*first->time + 1us);
  ASSERT_TRUE(at.ok()) << at.status();
  EXPECT_EQ(*at, 100U);
  auto got = drain_seqs(*c);
  got.insert(got.begin(), 0);
  ASSERT_EQ(got.size(), static_cast<std::size_t>(kRecords - 1));
  EXPECT_EQ(std::count(got.begin(), got.end(), 2U), 0);
  EXPECT_EQ(got[2], 3U);
  EXPECT_EQ(c->skipped_corrupt(), 1U);
  // A channel positioned inside the damage by a summary's index entry (the
  // segment's first record, seq 0, zeroed) jumps past it too.
  overwrite(segs[0], log::kSegmentHeaderSize, std::string(rec, '\0'));
  auto t2 = [&] {
    t.reset();
    c.reset();
    return open();
  }();
  auto c2 = std::move(*t2->channel("fresh"));
  const auto got2 = drain_seqs(*c2);
  EXPECT_EQ(got2.front(), 1U);
  EXPECT_EQ(got2.size(), static_cast<std::size_t>(kRecords - 2));
  // verify reads everything, summaries or not.
  auto v = verify_topic(dir_.string(), synced());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->corrupt.size(), 2U);
}

// Readers in several threads meet the same damage at once, while the
// writer appends: one reads the segment, all skip the same record.
TEST_F(TopicSummaryTest, ReadersInManyThreadsMeetTheDamageTogether) {
  fill();
  const auto segs = files(".seg");
  const std::uint64_t rec = log::kRecordHeaderSize + msg(0).size();
  overwrite(segs[1], log::kSegmentHeaderSize + rec + log::kRecordHeaderSize + 1, "X");
  auto t = open();
  constexpr int kReaders = 4;
  std::vector<std::unique_ptr<Channel>> channels;
  for (int i = 0; i < kReaders; ++i) {
    channels.push_back(std::move(*t->channel("r" + std::to_string(i))));
  }
  std::vector<std::vector<std::uint64_t>> got(kReaders);
  std::vector<std::thread> threads;
  for (int i = 0; i < kReaders; ++i) {
    threads.emplace_back([&, i] {
      auto& c = *channels[static_cast<std::size_t>(i)];
      while (got[static_cast<std::size_t>(i)].size() < kRecords - 1) {
        auto m = c.next(with_timeout(10s));
        if (!m.ok()) break;
        got[static_cast<std::size_t>(i)].push_back(m->seq);
      }
    });
  }
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(t->append(msg(kRecords + i)).ok());
  for (auto& th : threads) th.join();
  for (int i = 0; i < kReaders; ++i) {
    SCOPED_TRACE(i);
    const auto& g = got[static_cast<std::size_t>(i)];
    ASSERT_EQ(g.size(), static_cast<std::size_t>(kRecords - 1));
    EXPECT_TRUE(std::is_sorted(g.begin(), g.end()));
    EXPECT_EQ(channels[static_cast<std::size_t>(i)]->skipped_corrupt(), 1U);
  }
}

TEST_F(TopicSummaryTest, ASummaryThatDoesNotMatchItsSegmentIsIgnored) {
  fill();
  const auto sums = files(".sum");
  ASSERT_GE(sums.size(), 3U);
  overwrite(sums[0], 20, "X");                                            // torn: its CRC fails
  fs::resize_file(sums[1], fs::file_size(sums[1]) - 1);                   // short
  fs::copy_file(sums[0], sums[2], fs::copy_options::overwrite_existing);  // another segment's
  auto t = open();
  EXPECT_EQ(t->recovery().summarized, files(".seg").size() - 3);
  EXPECT_TRUE(t->recovery().clean());
  auto c = std::move(*t->channel("r"));
  EXPECT_EQ(drain_seqs(*c).size(), static_cast<std::size_t>(kRecords));
  // The writer's open wrote them again (the newest at its close): the next
  // open reads none.
  t.reset();
  c.reset();
  EXPECT_EQ(open()->recovery().summarized, files(".seg").size());
}

// A store an older sluice wrote (no summaries) gets them at its first
// writer open; kNone writes none (its sealed segments may not be on disk).
TEST_F(TopicSummaryTest, ATopicWithoutSummariesGetsThemAtTheWritersOpenButNotInNone) {
  fill();
  for (const auto& p : files(".sum")) fs::remove(p);
  TopicOptions none = synced();
  none.durability = Durability::kNone;
  EXPECT_EQ(open(none)->recovery().summarized, 0U);
  EXPECT_TRUE(files(".sum").empty());
  EXPECT_EQ(open()->recovery().summarized, 0U);
  EXPECT_EQ(files(".sum").size(), files(".seg").size());
  EXPECT_EQ(open()->recovery().summarized, files(".seg").size());
}

// The newest segment's summary (the writer's clean close) holds only while
// the segment is that size: once a writer appends, it is read again.
TEST_F(TopicSummaryTest, TheNewestSegmentsSummaryHoldsOnlyUntilItGrows) {
  fill();
  const std::size_t n = files(".seg").size();
  {
    auto t = open();
    EXPECT_EQ(t->recovery().summarized, n);
    ASSERT_TRUE(t->append(msg(kRecords)).ok());  // synced on return
    TopicOptions ro = synced();
    ro.read_only = true;
    auto r = Topic::open(dir_.string(), ro);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ((*r)->recovery().summarized, n - 1);
    EXPECT_EQ((*r)->next_seq(), static_cast<std::uint64_t>(kRecords + 1));
  }
  auto t = open();
  EXPECT_EQ(t->recovery().summarized, n);  // closed cleanly again
  EXPECT_EQ(t->next_seq(), static_cast<std::uint64_t>(kRecords + 1));
  ASSERT_TRUE(t->append(msg(kRecords + 1)).ok());
  auto c = std::move(*t->channel("r"));
  ASSERT_TRUE(c->seek(kRecords).ok());
  auto m = c->next(with_timeout(0ms));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->payload, msg(kRecords));
}

// Retention deletes a segment's summary with it; one left behind (a crash
// between the two) goes at the writer's open.
TEST_F(TopicSummaryTest, RetentionTakesTheSummaryWithItsSegment) {
  fill();
  {
    auto t = open();
    auto c = std::move(*t->channel("r"));
    while (c->next(with_timeout(0ms)).ok()) {
    }
    ASSERT_TRUE(c->ack(kRecords - 1).ok());
    ASSERT_TRUE(t->append("after").ok());
    EXPECT_GT(t->retention().segments_deleted, 0U);
  }
  const auto segs = files(".seg");
  const auto sums = files(".sum");
  EXPECT_LT(segs.size(), 3U);
  for (const auto& s : sums) {
    const fs::path seg = fs::path(s).replace_extension(".seg");
    EXPECT_TRUE(fs::exists(seg)) << s;
  }
  const fs::path stale = dir_ / (log::segment_name(0).substr(0, 20) + ".sum");
  ASSERT_FALSE(fs::exists(dir_ / log::segment_name(0)));
  std::ofstream(stale) << "left by a crash";
  open();
  EXPECT_FALSE(fs::exists(stale));
}

}  // namespace
}  // namespace sluice
