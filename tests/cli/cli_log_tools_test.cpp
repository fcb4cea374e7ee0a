// `sluice log verify|inspect` and `sluice repair` at their edges, the real
// binary run as a child process: how a directory is named (a trailing
// slash), and what a refused repair tells the user to do.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/cli_child.h"
#include "sluice/log/topic.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

constexpr int kInUse = 6;  // tools/sluice/exit_codes.h

using testutil::Outcome;

class CliLogToolsTest : public ::testing::Test {
 protected:
  void TearDown() override { fs::remove_all(store_); }

  Outcome run(std::vector<std::string> args, const std::string& input = "") {
    return testutil::run_cli(store_, std::move(args), input);
  }
  std::string queue_dir(const std::string& q) const { return store_ + "/queues/" + q; }
  static void overwrite(const fs::path& file, std::uint64_t at, const std::string& with) {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    f.write(with.data(), static_cast<std::streamsize>(with.size()));
  }
  static fs::path newest_segment(const fs::path& topic) {
    fs::path out;
    for (const auto& e : fs::directory_iterator(topic)) {
      if (e.path().extension() == ".seg" && e.path() > out) out = e.path();
    }
    return out;
  }

  std::string store_ = testutil::test_dir("cli-log-tools").string();
};

// A directory named with a trailing slash (as a shell completes it) is the
// same directory: the queue keeps its name in what is printed, and a bare
// topic's quarantine is `<dir>.quarantine` beside it, not a hidden
// `.quarantine` inside the topic (whose files are the topic's alone).
TEST_F(CliLogToolsTest, ADirectoryWithATrailingSlashIsTheSameDirectory) {
  ASSERT_EQ(run({"create", "jobs"}).rc, 0);
  ASSERT_EQ(run({"put", "jobs"}, "a\nb\n").rc, 0);
  Outcome r = run({"log", "verify", queue_dir("jobs") + "/"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("queue 'jobs': ok"), std::string::npos) << r.out;
  r = run({"log", "inspect", queue_dir("jobs") + "/"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.rfind("queue 'jobs'\n", 0), 0U) << r.out;

  const fs::path bare = store_ + "/bare";
  fs::copy(queue_dir("jobs") + "/topic", bare, fs::copy_options::recursive);
  overwrite(newest_segment(bare), 0, "XXXXXXXX");  // the writer cannot open it
  r = run({"repair", bare.string() + "/"});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_FALSE(fs::exists(bare / ".quarantine"));
  EXPECT_TRUE(fs::is_directory(bare.string() + ".quarantine"));
  EXPECT_NE(r.out.find("quarantine " + bare.string() + ".quarantine/"), std::string::npos) << r.out;
  r = run({"log", "verify", bare.string()});
  EXPECT_EQ(r.rc, 0) << r.out;
}

// A repair refused because a writer holds the queue says so with exit 6,
// and tells the user what to do: stop the writer. It does not suggest
// dropping a --no-wait that repair does not have (it never waits).
TEST_F(CliLogToolsTest, ARepairRefusedForALiveWriterSaysWhatToDo) {
  ASSERT_EQ(run({"create", "jobs"}).rc, 0);
  ASSERT_EQ(run({"put", "jobs"}, "a\n").rc, 0);
  int ready[2], done[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(done), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(done[1]);
    auto t = Topic::open(queue_dir("jobs") + "/topic");
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
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"repair", "jobs"}, {"repair", "jobs", "--dry-run"}}) {
    Outcome r = run(args);
    EXPECT_EQ(r.rc, kInUse) << r.err;
    EXPECT_NE(r.err.find("PID " + std::to_string(child)), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("stop it, then repair"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("--no-wait"), std::string::npos) << r.err;
  }
  close(done[1]);
  close(ready[0]);
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  EXPECT_EQ(run({"repair", "jobs"}).rc, 0);
}

// `log verify` over a whole store looks at every queue: one it cannot read
// (here its topic is a file) is said on stderr, the queues after it are
// still checked (their damage reported), and the exit code is the unread
// queue's, not 0 or 11. It stopped at the first such queue.
TEST_F(CliLogToolsTest, VerifyOfAStoreGoesOnPastAQueueItCannotRead) {
  for (const char* q : {"a", "b", "c"}) {
    ASSERT_EQ(run({"create", q}).rc, 0);
    ASSERT_EQ(run({"put", q}, "one\ntwo\nthree\n").rc, 0);
  }
  const fs::path topic_b = queue_dir("b") + "/topic";
  fs::remove_all(topic_b);
  std::ofstream(topic_b) << "not a directory";
  // Damage in c, after b: the first record's payload changed (its CRC no
  // longer matches; the segment's 32-byte header, the record's 24).
  overwrite(newest_segment(queue_dir("c") + "/topic"), 32 + 24, "X");
  for (const char* cmd : {"verify", "inspect"}) {
    SCOPED_TRACE(cmd);
    const Outcome r = run({"log", cmd});
    EXPECT_NE(r.rc, 0) << r.out;
    EXPECT_NE(r.rc, 11) << r.out;  // b was not checked: damage alone would say 11
    EXPECT_NE(r.err.find("queues/b/topic"), std::string::npos) << r.err;
    EXPECT_NE(r.out.find("queue 'a'"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("queue 'c'"), std::string::npos) << r.out;
    if (std::string(cmd) == "verify") {
      EXPECT_NE(r.out.find("queue 'c': damaged"), std::string::npos) << r.out;
    }
  }
}

}  // namespace
}  // namespace sluice
