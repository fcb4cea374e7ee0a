// repair_topic at its edges: cut short by a power cut at every call it makes
// (on the simulated disk), and run beside readers and writers. Whatever
// point it stops at, the topic opens after a second repair, every record
// that was intact before is delivered, nothing is deleted, and positions
// stay.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "log/crash_points.h"
#include "log/fault_file_system.h"
#include "log/file_system.h"
#include "log/format.h"
#include "log/inspect.h"
#include "log/position.h"
#include "log/topic_impl.h"
#include "sluice/log/channel.h"
#include "sluice/log/inspect.h"
#include "sluice/log/topic.h"
#include "testutil/forwarding_file_system.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testutil::CutMode;
using testutil::FaultFileSystem;

constexpr const char* kDir = "/fault/topic";
constexpr const char* kQuarantine = "/fault/quarantine";

TopicOptions options() {
  TopicOptions o;
  o.segment_bytes = 1024;  // 35 records of 28 bytes
  o.max_message_bytes = 512;
  o.durability = Durability::kPerAppend;
  return o;
}

std::string msg(std::uint64_t i) { return std::to_string(1000 + i); }

void overwrite(FaultFileSystem& fs, const std::string& path, std::uint64_t at,
               const std::string& with) {
  auto f = fs.open(path, log::OpenMode::kReadWrite);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_TRUE((*f)->pwrite(with.data(), with.size(), at).ok());
  ASSERT_TRUE((*f)->sync().ok());
}

std::string seg(std::uint64_t base) { return std::string(kDir) + "/" + log::segment_name(base); }

// 170 records in five segments (0..34, 35..69, 70..104, 105..139,
// 140..169), channel "c" acknowledged up to 10; then the damage repair
// deals with: the second segment's header, the newest segment's header
// (the writer cannot open), and slot 1 of c's position file (generation 1;
// slot 0, generation 2, is the one in use).
void build(FaultFileSystem& fs) {
  {
    auto t = log::open_topic(fs, kDir, options());
    ASSERT_TRUE(t.ok()) << t.status();
    for (std::uint64_t i = 0; i < 170; ++i) ASSERT_TRUE((*t)->append(msg(i)).ok());
    auto c = (*t)->channel("c");
    ASSERT_TRUE(c.ok()) << c.status();
    for (int i = 0; i < 10; ++i) ASSERT_TRUE((*c)->next().ok());
    ASSERT_TRUE((*c)->ack(9).ok());  // generation 2, slot 0
  }
  overwrite(fs, seg(35), 0, "XXXXXXXX");
  overwrite(fs, seg(140), 0, "XXXXXXXX");
  overwrite(fs, std::string(kDir) + "/channels/c.pos", 32 + 16, "XXXX");
}

// What a new channel delivers.
std::vector<std::uint64_t> delivered(FaultFileSystem& fs) {
  auto t = log::open_topic(fs, kDir, options());
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return {};
  auto c = (*t)->channel("reader");
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return {};
  std::vector<std::uint64_t> out;
  for (;;) {
    auto m = (*c)->next(with_timeout(0ms));
    if (!m.ok()) break;
    out.push_back(m->seq);
  }
  return out;
}

std::vector<std::uint64_t> intact() {
  std::vector<std::uint64_t> out;
  for (std::uint64_t s = 0; s < 35; ++s) out.push_back(s);
  for (std::uint64_t s = 70; s < 140; ++s) out.push_back(s);
  return out;
}

// Every file whose name is `name`, anywhere under `dir`.
int copies_of(FaultFileSystem& fs, const std::string& dir, const std::string& name) {
  auto names = fs.list(dir);
  if (!names.ok()) return 0;
  int n = 0;
  for (const std::string& e : *names) {
    const std::string p = dir + "/" + e;
    if (e == name) ++n;
    if (fs.is_dir(p)) n += copies_of(fs, p, name);
  }
  return n;
}

TEST(RepairEdgesTest, TheScenarioRepairsAndDeliversEveryIntactRecord) {
  FaultFileSystem fs;
  build(fs);
  ASSERT_EQ(log::open_topic(fs, kDir, options()).code(), StatusCode::kCorruption);
  auto r =
      log::repair_topic(fs, kDir, {.dry_run = false, .quarantine_dir = kQuarantine}, options());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records_lost, 65U);  // 35..69 and 140..169
  EXPECT_EQ(delivered(fs), intact());
}

// A power cut at each call repair makes; then a second repair and an open.
TEST(RepairEdgesTest, APowerCutAtEveryCallOfARepairLosesNoIntactRecord) {
  std::uint64_t total = 0;
  {
    FaultFileSystem fs;
    build(fs);
    const std::uint64_t before = fs.calls();
    ASSERT_TRUE(
        log::repair_topic(fs, kDir, {.dry_run = false, .quarantine_dir = kQuarantine}, options())
            .ok());
    total = fs.calls() - before;
  }
  ASSERT_GT(total, 3U);
  for (const CutMode mode : {CutMode::kDropUnsynced, CutMode::kZeroFill, CutMode::kTorn}) {
    for (std::uint64_t k = 1; k <= total; ++k) {
      SCOPED_TRACE(std::string("cut at call +") + std::to_string(k) + " " + to_string(mode));
      FaultFileSystem fs;
      build(fs);
      fs.cut_at(fs.calls() + k);
      auto first =
          log::repair_topic(fs, kDir, {.dry_run = false, .quarantine_dir = kQuarantine}, options());
      EXPECT_FALSE(first.ok());
      auto image = fs.after_cut(mode, k);
      auto again = log::repair_topic(*image, kDir,
                                     {.dry_run = false, .quarantine_dir = kQuarantine}, options());
      ASSERT_TRUE(again.ok()) << again.status() << "\n" << fs.recent_calls(12);
      auto look = log::look(*image, kDir, options());
      ASSERT_TRUE(look.ok()) << look.status();
      for (const LogFinding& f : look->out.findings) {
        EXPECT_NE(f.severity, LogFinding::Severity::kDamage) << f.file << ": " << f.what;
      }
      EXPECT_EQ(delivered(*image), intact());
      // Nothing deleted: both damaged segments are somewhere.
      EXPECT_GE(copies_of(*image, "/fault", log::segment_name(35)), 1) << fs.recent_calls(8);
      EXPECT_GE(copies_of(*image, "/fault", log::segment_name(140)), 1) << fs.recent_calls(8);
      // The damaged position file: copied before its slot was rewritten.
      EXPECT_GE(copies_of(*image, kQuarantine, "c.pos"), 1) << fs.recent_calls(8);
      auto t = log::open_topic(*image, kDir, options());
      ASSERT_TRUE(t.ok()) << t.status();
      auto c = (*t)->channel("c");
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_EQ((*c)->acked(), 10U);
      auto seq = (*t)->append("after");
      ASSERT_TRUE(seq.ok()) << seq.status();
      EXPECT_EQ(*seq, 170U);  // no seq used twice
    }
  }
}

// The records a repair reports lost are the seqs no longer delivered, each
// counted once: an older segment with a bad header right before a damaged
// newest one lies inside the range the newest's new segment skips (it was
// counted twice: 100 of 65).
TEST(RepairEdgesTest, RecordsLostCountEachSeqOnce) {
  FaultFileSystem fs;
  {
    auto t = log::open_topic(fs, kDir, options());
    ASSERT_TRUE(t.ok()) << t.status();
    for (std::uint64_t i = 0; i < 100; ++i) ASSERT_TRUE((*t)->append(msg(i)).ok());
  }
  overwrite(fs, seg(35), 0, "XXXXXXXX");  // 35..69, an older segment
  overwrite(fs, seg(70), 0, "XXXXXXXX");  // 70..99, the newest
  auto dry =
      log::repair_topic(fs, kDir, {.dry_run = true, .quarantine_dir = kQuarantine}, options());
  ASSERT_TRUE(dry.ok()) << dry.status();
  EXPECT_EQ(dry->records_lost, 65U);
  auto r =
      log::repair_topic(fs, kDir, {.dry_run = false, .quarantine_dir = kQuarantine}, options());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records_lost, 65U);
  const auto got = delivered(fs);
  ASSERT_EQ(got.size(), 35U);
  EXPECT_EQ(got.back(), 34U);
  auto t = log::open_topic(fs, kDir, options());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->next_seq(), 100U);  // 35 delivered + 65 lost
}

// A topic an older sluice wrote (format 1: no append times): a gap is
// flagged in a header that stays format 1 (its records are in that format),
// the damaged newest segment's records are found, and every intact record
// is delivered after the repair.
TEST(RepairEdgesTest, AFormat1TopicKeepsItsFormatThroughARepair) {
  FaultFileSystem fs;
  {
    log::OpenHooks hooks;
    hooks.untimed = true;
    TopicOptions o = options();
    o.segment_bytes = 32 + 35 * 20;  // 35 format 1 records (16 + 4 bytes)
    auto t = log::open_topic(fs, kDir, o, hooks);
    ASSERT_TRUE(t.ok()) << t.status();
    for (std::uint64_t i = 0; i < 140; ++i) ASSERT_TRUE((*t)->append(msg(i)).ok());
  }
  ASSERT_TRUE(fs.remove(seg(35)).ok());    // 35..69: a gap
  overwrite(fs, seg(105), 0, "XXXXXXXX");  // 105..139, the newest
  auto look = log::look(fs, kDir, options());
  ASSERT_TRUE(look.ok()) << look.status();
  ASSERT_EQ(look->out.segments.size(), 3U);
  EXPECT_EQ(look->out.segments[1].version, 1U);
  EXPECT_EQ(look->out.segments[2].records, 35U);  // found behind the bad header
  auto r =
      log::repair_topic(fs, kDir, {.dry_run = false, .quarantine_dir = kQuarantine}, options());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records_lost, 70U);
  look = log::look(fs, kDir, options());
  ASSERT_TRUE(look.ok()) << look.status();
  EXPECT_FALSE(look->out.damaged());
  ASSERT_EQ(look->out.segments.size(), 3U);
  EXPECT_EQ(look->out.segments[1].version, 1U);  // 70..104, flagged, still format 1
  EXPECT_TRUE(look->out.segments[1].after_gap);
  EXPECT_EQ(look->out.segments[1].records, 35U);
  std::vector<std::uint64_t> want;
  for (std::uint64_t s = 0; s < 35; ++s) want.push_back(s);
  for (std::uint64_t s = 70; s < 105; ++s) want.push_back(s);
  EXPECT_EQ(delivered(fs), want);
}

// A topic of 10 records on the real disk whose channel "c" acknowledged up
// to seq 2 (generation 2 in slot 0: next seq 3), and whose spare slot 1 is
// damaged (what repair rewrites).
void ten_records_and_a_bad_spare_slot(const std::filesystem::path& dir) {
  {
    auto t = Topic::open(dir.string(), options());
    ASSERT_TRUE(t.ok()) << t.status();
    for (std::uint64_t i = 0; i < 10; ++i) ASSERT_TRUE((*t)->append(msg(i)).ok());
    auto c = (*t)->channel("c");
    ASSERT_TRUE(c.ok()) << c.status();
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*c)->next().ok());
    ASSERT_TRUE((*c)->ack(2).ok());
  }
  std::fstream f(dir / "channels" / "c.pos", std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(32 + 16);
  f.write("XXXX", 4);
}

// A channel open in this process (a read-only topic's reader, beside the
// repair): POSIX locks do not conflict within a process, so its lock did not
// keep the repair out, which rewrote the position file under it; and the
// repair's closing of the file dropped the lock, so that another process
// could open the same channel. The repair now refuses, as for a writer of
// this process, and the channel keeps its lock.
TEST(RepairEdgesTest, RepairRefusesWhileAChannelIsOpenInThisProcess) {
  namespace fs = std::filesystem;
  const fs::path dir = testutil::test_dir("repair-channel-here");
  ASSERT_NO_FATAL_FAILURE(ten_records_and_a_bad_spare_slot(dir));
  TopicOptions ro = options();
  ro.read_only = true;
  {
    auto reader = Topic::open(dir.string(), ro);
    ASSERT_TRUE(reader.ok()) << reader.status();
    auto c = (*reader)->channel("c");
    ASSERT_TRUE(c.ok()) << c.status();
    for (const bool dry : {true, false}) {
      auto r = repair_topic(dir.string(), {.dry_run = dry, .quarantine_dir = ""}, options());
      EXPECT_EQ(r.code(), StatusCode::kInUse) << r.status();
      EXPECT_NE(r.status().message().find("channel 'c'"), std::string_view::npos) << r.status();
      EXPECT_NE(r.status().message().find("PID " + std::to_string(getpid())),
                std::string_view::npos)
          << r.status();
    }
    // Its lock is still held: another process cannot open the channel.
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      auto t = Topic::open(dir.string(), ro);
      if (!t.ok()) _exit(2);
      _exit((*t)->channel("c").code() == StatusCode::kInUse ? 0 : 1);
    }
    int st = 0;
    ASSERT_EQ(waitpid(child, &st, 0), child);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
    EXPECT_EQ((*c)->acked(), 3U);
  }
  // Closed: the repair goes ahead.
  auto r = repair_topic(dir.string(), {}, options());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->actions.size(), 2U);  // copied, slot rewritten
  fs::remove_all(dir);
  fs::remove_all(dir.string() + ".quarantine");
}

// A reader that acknowledges between repair's look at the position file and
// its lock on it (then leaves) wrote the damaged slot with its newer
// position: repair must not write the older one over it (a redelivery of
// what the reader acknowledged). It looks again once it holds the lock.
TEST(RepairEdgesTest, APositionWrittenBetweenTheLookAndTheLockIsKept) {
  namespace fs = std::filesystem;
  const fs::path dir = testutil::test_dir("repair-position-race");
  ASSERT_NO_FATAL_FAILURE(ten_records_and_a_bad_spare_slot(dir));
  const std::string pos = (dir / "channels" / "c.pos").string();
  // Opens the position file for the repair's lock only after "the reader"
  // acknowledged up to seq 4 (generation 3, slot 1: the damaged one).
  struct AckFirst final : testutil::ForwardingFileSystem {
    std::string pos;
    bool acked = false;
    Result<std::unique_ptr<log::File>> open(const std::string& p, log::OpenMode m) override {
      if (!acked && p == pos && m == log::OpenMode::kReadWrite) {
        acked = true;
        auto f = ForwardingFileSystem::open(p, log::OpenMode::kReadWrite);
        EXPECT_TRUE(f.ok()) << f.status();
        if (f.ok()) {
          EXPECT_TRUE(log::write_position(**f, 3, 5).ok());
        }
      }
      return ForwardingFileSystem::open(p, m);
    }
  } disk;
  disk.pos = pos;
  auto r =
      log::repair_topic(disk, dir.string(), {.dry_run = false, .quarantine_dir = ""}, options());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(disk.acked);
  auto f = log::posix_file_system().open(pos, log::OpenMode::kRead);
  ASSERT_TRUE(f.ok()) << f.status();
  auto p = log::read_position(**f);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->state, log::PositionState::kValid);
  EXPECT_EQ(p->slot.next_seq, 5U);  // the reader's, not the 3 repair looked at
  fs::remove_all(dir);
  fs::remove_all(dir.string() + ".quarantine");
}

// A channel had read past the records found behind the damaged newest
// segment's header (its tail was cut): after the repair the writer goes on
// after the channel's position (no seq is used twice), and the channel
// delivers from there.
TEST(RepairEdgesTest, AChannelPastTheDamagedNewestSegmentsRecordsResumesAfterTheRepair) {
  FaultFileSystem fs;
  {
    auto t = log::open_topic(fs, kDir, options());
    ASSERT_TRUE(t.ok()) << t.status();
    for (std::uint64_t i = 0; i < 100; ++i) ASSERT_TRUE((*t)->append(msg(i)).ok());
    auto c = (*t)->channel("c");
    ASSERT_TRUE(c.ok()) << c.status();
    for (int i = 0; i < 96; ++i) ASSERT_TRUE((*c)->next().ok());
    ASSERT_TRUE((*c)->ack(95).ok());  // position 96
  }
  {
    auto f = fs.open(seg(70), log::OpenMode::kReadWrite);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->truncate(32 + 20 * 28).ok());  // 70..89 left
    ASSERT_TRUE((*f)->sync().ok());
  }
  overwrite(fs, seg(70), 0, "XXXXXXXX");
  auto r =
      log::repair_topic(fs, kDir, {.dry_run = false, .quarantine_dir = kQuarantine}, options());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records_lost, 20U);  // 70..89 (90..99 were gone before)
  auto t = log::open_topic(fs, kDir, options());
  ASSERT_TRUE(t.ok()) << t.status();
  auto seq = (*t)->append("after");
  ASSERT_TRUE(seq.ok()) << seq.status();
  EXPECT_EQ(*seq, 96U);
  auto c = (*t)->channel("c");
  ASSERT_TRUE(c.ok()) << c.status();
  auto m = (*c)->next(with_timeout(0ms));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->seq, 96U);
  EXPECT_EQ(m->payload, "after");
}

// The default quarantine is "<dir>.quarantine", beside the topic, also when
// the directory is named with a trailing slash (it was "<dir>/.quarantine",
// inside the topic).
TEST(RepairEdgesTest, TheDefaultQuarantineIsBesideATopicNamedWithATrailingSlash) {
  namespace fs = std::filesystem;
  const fs::path dir = testutil::test_dir("repair-slash");
  {
    auto t = Topic::open(dir.string(), options());
    ASSERT_TRUE(t.ok()) << t.status();
    for (std::uint64_t i = 0; i < 10; ++i) ASSERT_TRUE((*t)->append(msg(i)).ok());
  }
  {
    std::fstream f(dir / log::segment_name(0), std::ios::in | std::ios::out | std::ios::binary);
    f.write("XXXXXXXX", 8);  // the newest (only) segment's header
  }
  auto r = repair_topic(dir.string() + "/", {}, options());
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string beside = dir.string() + ".quarantine";
  EXPECT_EQ(r->quarantine.rfind(beside + "/", 0), 0U) << r->quarantine;
  EXPECT_FALSE(fs::exists(dir / ".quarantine"));
  EXPECT_TRUE(fs::exists(fs::path(r->quarantine) / log::segment_name(0)));
  fs::remove_all(dir);
  fs::remove_all(beside);
}

}  // namespace
}  // namespace sluice
