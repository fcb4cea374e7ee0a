// A channel's lock (its claim on channels/<name>.pos) against other
// processes and other opens in this one. It was a POSIX record lock, which
// belongs to the process: any close of another descriptor of the .pos file
// in the same process (channel_position() through another Topic, DirStore's
// stat) dropped it, and another process could then open the same channel
// (two consumers, duplicate delivery). Now an open-file-description lock;
// the refusal still names the holder's PID.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "log/file_system.h"
#include "sluice/log/channel.h"
#include "sluice/log/topic.h"
#include "sluice/store.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

TopicOptions small() {
  TopicOptions o;
  o.segment_bytes = 4096;
  o.max_message_bytes = 1024;
  o.durability = Durability::kNone;
  return o;
}

TopicOptions reader() {
  TopicOptions o = small();
  o.read_only = true;
  return o;
}

// A child process forked before the test opens anything (no thread of the
// parent's is copied): it waits until go(), then runs its body and exits
// with what the body returned.
class Child {
 public:
  explicit Child(std::function<int()> body) {
    int p[2];
    if (::pipe(p) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(p[1]);
      char ch = 0;
      const bool go = ::read(p[0], &ch, 1) == 1;
      std::fflush(nullptr);
      ::_exit(go ? body() : 99);
    }
    ::close(p[0]);
    go_ = p[1];
  }
  ~Child() {
    if (go_ >= 0) ::close(go_);
    if (pid_ > 0 && !reaped_) (void)::waitpid(pid_, nullptr, 0);
  }
  bool started() const { return pid_ > 0; }
  // Lets the body run and returns its exit code (-1: it did not exit).
  int run() {
    const char ch = 'g';
    if (::write(go_, &ch, 1) != 1) return -1;
    int st = 0;
    if (::waitpid(pid_, &st, 0) != pid_) return -1;
    reaped_ = true;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }

 private:
  pid_t pid_ = -1;
  int go_ = -1;
  bool reaped_ = false;
};

constexpr int kRefusedNamingParent = 0;
constexpr int kOpened = 10;  // the bug: a second consumer of the channel
constexpr int kRefusedOtherwise = 11;
constexpr int kOtherError = 12;

// In the child: opens the topic read-only and tries channel `name`.
int try_channel(const std::string& dir, const std::string& name, pid_t parent) {
  auto t = Topic::open(dir, reader());
  if (!t.ok()) {
    std::fprintf(stderr, "child: open: %s\n", t.status().to_string().c_str());
    return kOtherError;
  }
  auto c = (*t)->channel(name);
  if (c.ok()) {
    std::fprintf(stderr, "child: opened channel '%s' while the parent has it open\n", name.c_str());
    return kOpened;
  }
  std::fprintf(stderr, "child: refused: %s\n", c.status().to_string().c_str());
  if (c.code() != StatusCode::kInUse) return kOtherError;
  const std::string want = "by PID " + std::to_string(parent);
  return c.status().message().find(want) != std::string::npos ? kRefusedNamingParent
                                                              : kRefusedOtherwise;
}

class ChannelLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testutil::test_dir("chanlock");
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir() const { return (dir_ / "t").string(); }

  fs::path dir_;
};

// The baseline: a channel open here is refused to another process, which
// is told who holds it.
TEST_F(ChannelLockTest, AnOpenChannelIsRefusedToAnotherProcessNamingTheHolder) {
  const pid_t parent = getpid();
  Child child([&] { return try_channel(dir(), "c", parent); });
  ASSERT_TRUE(child.started());
  auto w = Topic::open(dir(), small());
  ASSERT_TRUE(w.ok()) << w.status();
  auto c = (*w)->channel("c");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(child.run(), kRefusedNamingParent);
}

// channel_position() through another Topic of this process opens the .pos
// file and closes that descriptor: the channel must stay locked.
TEST_F(ChannelLockTest, ReadingThePositionHereKeepsTheChannelLocked) {
  const pid_t parent = getpid();
  Child child([&] { return try_channel(dir(), "c", parent); });
  ASSERT_TRUE(child.started());
  auto w = Topic::open(dir(), small());
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->append("m0").ok());
  auto c = (*w)->channel("c");
  ASSERT_TRUE(c.ok()) << c.status();
  auto r = Topic::open(dir(), reader());
  ASSERT_TRUE(r.ok()) << r.status();
  auto pos = (*r)->channel_position("c");  // opens and closes channels/c.pos
  ASSERT_TRUE(pos.ok()) << pos.status();
  EXPECT_EQ(*pos, 0u);
  const int got = child.run();
  EXPECT_NE(got, kOpened) << "another process opened channel 'c' while it was open here";
  EXPECT_EQ(got, kRefusedNamingParent);
  // Ours still works.
  auto m = (*c)->next(with_timeout(std::chrono::milliseconds(0)));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->payload, "m0");
}

// The same through a channel opened and closed again elsewhere in this
// process (delete_channel's probe, a second Topic's refused open): each
// closes a descriptor of the .pos file.
TEST_F(ChannelLockTest, ARefusedOpenHereKeepsTheChannelLocked) {
  const pid_t parent = getpid();
  Child child([&] { return try_channel(dir(), "c", parent); });
  ASSERT_TRUE(child.started());
  auto w = Topic::open(dir(), small());
  ASSERT_TRUE(w.ok()) << w.status();
  auto c = (*w)->channel("c");
  ASSERT_TRUE(c.ok()) << c.status();
  auto r = Topic::open(dir(), reader());
  ASSERT_TRUE(r.ok()) << r.status();
  // Another Topic of this process is a second consumer too: refused.
  auto again = (*r)->channel("c");
  EXPECT_EQ(again.code(), StatusCode::kInUse) << again.status();
  EXPECT_EQ((*r)->delete_channel("c").code(), StatusCode::kInUse);
  EXPECT_EQ(child.run(), kRefusedNamingParent);
}

// Once the holder closes the channel, another process may open it.
TEST_F(ChannelLockTest, AClosedChannelIsFreeForAnotherProcess) {
  Child child([&] {
    auto t = Topic::open(dir(), reader());
    if (!t.ok()) return kOtherError;
    auto c = (*t)->channel("c");
    if (!c.ok()) std::fprintf(stderr, "child: %s\n", c.status().to_string().c_str());
    return c.ok() ? 0 : kOtherError;
  });
  ASSERT_TRUE(child.started());
  auto w = Topic::open(dir(), small());
  ASSERT_TRUE(w.ok()) << w.status();
  {
    auto c = (*w)->channel("c");
    ASSERT_TRUE(c.ok()) << c.status();
  }
  EXPECT_EQ(child.run(), 0);
}

// The FileSystem level: lock() and lock_holder() between two processes on
// the real disk, the holder named by PID.
TEST_F(ChannelLockTest, LockHolderNamesTheHolderAcrossProcesses) {
  const std::string path = (dir_ / "f").string();
  const pid_t parent = getpid();
  Child child([&] {
    auto f = log::posix_file_system().open(path, log::OpenMode::kReadWrite);
    if (!f.ok()) return kOtherError;
    auto who = (*f)->lock_holder();
    if (!who.ok() || *who != parent) {
      std::fprintf(stderr, "child: lock_holder %d\n", who.ok() ? *who : -2);
      return kRefusedOtherwise;
    }
    Status s = (*f)->lock("f is held");
    std::fprintf(stderr, "child: lock: %s\n", s.to_string().c_str());
    if (s.code() != StatusCode::kInUse) return kOpened;
    return s.message() == "f is held by PID " + std::to_string(parent) ? 0 : kRefusedOtherwise;
  });
  ASSERT_TRUE(child.started());
  auto& pfs = log::posix_file_system();
  auto held = pfs.open(path, log::OpenMode::kCreate);
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_TRUE((*held)->lock("f is held").ok());
  EXPECT_EQ(*(*held)->lock_holder(), 0) << "our own lock is not another's";
  {
    // Another open of the file here, closed again: the lock stays.
    auto probe = pfs.open(path, log::OpenMode::kRead);
    ASSERT_TRUE(probe.ok()) << probe.status();
  }
  EXPECT_EQ(child.run(), 0);
}

