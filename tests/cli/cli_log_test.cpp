// `sluice log verify|inspect`, `sluice repair` and `peek` over damage, the real
// binary run as a child process on stores whose files the test damages by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "cli/cli_child.h"
#include "log/format.h"
#include "sluice/log/topic.h"
#include "testutil/temp_dir.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr int kDamaged = 11;  // tools/sluice/exit_codes.h

using testutil::CliChild;
using testutil::Outcome;

class CliLogTest : public ::testing::Test {
 protected:
  void TearDown() override { fs::remove_all(store_); }

  Outcome run(std::vector<std::string> args, const std::string& input = "") {
    CliChild c(store_, std::move(args));
    c.write_stdin(input);
    c.close_stdin();
    return c.finish();
  }
  std::string topic(const std::string& queue) const {
    return store_ + "/queues/" + queue + "/topic";
  }
  static std::string msg(int i) { return std::to_string(1000 + i); }
  static constexpr std::uint64_t kRecord = 24 + 4;  // header (with the append time) + msg(i)

  // A queue whose topic holds n records in 1 KiB segments (35 records
  // each), appended through the library (the store's own segments are
  // 64 MiB: too big to make several here).
  // `durability`: kGroupCommit writes segment summaries at each roll and at
  // the close, as the command's own writer does.
  void make_queue(const std::string& name, int n, Durability durability = Durability::kNone) {
    ASSERT_EQ(run({"create", name, "--bound", "100000"}).rc, 0);
    TopicOptions o;
    o.segment_bytes = 1024;
    o.max_message_bytes = 512;
    o.durability = durability;
    auto t = Topic::open(topic(name), o);
    ASSERT_TRUE(t.ok()) << t.status();
    for (int i = 0; i < n; ++i) ASSERT_TRUE((*t)->append(msg(i)).ok());
  }
  std::vector<fs::path> segments(const std::string& queue) const {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(topic(queue))) {
      if (e.path().extension() == ".seg") out.push_back(e.path());
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  static void overwrite(const fs::path& file, std::uint64_t at, const std::string& with) {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    f.write(with.data(), static_cast<std::streamsize>(with.size()));
  }
  // Every file of the store, with its bytes.
  std::map<std::string, std::string> bytes() const {
    std::map<std::string, std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(store_)) {
      if (!e.is_regular_file()) continue;
      std::ifstream in(e.path(), std::ios::binary);
      out[e.path().string()] = {std::istreambuf_iterator<char>(in), {}};
    }
    return out;
  }
  static int count(const std::string& text, const std::string& what) {
    int n = 0;
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  }

  std::string store_ = testutil::test_dir("cli-log").string();
};

TEST_F(CliLogTest, VerifyOfACleanStoreQueueOrTopicExitsZero) {
  ASSERT_EQ(run({"create", "jobs"}).rc, 0);
  ASSERT_EQ(run({"put", "jobs"}, "a\nb\nc\n").rc, 0);
  make_queue("many", 100);
  for (const std::string& target :
       {std::string(), std::string("jobs"), store_ + "/queues/jobs", topic("jobs"), store_}) {
    std::vector<std::string> args = {"log", "verify"};
    if (!target.empty()) args.push_back(target);
    const Outcome r = run(args);
    EXPECT_EQ(r.rc, 0) << target << ": " << r.out << r.err;
    EXPECT_EQ(count(r.out, "damage"), 0) << r.out;
  }
  const Outcome r = run({"log", "verify"});
  EXPECT_NE(r.out.find("queue 'jobs': ok (segments=1 records=3 channels=1)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("queue 'many': ok (segments=3 records=100 channels=1)"), std::string::npos)
      << r.out;
}

TEST_F(CliLogTest, EachDamageExitsElevenWithALineNamingIt) {
  make_queue("flipped", 100);
  make_queue("truncated", 100);
  // Synced at each roll: in kNone a power cut could take a sealed segment's
  // tail, which the disk does not tell from a segment file removed.
  make_queue("removed", 100, Durability::kGroupCommit);
  make_queue("slot", 100);
  overwrite(segments("flipped")[0], 32 + 2 * kRecord + 24 + 3, "X");  // record 2's payload
  fs::resize_file(segments("truncated")[0], 32 + 10 * kRecord + 5);
  fs::remove(segments("removed")[1]);
  overwrite(topic("slot") + "/channels/default.pos", 16, "XXXX");  // the unused slot 0
  const std::map<std::string, std::string> expect = {
      {"flipped", "seqs 2..2 lost"},
      {"truncated", "to the end of the segment"},
      {"removed", "seqs 35..69 missing"},
      {"slot", "slot 0 of the position file is damaged"},
  };
  for (const auto& [queue, what] : expect) {
    const Outcome r = run({"log", "verify", queue});
    EXPECT_EQ(r.rc, kDamaged) << queue << ": " << r.out << r.err;
    EXPECT_NE(r.out.find("damage: queue '" + queue + "'"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(what), std::string::npos) << queue << ": " << r.out;
    EXPECT_NE(r.out.find(" -- "), std::string::npos) << r.out;  // and what to do
  }
  const Outcome all = run({"log", "verify"});
  EXPECT_EQ(all.rc, kDamaged);
  EXPECT_EQ(count(all.out, "damage: "), 5) << all.out;  // the truncation is two: tail and gap
  ASSERT_EQ(run({"create", "fine"}).rc, 0);
  EXPECT_EQ(run({"log", "verify", "fine"}).rc, 0);
}

TEST_F(CliLogTest, InspectDescribesSegmentsChannelsAndFindings) {
  make_queue("q", 100);
  ASSERT_EQ(run({"get", "q", "--count", "10"}).rc, 0);
  Outcome r = run({"log", "inspect", "q"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("first_seq=0 next_seq=100 records=100 segments=3"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("00000000000000000000.seg base=0 seqs=0..34 records=35"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("00000000000000000070.seg base=70 seqs=70..99 records=30"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(count(r.out, " sealed"), 2) << r.out;
  // Each segment's format and append times; no summary (kNone writes none).
  EXPECT_EQ(count(r.out, " format=2 first_time=20"), 3) << r.out;
  EXPECT_EQ(count(r.out, " summary"), 0) << r.out;
  EXPECT_NE(r.out.find("default valid next_seq=10 unacked=90"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("high_watermark=100 closed=no"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("findings: 0 damage, 0 notes"), std::string::npos) << r.out;

  ASSERT_EQ(run({"close", "q"}).rc, 0);
  // The command's writer (synced) gave the three a summary; the closed mark
  // (a new, empty segment) needs none.
  r = run({"log", "inspect", "q"});
  EXPECT_EQ(count(r.out, " summary "), 3) << r.out;
  overwrite(segments("q")[0], 32 + 16 + 1, "X");
  r = run({"log", "inspect", "q", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(count(r.out, "\n"), 1) << r.out;
  EXPECT_NE(r.out.find("\"records\":99,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"closed\":true"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"damaged\":true"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"closed_mark\":true"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"severity\":\"damage\""), std::string::npos) << r.out;
}

// A segment opened from its summary is not read at open: damage that came
// after the summary is found by the first get that meets it, which skips the
// damaged message and delivers the rest (docs/durability.md, "Recovery").
TEST_F(CliLogTest, GetSkipsDamageInASegmentOpenedFromItsSummary) {
  make_queue("q", 100, Durability::kGroupCommit);
  Outcome r = run({"log", "inspect", "q"});
  ASSERT_EQ(count(r.out, " summary "), 3) << r.out;
  overwrite(segments("q")[0], 32 + 2 * kRecord + 24 + 1, "X");  // record 2's payload
  r = run({"log", "inspect", "q"});
  EXPECT_EQ(count(r.out, " summary "), 3) << r.out;  // same size: still taken from it
  r = run({"get", "q", "--count", "99", "--timeout", "10s"});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::string want;
  for (int i = 0; i < 100; ++i) {
    if (i != 2) want += msg(i) + "\n";
  }
  EXPECT_EQ(r.out, want);
  // Not silently: the loss is on stderr, once.
  EXPECT_EQ(count(r.err, "1 damaged message skipped (lost; `sluice log verify q` says where)"), 1)
      << r.err;
  EXPECT_NE(run({"log", "verify", "q"}).rc, 0);  // verify reads everything
}

// Damage that recovery finds at open (no summaries: the segments are read)
// is skipped and said too, by get and by get --exec; messages get delivers
// without damage say nothing.
TEST_F(CliLogTest, GetSaysHowManyDamagedMessagesItSkipped) {
  make_queue("q", 100);
  Outcome r = run({"get", "q", "--count", "3", "--timeout", "10s"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err.find("damaged"), std::string::npos) << r.err;
  const auto segs = segments("q");
  ASSERT_GE(segs.size(), 3u);
  overwrite(segs[1], 32 + 4 * kRecord + 24 + 1, "X");  // one record's payload
  overwrite(segs[2], 32 + 1 * kRecord + 24 + 1, "X");
  overwrite(segs[2], 32 + 7 * kRecord + 24 + 1, "X");
  r = run({"get", "q", "--count", "94", "--timeout", "10s"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 94);
  int said = 0;
  for (int n : {1, 2, 3}) {
    const std::string line = std::to_string(n) + " damaged message" + (n == 1 ? "" : "s");
    said += count(r.err, line) * n;
  }
  EXPECT_EQ(said, 3) << r.err;  // however the three were met, each counted once
  make_queue("e", 100);
  overwrite(segments("e")[1], 32 + 4 * kRecord + 24 + 1, "X");
  r = run({"-q", "get", "e", "--count", "99", "--timeout", "10s", "--exec", "cat"});  // -q too
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(count(r.err, "sluice get: queue 'e': 1 damaged message skipped"), 1) << r.err;
}

// Read-only: the bytes stay, and a live writer (a put holding the queue)
// does not stop it; a repair waits for no one and says who holds it.
TEST_F(CliLogTest, VerifyChangesNothingAndWorksBesideALiveWriter) {
  make_queue("q", 50);
  CliChild put(store_, {"put", "q"});
  put.write_stdin("live 1\nlive 2\n");
  ASSERT_TRUE(testutil::eventually([&] {
    return run({"stat", "q"}).out.find("produced=52") != std::string::npos;
  }));
  const auto before = bytes();
  Outcome r = run({"log", "verify", "q"});
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  r = run({"log", "inspect", "q"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("records=52"), std::string::npos) << r.out;
  EXPECT_EQ(bytes(), before);
  r = run({"repair", "q"});
  EXPECT_EQ(r.rc, 6) << r.out << r.err;
  EXPECT_NE(r.err.find("open for writing by PID"), std::string::npos) << r.err;
  EXPECT_EQ(bytes(), before);
  put.close_stdin();
  EXPECT_EQ(put.finish().rc, 0);
}

// A batch being copied in by a live `put` in another process (a page of it
// still zeros, a later page whole) is what verify may read: a note naming
// the writer, exit 0, not damage (the writer holds LOCK: F_GETLK says so).
TEST_F(CliLogTest, VerifyBesideAPutCopyingABatchInSaysSoAndFindsNoDamage) {
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  CliChild put(store_, {"put", "q"});
  std::string lines;
  for (int i = 0; i < 10; ++i) lines += msg(i) + "\n";
  put.write_stdin(lines);
  ASSERT_TRUE(testutil::eventually([&] {
    return run({"stat", "q"}).out.find("produced=10") != std::string::npos;
  }));
  const auto segs = segments("q");
  ASSERT_EQ(segs.size(), 1u);
  std::string bytes;
  for (int i = 10; i < 20; ++i) {
    std::string rec(kRecord, '\0');
    if (i >= 12) log::encode_record(rec.data(), static_cast<std::uint64_t>(i), 1, msg(i));
    bytes += rec;
  }
  overwrite(segs[0], 32 + 10 * kRecord, bytes);  // past what put wrote: 10 and 11 not yet
  Outcome r = run({"log", "verify", "q"});
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_EQ(count(r.out, "damage: "), 0) << r.out;
  EXPECT_NE(r.out.find("a write in progress: the writer (PID "), std::string::npos) << r.out;
  put.close_stdin();
  EXPECT_EQ(put.finish().rc, 0);
}

TEST_F(CliLogTest, RepairMakesADamagedNewestSegmentOpenableAgain) {
  make_queue("q", 100);
  const fs::path newest = segments("q").back();  // seqs 70..99
  overwrite(newest, 0, "XXXXXXXX");
  Outcome r = run({"put", "q"}, "more\n");
  EXPECT_NE(r.rc, 0);  // the writer cannot open
  EXPECT_NE(r.err.find(newest.filename().string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sluice repair"), std::string::npos) << r.err;  // says what to do
  r = run({"log", "verify", "q"});
  EXPECT_EQ(r.rc, kDamaged);
  EXPECT_NE(r.out.find("cannot open"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sluice repair"), std::string::npos) << r.out;

  const auto before = bytes();
  r = run({"repair", "q", "--dry-run"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("would move " + newest.filename().string()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("dry run, nothing changed"), std::string::npos) << r.out;
  EXPECT_EQ(bytes(), before);

  r = run({"repair", "q"});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("30 records lost from delivery"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(store_ + "/queues/q/quarantine/"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(newest));
  std::size_t moved = 0;
  for (const auto& e : fs::recursive_directory_iterator(store_ + "/queues/q/quarantine")) {
    if (e.path().filename() == newest.filename()) moved = fs::file_size(e.path());
  }
  EXPECT_EQ(moved, 32 + 30 * kRecord);  // kept whole

  r = run({"log", "verify", "q"});
  EXPECT_EQ(r.rc, 0) << r.out;
  std::string want;
  for (int i = 0; i < 70; ++i) want += msg(i) + "\n";
  r = run({"get", "q", "--count", "70"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, want);
  ASSERT_EQ(run({"put", "q"}, "after\n").rc, 0);
  r = run({"get", "q", "--count", "1"});
  EXPECT_EQ(r.out, "after\n");
  EXPECT_NE(run({"log", "inspect", "q"}).out.find("base=100 seqs=100..100"), std::string::npos);
  EXPECT_EQ(run({"repair", "q"}).out, "queue 'q': nothing to repair\n");
}

TEST_F(CliLogTest, BadArgumentsAreClearErrors) {
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  Outcome r = run({"log", "verify", store_ + "/no/such/dir"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("no directory"), std::string::npos) << r.err;
  EXPECT_EQ(count(r.err, "\n"), 1) << r.err;
  const std::string empty = store_ + "/empty";
  fs::create_directories(empty);
  r = run({"log", "inspect", empty});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("not a topic, queue or store directory"), std::string::npos) << r.err;
  r = run({"log", "verify", "nope"});
  EXPECT_EQ(r.rc, 3);
  EXPECT_NE(r.err.find("no queue 'nope'"), std::string::npos) << r.err;
  EXPECT_EQ(run({"repair", "nope"}).rc, 3);
  EXPECT_EQ(run({"repair"}).rc, 2);
  r = run({"repair", store_});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("is a store"), std::string::npos) << r.err;
  EXPECT_EQ(run({"log"}).rc, 2);
  for (std::vector<std::string> args : {std::vector<std::string>{"log", "--help"},
                                        {"log", "verify", "--help"},
                                        {"log", "inspect", "--help"},
                                        {"repair", "--help"}}) {
    r = run(args);
    EXPECT_EQ(r.rc, 0) << args[1];
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << r.out;
  }
}

// Not silently: a peek that leaves damaged messages out says so on stderr
// (once, with their count), and still exits 0 with the rest; one that meets
// no damage says nothing.
TEST_F(CliLogTest, PeekSaysHowManyDamagedMessagesItLeftOut) {
  make_queue("q", 100);
  Outcome r = run({"peek", "q", "--count", "3"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err.find("damaged"), std::string::npos) << r.err;
  const auto segs = segments("q");
  ASSERT_GE(segs.size(), 3u);
  overwrite(segs[1], 32 + 4 * kRecord + 24 + 1, "X");  // one record's payload
  overwrite(segs[2], 32 + 1 * kRecord + 24 + 1, "X");
  r = run({"peek", "q"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 98) << r.out;
  EXPECT_NE(r.err.find("sluice peek: queue 'q': 2 damaged messages skipped"), std::string::npos)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  // Before the damage: nothing to say.
  r = run({"peek", "q", "--count", "30"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err.find("damaged"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace sluice
