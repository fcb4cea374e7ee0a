// The writer side of a topic at its edges: the bound with channels being
// opened beside appenders (here and in other processes), retention charging
// a channel still opening, a roll whose directory sync fails, channels
// deleted under the writer's open. Each test failed on the code before its
// fix.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "log/fault_file_system.h"
#include "log/topic_impl.h"
#include "sluice/log/channel.h"
#include "sluice/log/topic.h"
#include "testutil/forwarding_file_system.h"
#include "testutil/temp_dir.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;

TopicOptions small() {
  TopicOptions o;
  o.segment_bytes = 4096;
  o.max_message_bytes = 1024;
  o.durability = Durability::kNone;
  return o;
}
std::string msg(std::uint64_t i) { return "message " + std::to_string(i); }

std::vector<LogMessage> drain(Channel& c) {
  std::vector<LogMessage> out;
  for (;;) {
    auto m = c.next(with_timeout(0ms));
    if (!m.ok()) break;
    out.push_back(std::move(*m));
  }
  return out;
}

// Holds the first sync of a file whose path ends with `suffix` until
// release(); every other sync passes.
struct SyncHold {
  explicit SyncHold(testutil::FaultFileSystem& disk, std::string suffix) : disk_(disk) {
    disk_.set_sync_hook([this, suffix](const std::string& path) {
      if (!path.ends_with(suffix)) return;
      std::unique_lock lk(m_);
      if (held_) return;
      held_ = true;
      cv_.notify_all();
      cv_.wait(lk, [&] { return released_; });
    });
  }
  ~SyncHold() {
    release();
    disk_.set_sync_hook(nullptr);
  }
  void wait_held() {
    std::unique_lock lk(m_);
    cv_.wait(lk, [&] { return held_; });
  }
  void release() {
    {
      std::lock_guard lk(m_);
      released_ = true;
    }
    cv_.notify_all();
  }
  testutil::FaultFileSystem& disk_;
  std::mutex m_;
  std::condition_variable cv_;
  bool held_ = false;
  bool released_ = false;
};

// A file of the real disk whose sync() first runs a hook (to hold it).
class HookedFile final : public testutil::ForwardingFile {
 public:
  HookedFile(std::unique_ptr<log::File> in, std::function<void(const std::string&)> hook)
      : ForwardingFile(std::move(in)), hook_(std::move(hook)) {}
  Status sync() override {
    if (hook_) hook_(path());
    return ForwardingFile::sync();
  }

 private:
  std::function<void(const std::string&)> hook_;
};

// The real disk, with one directory sync made to fail on demand (EIO, as a
// disk may report once and then recover).
class FlakyDirSync final : public testutil::ForwardingFileSystem {
 public:
  std::atomic<int> fail_dir_syncs{0};
  // Runs after a listing is taken (a test deletes a file there meanwhile).
  std::function<void(const std::string&)> after_list;
  // Runs at the start of every sync of a position file (.pos).
  std::function<void(const std::string&)> pos_sync_hook;
  Status sync_dir(const std::string& d) override {
    if (fail_dir_syncs > 0) {
      --fail_dir_syncs;
      return log::io_error("fsync", d, EIO);
    }
    return ForwardingFileSystem::sync_dir(d);
  }
  Result<std::vector<std::string>> list(const std::string& d) override {
    auto names = ForwardingFileSystem::list(d);
    if (after_list) after_list(d);
    return names;
  }

 protected:
  std::unique_ptr<log::File> wrap(std::unique_ptr<log::File> f) override {
    if (!f->path().ends_with(".pos")) return f;
    return std::make_unique<HookedFile>(std::move(f), [this](const std::string& path) {
      if (pos_sync_hook) pos_sync_hook(path);
    });
  }
};

