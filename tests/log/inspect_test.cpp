// inspect_topic and repair_topic on real topics damaged by hand (a fresh
// temporary directory each): what they find, what repair moves, and that
// inspecting changes nothing.
#include "sluice/log/inspect.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "log/format.h"
#include "sluice/log/channel.h"
#include "sluice/log/topic.h"
#include "testutil/damage.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Severity = LogFinding::Severity;

constexpr std::size_t kSegHeader = 32;
constexpr std::size_t kRecHeader = 24;  // with the append time (format 2)

class InspectTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testutil::test_dir("inspect"); }
  void TearDown() override {
    fs::remove_all(dir_);
    fs::remove_all(dir_.string() + ".quarantine");
  }

  static TopicOptions small() {
    TopicOptions o;
    o.segment_bytes = 1024;
    o.max_message_bytes = 512;
    o.durability = Durability::kNone;
    return o;
  }
  static std::string msg(std::uint64_t i) { return std::to_string(1000 + i); }
  static constexpr std::size_t kRecord = kRecHeader + 4;  // msg(i) is 4 bytes

  // Appends n records (segments of 35 records each), with channel "c"
  // acknowledged up to `acked` (none if 0).
  // `d`: kNone seals segments without a sync (a power cut may take their
  // tails, which recovery does not call damage).
  void fill(int n, std::uint64_t acked = 0, Durability d = Durability::kNone) {
    TopicOptions o = small();
    o.durability = d;
    auto t = Topic::open(dir_.string(), o);
    ASSERT_TRUE(t.ok()) << t.status();
    for (int i = 0; i < n; ++i) ASSERT_TRUE((*t)->append(msg(i)).ok());
    if (acked > 0) {
      auto c = (*t)->channel("c");
      ASSERT_TRUE(c.ok()) << c.status();
      for (std::uint64_t i = 0; i < acked; ++i) ASSERT_TRUE((*c)->next().ok());
      ASSERT_TRUE((*c)->ack(acked - 1).ok());
    }
  }
  std::vector<fs::path> segments() const {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().extension() == ".seg") out.push_back(e.path());
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  // Every file under the topic, with its bytes.
  std::map<std::string, std::string> bytes() const {
    std::map<std::string, std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(dir_)) {
      if (!e.is_regular_file()) continue;
      std::ifstream in(e.path(), std::ios::binary);
      out[e.path().string()] = {std::istreambuf_iterator<char>(in), {}};
    }
    return out;
  }
  static void overwrite(const fs::path& file, std::uint64_t at, const std::string& with) {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    f.write(with.data(), static_cast<std::streamsize>(with.size()));
  }
  TopicInspection inspect() const {
    auto r = inspect_topic(dir_.string(), small());
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::move(*r) : TopicInspection{};
  }
  static std::vector<const LogFinding*> damage(const TopicInspection& t) {
    std::vector<const LogFinding*> out;
    for (const LogFinding& f : t.findings) {
      if (f.severity == Severity::kDamage) out.push_back(&f);
    }
    return out;
  }
  static std::string all(const TopicInspection& t) {
    std::string s;
    for (const LogFinding& f : t.findings) s += f.file + ": " + f.what + "\n";
    return s;
  }
  // What a new channel delivers, by seq.
  std::vector<std::uint64_t> delivered() const {
    auto t = Topic::open(dir_.string(), small());
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return {};
    auto c = (*t)->channel("reader");
    EXPECT_TRUE(c.ok()) << c.status();
    std::vector<std::uint64_t> out;
    for (;;) {
      auto m = (*c)->next(with_timeout(0ms));
      if (!m.ok()) break;
      out.push_back(m->seq);
    }
    return out;
  }

  fs::path dir_;
};

TEST_F(InspectTest, ACleanTopicIsDescribedWithoutFindings) {
  fill(100, 20);  // within the first segment: retention keeps all
  const TopicInspection t = inspect();
  EXPECT_FALSE(t.damaged()) << all(t);
  EXPECT_TRUE(t.findings.empty()) << all(t);
  EXPECT_EQ(t.first_seq, 0U);
  EXPECT_EQ(t.next_seq, 100U);
  EXPECT_EQ(t.records, 100U);
  ASSERT_EQ(t.segments.size(), 3U);  // 35 records of 28 bytes per 1 KiB segment
  std::uint64_t records = 0;
  for (std::size_t i = 0; i < t.segments.size(); ++i) {
    const SegmentInspection& g = t.segments[i];
    EXPECT_TRUE(g.header_valid);
    EXPECT_EQ(g.sealed, i + 1 < t.segments.size());
    EXPECT_EQ(g.reserved_bytes, 0U);  // given back when the writer closed
    EXPECT_EQ(g.record_bytes, g.file_bytes);
    EXPECT_EQ(g.file_bytes, kSegHeader + g.records * kRecord);
    EXPECT_EQ(g.first_seq, records);
    records += g.records;
    EXPECT_EQ(g.last_seq, records - 1);
  }
  EXPECT_EQ(records, 100U);
  ASSERT_EQ(t.channels.size(), 1U);
  const ChannelInspection& c = t.channels[0];
  EXPECT_EQ(c.name, "c");
  EXPECT_EQ(c.state, ChannelInspection::State::kValid);
  EXPECT_EQ(c.next_seq, 20U);
  EXPECT_EQ(c.unacked, 80U);
  // Generation 1 (its start) went to slot 1, the ack's generation 2 to slot 0.
  EXPECT_EQ(c.current_slot, 0);
  EXPECT_TRUE(c.slots[0].valid && c.slots[1].valid);
  EXPECT_EQ(c.slots[0].generation, 2U);
  EXPECT_EQ(c.slots[1].next_seq, 0U);
  EXPECT_TRUE(t.has_notify);
  EXPECT_EQ(t.visible_seq, 100U);
  EXPECT_FALSE(t.closed);
}

// While a writer holds the topic (its LOCK, a preallocated newest segment),
// inspecting works and changes no byte.
TEST_F(InspectTest, InspectingBesideALiveWriterChangesNothing) {
  TopicOptions o = small();
  o.preallocate = true;
  auto topic = Topic::open(dir_.string(), o);
  ASSERT_TRUE(topic.ok()) << topic.status();
  for (int i = 0; i < 50; ++i) ASSERT_TRUE((*topic)->append(msg(i)).ok());
  const auto before = bytes();
  const TopicInspection t = inspect();
  EXPECT_EQ(bytes(), before);
  EXPECT_FALSE(t.damaged()) << all(t);
  EXPECT_EQ(t.records, 50U);
  ASSERT_FALSE(t.segments.empty());
  const SegmentInspection& last = t.segments.back();
  EXPECT_FALSE(last.sealed);
  EXPECT_EQ(last.record_bytes, kSegHeader + last.records * kRecord);
  // Preallocated where the file system can (tmpfs, ext4, xfs).
  EXPECT_EQ(last.reserved_bytes, last.file_bytes - last.record_bytes);
  // A repair needs the writer's role.
  auto r = repair_topic(dir_.string(), {}, small());
  EXPECT_EQ(r.code(), StatusCode::kInUse) << r.status();
  EXPECT_EQ(bytes(), before);
}

// A batch being copied in beside a live writer (a page of it still zeros, a
// later page whole) is a note, not damage: the writer had not published it.
// The same bytes with no writer (a copy of the directory) stay damage, for
// the count in NOTIFY is then not to be trusted (it is not synced).
TEST_F(InspectTest, ABatchBeingWrittenBesideALiveWriterIsNotDamage) {
  auto topic = Topic::open(dir_.string(), small());
  ASSERT_TRUE(topic.ok()) << topic.status();
  for (int i = 0; i < 10; ++i) ASSERT_TRUE((*topic)->append(msg(i)).ok());
  {
    // Records 12..19 whole; 10 and 11 still zeros (not copied yet).
    std::string bytes;
    for (int i = 10; i < 20; ++i) {
      std::string rec(kRecord, '\0');
      if (i >= 12) log::encode_record(rec.data(), static_cast<std::uint64_t>(i), 1, msg(i));
      bytes += rec;
    }
    overwrite(segments().front(), kSegHeader + 10 * kRecord, bytes);
  }
  const fs::path copy = dir_.string() + ".copy";
  fs::remove_all(copy);
  fs::copy(dir_, copy, fs::copy_options::recursive);
  const TopicInspection live = inspect();
  EXPECT_FALSE(live.damaged()) << all(live);
  EXPECT_NE(all(live).find("a write in progress: the writer (PID " + std::to_string(getpid()) +
                           ") had published up to seq 10"),
            std::string::npos)
      << all(live);
  EXPECT_EQ(live.records, 10U);
  auto dead = inspect_topic(copy.string(), small());
  fs::remove_all(copy);
  ASSERT_TRUE(dead.ok()) << dead.status();
  ASSERT_TRUE(dead->damaged()) << all(*dead);
  EXPECT_NE(all(*dead).find("seqs 10..11 lost"), std::string::npos) << all(*dead);
}

