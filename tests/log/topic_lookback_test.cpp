// Looking back into a topic (issue 25): records carry their append time
// (segment format 2) beside format 1 segments an older sluice wrote;
// Topic::seq_at_time, Topic::cursor (reading without taking),
// Topic::channel_position, and Channel::seek with the bound and retention.
// A fresh temporary directory each, on the real file system unless a test
// needs the simulated disk.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "log/fault_file_system.h"
#include "log/format.h"
#include "log/topic_impl.h"
#include "sluice/log/channel.h"
#include "sluice/log/cursor.h"
#include "sluice/log/inspect.h"
#include "sluice/log/topic.h"
#include "testutil/temp_dir.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using SysTime = std::chrono::system_clock::time_point;

SysTime at_us(std::int64_t us) { return SysTime(std::chrono::microseconds(us)); }
std::int64_t us_of(SysTime t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

class LookbackTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testutil::test_dir("lookback"); }
  void TearDown() override { fs::remove_all(dir_); }

  static TopicOptions small() {
    TopicOptions o;
    o.segment_bytes = 4096;
    o.max_message_bytes = 1024;
    o.durability = Durability::kNone;
    return o;
  }
  std::unique_ptr<Topic> open(TopicOptions o = small(), const log::OpenHooks& hooks = {}) {
    auto t = log::open_topic(log::posix_file_system(), dir_.string(), o, hooks);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::move(*t) : nullptr;
  }
  Result<std::unique_ptr<Topic>> open_reader(TopicOptions o = small()) {
    o.read_only = true;
    return Topic::open(dir_.string(), o);
  }
  // The topic that sluice at 88a898f (segment format 1) wrote: 20 records
  // "old record <seq>" in 256-byte segments (seqs 0..7, 8..14, 15..19),
  // channel "old" acknowledged up to seq 4 (tests/log/fixtures/README.md).
  static TopicOptions fixture_options() {
    TopicOptions o;
    o.segment_bytes = 256;
    o.max_message_bytes = 64;
    o.durability = Durability::kNone;
    return o;
  }
  void copy_fixture() {
    fs::create_directories(dir_ / "channels");
    for (const auto& e : fs::recursive_directory_iterator(SLUICE_LOG_FIXTURES "/format1")) {
      if (!e.is_regular_file()) continue;
      const fs::path rel = fs::relative(e.path(), SLUICE_LOG_FIXTURES "/format1");
      fs::copy_file(e.path(), dir_ / rel);
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
  static std::string bytes_of(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  static std::uint32_t version_of(const fs::path& seg) {
    const std::string b = bytes_of(seg);
    return b.size() >= log::kSegmentHeaderSize ? log::segment_header_version(b.data()) : 0;
  }
  // Every file under the topic, with its bytes.
  std::map<std::string, std::string> files() const {
    std::map<std::string, std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(dir_)) {
      if (e.is_regular_file()) out[e.path().string()] = bytes_of(e.path());
    }
    return out;
  }
  // Everything a channel or cursor delivers now.
  static std::vector<LogMessage> drain(Channel& c) {
    std::vector<LogMessage> out;
    for (;;) {
      auto m = c.next(with_timeout(0ms));
      if (!m.ok()) break;
      out.push_back(std::move(*m));
    }
    return out;
  }
  static std::vector<LogMessage> drain(LogCursor& c) {
    std::vector<LogMessage> out;
    for (;;) {
      const std::size_t before = out.size();
      EXPECT_TRUE(c.next_batch(out, 7).ok());
      if (out.size() == before) return out;
    }
  }
  static std::vector<std::uint64_t> seqs(const std::vector<LogMessage>& ms) {
    std::vector<std::uint64_t> out;
    for (const auto& m : ms) out.push_back(m.seq);
    return out;
  }
  static std::vector<std::uint64_t> range(std::uint64_t from, std::uint64_t to) {
    std::vector<std::uint64_t> out;
    for (std::uint64_t s = from; s < to; ++s) out.push_back(s);
    return out;
  }
  static std::string msg(std::uint64_t i) { return "message " + std::to_string(i); }
  static ::testing::AssertionResult exited_cleanly(pid_t child) {
    int st = 0;
    if (waitpid(child, &st, 0) != child) return ::testing::AssertionFailure() << "waitpid failed";
    if (!WIFEXITED(st)) return ::testing::AssertionFailure() << "child died: status " << st;
    if (WEXITSTATUS(st) != 0) {
      return ::testing::AssertionFailure() << "child exit " << WEXITSTATUS(st);
    }
    return ::testing::AssertionSuccess();
  }

  fs::path dir_;
};

// A clock the test sets: appends take their time from it.
struct TestClock {
  std::atomic<std::int64_t> now_us{1'700'000'000'000'000};
  log::OpenHooks hooks() {
    log::OpenHooks h;
    h.clock = [this] { return at_us(now_us.load()); };
    return h;
  }
};

// ---------------------------------------------------------------------------
// The format: times in new records, format 1 segments read beside them.

TEST_F(LookbackTest, RecordsCarryTheirAppendTime) {
  auto t = open();
  const SysTime before =
      std::chrono::time_point_cast<std::chrono::microseconds>(std::chrono::system_clock::now());
  ASSERT_TRUE(t->append("a").ok());
  std::vector<std::string_view> batch = {"b", "c"};
  ASSERT_TRUE(t->append_batch(batch).ok());
  const SysTime after = std::chrono::system_clock::now();
  auto c = std::move(*t->channel("c"));
  const auto got = drain(*c);
  ASSERT_EQ(got.size(), 3U);
  for (const auto& m : got) {
    ASSERT_TRUE(m.time.has_value()) << m.seq;
    EXPECT_GE(*m.time, before);
    EXPECT_LE(*m.time, after);
  }
  EXPECT_LE(*got[0].time, *got[1].time);
  EXPECT_EQ(*got[1].time, *got[2].time);  // one batch, one time
  EXPECT_EQ(version_of(segments().front()), log::kFormatVersion);
}

TEST_F(LookbackTest, AppendTimesNeverGoBackwardsEvenWhenTheClockDoes) {
  TestClock clock;
  {
    auto t = open(small(), clock.hooks());
    ASSERT_TRUE(t->append("a").ok());
    clock.now_us -= 1'000'000;  // stepped back a second
    ASSERT_TRUE(t->append("b").ok());
    clock.now_us += 2'000'000;
    ASSERT_TRUE(t->append("c").ok());
  }
  clock.now_us -= 5'000'000;  // and further back, across a reopen
  auto t = open(small(), clock.hooks());
  ASSERT_TRUE(t->append("d").ok());
  auto c = std::move(*t->channel("c"));
  const auto got = drain(*c);
  ASSERT_EQ(got.size(), 4U);
  const std::int64_t start = clock.now_us + 5'000'000 - 1'000'000;
  EXPECT_EQ(us_of(*got[0].time), start);
  EXPECT_EQ(us_of(*got[1].time), start);  // the last time again, not the clock's
  EXPECT_EQ(us_of(*got[2].time), start + 1'000'000);
  EXPECT_EQ(us_of(*got[3].time), start + 1'000'000);  // the recovered last time
}

TEST_F(LookbackTest, ATopicAnOlderSluiceWroteReadsBesideNewRecords) {
  copy_fixture();
  const auto old_segments = segments();
  ASSERT_EQ(old_segments.size(), 3U);
  std::map<fs::path, std::string> old_bytes;
  for (const auto& s : old_segments) {
    EXPECT_EQ(version_of(s), log::kUntimedFormatVersion) << s;
    old_bytes[s] = bytes_of(s);
  }
  {
    auto t = open(fixture_options());
    EXPECT_TRUE(t->recovery().clean());
    EXPECT_EQ(t->first_seq(), 0U);
    EXPECT_EQ(t->next_seq(), 20U);
    auto c = std::move(*t->channel("old"));
    EXPECT_EQ(c->acked(), 5U);
    // New records go to a new, format 2 segment: the old ones are not
    // touched (the writer's open rolled).
    for (int i = 20; i < 23; ++i) ASSERT_TRUE(t->append("new record " + std::to_string(i)).ok());
    const auto got = drain(*c);
    EXPECT_EQ(seqs(got), range(5, 23));
    for (const auto& m : got) {
      EXPECT_EQ(m.payload, (m.seq < 20 ? "old record " : "new record ") + std::to_string(m.seq));
      EXPECT_EQ(m.time.has_value(), m.seq >= 20) << m.seq;
    }
  }
  const auto now = segments();
  ASSERT_EQ(now.size(), 4U);
  EXPECT_EQ(now.back().filename(), log::segment_name(20));
  EXPECT_EQ(version_of(now.back()), log::kFormatVersion);
  for (const auto& s : old_segments) EXPECT_EQ(bytes_of(s), old_bytes[s]) << s;
  // Verify, inspect and a reader elsewhere know both formats.
  auto v = verify_topic(dir_.string(), fixture_options());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->clean());
  auto in = inspect_topic(dir_.string(), fixture_options());
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_FALSE(in->damaged());
  ASSERT_EQ(in->segments.size(), 4U);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(in->segments[i].version, 1U);
    EXPECT_FALSE(in->segments[i].first_time.has_value());
  }
  EXPECT_EQ(in->segments[3].version, 2U);
  EXPECT_EQ(in->segments[3].records, 3U);
  ASSERT_TRUE(in->segments[3].first_time.has_value());
  EXPECT_LE(*in->segments[3].first_time, *in->segments[3].last_time);
  auto r = open_reader(fixture_options());
  ASSERT_TRUE(r.ok()) << r.status();
  auto cur = (*r)->cursor(0);
  ASSERT_TRUE(cur.ok()) << cur.status();
  const auto all = drain(**cur);
  EXPECT_EQ(seqs(all), range(0, 23));
  for (const auto& m : all) EXPECT_EQ(m.time.has_value(), m.seq >= 20) << m.seq;
}