// A new channel that starts behind the slowest one (at the oldest record,
// or at a seq it is given) has that many unconsumed records: the bound must
// count them at once, as it does for a channel moved back by seek(). The
// writer's cached slowest position does not follow it, so appends pass the
// bound by up to `bound` records.
TEST(WriterEdgesTest, ANewChannelBehindTheSlowestCountsTowardTheBound) {
  testutil::FaultFileSystem disk;
  TopicOptions o = small();
  o.max_unconsumed = 10;
  o.on_bound = BoundPolicy::kFail;
  auto opened = log::open_topic(disk, "/fault/topic", o);
  ASSERT_TRUE(opened.ok()) << opened.status();
  Topic& t = **opened;
  auto a = std::move(*t.channel("a"));
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(t.append(msg(i)).ok());
  ASSERT_EQ(drain(*a).size(), 10U);
  ASSERT_TRUE(a->ack(9).ok());
  ASSERT_TRUE(t.append(msg(10)).ok());  // the writer looks: slowest at 10
  ChannelOptions from0;
  from0.start_seq = 0;
  auto b = t.channel("b", from0);  // 11 unconsumed: past the bound already
  ASSERT_TRUE(b.ok()) << b.status();
  int admitted = 0;
  while (admitted < 20 && t.append(msg(11 + admitted)).ok()) ++admitted;
  EXPECT_EQ(admitted, 0) << "appends admitted past the bound; channel b now has " << t.next_seq()
                         << " unconsumed records (bound 10)";
}

// The same with the new channel made by another process (a read-only topic,
// e.g. `sluice get` of a new reader): the writer's cached slowest position
// never learns of it, so a fix in Topic::channel alone does not cover this.
TEST(WriterEdgesTest, ANewChannelMadeElsewhereBehindTheSlowestCountsTowardTheBound) {
  const auto dir = testutil::test_dir("writer-edges");
  TopicOptions o = small();
  o.max_unconsumed = 10;
  o.on_bound = BoundPolicy::kFail;
  auto opened = Topic::open(dir.string(), o);
  ASSERT_TRUE(opened.ok()) << opened.status();
  Topic& t = **opened;
  auto a = std::move(*t.channel("a"));
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(t.append(msg(i)).ok());
  ASSERT_EQ(drain(*a).size(), 10U);
  ASSERT_TRUE(a->ack(9).ok());
  ASSERT_TRUE(t.append(msg(10)).ok());  // the writer looks: slowest at 10
  TopicOptions ro = small();
  ro.read_only = true;
  auto reader = Topic::open(dir.string(), ro);
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto b = (*reader)->channel("b");  // from the oldest record: 11 unconsumed
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ((*b)->acked(), 0U);
  int admitted = 0;
  while (admitted < 20 && t.append(msg(11 + admitted)).ok()) ++admitted;
  EXPECT_EQ(admitted, 0) << "appends admitted past the bound; channel b now has " << t.next_seq()
                         << " unconsumed records (bound 10)";
  b->reset();
  reader->reset();
  a.reset();
  opened->reset();
  std::filesystem::remove_all(dir);
}

// delete_channel refuses a channel open in this process (kInUse), but not
// one open in another process (a read-only topic, e.g. a running `sluice
// get`): the file goes, retention and the bound stop counting that channel
// while it still reads and acknowledges (into the unlinked file).
TEST(WriterEdgesTest, DeleteChannelRefusesAChannelOpenInAnotherProcess) {
  const auto dir = testutil::test_dir("writer-edges");
  auto opened = Topic::open(dir.string(), small());
  ASSERT_TRUE(opened.ok()) << opened.status();
  Topic& t = **opened;
  { auto b = std::move(*t.channel("b")); }  // made here, read elsewhere
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(t.append(msg(i)).ok());
  int ready[2], done[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(done), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    TopicOptions ro = small();
    ro.read_only = true;
    auto r = Topic::open(dir.string(), ro);
    if (!r.ok()) _exit(2);
    auto c = (*r)->channel("b");
    if (!c.ok()) _exit(3);
    char x = 1;
    if (write(ready[1], &x, 1) != 1) _exit(4);
    if (read(done[0], &x, 1) != 1) _exit(5);
    _exit(0);
  }
  char x = 0;
  ASSERT_EQ(read(ready[0], &x, 1), 1);  // b is open in the child
  const Status s = t.delete_channel("b");
  EXPECT_EQ(s.code(), StatusCode::kInUse) << "deleted while open in PID " << child << ": " << s;
  ASSERT_EQ(write(done[1], &x, 1), 1);
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  for (int fd : {ready[0], ready[1], done[0], done[1]}) close(fd);
  opened->reset();
  std::filesystem::remove_all(dir);
}

// A roll whose directory sync fails once (an I/O error the disk recovers
// from) fails that append, as it should; but the new segment file it made
// stays on disk while the writer goes on with the old one, so every later
// roll finds its name taken: each append from then on fails with
// kAlreadyExists until the topic is reopened. durability.md: "Appends work
// again once there is room" after an I/O error.
TEST(WriterEdgesTest, AppendsWorkAgainAfterARollWhoseDirectorySyncFailedOnce) {
  const auto dir = testutil::test_dir("writer-edges");
  std::filesystem::create_directories(dir);
  FlakyDirSync disk;
  auto opened = log::open_topic(disk, dir.string(), small());
  ASSERT_TRUE(opened.ok()) << opened.status();
  Topic& t = **opened;
  const std::string big(1000, 'x');
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(t.append(big).ok());  // 3 of 4 per segment
  disk.fail_dir_syncs = 1;
  auto failed = t.append(big);  // no room: a roll, whose directory sync fails
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kIOError) << failed.status();
  int ok = 0;
  Status last;
  for (int i = 0; i < 5; ++i) {
    auto r = t.append(big);
    if (r.ok()) ++ok;
    last = r.status();
  }
  EXPECT_EQ(ok, 5) << "appends after the disk recovered: " << last;
  opened->reset();
  std::filesystem::remove_all(dir);
}

// The same failed roll, then appends small enough to fit the old segment
// (they work: no roll), then a roll elsewhere: the file the failed roll
// made stays, named after a seq inside the old segment. Every record
// appended must still be there after a reopen, once each.
TEST(WriterEdgesTest, AFailedRollLeavesNoSegmentInsideTheLog) {
  const auto dir = testutil::test_dir("writer-edges");
  std::filesystem::create_directories(dir);
  std::uint64_t next = 0;
  {
    FlakyDirSync disk;
    auto opened = log::open_topic(disk, dir.string(), small());
    ASSERT_TRUE(opened.ok()) << opened.status();
    Topic& t = **opened;
    const std::string big(1000, 'x');
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(t.append(big).ok());
    disk.fail_dir_syncs = 1;
    ASSERT_FALSE(t.append(big).ok());  // the roll to seq 3 failed
    for (int i = 0; i < 60; ++i) {     // small ones still fit, then a roll
      auto r = t.append(msg(i));
      ASSERT_TRUE(r.ok()) << r.status();
    }
    next = t.next_seq();
    ASSERT_TRUE(t.sync().ok());
  }
  auto again = Topic::open(dir.string(), small());
  ASSERT_TRUE(again.ok()) << again.status();
  for (const auto& d : (*again)->recovery().corrupt)
    ADD_FAILURE() << "corrupt: " << d.file << " @" << d.offset << " " << d.what;
  for (const auto& d : (*again)->recovery().truncated)
    ADD_FAILURE() << "truncated: " << d.file << " @" << d.offset << " " << d.what;
  EXPECT_EQ((*again)->next_seq(), next);
  auto c = (*again)->channel("c");
  ASSERT_TRUE(c.ok()) << c.status();
  auto got = drain(**c);
  std::vector<std::uint64_t> seqs;
  for (const auto& m : got) seqs.push_back(m.seq);
  std::vector<std::uint64_t> want;
  for (std::uint64_t i = 0; i < next; ++i) want.push_back(i);
  EXPECT_EQ(seqs, want);
  c->reset();
  again->reset();
  std::filesystem::remove_all(dir);
}