TEST_F(InspectTest, AFlippedByteIsDamageNamingTheSeqLost) {
  fill(20);
  const fs::path seg = segments().front();
  const std::uint64_t at = kSegHeader + 2 * kRecord;  // record 2
  testutil::flip_bit(seg, at + kRecHeader + 3);
  const TopicInspection t = inspect();
  ASSERT_TRUE(t.damaged());
  const auto d = damage(t);
  ASSERT_EQ(d.size(), 1U) << all(t);
  EXPECT_EQ(d[0]->file, seg.string());
  EXPECT_EQ(d[0]->offset, at);
  EXPECT_NE(d[0]->what.find("seqs 2..2 lost"), std::string::npos) << d[0]->what;
  EXPECT_FALSE(d[0]->repairable);  // readers skip it; the bytes stay
  EXPECT_EQ(t.records, 19U);
  EXPECT_EQ(t.segments[0].damaged_bytes, kRecord);
}

TEST_F(InspectTest, ATruncatedSealedSegmentLosesItsTailAndLeavesAGap) {
  fill(100);
  const fs::path first = segments().front();
  fs::resize_file(first, kSegHeader + 10 * kRecord + 5);  // mid-record 10
  const TopicInspection t = inspect();
  const auto d = damage(t);
  ASSERT_EQ(d.size(), 2U) << all(t);
  EXPECT_EQ(d[0]->file, first.string());
  EXPECT_NE(d[0]->what.find("to the end of the segment"), std::string::npos) << d[0]->what;
  EXPECT_NE(d[1]->what.find("seqs 10..34 missing"), std::string::npos) << d[1]->what;
  EXPECT_TRUE(d[1]->repairable);
  EXPECT_EQ(t.segments[0].records, 10U);
}

TEST_F(InspectTest, ARemovedMiddleSegmentIsAGapThatRepairRecords) {
  // Synced at each roll: in kNone a power cut could take a sealed segment's
  // tail, which the disk does not tell from a segment file removed.
  fill(100, 5, Durability::kInterval);
  const auto segs = segments();
  ASSERT_EQ(segs.size(), 3U);
  fs::remove(segs[1]);
  TopicInspection t = inspect();
  auto d = damage(t);
  ASSERT_EQ(d.size(), 1U) << all(t);
  EXPECT_EQ(d[0]->file, segs[2].string());
  EXPECT_NE(d[0]->what.find("seqs 35..69 missing"), std::string::npos) << d[0]->what;

  auto r = repair_topic(dir_.string(), {}, small());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records_lost, 35U);
  ASSERT_EQ(r->actions.size(), 1U);
  EXPECT_NE(r->actions[0].what.find("after gap"), std::string::npos);
  EXPECT_TRUE(r->left.empty());
  EXPECT_TRUE(r->quarantine.empty());  // nothing moved
  t = inspect();
  EXPECT_FALSE(t.damaged()) << all(t);
  EXPECT_TRUE(t.segments[1].after_gap);
  const auto got = delivered();
  ASSERT_EQ(got.size(), 65U);
  EXPECT_EQ(got[34], 34U);
  EXPECT_EQ(got[35], 70U);
}

TEST_F(InspectTest, AnOlderSegmentWithABadHeaderIsMovedAndItsSeqsAKnownGap) {
  fill(100);
  const auto segs = segments();
  ASSERT_EQ(segs.size(), 3U);
  overwrite(segs[1], 0, "XXXXXXXX");
  TopicInspection t = inspect();
  auto d = damage(t);
  ASSERT_EQ(d.size(), 2U) << all(t);
  EXPECT_EQ(d[0]->file, segs[1].string());
  EXPECT_NE(d[0]->what.find("bad segment header: skipped whole, its 35 records (seqs 35..69)"),
            std::string::npos)
      << d[0]->what;
  EXPECT_EQ(d[1]->file, segs[2].string());  // and the gap it leaves
  EXPECT_EQ(t.records, 65U);

  auto r = repair_topic(dir_.string(), {}, small());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records_lost, 35U);
  ASSERT_EQ(r->actions.size(), 2U);  // moved, then the next segment flagged
  EXPECT_EQ(r->actions[0].records, 35U);
  EXPECT_TRUE(fs::exists(fs::path(r->quarantine) / segs[1].filename()));
  EXPECT_FALSE(fs::exists(segs[1]));
  t = inspect();
  EXPECT_FALSE(t.damaged()) << all(t);
  EXPECT_EQ(delivered().size(), 65U);
}

TEST_F(InspectTest, ADamagedPositionSlotIsRewrittenFromTheOther) {
  fill(30, 10);  // generation 2 in slot 0
  const fs::path pos = dir_ / "channels" / "c.pos";
  overwrite(pos, 32 + 16, "XXXX");  // slot 1 (generation 1)
  TopicInspection t = inspect();
  auto d = damage(t);
  ASSERT_EQ(d.size(), 1U) << all(t);
  EXPECT_EQ(d[0]->file, pos.string());
  EXPECT_NE(d[0]->what.find("slot 1"), std::string::npos) << d[0]->what;
  EXPECT_TRUE(d[0]->repairable);
  ASSERT_EQ(t.channels.size(), 1U);
  EXPECT_EQ(t.channels[0].current_slot, 0);
  EXPECT_TRUE(t.channels[0].slots[1].set);
  EXPECT_FALSE(t.channels[0].slots[1].valid);
  EXPECT_EQ(t.channels[0].next_seq, 10U);

  auto r = repair_topic(dir_.string(), {}, small());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records_lost, 0U);
  ASSERT_FALSE(r->quarantine.empty());
  EXPECT_TRUE(fs::exists(fs::path(r->quarantine) / "c.pos"));  // the damaged original
  t = inspect();
  EXPECT_FALSE(t.damaged()) << all(t);
  EXPECT_EQ(t.channels[0].next_seq, 10U);
  EXPECT_EQ(t.channels[0].current_slot, 1);
  auto topic = Topic::open(dir_.string(), small());
  ASSERT_TRUE(topic.ok());
  auto c = (*topic)->channel("c");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->acked(), 10U);
}

TEST_F(InspectTest, APositionWithoutAValidSlotIsMovedAndTheChannelStartsOver) {
  fill(30, 10);
  const fs::path pos = dir_ / "channels" / "c.pos";
  overwrite(pos, 16, "XXXX");
  overwrite(pos, 32 + 16, "XXXX");
  TopicInspection t = inspect();
  auto d = damage(t);
  ASSERT_EQ(d.size(), 1U) << all(t);
  EXPECT_NE(d[0]->what.find("no valid slot"), std::string::npos) << d[0]->what;
  EXPECT_EQ(t.channels[0].state, ChannelInspection::State::kDamaged);

  auto r = repair_topic(dir_.string(), {}, small());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(fs::exists(pos));
  EXPECT_TRUE(fs::exists(fs::path(r->quarantine) / "c.pos"));
  EXPECT_FALSE(inspect().damaged());
  auto topic = Topic::open(dir_.string(), small());
  ASSERT_TRUE(topic.ok());
  auto c = (*topic)->channel("c");
  ASSERT_TRUE(c.ok()) << c.status();
  auto m = (*c)->next(with_timeout(0ms));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->seq, 0U);  // redelivers from the oldest
}

