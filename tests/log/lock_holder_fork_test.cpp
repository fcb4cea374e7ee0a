// lock() and lock_holder() when a forked child holds the lock its parent
// took and the parent has since let go of it (closed its File, its channel,
// its topic). The lock is an open-file-description lock: the child shares
// it and keeps it. The PID the lock carries is the parent's, which is alive
// and asks: it must not be told the lock is its own ("in use by PID <its
// own PID>", and live_writer() naming this process as the writer).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "log/file_system.h"
#include "sluice/log/channel.h"
#include "sluice/log/topic.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

// A child forked now (sharing every open file of this process, so its
// locks), which exits when release() closes the pipe it waits on.
class Keeper {
 public:
  Keeper() {
    int p[2];
    if (::pipe(p) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(p[1]);
      char ch = 0;
      (void)!::read(p[0], &ch, 1);  // EOF: the parent released us
      ::_exit(0);
    }
    ::close(p[0]);
    hold_ = p[1];
  }
  ~Keeper() { release(); }
  bool started() const { return pid_ > 0; }
  // Lets the child exit and reaps it: its descriptors, so its share of
  // every lock, are gone when waitpid returns.
  void release() {
    if (hold_ >= 0) ::close(hold_);
    hold_ = -1;
    if (pid_ > 0) (void)::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int hold_ = -1;
};

class LockHolderForkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testutil::test_dir("lockfork");
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
};

TEST_F(LockHolderForkTest, ALockLeftWithAForkedChildIsNotNamedAsThisProcesss) {
  const std::string path = (dir_ / "f").string();
  auto held = log::posix_file_system().open(path, log::OpenMode::kCreate);
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_TRUE((*held)->lock("f is held").ok());
  Keeper keeper;
  ASSERT_TRUE(keeper.started());
  held->reset();  // this process lets go; the child still has it

  auto f = log::posix_file_system().open(path, log::OpenMode::kReadWrite);
  ASSERT_TRUE(f.ok()) << f.status();
  auto who = (*f)->lock_holder();
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_NE(*who, static_cast<int>(::getpid())) << "this process holds no lock on f";
  EXPECT_EQ(*who, -1);
  Status s = (*f)->lock("f is held");
  EXPECT_EQ(s.code(), StatusCode::kInUse) << s;
  EXPECT_EQ(s.message(), "f is held by another process");

  keeper.release();
  EXPECT_EQ(*(*f)->lock_holder(), 0);
  EXPECT_TRUE((*f)->lock("f is held").ok());
}

// Another File of this process holding the lock is still named as this
// process (repair beside a channel open here says whose it is).
TEST_F(LockHolderForkTest, ALockHeldHereIsStillNamedAsThisProcesss) {
  const std::string path = (dir_ / "f").string();
  auto held = log::posix_file_system().open(path, log::OpenMode::kCreate);
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_TRUE((*held)->lock("f is held").ok());
  Keeper keeper;  // shares it too, but this process has not let go
  ASSERT_TRUE(keeper.started());
  auto f = log::posix_file_system().open(path, log::OpenMode::kReadWrite);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(*(*f)->lock_holder(), static_cast<int>(::getpid()));
  Status s = (*f)->lock("f is held");
  EXPECT_EQ(s.message(), "f is held by PID " + std::to_string(::getpid()));
}

// Through the log: a channel closed here while a forked child (a
// multiprocessing worker, say) lives is refused on reopen, and the refusal
// does not name this process, which holds nothing.
TEST_F(LockHolderForkTest, AChannelReopenedBesideAForkedChildDoesNotNameThisProcess) {
  const std::string dir = (dir_ / "t").string();
  TopicOptions o;
  o.segment_bytes = 4096;
  o.max_message_bytes = 1024;
  o.durability = Durability::kNone;
  auto t = Topic::open(dir, o);
  ASSERT_TRUE(t.ok()) << t.status();
  auto c = (*t)->channel("c");
  ASSERT_TRUE(c.ok()) << c.status();
  Keeper keeper;
  ASSERT_TRUE(keeper.started());
  c->reset();
  auto again = (*t)->channel("c");
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.code(), StatusCode::kInUse) << again.status();
  EXPECT_EQ(again.status().message().find("PID " + std::to_string(::getpid())), std::string::npos)
      << again.status();
  keeper.release();
  auto third = (*t)->channel("c");
  EXPECT_TRUE(third.ok()) << third.status();
}

}  // namespace
}  // namespace sluice