// The writer's open reads every channel's position (the highest one says
// where seqs continue). A channel deleted meanwhile (another process's
// delete_channel between the listing and the read) makes the open fail
// with kNotFound; retention and the bound skip such a file ("deleted
// meanwhile"), the open does not.
TEST(WriterEdgesTest, TheWritersOpenSurvivesAChannelDeletedWhileItLooks) {
  const auto dir = testutil::test_dir("writer-edges");
  {
    auto t = Topic::open(dir.string(), small());
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_TRUE((*t)->channel("keep").ok());
    ASSERT_TRUE((*t)->channel("gone").ok());
    ASSERT_TRUE((*t)->append(msg(0)).ok());
  }
  FlakyDirSync disk;
  bool deleted = false;
  disk.after_list = [&](const std::string& d) {
    if (deleted || !d.ends_with("/channels")) return;
    deleted = true;
    std::filesystem::remove(dir / "channels" / "gone.pos");  // delete_channel elsewhere
  };
  auto t = log::open_topic(disk, dir.string(), small());
  EXPECT_TRUE(deleted);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->next_seq(), 1U);
  t->reset();
  std::filesystem::remove_all(dir);
}

TEST(WriterEdgesTest, AnAppenderThatLookedWhileAChannelOpenedIsWokenWhenItIsOpen) {
  testutil::FaultFileSystem disk;
  TopicOptions o = small();
  o.max_unconsumed = 10;
  auto opened = log::open_topic(disk, "/fault/topic", o);
  ASSERT_TRUE(opened.ok()) << opened.status();
  Topic& t = **opened;
  auto a = std::move(*t.channel("a"));
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(t.append(msg(i)).ok());
  ASSERT_EQ(drain(*a).size(), 10U);
  ASSERT_TRUE(a->ack(9).ok());  // a is caught up: 0 unconsumed
  SyncHold hold(disk, "/channels/b.pos");
  Result<std::unique_ptr<Channel>> b = Status(StatusCode::kInternal, "not run");
  std::thread opener([&] {
    ChannelOptions tail;
    tail.start = StartFrom::kTail;
    b = t.channel("b", tail);
  });
  hold.wait_held();  // b is registered, its start (10) not yet
  std::atomic<bool> done{false};
  Status appended;
  std::stop_source stop;
  std::thread appender([&] {
    appended = t.append(msg(10), Context(stop.get_token())).status();
    done = true;
  });
  // Either it went in at once, or it sleeps at the bound.
  ASSERT_TRUE(testutil::eventually([&] { return done.load() || t.stats().bound_waits == 1; }));
  hold.release();
  opener.join();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(testutil::eventually([&] { return done.load(); }, 5s))
      << "the appender was never woken: channels a and b are both at seq 10, bound 10";
  stop.request_stop();
  appender.join();
  EXPECT_TRUE(appended.ok()) << appended;
}

// A channel opened at the tail needs nothing a cap deletes meanwhile, yet
// while it opens its registry entry says seq 0, and retention charges it
// (skipped_retention) with every record of the segments a cap deletes then.
TEST(WriterEdgesTest, AChannelOpeningAtTheTailIsNotChargedForWhatACapDeletesMeanwhile) {
  testutil::FaultFileSystem disk;
  TopicOptions o = small();
  o.max_retained_bytes = 3 * 4096;
  auto opened = log::open_topic(disk, "/fault/topic", o);
  ASSERT_TRUE(opened.ok()) << opened.status();
  Topic& t = **opened;
  std::uint64_t n = 0;
  for (; n < 200; ++n) ASSERT_TRUE(t.append(msg(n)).ok());
  SyncHold hold(disk, "/channels/b.pos");
  Result<std::unique_ptr<Channel>> b = Status(StatusCode::kInternal, "not run");
  std::thread opener([&] {
    ChannelOptions tail;
    tail.start = StartFrom::kTail;
    b = t.channel("b", tail);
  });
  hold.wait_held();  // b starts at 200; the registry still says 0
  const std::uint64_t start = t.next_seq();
  const std::uint64_t first_before = t.first_seq();
  // Until the cap deletes the oldest segment (all of it before b's start).
  while (t.first_seq() == first_before && n < 2000) ASSERT_TRUE(t.append(msg(n++)).ok());
  ASSERT_GT(t.first_seq(), first_before) << "no cap deletion while b opened";
  ASSERT_LE(t.first_seq(), start) << "the cap took records b needs: the test wants less";
  hold.release();
  opener.join();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->acked(), start);
  EXPECT_EQ((*b)->skipped_retention(), 0U) << "b started at seq " << start << " and lost nothing";
  auto got = drain(**b);
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.front().seq, start);
}

}  // namespace
}  // namespace sluice