TEST_F(LookbackTest, AnEmptyFormat1LastSegmentTakesFormat2RecordsInPlace) {
  {
    log::OpenHooks old;
    old.untimed = true;
    auto t = open(small(), old);  // a new topic: one empty segment, format 1
  }
  ASSERT_EQ(segments().size(), 1U);
  EXPECT_EQ(version_of(segments().front()), log::kUntimedFormatVersion);
  auto t = open();
  ASSERT_TRUE(t->recovery().clean());
  ASSERT_EQ(segments().size(), 1U);  // no roll: a new segment would take its name
  EXPECT_EQ(version_of(segments().front()), log::kFormatVersion);
  ASSERT_TRUE(t->append("x").ok());
  auto c = std::move(*t->channel("c"));
  const auto got = drain(*c);
  ASSERT_EQ(got.size(), 1U);
  EXPECT_TRUE(got[0].time.has_value());
}

TEST_F(LookbackTest, AClosedFormat1TopicStaysAsItWas) {
  {
    log::OpenHooks old;
    old.untimed = true;
    auto t = open(small(), old);
    ASSERT_TRUE(t->append("a").ok());
    ASSERT_TRUE(t->close().ok());
  }
  const auto before = files();
  auto t = open();
  EXPECT_TRUE(t->closed());
  EXPECT_EQ(t->append("b").code(), StatusCode::kClosed);
  auto c = std::move(*t->channel("c"));
  const auto got = drain(*c);
  ASSERT_EQ(got.size(), 1U);
  EXPECT_FALSE(got[0].time.has_value());
  for (const auto& s : segments()) EXPECT_EQ(bytes_of(s), before.at(s.string())) << s;
}

// ---------------------------------------------------------------------------
// seq_at_time

// Every answer against a scan of all records: the first record whose time
// is at or after t.
void expect_search_matches_scan(Topic& t, const std::vector<LogMessage>& all,
                                const std::vector<SysTime>& probes) {
  for (SysTime p : probes) {
    std::uint64_t want = t.next_seq();
    for (const auto& m : all) {
      if (*m.time >= p) {
        want = m.seq;
        break;
      }
    }
    auto got = t.seq_at_time(p);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(*got, want) << "t = " << p.time_since_epoch().count() << " ns";
  }
}

TEST_F(LookbackTest, SeqAtTimeFindsTheFirstRecordAtOrAfterATime) {
  TopicOptions o = small();
  o.segment_bytes = 256 * 1024;  // several segments, several index entries in each
  TestClock clock;
  auto t = open(o, clock.hooks());
  {
    auto empty = t->seq_at_time(at_us(clock.now_us));
    ASSERT_TRUE(empty.ok());
    EXPECT_EQ(*empty, 0U);  // nothing at all: next_seq
  }
  const std::string payload(100, 'p');
  for (int i = 0; i < 9000; ++i) {
    clock.now_us += 1 + (i % 3) * 10;  // uneven steps
    if (i % 50 == 0) {                 // a batch: several records of one time
      std::vector<std::string_view> batch(4, payload);
      ASSERT_TRUE(t->append_batch(batch).ok());
    } else {
      ASSERT_TRUE(t->append(payload).ok());
    }
  }
  ASSERT_GE(t->stats().segments, 4U);
  auto c = std::move(*t->channel("scan"));
  std::vector<LogMessage> all;
  ASSERT_TRUE(c->next_batch(all, 100000, with_timeout(0ms)).ok());
  ASSERT_EQ(all.size(), t->next_seq());
  std::vector<SysTime> probes;
  probes.push_back(at_us(0));
  probes.push_back(*all.front().time - 1s);
  for (std::size_t i = 0; i < all.size(); i += 7) {
    const SysTime m = *all[i].time;
    probes.push_back(m);  // exactly a record's time
    probes.push_back(m - std::chrono::microseconds(1));
    probes.push_back(m + std::chrono::microseconds(1));
    probes.push_back(m + std::chrono::nanoseconds(500));  // between whole microseconds
  }
  probes.push_back(*all.back().time);
  probes.push_back(*all.back().time + 1ns);
  probes.push_back(*all.back().time + 1h);
  expect_search_matches_scan(*t, all, probes);
  // A batch's records share a time: the search lands on its first.
  auto first_of_batch = t->seq_at_time(*all[50 * 0 + 1].time);
  ASSERT_TRUE(first_of_batch.ok());
  EXPECT_EQ(*first_of_batch, 0U);
  // The same answers after a reopen (the index is rebuilt by recovery) and
  // in a read-only topic (built as it reads).
  t.reset();
  c.reset();
  t = open(o, clock.hooks());
  expect_search_matches_scan(*t, all, probes);
  auto r = open_reader(o);
  ASSERT_TRUE(r.ok()) << r.status();
  expect_search_matches_scan(**r, all, probes);
}