// The one damage that stops the writer: the newest segment's header, with
// records behind it. Repair moves it aside and seqs continue after it.
TEST_F(InspectTest, RepairMovesADamagedNewestSegmentAsideAndTheTopicOpens) {
  fill(100);
  const fs::path newest = segments().back();  // seqs 70..99
  overwrite(newest, 0, "XXXXXXXX");
  ASSERT_EQ(Topic::open(dir_.string(), small()).code(), StatusCode::kCorruption);
  TopicInspection t = inspect();
  auto d = damage(t);
  ASSERT_EQ(d.size(), 1U) << all(t);
  EXPECT_EQ(d[0]->file, newest.string());
  EXPECT_NE(d[0]->what.find("30 records (seqs 70..99)"), std::string::npos) << d[0]->what;
  EXPECT_NE(d[0]->what.find("cannot open"), std::string::npos) << d[0]->what;
  EXPECT_FALSE(t.segments.back().header_valid);
  EXPECT_EQ(t.segments.back().records, 30U);

  // A dry run plans it and changes nothing.
  const auto before = bytes();
  auto dry = repair_topic(dir_.string(), {.dry_run = true, .quarantine_dir = ""}, small());
  ASSERT_TRUE(dry.ok()) << dry.status();
  EXPECT_EQ(dry->actions.size(), 2U);
  EXPECT_EQ(dry->records_lost, 30U);
  EXPECT_EQ(bytes(), before);
  EXPECT_FALSE(fs::exists(dir_.string() + ".quarantine"));

  auto r = repair_topic(dir_.string(), {}, small());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records_lost, 30U);
  ASSERT_EQ(r->actions.size(), 2U);
  EXPECT_EQ(r->actions[1].records, 30U);
  EXPECT_FALSE(fs::exists(newest));
  const fs::path moved = fs::path(r->quarantine) / newest.filename();
  EXPECT_TRUE(fs::exists(moved));
  EXPECT_EQ(fs::file_size(moved), kSegHeader + 30 * kRecord);  // whole, never deleted
  EXPECT_TRUE(r->left.empty());
  EXPECT_FALSE(inspect().damaged()) << all(inspect());

  auto got = delivered();
  ASSERT_EQ(got.size(), 70U);
  EXPECT_EQ(got.back(), 69U);
  auto topic = Topic::open(dir_.string(), small());
  ASSERT_TRUE(topic.ok()) << topic.status();
  auto seq = (*topic)->append("after");
  ASSERT_TRUE(seq.ok());
  EXPECT_EQ(*seq, 100U);  // no seq is used twice
}

TEST_F(InspectTest, RepairOfACleanTopicDoesNothing) {
  fill(50, 3);
  const auto before = bytes();
  auto r = repair_topic(dir_.string(), {}, small());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->actions.empty());
  EXPECT_EQ(r->records_lost, 0U);
  EXPECT_EQ(bytes(), before);
}

// A writer in another process (one in this process is refused by the registry).
TEST_F(InspectTest, RepairRefusesWhileAWriterElsewhereHoldsTheTopic) {
  fill(10);
  int ready[2], done[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(done), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(done[1]);  // or its read never ends
    auto t = Topic::open(dir_.string(), small());
    char b = t.ok() ? 'y' : 'n';
    (void)!write(ready[1], &b, 1);
    (void)!read(done[0], &b, 1);  // until the parent closes it
    _exit(0);
  }
  close(ready[1]);
  close(done[0]);
  char b = 0;
  ASSERT_EQ(read(ready[0], &b, 1), 1);
  ASSERT_EQ(b, 'y');
  auto r = repair_topic(dir_.string(), {}, small());
  EXPECT_EQ(r.code(), StatusCode::kInUse);
  EXPECT_NE(r.status().message().find("PID " + std::to_string(child)), std::string_view::npos)
      << r.status();
  auto t = inspect_topic(dir_.string(), small());  // reading needs no lock
  EXPECT_TRUE(t.ok()) << t.status();
  close(done[1]);
  close(ready[0]);
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  EXPECT_TRUE(repair_topic(dir_.string(), {}, small()).ok());
}

TEST_F(InspectTest, NotATopicIsNotFound) {
  EXPECT_EQ(inspect_topic(dir_.string(), small()).code(), StatusCode::kNotFound);  // missing
  fs::create_directories(dir_);
  std::ofstream(dir_ / "notes.txt") << "hello";
  auto r = inspect_topic(dir_.string(), small());
  EXPECT_EQ(r.code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("no segment files"), std::string_view::npos) << r.status();
  EXPECT_EQ(repair_topic(dir_.string(), {}, small()).code(), StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(dir_ / "LOCK"));  // a refused repair leaves no trace
}

}  // namespace
}  // namespace sluice