// DirStore::stat reads each channel's .pos file (and closes it) while this
// process's reader has the channel open: the log's lock on it must hold for
// a direct user of the log in another process.
TEST_F(ChannelLockTest, AStoreStatHereKeepsTheReadersChannelLocked) {
  const std::string store_dir = (dir_ / "store").string();
  const std::string topic_dir = store_dir + "/queues/q/topic";
  const pid_t parent = getpid();
  Child child([&] {
    TopicOptions ro;
    ro.read_only = true;
    auto t = Topic::open(topic_dir, ro);
    if (!t.ok()) {
      std::fprintf(stderr, "child: open: %s\n", t.status().to_string().c_str());
      return kOtherError;
    }
    auto c = (*t)->channel("c");
    if (c.ok()) return kOpened;
    std::fprintf(stderr, "child: refused: %s\n", c.status().to_string().c_str());
    if (c.code() != StatusCode::kInUse) return kOtherError;
    return c.status().message().find("by PID " + std::to_string(parent)) != std::string::npos
               ? kRefusedNamingParent
               : kRefusedOtherwise;
  });
  ASSERT_TRUE(child.started());
  auto store = QueueStore::open(store_dir, StoreOptions{});
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->create("q", QueueSpec{}).ok());
  auto r = (*store)->reader("q", "c", {});
  ASSERT_TRUE(r.ok()) << r.status();
  auto info = (*store)->stat("q");  // reads and closes channels/c.pos
  ASSERT_TRUE(info.ok()) << info.status();
  const int got = child.run();
  EXPECT_NE(got, kOpened) << "another process opened channel 'c' of the store's reader";
  EXPECT_EQ(got, kRefusedNamingParent);
}

// A forked child shares its parent's lock (one open file description) and
// keeps it after the parent exits: the PID the lock carries is then gone,
// and the refusal says "another process" rather than a PID that is not the
// holder's.
TEST_F(ChannelLockTest, ALockKeptByAForkedChildOfAGoneHolderNamesNoPid) {
  const std::string path = (dir_ / "f").string();
  int hold[2];  // the grandchild holds until this pipe's write end closes
  int ready[2];
  ASSERT_EQ(::pipe(hold), 0);
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t holder = ::fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    ::close(hold[1]);
    ::close(ready[0]);
    auto f = log::posix_file_system().open(path, log::OpenMode::kCreate);
    if (!f.ok() || !(*f)->lock("f is held").ok()) ::_exit(1);
    const pid_t keeper = ::fork();
    if (keeper == 0) {  // shares the open file, so the lock: waits for EOF
      const char ch = 'r';
      (void)!::write(ready[1], &ch, 1);
      char buf = 0;
      (void)!::read(hold[0], &buf, 1);
      ::_exit(0);
    }
    ::_exit(keeper > 0 ? 0 : 1);  // the holder goes; its File is never closed
  }
  ::close(hold[0]);
  ::close(ready[1]);
  int st = 0;
  ASSERT_EQ(::waitpid(holder, &st, 0), holder);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  char ch = 0;
  ASSERT_EQ(::read(ready[0], &ch, 1), 1);  // the keeper runs
  ::close(ready[0]);

  auto f = log::posix_file_system().open(path, log::OpenMode::kReadWrite);
  ASSERT_TRUE(f.ok()) << f.status();
  auto who = (*f)->lock_holder();
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(*who, -1) << "the holder's PID " << holder << " is gone";
  Status s = (*f)->lock("f is held");
  EXPECT_EQ(s.code(), StatusCode::kInUse) << s;
  EXPECT_EQ(s.message(), "f is held by another process");
  ::close(hold[1]);  // the keeper exits, and the lock goes with it
  for (int i = 0; i < 500 && !(*f)->lock("f is held").ok(); ++i) ::usleep(2000);
  EXPECT_EQ(*(*f)->lock_holder(), 0);
  EXPECT_TRUE((*f)->lock("f is held").ok());
}

}  // namespace
}  // namespace sluice
