// TopicOptions::max_message_bytes bounds what is appended, not what is read:
// records a writer with a larger limit wrote stay valid for an opener with a
// smaller one (writer, read-only reader, verify, inspect), and are
// delivered. Reopening with a smaller limit took them for damage and cut
// synced, acknowledged records off as a "torn tail" (docs/design.md, "What
// is next", item 3). Real damage in such a log is still found.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "sluice/log/channel.h"
#include "sluice/log/cursor.h"
#include "sluice/log/inspect.h"
#include "sluice/log/topic.h"
#include "testutil/damage.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr std::uint64_t kRecords = 200;  // 1,000 bytes each
constexpr std::uint32_t kSmall = 100;
constexpr std::uint32_t kWriterLimit = 8192;  // what 64 KiB segments allow: above 1,000

// 1,000 bytes, all alike but for the seq.
std::string msg(std::uint64_t i) {
  std::string s = std::to_string(i);
  return "message " + std::string(8 - s.size(), '0') + s + std::string(984, 'x');
}

TopicOptions with_limit(std::uint32_t max_message_bytes) {
  TopicOptions o;
  o.segment_bytes = 64 * 1024;  // a few segments: sealed ones (with summaries) and the newest
  o.max_message_bytes = max_message_bytes;
  return o;
}

class MaxMessageReopenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testutil::test_dir("maxmsg");
    auto t = Topic::open(dir_.string(), with_limit(kWriterLimit));
    ASSERT_TRUE(t.ok()) << t.status();
    for (std::uint64_t i = 0; i < kRecords; ++i) {
      auto seq = (*t)->append(msg(i));  // kGroupCommit: synced on return
      ASSERT_TRUE(seq.ok()) << seq.status();
      ASSERT_EQ(*seq, i);
    }
    ASSERT_TRUE((*t)->sync().ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<fs::path> files(const std::string& ext) const {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().extension() == ext) out.push_back(e.path());
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  void remove_summaries() {
    for (const auto& p : files(".sum")) fs::remove(p);
  }

  // Every record of `c`, checking each payload.
  static std::vector<std::uint64_t> drain(Channel& c) {
    std::vector<std::uint64_t> seqs;
    for (;;) {
      std::vector<LogMessage> batch;
      Status s = c.next_batch(batch, 16, with_timeout(0ms));
      for (const auto& m : batch) {
        EXPECT_EQ(m.payload, msg(m.seq)) << "seq " << m.seq;
        seqs.push_back(m.seq);
      }
      if (!s.ok()) {
        EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s;
        break;
      }
    }
    return seqs;
  }

  // The reopened topic `t` (limit kSmall) holds and delivers every record.
  void expect_all_delivered(Topic& t) {
    EXPECT_TRUE(t.recovery().corrupt.empty()) << t.recovery().corrupt.front().what;
    EXPECT_TRUE(t.recovery().truncated.empty()) << t.recovery().truncated.front().what;
    EXPECT_EQ(t.next_seq(), kRecords);
    // Never acknowledged: retention keeps every segment for the next open.
    auto c = t.channel("c");
    ASSERT_TRUE(c.ok()) << c.status();
    // One at a time (Channel::next), then in batches.
    std::vector<std::uint64_t> seqs;
    for (std::uint64_t i = 0; i < 5; ++i) {
      auto m = (*c)->next(with_timeout(0ms));
      ASSERT_TRUE(m.ok()) << m.status();
      EXPECT_EQ(m->payload, msg(i));
      seqs.push_back(m->seq);
    }
    for (std::uint64_t seq : drain(**c)) seqs.push_back(seq);
    ASSERT_EQ(seqs.size(), kRecords);
    for (std::uint64_t i = 0; i < kRecords; ++i) EXPECT_EQ(seqs[i], i);
    EXPECT_EQ((*c)->skipped_corrupt(), 0U);

    auto cur = t.cursor(150);
    ASSERT_TRUE(cur.ok()) << cur.status();
    std::vector<LogMessage> batch;
    ASSERT_TRUE((*cur)->next_batch(batch, 100).ok());
    ASSERT_EQ(batch.size(), kRecords - 150);
    EXPECT_EQ(batch.front().payload, msg(150));

    // A time search reads records between index entries: the first record
    // with record 175's time (appends may share a microsecond).
    ASSERT_TRUE(batch[25].time.has_value());
    std::size_t first = 25;
    while (first > 0 && batch[first - 1].time == batch[25].time) --first;
    auto at = t.seq_at_time(*batch[25].time);
    ASSERT_TRUE(at.ok()) << at.status();
    if (first > 0) {
      EXPECT_EQ(*at, 150 + first);
    } else {
      EXPECT_LE(*at, 150U);
    }
  }

  fs::path dir_;
};

TEST_F(MaxMessageReopenTest, AWriterWithASmallerLimitKeepsAndDeliversLongerRecords) {
  for (const bool summaries : {false, true}) {
    SCOPED_TRACE(summaries ? "with summaries" : "without summaries");
    if (!summaries) remove_summaries();
    auto t = Topic::open(dir_.string(), with_limit(kSmall));
    ASSERT_TRUE(t.ok()) << t.status();
    expect_all_delivered(**t);
    // The limit still bounds appends.
    auto big = (*t)->append(std::string(1000, 'b'));
    ASSERT_FALSE(big.ok());
    EXPECT_EQ(big.status().code(), StatusCode::kInvalidArgument) << big.status();
    EXPECT_EQ((*t)->next_seq(), kRecords);
    if (summaries) {
      auto small = (*t)->append(std::string(50, 's'));
      ASSERT_TRUE(small.ok()) << small.status();
      EXPECT_EQ(*small, kRecords);
    }
  }
  // Reopened once more: all of it, the short one too.
  auto t = Topic::open(dir_.string(), with_limit(kSmall));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE((*t)->recovery().clean());
  EXPECT_EQ((*t)->next_seq(), kRecords + 1);
  auto cur = (*t)->cursor(kRecords - 1);
  ASSERT_TRUE(cur.ok());
  std::vector<LogMessage> last;
  ASSERT_TRUE((*cur)->next_batch(last, 10).ok());
  ASSERT_EQ(last.size(), 2U);
  EXPECT_EQ(last[0].payload, msg(kRecords - 1));
  EXPECT_EQ(last[1].payload, std::string(50, 's'));
}

