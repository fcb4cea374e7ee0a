// The writer's durability modes at their edges, found by a second review:
// the interval flusher after a failed sync; a close that failed after it
// began refusing appends, with an appender asleep at the bound; a channel
// opened in a read-only topic while a cap deletes its records. Each test
// failed on the code before its fix.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "log/fault_file_system.h"
#include "log/format.h"
#include "log/topic_impl.h"
#include "sluice/log/channel.h"
#include "sluice/log/topic.h"
#include "testutil/flaky_segment_sync.h"
#include "testutil/forwarding_file_system.h"
#include "testutil/temp_dir.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;

using testutil::FlakySegmentSync;

// A failed fdatasync cannot be taken back by another: Linux marks the pages
// whose write-back failed clean, so the next fdatasync returns 0 without
// writing them. kInterval's flusher cleared its flag and, after the first
// fix, tried again at the next interval, which would only have pretended;
// the failure is now reported by the next append and sync() (reopen the
// topic), and the flusher stops.
TEST(WriterSecondLookTest, AFailedIntervalSyncIsReportedByTheNextAppendAndSync) {
  testutil::FaultFileSystem disk;
  FlakySegmentSync fs(disk);
  TopicOptions o;
  o.durability = Durability::kInterval;
  o.sync_interval = 1ms;
  const std::string dir = "/fault/topic";
  auto opened = log::open_topic(fs, dir, o);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const std::uint64_t syncs = (*opened)->stats().syncs;
  fs.fail = 1;
  ASSERT_TRUE((*opened)->append("kept").ok());
  // The flusher counts its sync and records its failure under one lock.
  ASSERT_TRUE(testutil::eventually([&] { return (*opened)->stats().syncs > syncs; }));
  ASSERT_EQ(fs.failed.load(), 1);
  auto next = (*opened)->append("refused");
  EXPECT_EQ(next.status().code(), StatusCode::kIOError) << next.status();
  EXPECT_NE(next.status().message().find("reopen"), std::string_view::npos) << next.status();
  EXPECT_EQ((*opened)->sync().code(), StatusCode::kIOError);
  opened->reset();
  auto again = log::open_topic(fs, dir, o);  // recovery keeps what is there
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->next_seq(), 1U);
  EXPECT_TRUE((*again)->append("after the reopen").ok());
}

// kGroupCommit: an appender whose record a failed shared sync covered took
// the lead of the next sync, whose fdatasync (0 on Linux for the pages that
// failed) told it the record was durable. Every waiter fails with the
// leader, and every later append, until the topic is reopened.
TEST(WriterSecondLookTest, AFailedGroupSyncFailsEveryWaiterAndLaterAppendsUntilReopened) {
  testutil::FaultFileSystem disk;
  FlakySegmentSync fs(disk);
  TopicOptions o;
  o.durability = Durability::kGroupCommit;
  const std::string dir = "/fault/topic";
  auto opened = log::open_topic(fs, dir, o);
  ASSERT_TRUE(opened.ok()) << opened.status();
  Topic& t = **opened;
  std::latch held(1);
  std::latch release(1);
  fs.hold = [&] {
    held.count_down();
    release.wait();
  };
  fs.fail = 1;
  Status first;
  Status second;
  std::thread a([&] { first = t.append("first").status(); });
  held.wait();  // the leader is in its sync, which will fail
  std::thread b([&] { second = t.append("second").status(); });
  ASSERT_TRUE(testutil::eventually([&] { return t.next_seq() == 2; }));
  release.count_down();
  a.join();
  b.join();
  EXPECT_EQ(first.code(), StatusCode::kIOError) << first;
  EXPECT_EQ(second.code(), StatusCode::kIOError) << second;
  auto third = t.append("third");
  EXPECT_EQ(third.status().code(), StatusCode::kIOError) << third.status();
  EXPECT_EQ(t.sync().code(), StatusCode::kIOError);
  opened->reset();
  auto again = log::open_topic(fs, dir, o);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE((*again)->append("after the reopen").ok());
}

// A close() that fails once appends are refused (here: the directory sync
// of its closed mark) refuses every later append (docs/durability.md). An
// append asleep at the bound (kBlock, no deadline) was not woken: it slept
// until an acknowledgement came, for ever if none did, though all it could
// ever return was kClosed.
TEST(WriterSecondLookTest, AnAppendAsleepAtTheBoundReturnsWhenACloseFailsAfterRefusingAppends) {
  testutil::FaultFileSystem disk;
  FlakySegmentSync fs(disk);
  TopicOptions o;
  o.durability = Durability::kNone;
  o.max_unconsumed = 1;
  const std::string dir = "/fault/topic";
  auto opened = log::open_topic(fs, dir, o);
  ASSERT_TRUE(opened.ok()) << opened.status();
  Topic& t = **opened;
  auto ch = t.channel("c");
  ASSERT_TRUE(ch.ok()) << ch.status();
  ASSERT_TRUE(t.append("fills the bound").ok());
  std::atomic<bool> done{false};
  Status waited;
  std::thread appender([&] {
    waited = t.append("waits").status();
    done = true;
  });
  ASSERT_TRUE(testutil::eventually([&] { return t.stats().bound_waits == 1; }));
  fs.fail_dir_syncs = 2;  // the mark's segment, and the clean-up after it
  const Status closed = t.close();
  EXPECT_EQ(closed.code(), StatusCode::kIOError) << closed;
  const bool returned = testutil::eventually([&] { return done.load(); }, 5s);
  EXPECT_TRUE(returned) << "the append at the bound still waits after the failed close";
  if (!returned) {  // free it: an acknowledgement wakes it
    auto m = (*ch)->next(with_timeout(0ms));
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_TRUE((*ch)->ack(m->seq).ok());
  }
  appender.join();
  EXPECT_EQ(waited.code(), StatusCode::kClosed) << waited;
  auto again = t.append("after");
  EXPECT_EQ(again.status().code(), StatusCode::kClosed) << again.status();
}

// The real disk; runs `before_open` once, at the first open of a file whose
// path ends with `suffix` (then forwards the open).
class OpenHook final : public testutil::ForwardingFileSystem {
 public:
  std::string suffix;
  std::function<void()> before_open;
  Result<std::unique_ptr<log::File>> open(const std::string& path, log::OpenMode mode) override {
    if (before_open && path.ends_with(suffix)) std::exchange(before_open, nullptr)();
    return ForwardingFileSystem::open(path, mode);
  }
};

// A channel opened in a read-only topic (another process than the writer's)
// at a stored position whose segments a retention cap deletes while it
// opens: the open computed its start from what it knew, then looked at the
// writer's latest (which forgot the deleted segments) and started at the
// oldest segment left, so the records between were dropped and counted
// nowhere (skipped_retention() 0). A channel opened a moment later counted
// them; the writer's process charged a channel in that window already.
TEST(WriterSecondLookTest, AReadOnlyChannelCountsWhatACapDeletesWhileItOpens) {
  const auto dir = testutil::test_dir("writer-second-look");
  std::filesystem::create_directories(dir);
  TopicOptions o;
  o.segment_bytes = 4096;
  o.max_message_bytes = 1024;
  o.durability = Durability::kNone;
  o.max_retained_bytes = 8192;
  auto writer = Topic::open(dir.string(), o);
  ASSERT_TRUE(writer.ok()) << writer.status();
  Topic& w = **writer;
  ASSERT_TRUE(w.append("first").ok());
  {
    auto c = w.channel("c");  // at seq 0, then closed
    ASSERT_TRUE(c.ok()) << c.status();
  }
  OpenHook fs;
  TopicOptions ro = o;
  ro.read_only = true;
  auto reader = log::open_topic(fs, dir.string(), ro);
  ASSERT_TRUE(reader.ok()) << reader.status();
  Topic& r = **reader;
  const std::string big(1000, 'x');
  fs.suffix = "/channels/c.pos";
  fs.before_open = [&] {  // the channel's open has looked at the topic
    for (int i = 0; i < 40; ++i) ASSERT_TRUE(w.append(big).ok());
    ASSERT_GT(w.first_seq(), 0u) << "the cap deleted nothing";
  };
  auto ch = r.channel("c");
  ASSERT_TRUE(ch.ok()) << ch.status();
  const std::uint64_t first = r.first_seq();
  ASSERT_GT(first, 0u);
  auto m = (*ch)->next(with_timeout(0ms));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->seq, first);
  EXPECT_EQ((*ch)->skipped_retention(), first) << "records the cap dropped, counted once";
  ch->reset();
  reader->reset();
  writer->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice
