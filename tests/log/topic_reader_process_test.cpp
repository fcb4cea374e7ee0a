// A topic opened read-only (a reader process: `sluice get`, a DirStore
// reader) beside its writer: it delivers only what the writer published,
// survives a failed read, lets go of segments retention deleted, counts a
// gap once, and under load delivers or counts every record. Found by a
// review (2026-11-26); each test failed before its fix.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>

#include "fault_file_system.h"
#include "log/file_system.h"
#include "log/topic_impl.h"
#include "sluice/log/channel.h"
#include "sluice/log/topic.h"
#include "testutil/forwarding_file_system.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testutil::CutMode;
using testutil::FaultFileSystem;

// ---------------------------------------------------------------------------
// 1. A read-only open while a record awaits its sync (kPerAppend) delivers
//    that record, although the writer has not published it (NOTIFY
//    visible_seq) and a power cut takes it back.
TEST(ReaderProcessTest, AnOpenBesideASyncingWriterDeliversOnlyWhatItPublished) {
  FaultFileSystem fs;
  const std::string dir = "/fault/topic";
  TopicOptions o;
  o.segment_bytes = 1 << 20;
  o.max_message_bytes = 1024;
  o.durability = Durability::kPerAppend;
  auto w = log::open_topic(fs, dir, o);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->append("durable-0").ok());

  std::mutex m;
  std::condition_variable cv;
  bool armed = true, held = false, release = false;
  fs.set_sync_hook([&](const std::string& path) {
    if (!path.ends_with(".seg")) return;
    std::unique_lock lk(m);
    if (!armed) return;
    armed = false;
    held = true;
    cv.notify_all();
    cv.wait(lk, [&] { return release; });
  });
  std::thread appender([&] { (void)(*w)->append("not-yet-durable-1"); });
  {
    std::unique_lock lk(m);
    cv.wait(lk, [&] { return held; });
  }
  // The writer is inside fdatasync of record 1; it published only seq < 1.
  std::printf("writer: append of record 1 is inside its fdatasync (not returned)\n");

  TopicOptions ro = o;
  ro.read_only = true;
  auto r = log::open_topic(fs, dir, ro);
  ASSERT_TRUE(r.ok()) << r.status();
  auto c = (*r)->channel("reader");
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<LogMessage> got;
  for (;;) {
    auto msg = (*c)->next(with_timeout(0ms));
    if (!msg.ok()) break;
    std::printf("read-only channel delivered seq %llu '%s'\n",
                static_cast<unsigned long long>(msg->seq), msg->payload.c_str());
    got.push_back(std::move(*msg));
  }
  if (!got.empty()) {
    ASSERT_TRUE((*c)->ack(got.back().seq).ok());
  }
  // Power cut now: the append of record 1 never returned.
  auto after = fs.after_cut(CutMode::kDropUnsynced, 0);
  {
    std::lock_guard lk(m);
    release = true;
  }
  cv.notify_all();
  appender.join();
  fs.set_sync_hook(nullptr);

  EXPECT_EQ(got.size(), 1U) << "the read-only channel delivered (and acked) a record whose "
                               "append had not returned and was not synced";
  auto w2 = log::open_topic(*after, dir, o);
  ASSERT_TRUE(w2.ok()) << w2.status();
  for (const auto& t : (*w2)->recovery().truncated) {
    std::printf("after the cut, recovery: %s offset %llu: %s\n", t.file.c_str(),
                static_cast<unsigned long long>(t.offset), t.what.c_str());
  }
  std::printf("after the cut: next_seq %llu; the record the consumer acked is gone\n",
              static_cast<unsigned long long>((*w2)->next_seq()));
}

// ---------------------------------------------------------------------------
// A FileSystem over the real one whose pread on a segment fails on demand.
std::atomic<int> g_fail_preads{0};