// The writer never lets times go back, but a segment's bytes may come from
// elsewhere (a copy, a tool, a fuzzer): the search still finds the first
// record at or after a time, and times past what system_clock holds
// saturate rather than overflow.
TEST_F(LookbackTest, SeqAtTimeIsExactWhereTheBytesHoldTimesOutOfOrder) {
  const std::vector<log::TimeUs> times = {100, 50,
                                          300, 200,
                                          250, 400,
                                          350, std::numeric_limits<log::TimeUs>::max(),
                                          500, std::numeric_limits<log::TimeUs>::min(),
                                          600};
  fs::create_directories(dir_);
  std::string seg(log::kSegmentHeaderSize, '\0');
  log::encode_segment_header(seg.data(), 0);
  TopicOptions o = small();
  o.segment_bytes = 1 << 20;
  for (std::size_t i = 0; i < times.size(); ++i) {
    // Entries every 64 KiB: large records give the index several.
    const std::string payload(i % 2 == 0 ? 40000 : 10, static_cast<char>('a' + i));
    std::string rec(log::kRecordHeaderSize + payload.size(), '\0');
    log::encode_record(rec.data(), i, times[i], payload);
    seg += rec;
  }
  { std::ofstream(dir_ / log::segment_name(0), std::ios::binary) << seg; }
  o.max_message_bytes = 64 * 1024;
  auto t = open(o);
  ASSERT_TRUE(t->recovery().clean());
  auto c = std::move(*t->channel("c"));
  const auto all = drain(*c);
  ASSERT_EQ(all.size(), times.size());
  EXPECT_EQ(*all[7].time, SysTime::max() - (SysTime::max() - SysTime()) % 1us);  // saturated
  std::vector<SysTime> probes;
  for (const auto& m : all) {
    probes.push_back(*m.time);
    if (*m.time < SysTime::max() - 1us) probes.push_back(*m.time + 1us);
    if (*m.time > SysTime::min() + 1us) probes.push_back(*m.time - 1us);
  }
  for (SysTime p : probes) {
    std::uint64_t want = t->next_seq();
    for (const auto& m : all) {
      if (*m.time >= p) {
        want = m.seq;
        break;
      }
    }
    auto got = t->seq_at_time(p);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, want) << "t = " << p.time_since_epoch().count() << " ns";
  }
}

TEST_F(LookbackTest, SeqAtTimeLooksOnlyAtRetainedRecordsAndFollowsTheWriter) {
  TopicOptions o = small();
  TestClock clock;
  auto t = open(o, clock.hooks());
  auto r = open_reader(o);
  ASSERT_TRUE(r.ok());
  for (int i = 0; i < 200; ++i) {
    clock.now_us += 10;
    ASSERT_TRUE(t->append(msg(i)).ok());
  }
  {
    auto c = std::move(*t->channel("c", ChannelOptions{}));
    auto got = drain(*c);
    ASSERT_EQ(got.size(), 200U);
    ASSERT_TRUE(c->ack(149).ok());  // retention deletes the segments before 150's
  }
  const std::uint64_t first = t->first_seq();
  ASSERT_GT(first, 0U);
  auto early = t->seq_at_time(at_us(0));
  ASSERT_TRUE(early.ok());
  EXPECT_EQ(*early, first);
  // A reader elsewhere sees what the writer appended since it opened.
  auto last = (*r)->seq_at_time(at_us(clock.now_us));
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(*last, 199U);
  auto later = (*r)->seq_at_time(at_us(clock.now_us + 1));
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(*later, 200U);
}

TEST_F(LookbackTest, AFormat1SegmentCountsAsWrittenWhenItsFileLastChanged) {
  copy_fixture();
  TestClock clock;
  auto t = open(fixture_options(), clock.hooks());
  // The fixture's segments: seqs 0..7, 8..14, 15..19; then new records.
  const auto segs = segments();
  ASSERT_EQ(segs.size(), 4U);  // the writer's open rolled to a format 2 one
  const std::int64_t base = clock.now_us;
  const auto file_time = [](std::int64_t us) {
    return std::chrono::file_clock::from_sys(at_us(us));
  };
  fs::last_write_time(segs[0], file_time(base - 3'000'000));
  fs::last_write_time(segs[1], file_time(base - 2'000'000));
  fs::last_write_time(segs[2], file_time(base - 1'000'000));
  clock.now_us = base + 1'000'000;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(t->append("new").ok());
  const auto at = [&](std::int64_t us) {
    auto s = t->seq_at_time(at_us(us));
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : ~std::uint64_t{0};
  };
  EXPECT_EQ(at(0), 0U);
  EXPECT_EQ(at(base - 3'000'000), 0U);  // the first segment changed then
  EXPECT_EQ(at(base - 3'000'000 + 1), 8U);
  EXPECT_EQ(at(base - 2'000'000), 8U);
  EXPECT_EQ(at(base - 1'500'000), 15U);
  EXPECT_EQ(at(base - 1'000'000 + 1), 20U);  // the first record with a time
  EXPECT_EQ(at(base + 1'000'000), 20U);
  EXPECT_EQ(at(base + 1'000'001), 23U);  // after everything: next_seq
}

// ---------------------------------------------------------------------------
// Cursors

TEST_F(LookbackTest, ACursorReadsWithoutTakingAnything) {
  TopicOptions o = small();
  o.max_unconsumed = 1000;
  auto t = open(o);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(t->append(msg(i)).ok());
  {
    auto c = std::move(*t->channel("c"));
    auto got = drain(*c);
    ASSERT_TRUE(c->ack(29).ok());
  }
  const auto before = files();
  auto cur = t->cursor(0);
  ASSERT_TRUE(cur.ok()) << cur.status();
  EXPECT_EQ((*cur)->start(), 0U);
  const auto got = drain(**cur);
  EXPECT_EQ(seqs(got), range(0, 100));
  for (const auto& m : got) EXPECT_EQ(m.payload, msg(m.seq));
  EXPECT_EQ((*cur)->position(), 100U);
  EXPECT_EQ((*cur)->skipped(), 0U);
  // Caught up: returns at once with nothing (never waits).
  std::vector<LogMessage> none;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE((*cur)->next_batch(none, 10).ok());
  EXPECT_TRUE(none.empty());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  // Nothing changed on disk; no channel appeared; the channel's position,
  // lock and the bound are untouched.
  EXPECT_EQ(files(), before);
  EXPECT_EQ(*t->channels(), std::vector<std::string>{"c"});
  EXPECT_TRUE(t->stats().channels.empty());
  auto pos = t->channel_position("c");
  ASSERT_TRUE(pos.ok());
  EXPECT_EQ(*pos, 30U);
  auto c = t->channel("c");
  ASSERT_TRUE(c.ok()) << c.status();  // the cursor holds no lock
  EXPECT_EQ((*c)->acked(), 30U);
  // New appends show up at the next call.
  ASSERT_TRUE(t->append(msg(100)).ok());
  std::vector<LogMessage> one;
  ASSERT_TRUE((*cur)->next_batch(one, 10).ok());
  EXPECT_EQ(seqs(one), std::vector<std::uint64_t>{100});
}

TEST_F(LookbackTest, ACursorStartsAtTheOldestRetainedRecordAndRefusesPastTheEnd) {
  auto t = open();
  for (int i = 0; i < 300; ++i) ASSERT_TRUE(t->append(msg(i)).ok());
  {
    auto c = std::move(*t->channel("c"));
    (void)drain(*c);
    ASSERT_TRUE(c->ack(199).ok());
  }
  const std::uint64_t first = t->first_seq();
  ASSERT_GT(first, 0U);
  auto cur = t->cursor(3);
  ASSERT_TRUE(cur.ok());
  EXPECT_EQ((*cur)->start(), first);
  EXPECT_EQ(seqs(drain(**cur)), range(first, 300));
  auto mid = t->cursor(250);
  ASSERT_TRUE(mid.ok());
  EXPECT_EQ((*mid)->start(), 250U);
  EXPECT_EQ(seqs(drain(**mid)), range(250, 300));
  auto end = t->cursor(300);
  ASSERT_TRUE(end.ok());
  EXPECT_TRUE(drain(**end).empty());
  EXPECT_EQ(t->cursor(301).code(), StatusCode::kInvalidArgument);
  std::vector<LogMessage> out;
  EXPECT_EQ((*end)->next_batch(out, 0).code(), StatusCode::kInvalidArgument);
}

// Group commit: records become visible only once a sync covered them. A
// cursor must not read a record whose sync is still running (the simulated
// disk holds it), though it is written.
TEST_F(LookbackTest, ACursorSeesOnlyWhatASyncCovered) {
  testutil::FaultFileSystem disk;
  TopicOptions o = small();
  o.durability = Durability::kGroupCommit;
  auto opened = log::open_topic(disk, "/fault/topic", o);
  ASSERT_TRUE(opened.ok()) << opened.status();
  Topic& t = **opened;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(t.append(msg(i)).ok());
  std::mutex m;
  std::condition_variable cv;
  bool held = false;
  bool release = false;
  disk.set_sync_hook([&](const std::string&) {
    std::unique_lock lk(m);
    if (held) return;
    held = true;
    cv.notify_all();
    cv.wait(lk, [&] { return release; });
  });
  std::thread appender([&] { EXPECT_TRUE(t.append(msg(3)).ok()); });
  {
    std::unique_lock lk(m);
    cv.wait(lk, [&] { return held; });  // written; its sync held
  }
  EXPECT_EQ(t.next_seq(), 4U);
  auto cur = t.cursor(0);
  ASSERT_TRUE(cur.ok());
  std::vector<LogMessage> got;
  ASSERT_TRUE((*cur)->next_batch(got, 10).ok());
  EXPECT_EQ(seqs(got), range(0, 3));
  {
    std::lock_guard lk(m);
    release = true;
  }
  cv.notify_all();
  appender.join();
  disk.set_sync_hook(nullptr);
  ASSERT_TRUE((*cur)->next_batch(got, 10).ok());
  EXPECT_EQ(seqs(got), range(0, 4));
}

// A cursor in another process (a read-only topic) while the writer appends
// and a channel there consumes and acknowledges: it gets every record, in
// order, whole, each once, and never more than the writer published.
TEST_F(LookbackTest, ACursorInAnotherProcessSeesAConsistentPrefixWhileAppendsRun) {
  TopicOptions o = small();
  o.segment_bytes = 16 * 1024;  // rolls as it goes
  constexpr int kRecords = 20000;
  {
    auto t = open(o);  // the topic exists before the reader opens it
  }
  int ready[2];
  int go[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(go), 0);
  const pid_t child = fork();
  if (child == 0) {
    ::close(ready[0]);
    ::close(go[1]);
    auto t = Topic::open(dir_.string(), o);
    if (!t.ok()) _exit(10);
    (void)!write(ready[1], "r", 1);
    char b = 0;
    if (read(go[0], &b, 1) != 1) _exit(11);
    std::thread consumer([&] {
      auto c = (*t)->channel("c");
      if (!c.ok()) _exit(12);
      std::vector<LogMessage> batch;
      for (std::uint64_t seen = 0; seen < kRecords;) {
        batch.clear();
        if (!(*c)->next_batch(batch, 64, with_timeout(30s)).ok()) _exit(13);
        seen = batch.back().seq + 1;
        if (!(*c)->ack(batch.back().seq).ok()) _exit(14);
      }
    });
    for (int i = 0; i < kRecords; ++i) {
      if (!(*t)->append(msg(i)).ok()) _exit(15);
    }
    consumer.join();
    _exit(0);
  }
  ::close(ready[1]);
  ::close(go[0]);
  char b = 0;
  ASSERT_EQ(read(ready[0], &b, 1), 1);
  auto r = open_reader(o);
  ASSERT_TRUE(r.ok()) << r.status();
  // A channel here that never acknowledges holds every segment, so the
  // cursor's view is whole: no gap is allowed.
  auto hold = (*r)->channel("hold");
  ASSERT_TRUE(hold.ok()) << hold.status();
  auto cur = (*r)->cursor(0);
  ASSERT_TRUE(cur.ok()) << cur.status();
  ASSERT_EQ(write(go[1], "g", 1), 1);
  std::vector<LogMessage> batch;
  std::uint64_t next = 0;
  std::int64_t last_time = 0;
  bool ok = true;
  const auto give_up = std::chrono::steady_clock::now() + 60s;
  while (next < kRecords && ok && std::chrono::steady_clock::now() < give_up) {
    batch.clear();
    ASSERT_TRUE((*cur)->next_batch(batch, 500).ok());
    if (batch.empty()) {
      std::this_thread::yield();  // the cursor never waits: look again
      continue;
    }
    for (const auto& m : batch) {
      ok = ok && m.seq == next && m.payload == msg(m.seq) && m.time.has_value() &&
           us_of(*m.time) >= last_time;
      EXPECT_EQ(m.seq, next);
      EXPECT_EQ(m.payload, msg(m.seq));
      if (m.time) last_time = us_of(*m.time);
      ++next;
    }
  }
  EXPECT_EQ(next, static_cast<std::uint64_t>(kRecords));
  EXPECT_EQ((*cur)->skipped(), 0U);
  EXPECT_TRUE(exited_cleanly(child));
  ::close(ready[0]);
  ::close(go[1]);
}

// ---------------------------------------------------------------------------
// A channel's position, read without opening it.

TEST_F(LookbackTest, AChannelPositionIsReadWithoutOpeningTheChannel) {
  auto t = open();
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(t->append(msg(i)).ok());
  EXPECT_EQ(t->channel_position("none").code(), StatusCode::kNotFound);
  {
    auto c = std::move(*t->channel("c"));
    for (int i = 0; i < 7; ++i) ASSERT_TRUE(c->next().ok());
    ASSERT_TRUE(c->ack(6).ok());
    auto open_here = t->channel_position("c");  // open in this process: from memory
    ASSERT_TRUE(open_here.ok());
    EXPECT_EQ(*open_here, 7U);
  }
  auto closed = t->channel_position("c");  // from its file
  ASSERT_TRUE(closed.ok());
  EXPECT_EQ(*closed, 7U);
  // Open in another process, which holds its lock: read all the same.
  int ready[2];
  int done[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(done), 0);
  const pid_t child = fork();
  if (child == 0) {
    ::close(done[1]);
    auto r = open_reader();
    if (!r.ok()) _exit(10);
    auto c = (*r)->channel("c");
    if (!c.ok()) _exit(11);
    for (int i = 0; i < 3; ++i) {
      if (!(*c)->next().ok()) _exit(12);
    }
    if (!(*c)->ack(9).ok()) _exit(13);
    (void)!write(ready[1], "r", 1);
    char b = 0;
    (void)!read(done[0], &b, 1);  // holds the channel until the parent is done
    _exit(0);
  }
  ::close(done[0]);
  char b = 0;
  ASSERT_EQ(read(ready[0], &b, 1), 1);
  auto r = open_reader();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->channel("c").code(), StatusCode::kInUse);
  auto elsewhere = (*r)->channel_position("c");
  ASSERT_TRUE(elsewhere.ok()) << elsewhere.status();
  EXPECT_EQ(*elsewhere, 10U);
  ASSERT_EQ(write(done[1], "d", 1), 1);
  EXPECT_TRUE(exited_cleanly(child));
  ::close(ready[0]);
  ::close(ready[1]);
  ::close(done[1]);
  // A file that never reached the disk: starts at the oldest record; one
  // with bytes but no valid slot: damage.
  { std::ofstream(dir_ / "channels" / "unset.pos", std::ios::binary) << std::string(64, '\0'); }
  auto unset = t->channel_position("unset");
  ASSERT_TRUE(unset.ok());
  EXPECT_EQ(*unset, t->first_seq());
  { std::ofstream(dir_ / "channels" / "bad.pos", std::ios::binary) << std::string(64, 'x'); }
  EXPECT_EQ(t->channel_position("bad").code(), StatusCode::kCorruption);
}

// A channel that does not exist yet may start at a seq (get --from-seq,
// --from-time), also from a read-only topic, where seek is refused.
TEST_F(LookbackTest, ANewChannelStartsAtTheSeqItIsGiven) {
  auto t = open();
  for (int i = 0; i < 300; ++i) ASSERT_TRUE(t->append(msg(i)).ok());
  {
    auto c = std::move(*t->channel("c"));
    (void)drain(*c);
    ASSERT_TRUE(c->ack(199).ok());  // retention deletes the oldest segments
  }
  const std::uint64_t first = t->first_seq();
  ASSERT_GT(first, 0U);
  ChannelOptions at;
  at.start_seq = 250;
  auto mid = t->channel("mid", at);
  ASSERT_TRUE(mid.ok()) << mid.status();
  EXPECT_EQ((*mid)->acked(), 250U);
  EXPECT_EQ(seqs(drain(**mid)), range(250, 300));
  at.start_seq = 0;
  auto early = t->channel("early", at);
  ASSERT_TRUE(early.ok());
  EXPECT_EQ((*early)->acked(), first);
  at.start_seq = 301;
  EXPECT_EQ(t->channel("late", at).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(dir_ / "channels" / "late.pos"));
  at.start_seq = 290;
  early->reset();
  auto again = t->channel("early", at);  // exists: its own position wins
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->acked(), first);
  auto r = open_reader();
  ASSERT_TRUE(r.ok());
  auto elsewhere = (*r)->channel("elsewhere", at);
  ASSERT_TRUE(elsewhere.ok()) << elsewhere.status();
  EXPECT_EQ(seqs(drain(**elsewhere)), range(290, 300));
}

// ---------------------------------------------------------------------------
// Channel::seek

TEST_F(LookbackTest, SeekBackReplaysSeekForwardSkipsAndBothAreDurable) {
  auto t = open();
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(t->append(msg(i)).ok());
  {
    auto c = std::move(*t->channel("c"));
    ASSERT_EQ(drain(*c).size(), 10U);
    ASSERT_TRUE(c->ack(9).ok());
    auto back = c->seek(3);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, 3U);
    EXPECT_EQ(c->acked(), 3U);
    EXPECT_EQ(c->delivered(), 3U);
    EXPECT_EQ(seqs(drain(*c)), range(3, 10));
  }
  {
    auto c = std::move(*t->channel("c"));  // durable: it reopens there
    EXPECT_EQ(c->acked(), 3U);
    auto fwd = c->seek(8);
    ASSERT_TRUE(fwd.ok());
    EXPECT_EQ(*fwd, 8U);
    EXPECT_EQ(seqs(drain(*c)), range(8, 10));
  }
  {
    auto c = std::move(*t->channel("c"));
    EXPECT_EQ(c->acked(), 8U);
    // A purge: everything not acknowledged goes.
    auto purge = c->seek(t->next_seq());
    ASSERT_TRUE(purge.ok());
    EXPECT_EQ(*purge, 10U);
    EXPECT_TRUE(drain(*c).empty());
    ASSERT_TRUE(t->append(msg(10)).ok());
    EXPECT_EQ(seqs(drain(*c)), std::vector<std::uint64_t>{10});
    // Past the end: refused, nothing moved.
    EXPECT_EQ(c->seek(12).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(c->acked(), 10U);
  }
  auto reopened = open_reader();
  ASSERT_TRUE(reopened.ok());
  auto pos = (*reopened)->channel_position("c");
  ASSERT_TRUE(pos.ok());
  EXPECT_EQ(*pos, 10U);
}

TEST_F(LookbackTest, SeekBeforeTheOldestRetainedRecordStopsThereAndSaysSo) {
  auto t = open();
  for (int i = 0; i < 300; ++i) ASSERT_TRUE(t->append(msg(i)).ok());
  auto c = std::move(*t->channel("c"));
  ASSERT_EQ(drain(*c).size(), 300U);
  ASSERT_TRUE(c->ack(249).ok());
  const std::uint64_t first = t->first_seq();
  ASSERT_GT(first, 0U);
  auto to = c->seek(0);
  ASSERT_TRUE(to.ok());
  EXPECT_EQ(*to, first);
  EXPECT_EQ(seqs(drain(*c)), range(first, 300));
  EXPECT_EQ(c->skipped_retention(), 0U);
}

// In a read-only topic a seek forward is what an ack is (durable, visible to
// the writer and to the next open); back needs the writer.
TEST_F(LookbackTest, SeekBackNeedsTheWriterForwardDoesNot) {
  {
    auto t = open();
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(t->append(msg(i)).ok());
  }
  {
    auto r = open_reader();
    ASSERT_TRUE(r.ok());
    auto c = std::move(*(*r)->channel("c"));
    auto to = c->seek(6);
    ASSERT_TRUE(to.ok()) << to.status();
    EXPECT_EQ(*to, 6U);
    EXPECT_EQ(c->acked(), 6U);
    EXPECT_EQ(seqs(drain(*c)), range(6, 10));
    EXPECT_EQ(c->seek(2).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(c->seek(11).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(c->acked(), 6U);
  }
  auto t = open();
  auto pos = t->channel_position("c");
  ASSERT_TRUE(pos.ok());
  EXPECT_EQ(*pos, 6U);
}

// Replayed records are unacknowledged again: they count toward the bound,
// although the writer had cached a slower position than the channel's new
// one (the cached floor follows the channel back).
TEST_F(LookbackTest, RecordsReplayedAfterASeekBackCountTowardTheBound) {
  TopicOptions o = small();
  o.max_unconsumed = 10;
  o.on_bound = BoundPolicy::kFail;
  auto t = open(o);
  auto c = std::move(*t->channel("c"));
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(t->append(msg(i)).ok());
  ASSERT_EQ(drain(*c).size(), 10U);
  ASSERT_TRUE(c->ack(9).ok());
  for (int i = 10; i < 15; ++i) ASSERT_TRUE(t->append(msg(i)).ok());  // 5 unconsumed
  ASSERT_TRUE(c->seek(0).ok());                                       // 15 unconsumed again
  EXPECT_EQ(t->append("over").code(), StatusCode::kRejected);
  EXPECT_EQ(t->next_seq(), 15U);
  auto again = drain(*c);
  EXPECT_EQ(seqs(again), range(0, 15));
  ASSERT_TRUE(c->ack(9).ok());  // 5 unconsumed: room
  EXPECT_TRUE(t->append(msg(15)).ok());
}

// Moving forward frees room: an appender waiting at the bound wakes.
TEST_F(LookbackTest, SeekForwardWakesAnAppenderWaitingAtTheBound) {
  TopicOptions o = small();
  o.max_unconsumed = 5;
  auto t = open(o);
  auto c = std::move(*t->channel("c"));
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(t->append(msg(i)).ok());
  Status blocked;
  std::atomic<bool> done{false};
  std::stop_source stop;
  std::thread appender([&] {
    blocked = t->append(msg(5), Context(stop.get_token())).status();
    done = true;
  });
  ASSERT_TRUE(testutil::eventually([&] { return t->stats().bound_waits == 1; }));
  auto to = c->seek(5);  // skip the backlog
  ASSERT_TRUE(to.ok());
  // Woken by the seek: any later wake-up would find the room too, so wait
  // for it a bounded time only, then stop it (a failure).
  EXPECT_TRUE(testutil::eventually([&] { return done.load(); }, 10s)) << "not woken";
  stop.request_stop();
  appender.join();
  EXPECT_TRUE(blocked.ok()) << blocked;
  EXPECT_EQ(seqs(drain(*c)), std::vector<std::uint64_t>{5});
}

// The same from a read-only topic (a purge by another process): the
// writer's appender waiting at the bound is woken through the NOTIFY page.
TEST_F(LookbackTest, SeekForwardInAReadOnlyTopicWakesTheWritersAppender) {
  TopicOptions o = small();
  o.max_unconsumed = 5;
  auto t = open(o);
  { auto c = std::move(*t->channel("c")); }  // made here, read elsewhere
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(t->append(msg(i)).ok());
  Status blocked;
  std::atomic<bool> done{false};
  std::stop_source stop;
  std::thread appender([&] {
    blocked = t->append(msg(5), Context(stop.get_token())).status();
    done = true;
  });
  ASSERT_TRUE(testutil::eventually([&] { return t->stats().bound_waits == 1; }));
  auto r = open_reader();
  ASSERT_TRUE(r.ok());
  auto c = std::move(*(*r)->channel("c"));
  auto to = c->seek(5);
  ASSERT_TRUE(to.ok()) << to.status();
  EXPECT_TRUE(testutil::eventually([&] { return done.load(); }, 10s)) << "not woken";
  stop.request_stop();
  appender.join();
  EXPECT_TRUE(blocked.ok()) << blocked;
}

// Retention keeps what a channel moved back to: the other channels' acks
// delete nothing it now needs, though it had passed it before.
TEST_F(LookbackTest, RetentionKeepsWhatAChannelMovedBackToNeeds) {
  auto t = open();
  for (int i = 0; i < 400; ++i) ASSERT_TRUE(t->append(msg(i)).ok());
  auto a = std::move(*t->channel("a"));
  auto b = std::move(*t->channel("b"));
  auto c = std::move(*t->channel("c"));
  const auto read_and_ack = [](Channel& ch, std::size_t n) {
    std::vector<LogMessage> batch;
    ASSERT_TRUE(ch.next_batch(batch, n, with_timeout(0ms)).ok());
    ASSERT_TRUE(ch.ack(batch.back().seq).ok());
  };
  read_and_ack(*a, 300);
  read_and_ack(*b, 300);
  read_and_ack(*c, 50);  // c holds the oldest segments
  ASSERT_EQ(t->first_seq(), 0U);
  auto to = a->seek(60);  // a goes back to what only c still held for it
  ASSERT_TRUE(to.ok());
  ASSERT_EQ(*to, 60U);
  // b and c pass everything: only a holds segments now.
  read_and_ack(*b, 100);
  (void)drain(*c);
  ASSERT_TRUE(c->ack(399).ok());
  EXPECT_LE(t->first_seq(), 60U);
  EXPECT_EQ(seqs(drain(*a)), range(60, 400));
  EXPECT_EQ(a->skipped_retention(), 0U);
  EXPECT_EQ(a->skipped_corrupt(), 0U);
  ASSERT_TRUE(a->ack(399).ok());  // and then they go
  EXPECT_GT(t->first_seq(), 60U);
}

}  // namespace
}  // namespace sluice