TEST_F(MaxMessageReopenTest, AReadOnlyReaderWithASmallerLimitDeliversLongerRecords) {
  for (const bool summaries : {false, true}) {
    SCOPED_TRACE(summaries ? "with summaries" : "without summaries");
    if (!summaries) remove_summaries();
    TopicOptions o = with_limit(kSmall);
    o.read_only = true;
    auto r = Topic::open(dir_.string(), o);
    ASSERT_TRUE(r.ok()) << r.status();
    expect_all_delivered(**r);
  }
}

TEST_F(MaxMessageReopenTest, VerifyAndInspectWithASmallerLimitFindNoDamage) {
  remove_summaries();
  auto v = verify_topic(dir_.string(), with_limit(kSmall));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->corrupt.empty()) << v->corrupt.front().what;
  EXPECT_TRUE(v->truncated.empty()) << v->truncated.front().what;
  auto in = inspect_topic(dir_.string(), with_limit(kSmall));
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_FALSE(in->damaged());
  for (const auto& f : in->findings) ADD_FAILURE() << f.file << ": " << f.what;
}

// A reader opened with a smaller limit beside a live writer with a larger
// one follows its appends (the read-only topic's refresh).
TEST_F(MaxMessageReopenTest, AReadOnlyReaderWithASmallerLimitFollowsALiveWriter) {
  TopicOptions wo = with_limit(4U << 20);
  wo.segment_bytes = 8U << 20;  // rolls after two records of 3 MiB
  auto w = Topic::open(dir_.string(), wo);
  ASSERT_TRUE(w.ok()) << w.status();
  TopicOptions o = with_limit(kSmall);
  o.read_only = true;
  auto r = Topic::open(dir_.string(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  auto c = (*r)->channel("follower");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE((*c)->seek(kRecords).ok());
  for (std::uint64_t i = kRecords; i < kRecords + 100; ++i) {
    ASSERT_TRUE((*w)->append(msg(i)).ok());
    auto m = (*c)->next(with_timeout(5s));
    ASSERT_TRUE(m.ok()) << "seq " << i << ": " << m.status();
    EXPECT_EQ(m->seq, i);
    EXPECT_EQ(m->payload, msg(i));
  }
  // Records longer than a read of the refresh (1 MiB), across a roll.
  for (int i = 0; i < 4; ++i) {
    const std::string huge(3 << 20, static_cast<char>('a' + i));
    auto seq = (*w)->append(huge);
    ASSERT_TRUE(seq.ok()) << seq.status();
    auto m = (*c)->next(with_timeout(5s));
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->seq, *seq);
    EXPECT_TRUE(m->payload == huge) << "record " << *seq << " differs";
  }
  EXPECT_EQ((*c)->skipped_corrupt(), 0U);
}

// Writes `len` as a record's length field at `off` of `path`.
void put_length(const fs::path& path, std::uint64_t off, std::uint32_t len) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(off));
  const char b[4] = {static_cast<char>(len), static_cast<char>(len >> 8),
                     static_cast<char>(len >> 16), static_cast<char>(len >> 24)};
  f.write(b, 4);
}

TEST_F(MaxMessageReopenTest, DamageInLongerRecordsIsStillFound) {
  remove_summaries();
  const auto segs = files(".seg");
  ASSERT_GE(segs.size(), 3U);
  // Records are 16 + 8 + 1,000 bytes after a 32-byte header (63 a
  // segment): in the first segment, a payload byte of its record 10; in the
  // second, the length of its record 5 made to run past the end of the
  // file; in the newest, a payload byte of its record 3.
  constexpr std::uint64_t kRec = 1024;
  testutil::flip_bit(segs[0], 32 + 10 * kRec + 500);
  put_length(segs[1], 32 + 5 * kRec, 0x7fffffffU);
  testutil::flip_bit(segs.back(), 32 + 3 * kRec + 40);
  for (const std::uint32_t limit : {kWriterLimit, kSmall}) {
    SCOPED_TRACE("limit " + std::to_string(limit));
    auto v = verify_topic(dir_.string(), with_limit(limit));
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_TRUE(v->truncated.empty()) << v->truncated.front().what;
    ASSERT_EQ(v->corrupt.size(), 3U);
    for (const auto& d : v->corrupt) {
      EXPECT_NE(d.what.find("seqs "), std::string::npos) << d.what;
      EXPECT_EQ(d.length, kRec) << d.file << " " << d.what;  // one record each, no more
    }
  }
  auto t = Topic::open(dir_.string(), with_limit(kSmall));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->next_seq(), kRecords);
  EXPECT_EQ((*t)->recovery().corrupt.size(), 3U);
  EXPECT_TRUE((*t)->recovery().truncated.empty());
  auto c = (*t)->channel("c");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(drain(**c).size(), kRecords - 3);
  EXPECT_EQ((*c)->skipped_corrupt(), 3U);
}

}  // namespace
}  // namespace sluice