class FlakyFile final : public testutil::ForwardingFile {
 public:
  explicit FlakyFile(std::unique_ptr<log::File> f) : ForwardingFile(std::move(f)) {}
  Result<std::size_t> pread(char* buf, std::size_t n, std::uint64_t off) override {
    if (path().ends_with(".seg") && g_fail_preads.load() > 0) {
      g_fail_preads.fetch_sub(1);
      return log::io_error("read", path(), EIO);
    }
    return ForwardingFile::pread(buf, n, off);
  }
  Status sync() override;
};

// Holds the next sync of a segment until released, then fails it (EIO).
struct SyncGate {
  std::mutex m;
  std::condition_variable cv;
  bool armed = false, held = false, release = false;
};
SyncGate g_gate;

Status FlakyFile::sync() {
  if (path().ends_with(".seg")) {
    std::unique_lock lk(g_gate.m);
    if (g_gate.armed) {
      g_gate.armed = false;
      g_gate.held = true;
      g_gate.cv.notify_all();
      g_gate.cv.wait(lk, [] { return g_gate.release; });
      return log::io_error("fdatasync", path(), EIO);
    }
  }
  return ForwardingFile::sync();
}

class FlakyFs final : public testutil::ForwardingFileSystem {
 protected:
  std::unique_ptr<log::File> wrap(std::unique_ptr<log::File> f) override {
    return std::make_unique<FlakyFile>(std::move(f));
  }
};

// 2. Reader::fill resizes its buffer before the pread and keeps the old
//    buf_seg_/buf_off_ when the pread fails: the next read takes the zeros
//    of the resized buffer for the record and reports kCorruption, for ever.
TEST(ReaderProcessTest, AFailedReadIsAnErrorOnceNotDamageForEver) {
  const auto dir = testutil::test_dir("reader-process");
  FlakyFs fs;
  TopicOptions o;
  o.segment_bytes = 1 << 20;
  o.max_message_bytes = 1024;
  o.durability = Durability::kNone;
  o.preallocate = false;  // no map: the channel reads with pread
  auto t = log::open_topic(fs, dir.string(), o);
  ASSERT_TRUE(t.ok()) << t.status();
  auto c = (*t)->channel("c");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE((*t)->append("first").ok());
  auto m0 = (*c)->next(with_timeout(1s));
  ASSERT_TRUE(m0.ok()) << m0.status();
  for (int i = 1; i <= 20; ++i) ASSERT_TRUE((*t)->append("record " + std::to_string(i)).ok());
  g_fail_preads = 1;  // one read error (EIO), then the disk reads fine again
  auto m1 = (*c)->next(with_timeout(1s));
  std::printf("next after the injected EIO: %s\n", m1.ok()
                                                       ? ("seq " + std::to_string(m1->seq)).c_str()
                                                       : m1.status().to_string().c_str());
  EXPECT_EQ(g_fail_preads.load(), 0);
  for (int n = 0; n < 3; ++n) {
    auto m = (*c)->next(with_timeout(1s));
    std::printf("retry %d: %s\n", n,
                m.ok() ? ("seq " + std::to_string(m->seq) + " '" + m->payload + "'").c_str()
                       : m.status().to_string().c_str());
    EXPECT_TRUE(m.ok()) << "the disk reads fine again, record 1 is intact";
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

namespace fs = std::filesystem;

TopicOptions none_opts() {
  TopicOptions o;
  o.segment_bytes = 1 << 20;
  o.max_message_bytes = 1024;
  o.durability = Durability::kNone;
  return o;
}

std::uint64_t record_bytes(const std::string& p) { return log::kRecordHeaderSize + p.size(); }

// 3a. After a power cut in kNone, NOTIFY (never synced, but written back by
//     the kernel like any dirty page) may hold a visible_seq past the
//     recovered log. A reader started before the writer took the missing
//     records for damage, set damaged_at for good, and stayed stopped with
//     kCorruption after the writer reopened and appended those seqs for
//     real. Without a live writer it now waits.
TEST(ReaderProcessTest, AReaderBeforeTheWriterAfterAPowerCutWaitsForItNotDamageForGood) {
  const auto dir = testutil::test_dir("reader-process");
  {
    auto t = Topic::open(dir.string(), none_opts());
    ASSERT_TRUE(t.ok()) << t.status();
    for (int i = 0; i < 10; ++i) ASSERT_TRUE((*t)->append("rec" + std::to_string(i)).ok());
  }
  // The power cut: the last 5 records' pages never reached the disk; the
  // NOTIFY page (visible_seq 10) did.
  const fs::path seg = dir / log::segment_name(0);
  fs::resize_file(seg, log::kSegmentHeaderSize + 5 * record_bytes("rec0"));
  TopicOptions ro = none_opts();
  ro.read_only = true;
  auto r = Topic::open(dir.string(), ro);
  ASSERT_TRUE(r.ok()) << r.status();
  auto c = (*r)->channel("r");
  ASSERT_TRUE(c.ok()) << c.status();
  for (int i = 0; i < 5; ++i) {
    auto m = (*c)->next(with_timeout(1s));
    ASSERT_TRUE(m.ok()) << m.status();
  }
  auto before = (*c)->next(with_timeout(100ms));
  std::printf("reader, writer not open yet: %s\n", before.status().to_string().c_str());
  // The writer comes back and appends seqs 5.. for real.
  auto w = Topic::open(dir.string(), none_opts());
  ASSERT_TRUE(w.ok()) << w.status();
  std::printf("writer reopened: next_seq %llu, corrupt %zu\n",
              static_cast<unsigned long long>((*w)->next_seq()), (*w)->recovery().corrupt.size());
  for (int i = 5; i < 8; ++i) ASSERT_TRUE((*w)->append("new" + std::to_string(i)).ok());
  for (int n = 0; n < 3; ++n) {
    auto m = (*c)->next(with_timeout(1s));
    std::printf("reader after the writer's appends: %s\n",
                m.ok() ? ("seq " + std::to_string(m->seq) + " " + m->payload).c_str()
                       : m.status().to_string().c_str());
    EXPECT_TRUE(m.ok());
  }
  fs::remove_all(dir);
}

// 3b. After a power cut that took records a channel's durable position had
//     passed, the writer's open continues in an `after gap` segment. A reader
//     started before the writer reopened looks for the segment named after
//     its next seq, finds a later one while its own is still there, and
//     took that for damage: kCorruption for good instead of jumping the gap.
// The power cut left `kept` of 10 records (a channel had passed all 10, so
// the writer's recovery goes on in an `after gap` segment at 10) and an
// empty NOTIFY page; a reader opened first must deliver what the writer
// then appends.
void reader_before_an_after_gap_writer(std::uint64_t kept) {
  const auto dir = testutil::test_dir("reader-process");
  {
    auto t = Topic::open(dir.string(), none_opts());
    ASSERT_TRUE(t.ok()) << t.status();
    auto a = (*t)->channel("a");
    ASSERT_TRUE(a.ok()) << a.status();
    for (int i = 0; i < 10; ++i) ASSERT_TRUE((*t)->append("rec" + std::to_string(i)).ok());
    ASSERT_TRUE((*a)->seek(10).ok());  // durable (synced) in every mode
  }
  fs::resize_file(dir / log::segment_name(0),
                  log::kSegmentHeaderSize + kept * record_bytes("rec0"));
  {
    std::ofstream n(dir / "NOTIFY", std::ios::binary | std::ios::trunc);
    n << std::string(4096, '\0');
  }
  TopicOptions ro = none_opts();
  ro.read_only = true;
  auto r = Topic::open(dir.string(), ro);  // e.g. `sluice get` started first after the reboot
  ASSERT_TRUE(r.ok()) << r.status();
  auto c = (*r)->channel("r");
  ASSERT_TRUE(c.ok()) << c.status();
  auto w = Topic::open(dir.string(), none_opts());
  ASSERT_TRUE(w.ok()) << w.status();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*w)->append("new" + std::to_string(i)).ok());
  std::vector<std::string> got;
  for (std::uint64_t n = 0; n < kept + 3; ++n) {
    auto m = (*c)->next(with_timeout(1s));
    ASSERT_TRUE(m.ok()) << m.status() << " after " << got.size();
    got.push_back(m->payload);
  }
  EXPECT_EQ(got.back(), "new2");
  EXPECT_EQ((*c)->skipped_corrupt() + (*c)->skipped_retention(), 10 - kept);
  fs::remove_all(dir);
}

TEST(ReaderProcessTest, AReaderBeforeTheWriterJumpsToTheWritersAfterGapSegment) {
  reader_before_an_after_gap_writer(0);
}

TEST(ReaderProcessTest, AReaderBeforeTheWriterJumpsToTheWritersAfterGapSegmentMidSegment) {
  reader_before_an_after_gap_writer(5);
}

}  // namespace
}  // namespace sluice

#include <sys/wait.h>
#include <unistd.h>

namespace sluice {
namespace {

std::string payload_of(std::uint64_t seq) {
  return "p" + std::to_string(seq) + std::string(seq * 7 % 300, static_cast<char>('a' + seq % 26));
}

void stress(Durability d, std::uint64_t cap, int records, bool batches, int slow = 0) {
  const auto dir = testutil::test_dir("reader-process");
  TopicOptions o;
  o.segment_bytes = 4096;
  o.max_message_bytes = 1024;
  o.durability = d;
  o.max_retained_bytes = cap;
  {
    auto t = Topic::open(dir.string(), o);
    ASSERT_TRUE(t.ok()) << t.status();
  }
  TopicOptions ro = o;
  ro.read_only = true;
  auto r = Topic::open(dir.string(), ro);
  ASSERT_TRUE(r.ok()) << r.status();
  auto c = (*r)->channel("r");
  ASSERT_TRUE(c.ok()) << c.status();
  const pid_t child = fork();
  if (child == 0) {
    auto t = Topic::open(dir.string(), o);
    if (!t.ok()) _exit(3);
    std::uint64_t seq = 0;
    while (seq < static_cast<std::uint64_t>(records)) {
      const std::uint64_t n = batches ? 1 + seq % 5 : 1;
      std::vector<std::string> ps;
      for (std::uint64_t i = 0; i < n; ++i) ps.push_back(payload_of(seq + i));
      std::vector<std::string_view> vs(ps.begin(), ps.end());
      auto got = (*t)->append_batch(vs);
      if (!got.ok() || *got != seq) _exit(4);
      seq += n;
      if (seq % 97 == 0) usleep(200);
    }
    if (!(*t)->close().ok()) _exit(5);
    _exit(0);
  }
  std::uint64_t delivered = 0, expect = 0, last = 0;
  bool bad = false;
  for (;;) {
    std::vector<LogMessage> out;
    Status s = (*c)->next_batch(out, 7, with_timeout(20s));
    if (s.code() == StatusCode::kClosed) break;
    if (!s.ok()) {
      ADD_FAILURE() << "reader: " << s << " after " << delivered << " delivered, next " << expect;
      bad = true;
      break;
    }
    for (const auto& m : out) {
      if (m.seq < expect || m.payload != payload_of(m.seq)) {
        ADD_FAILURE() << "seq " << m.seq << " expected >= " << expect << " payload ok "
                      << (m.payload == payload_of(m.seq));
        bad = true;
      }
      expect = m.seq + 1;
      last = m.seq;
      ++delivered;
    }
    if (!out.empty() && delivered % 3 == 0) (void)(*c)->ack(last);
    if (slow > 0 && delivered % 50 < 7) usleep(static_cast<useconds_t>(slow));
    if (bad) break;
  }
  if (bad) kill(child, SIGKILL);
  int st = 0;
  waitpid(child, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  const std::uint64_t skipped = (*c)->skipped_retention() + (*c)->skipped_corrupt();
  std::printf("mode %d cap %llu: delivered %llu, skipped_retention %llu, corrupt %llu, total %d\n",
              static_cast<int>(d), static_cast<unsigned long long>(cap),
              static_cast<unsigned long long>(delivered),
              static_cast<unsigned long long>((*c)->skipped_retention()),
              static_cast<unsigned long long>((*c)->skipped_corrupt()), records);
  EXPECT_EQ(delivered + skipped, static_cast<std::uint64_t>(records));
  std::filesystem::remove_all(dir);
}

TEST(ReaderProcessTest, StressNone) { stress(Durability::kNone, 0, 20000, true); }
TEST(ReaderProcessTest, StressNoneCap) { stress(Durability::kNone, 16384, 20000, true); }
TEST(ReaderProcessTest, StressGroupCap) { stress(Durability::kGroupCommit, 16384, 3000, true); }
TEST(ReaderProcessTest, StressAppendCap) { stress(Durability::kPerAppend, 16384, 2000, false); }
TEST(ReaderProcessTest, StressSlowNoneCap) { stress(Durability::kNone, 16384, 30000, true, 2000); }
TEST(ReaderProcessTest, StressSlowNoneCapSingle) {
  stress(Durability::kNone, 8192, 30000, false, 500);
}
TEST(ReaderProcessTest, StressSlowGroupCap) {
  stress(Durability::kGroupCommit, 8192, 3000, true, 3000);
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// 4 KiB segments, at most three of them kept.
TopicOptions capped_opts() {
  TopicOptions o;
  o.segment_bytes = 4096;
  o.max_message_bytes = 1024;
  o.durability = Durability::kNone;
  o.max_retained_bytes = 3 * 4096;
  return o;
}

// 5. A read-only topic counted a gap (segments a cap deleted before it got
//    there) each time a channel crossed it: a nack (or DirReader::release)
//    that rewound before the gap counted the same lost records again.
TEST(ReaderProcessTest, ANackBeforeACappedGapCountsTheGapOnce) {
  const auto dir = testutil::test_dir("reader-process");
  const TopicOptions o = capped_opts();
  auto w = Topic::open(dir.string(), o);
  ASSERT_TRUE(w.ok()) << w.status();
  const std::string p(200, 'x');
  std::uint64_t n = 0;
  while ((*w)->stats().segments < 2) {
    ASSERT_TRUE((*w)->append(p).ok());
    ++n;
  }
  TopicOptions ro = o;
  ro.read_only = true;
  auto r = Topic::open(dir.string(), ro);
  ASSERT_TRUE(r.ok()) << r.status();
  auto c = (*r)->channel("r", ChannelOptions{});
  ASSERT_TRUE(c.ok()) << c.status();
  for (int i = 0; i < 200; ++i) ASSERT_TRUE((*w)->append(p).ok());  // caps delete the oldest
  std::uint64_t delivered = 0;
  for (;;) {
    auto m = (*c)->next(with_timeout(100ms));
    if (!m.ok()) break;
    ++delivered;
  }
  const std::uint64_t lost1 = (*c)->skipped_retention();
  std::printf("first pass: delivered %llu, skipped_retention %llu, total %llu\n",
              static_cast<unsigned long long>(delivered), static_cast<unsigned long long>(lost1),
              static_cast<unsigned long long>((*w)->next_seq()));
  (*c)->nack();  // nothing was acknowledged: everything not lost comes again
  std::uint64_t again = 0;
  for (;;) {
    auto m = (*c)->next(with_timeout(100ms));
    if (!m.ok()) break;
    ++again;
  }
  std::printf("after nack: redelivered %llu, skipped_retention %llu\n",
              static_cast<unsigned long long>(again),
              static_cast<unsigned long long>((*c)->skipped_retention()));
  EXPECT_EQ((*c)->skipped_retention(), lost1) << "the same lost records counted twice";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice

#include <sys/resource.h>

namespace sluice {
namespace {

int deleted_fds() {
  int n = 0;
  std::error_code dec;
  std::filesystem::directory_iterator it("/proc/self/fd", dec);
  if (dec) return -1;  // no descriptor left to list them
  for (const auto& e : it) {
    std::error_code ec;
    const auto target = std::filesystem::read_symlink(e.path(), ec);
    if (!ec && target.string().ends_with(".seg (deleted)")) ++n;
  }
  return n;
}

// 6. A read-only topic never let go of a segment: every segment it ever
//    opened stayed open (Topic::Impl::segs only grew in a reader), so the
//    disk space of segments the writer's retention deleted was never freed
//    while the reader ran, and once the process ran out of descriptors
//    refresh() could not open the next segment and returned silently: the
//    channel waited for ever although the writer had published (and closed).
TEST(ReaderProcessTest, AFollowerLetsGoOfDeletedSegmentsAndReachesTheEndUnderAnFdLimit) {
  const auto dir = testutil::test_dir("reader-process");
  const TopicOptions o = capped_opts();
  auto w = Topic::open(dir.string(), o);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->append("first").ok());
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  const pid_t child = fork();
  if (child == 0) {
    rlimit lim{64, 64};
    setrlimit(RLIMIT_NOFILE, &lim);
    TopicOptions ro = o;
    ro.read_only = true;
    auto r = Topic::open(dir.string(), ro);
    if (!r.ok()) _exit(3);
    auto c = (*r)->channel("r");
    if (!c.ok()) _exit(4);
    char go = 1;
    (void)!write(pipefd[1], &go, 1);
    std::uint64_t delivered = 0, last = 0;
    int peak_deleted = 0;
    for (;;) {
      auto m = (*c)->next(with_timeout(3s));
      if (!m.ok()) {
        std::printf(
            "child reader: %s after %llu delivered (last seq %llu); open deleted "
            "segments: %d (peak %d)\n",
            m.status().to_string().c_str(), static_cast<unsigned long long>(delivered),
            static_cast<unsigned long long>(last), deleted_fds(), peak_deleted);
        std::fflush(stdout);
        _exit(m.status().code() == StatusCode::kClosed ? 0 : 1);
      }
      ++delivered;
      last = m->seq;
      (void)(*c)->ack(m->seq);
      if (delivered % 200 == 0) peak_deleted = std::max(peak_deleted, deleted_fds());
    }
  }
  char go = 0;
  ASSERT_EQ(read(pipefd[0], &go, 1), 1);
  const std::string p(200, 'x');
  for (int i = 0; i < 4000; ++i) {
    ASSERT_TRUE((*w)->append(p).ok());
    if (i % 50 == 0) usleep(2000);
  }
  std::printf("writer: next_seq %llu, segments deleted %llu; closing\n",
              static_cast<unsigned long long>((*w)->next_seq()),
              static_cast<unsigned long long>((*w)->stats().retention.segments_deleted));
  ASSERT_TRUE((*w)->close().ok());
  int st = 0;
  waitpid(child, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
      << "reader did not reach the closed mark, status " << st;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice

#include <fcntl.h>
#include <sys/mman.h>

namespace sluice {
namespace {

// 1b. The same on the real disk, two processes, kGroupCommit (what DirStore
//     uses for StoreDurability::kSync; its readers open the topic read-only):
//     a read-only open often starts ahead of the writer's published count.
TEST(ReaderProcessTest, OpensBesideAGroupCommitWriterNeverStartPastItsPublishedCount) {
  const auto dir = testutil::test_dir("reader-process");
  TopicOptions o;
  o.segment_bytes = 64 << 20;
  o.max_message_bytes = 1024;
  o.durability = Durability::kGroupCommit;
  {
    auto t = Topic::open(dir.string(), o);
    ASSERT_TRUE(t.ok()) << t.status();
  }
  const pid_t child = fork();
  if (child == 0) {
    auto t = Topic::open(dir.string(), o);
    if (!t.ok()) _exit(3);
    for (int i = 0; i < 20000; ++i) {
      if (!(*t)->append("payload " + std::to_string(i)).ok()) _exit(4);
    }
    _exit(0);
  }
  const int fd = ::open((dir / "NOTIFY").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  auto* page = static_cast<char*>(mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0));
  ASSERT_NE(page, MAP_FAILED);
  auto published = [&] {
    return std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(page + 16)).load();
  };
  TopicOptions ro = o;
  ro.read_only = true;
  int ahead = 0, opens = 0;
  std::uint64_t worst = 0;
  for (; opens < 300; ++opens) {
    auto r = Topic::open(dir.string(), ro);
    if (!r.ok()) continue;
    const std::uint64_t seen = (*r)->stats().visible_seq;  // what its channels may deliver
    const std::uint64_t pub = published();                 // read after the open
    if (seen > pub) {
      ++ahead;
      worst = std::max(worst, seen - pub);
    }
    int st = 0;
    if (waitpid(child, &st, WNOHANG) == child) break;
  }
  std::printf(
      "%d of %d read-only opens could deliver records the writer had not yet synced "
      "and published (up to %llu records ahead)\n",
      ahead, opens, static_cast<unsigned long long>(worst));
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  munmap(page, 4096);
  ::close(fd);
  EXPECT_EQ(ahead, 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// 1c. kPerAppend: an append whose sync fails is taken back (truncated) and
//     its seq is reused by the next append. A reader process that opened
//     while that sync ran delivered the taken-back record; it then delivers
//     the next record under the reused seq's successor, and the record that
//     really got the reused seq is never delivered nor counted.
TEST(ReaderProcessTest, ARecordWhoseSyncFailsIsNeverDeliveredAndItsSeqsNextHolderIs) {
  const auto dir = testutil::test_dir("reader-process");
  FlakyFs fs;
  TopicOptions o;
  o.segment_bytes = 1 << 20;
  o.max_message_bytes = 1024;
  o.durability = Durability::kPerAppend;
  auto w = log::open_topic(fs, dir.string(), o);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->append("A-0").ok());
  {
    std::lock_guard lk(g_gate.m);
    g_gate.armed = true;
  }
  Status failed;
  std::thread appender([&] { failed = (*w)->append("X-1").status(); });
  {
    std::unique_lock lk(g_gate.m);
    g_gate.cv.wait(lk, [] { return g_gate.held; });
  }
  TopicOptions ro = o;
  ro.read_only = true;
  auto r = Topic::open(dir.string(), ro);  // another process's view (real disk)
  ASSERT_TRUE(r.ok()) << r.status();
  auto c = (*r)->channel("r");
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<std::string> got;
  for (;;) {  // the reader consumes while the writer's sync runs
    auto m = (*c)->next(with_timeout(0ms));
    if (!m.ok()) break;
    std::printf("reader (during the sync): seq %llu '%s'\n",
                static_cast<unsigned long long>(m->seq), m->payload.c_str());
    got.push_back(m->payload);
  }
  {
    std::lock_guard lk(g_gate.m);
    g_gate.release = true;
  }
  g_gate.cv.notify_all();
  appender.join();
  std::printf("append of X-1: %s\n", failed.to_string().c_str());
  auto y = (*w)->append("Y-1");  // same size as X-1
  auto z = (*w)->append("Z-2");
  ASSERT_TRUE(y.ok() && z.ok());
  std::printf("writer: Y-1 got seq %llu, Z-2 got seq %llu\n", static_cast<unsigned long long>(*y),
              static_cast<unsigned long long>(*z));
  for (;;) {
    auto m = (*c)->next(with_timeout(200ms));
    if (!m.ok()) {
      std::printf("reader: %s\n", m.status().to_string().c_str());
      break;
    }
    std::printf("reader: seq %llu '%s'\n", static_cast<unsigned long long>(m->seq),
                m->payload.c_str());
    got.push_back(m->payload);
  }
  std::printf("reader skipped_corrupt %llu skipped_retention %llu\n",
              static_cast<unsigned long long>((*c)->skipped_corrupt()),
              static_cast<unsigned long long>((*c)->skipped_retention()));
  EXPECT_EQ(got, (std::vector<std::string>{"A-0", "Y-1", "Z-2"}));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice
