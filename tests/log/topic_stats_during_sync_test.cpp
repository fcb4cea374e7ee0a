// Topic::stats (what `--metrics` scrapes and the progress line read, through
// QueueWriter::blocked_seconds) while the topic lock is held across a slow
// segment sync: a per-append fdatasync, or the sync of a roll. It took that
// lock, so on a slow disk a scrape waited for the disk (past the 500 ms the
// command promises). It must return at once, with the counters as of before
// the held append or roll. Failed on the code before its fix: stats()
// returned only once the sync was let go.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "log/format.h"
#include "log/topic_impl.h"
#include "sluice/log/channel.h"
#include "sluice/log/topic.h"
#include "testutil/forwarding_file_system.h"
#include "testutil/temp_dir.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;

// Once armed, the next call through it waits until the test lets it go.
class Gate {
 public:
  void arm() {
    std::lock_guard g(mu_);
    armed_ = true;
  }
  bool holding() {
    std::lock_guard g(mu_);
    return holding_;
  }
  void release() {
    {
      std::lock_guard g(mu_);
      released_ = true;
    }
    cv_.notify_all();
  }
  void pass() {
    std::unique_lock lk(mu_);
    if (!armed_) return;
    armed_ = false;
    holding_ = true;
    cv_.wait(lk, [&] { return released_; });
    holding_ = false;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool armed_ = false;
  bool holding_ = false;
  bool released_ = false;
};

// The real disk, except that a segment sync (before it syncs) and a listing
// of a directory pass through gates.
class HeldSegmentSync final : public testutil::ForwardingFileSystem {
 public:
  Gate sync;
  Gate listing;

  Result<std::vector<std::string>> list(const std::string& d) override {
    listing.pass();
    return ForwardingFileSystem::list(d);
  }

 protected:
  std::unique_ptr<log::File> wrap(std::unique_ptr<log::File> f) override {
    if (!f->path().ends_with(log::kSegmentSuffix)) return f;
    return std::make_unique<File>(std::move(f), *this);
  }

 private:
  class File final : public testutil::ForwardingFile {
   public:
    File(std::unique_ptr<log::File> f, HeldSegmentSync& fs)
        : ForwardingFile(std::move(f)), fs_(fs) {}
    Status sync() override {
      fs_.sync.pass();
      return ForwardingFile::sync();
    }

   private:
    HeldSegmentSync& fs_;
  };
};

// Runs t.stats() (and t.retention()) on a thread of its own while `gate`
// holds a call; whether it returned before the gate was let go. Lets it go
// in any case (after 5 s without an answer), so a failure does not hang.
bool stats_return_while_held(Topic& t, Gate& gate, TopicStats* out) {
  std::atomic<bool> returned{false};
  std::thread reader([&] {
    (void)t.retention();
    *out = t.stats();
    returned = true;
  });
  const bool in_time = testutil::eventually([&] { return returned.load(); }, 5s);
  const bool still_held = gate.holding();
  gate.release();
  reader.join();
  return in_time && still_held;
}

TEST(TopicStatsDuringSyncTest, StatsDoNotWaitForAPerAppendSync) {
  const auto dir = testutil::test_dir("stats-sync");
  HeldSegmentSync fs;
  TopicOptions o;
  o.durability = Durability::kPerAppend;
  auto opened = log::open_topic(fs, dir.string(), o);
  ASSERT_TRUE(opened.ok()) << opened.status();
  Topic& t = **opened;
  auto c = t.channel("c");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(t.append("first").ok());
  const TopicStats before = t.stats();
  ASSERT_EQ(before.appended, 1u);

  fs.sync.arm();
  Result<std::uint64_t> second = Status(StatusCode::kInternal, "not run");
  std::thread appender([&] { second = t.append("second"); });
  ASSERT_TRUE(testutil::eventually([&] { return fs.sync.holding(); }, 10s));
  TopicStats during;
  EXPECT_TRUE(stats_return_while_held(t, fs.sync, &during))
      << "stats() waited for the per-append fdatasync holding the topic lock";
  appender.join();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(*second, 1u);

  // As of before the held append: it had not returned.
  EXPECT_EQ(during.appended, 1u);
  EXPECT_EQ(during.next_seq, 1u);
  EXPECT_EQ(during.visible_seq, 1u);
  EXPECT_EQ(during.syncs, before.syncs);
  EXPECT_EQ(during.disk_bytes, before.disk_bytes);
  ASSERT_EQ(during.channels.size(), 1u);
  EXPECT_EQ(during.channels[0].channel, "c");
  EXPECT_EQ(during.channels[0].acked, 0u);

  // Once it returned, it is in them, exactly.
  const TopicStats after = t.stats();
  EXPECT_EQ(after.appended, 2u);
  EXPECT_EQ(after.next_seq, 2u);
  EXPECT_EQ(after.visible_seq, 2u);
  EXPECT_EQ(after.syncs, before.syncs + 1);
  EXPECT_GT(after.disk_bytes, before.disk_bytes);
  std::filesystem::remove_all(dir);
}

// Group commit (the embedded store's `put`) syncs outside the lock, but a
// roll syncs the sealed segment under it.
TEST(TopicStatsDuringSyncTest, StatsDoNotWaitForTheSyncOfARoll) {
  const auto dir = testutil::test_dir("stats-roll");
  HeldSegmentSync fs;
  TopicOptions o;
  o.durability = Durability::kGroupCommit;
  o.max_message_bytes = 64;
  o.segment_bytes = 256;
  auto opened = log::open_topic(fs, dir.string(), o);
  ASSERT_TRUE(opened.ok()) << opened.status();
  Topic& t = **opened;
  const std::string payload(60, 'x');
  // The append that finds the first segment full rolls: it held per.
  std::uint64_t k = 0;
  while (t.stats().segments == 1) {
    ASSERT_TRUE(t.append(payload).ok());
    ASSERT_LT(++k, 100u);
  }
  const std::uint64_t per = k - 1;
  ASSERT_GE(per, 1u);
  for (std::uint64_t i = 1; i < per; ++i) ASSERT_TRUE(t.append(payload).ok());
  const TopicStats full = t.stats();  // the second segment full
  ASSERT_EQ(full.segments, 2u);

  fs.sync.arm();  // the next sync: the sealed segment's, in the roll
  Result<std::uint64_t> rolled = Status(StatusCode::kInternal, "not run");
  std::thread appender([&] { rolled = t.append(payload); });
  ASSERT_TRUE(testutil::eventually([&] { return fs.sync.holding(); }, 10s));
  TopicStats during;
  EXPECT_TRUE(stats_return_while_held(t, fs.sync, &during))
      << "stats() waited for the sync of a roll holding the topic lock";
  appender.join();
  ASSERT_TRUE(rolled.ok()) << rolled.status();

  EXPECT_EQ(during.segments, 2u);
  EXPECT_EQ(during.next_seq, full.next_seq);
  EXPECT_EQ(during.appended, full.appended);
  EXPECT_EQ(during.syncs, full.syncs);
  const TopicStats after = t.stats();
  EXPECT_EQ(after.segments, 3u);
  EXPECT_EQ(after.next_seq, full.next_seq + 1);
  EXPECT_EQ(after.appended, full.appended + 1);
  std::filesystem::remove_all(dir);
}

// Group commit: a follower returns, without the lock, once a sync covered
// its record, here a roll's by another appender, which holds the lock on
// past it (retention's look at the channels, on a slow disk). What the
// follower's append did must be in the stats as it returns: its record
// visible, the roll's sync counted.
TEST(TopicStatsDuringSyncTest, AFollowerWokenByARollIsInTheStatsAtOnce) {
  const auto dir = testutil::test_dir("stats-follower");
  HeldSegmentSync fs;
  TopicOptions o;
  o.durability = Durability::kGroupCommit;
  o.max_message_bytes = 64;
  o.segment_bytes = 512;
  auto opened = log::open_topic(fs, dir.string(), o);
  ASSERT_TRUE(opened.ok()) << opened.status();
  Topic& t = **opened;
  const std::string payload(20, 'x');
  std::uint64_t k = 0;
  while (t.stats().segments == 1) {
    ASSERT_TRUE(t.append(payload).ok());
    ASSERT_LT(++k, 100u);
  }
  const std::uint64_t per = k - 1;  // records a segment holds
  ASSERT_GE(per, 3u);
  // The second segment holds one: room for two more, the leader's and the
  // follower's; the third append after them rolls.
  for (std::uint64_t i = 1; i < per - 2; ++i) ASSERT_TRUE(t.append(payload).ok());
  const TopicStats start = t.stats();

  fs.sync.arm();  // the leader's sync, outside the lock
  std::thread leader([&] { EXPECT_TRUE(t.append(payload).ok()); });
  std::thread follower;
  std::thread roller;
  std::atomic<bool> followed{false};
  Result<std::uint64_t> f = Status(StatusCode::kInternal, "not run");
  bool rolling = false;
  TopicStats during;
  if (testutil::eventually([&] { return fs.sync.holding(); }, 10s)) {
    follower = std::thread([&] {
      f = t.append(payload);
      followed = true;
    });
    // Written (published as it let the lock go): it waits for a sync now.
    if (testutil::eventually([&] { return t.stats().appended == start.appended + 2; }, 10s)) {
      fs.listing.arm();  // retention's look after the roll, under the lock
      roller = std::thread([&] { EXPECT_TRUE(t.append(payload).ok()); });
      rolling = testutil::eventually([&] { return fs.listing.holding() && followed; }, 10s) &&
                stats_return_while_held(t, fs.listing, &during);
    }
  }
  fs.listing.release();
  fs.sync.release();
  for (std::thread* th : {&roller, &follower, &leader}) {
    if (th->joinable()) th->join();
  }
  ASSERT_TRUE(rolling) << "the follower did not return, or stats() did not, while the roll held "
                          "the lock";
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_GT(during.visible_seq, *f) << "the follower's record, returned, is not visible in stats";
  EXPECT_GE(during.syncs, start.syncs + 1) << "the roll's sync that woke the follower";
  std::filesystem::remove_all(dir);
}

// Read without the lock, beside appends, acks and channels opened and
// closed: every snapshot is consistent (no position past next_seq, nothing
// visible past it) and no counter goes back. Under TSan: no race.
TEST(TopicStatsDuringSyncTest, SnapshotsBesideAppendsAndAcksAreConsistent) {
  const auto dir = testutil::test_dir("stats-race");
  TopicOptions o;
  o.durability = Durability::kNone;
  o.max_message_bytes = 64;
  o.segment_bytes = 4096;  // rolls and, with a channel acking, deletions
  auto opened = Topic::open(dir.string(), o);
  ASSERT_TRUE(opened.ok()) << opened.status();
  Topic& t = **opened;
  auto c = t.channel("c");
  ASSERT_TRUE(c.ok()) << c.status();
  constexpr std::uint64_t kRecords = 20000;
  std::atomic<bool> done{false};
  std::thread appender([&] {
    for (std::uint64_t i = 0; i < kRecords; ++i) {
      if (!t.append("a record of some length").ok()) break;
    }
  });
  std::thread consumer([&] {
    for (std::uint64_t got = 0; got < kRecords;) {
      auto m = (*c)->next(with_timeout(10s));
      if (!m.ok() || !(*c)->ack(m->seq).ok()) break;
      ++got;
    }
    done = true;
  });
  std::thread opener([&] {
    ChannelOptions at_tail;
    at_tail.start = StartFrom::kTail;
    while (!done) {
      // Opened, closed and deleted again (holding back no deletion for long).
      if (!t.channel("other", at_tail).ok() || !t.delete_channel("other").ok()) break;
    }
  });
  TopicStats last;
  std::uint64_t reads = 0;
  // EXPECT and break: an ASSERT would leave the threads running.
  while ((!done || reads < 10) && !::testing::Test::HasFailure()) {
    const TopicStats s = t.stats();
    ++reads;
    EXPECT_LE(s.first_seq, s.visible_seq);
    EXPECT_LE(s.visible_seq, s.next_seq);
    EXPECT_EQ(s.appended, s.next_seq);
    EXPECT_GE(s.appended, last.appended);
    EXPECT_GE(s.syncs, last.syncs);
    EXPECT_GE(s.retention.segments_deleted, last.retention.segments_deleted);
    for (const auto& p : s.channels) EXPECT_LE(p.acked, s.next_seq) << p.channel;
    last = s;
  }
  done = true;
  appender.join();
  consumer.join();
  opener.join();
  const TopicStats end = t.stats();
  EXPECT_EQ(end.appended, kRecords);
  EXPECT_EQ(end.next_seq, kRecords);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice
