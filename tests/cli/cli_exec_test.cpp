// get --exec through the real binary: acknowledgement only on success,
// retries and the dead-letter queue, --parallel, SIGKILL and restart,
// SIGTERM with a grace period, commands that cannot run, inherited fds.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/cli_child.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

using testutil::CliChild;
using testutil::Outcome;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> file_lines(const std::string& path) {
  std::vector<std::string> out;
  std::istringstream in(read_file(path));
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// Polls (every 10 ms, for at most 30 s) until the file has `n` lines: the
// commands sluice runs leave no other event to wait on.
::testing::AssertionResult has_lines(const std::string& path, std::size_t n) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (file_lines(path).size() < n) {
    if (std::chrono::steady_clock::now() > until) {
      return ::testing::AssertionFailure() << path << " never had " << n << " lines";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return ::testing::AssertionSuccess();
}

std::string numbered(int from, int to) {
  std::string s;
  for (int i = from; i < to; ++i) s += "m" + std::to_string(i) + "\n";
  return s;
}

class CliExecTest : public ::testing::Test {
 protected:
  void SetUp() override { std::filesystem::create_directories(dir_); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  Outcome run(std::vector<std::string> args, const std::string& input = "") {
    return testutil::run_cli(store_, std::move(args), input);
  }
  std::string stat(const std::string& q) { return run({"stat", q}).out; }
  // A file for commands to write to.
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  std::string store_ = testutil::test_dir("cli-exec").string();
  std::filesystem::path dir_ = testutil::test_dir("cli-exec-files");
};

TEST_F(CliExecTest, AcksOnlyOnSuccessRetriesThenDeadLetters) {
  ASSERT_EQ(run({"create", "q", "--bound", "50"}).rc, 0);
  ASSERT_EQ(run({"put", "q", "--close"}, "a\nbad\nc\n").rc, 0);
  const std::string log = file("log");
  // Each run appends "MESSAGE ATTEMPT"; the message "bad" always fails.
  const std::string cmd =
      "m=$(cat); echo \"$m $SLUICE_ATTEMPT $SLUICE_QUEUE\" >> " + log + "; [ \"$m\" != bad ]";
  Outcome r = run({"get", "q", "--exec", cmd, "--retries", "2"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(file_lines(log),
            (std::vector<std::string>{"a 1 q", "bad 1 q", "bad 2 q", "bad 3 q", "c 1 q"}));
  EXPECT_NE(r.err.find("failed 3 times (last: exit 1); moved to queue 'q.dead'"), std::string::npos)
      << r.err;
  EXPECT_NE(stat("q").find("consumed=3\n"), std::string::npos) << stat("q");
  // The dead-letter queue was created with q's bound and holds the message.
  EXPECT_NE(stat("q.dead").find("bound=50\n"), std::string::npos) << stat("q.dead");
  EXPECT_EQ(run({"get", "q.dead", "--timeout", "0.1"}).out, "bad\n");
}

TEST_F(CliExecTest, AFailedRunIsRetriedAndNotDeadLetteredOnceItSucceeds) {
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  ASSERT_EQ(run({"put", "q", "--close"}, "x\ny\n").rc, 0);
  const std::string log = file("log");
  // Fails on the first run of each message, succeeds on the second.
  const std::string cmd = "m=$(cat); [ \"$SLUICE_ATTEMPT\" -ge 2 ] && echo \"$m\" >> " + log;
  Outcome r = run({"get", "q", "--exec", cmd, "--dead-letter", "failed"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(file_lines(log), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(run({"ls"}).out, "q\n");  // no dead-letter queue was needed
}

TEST_F(CliExecTest, Parallel4ProcessesEveryMessageExactlyOnce) {
  constexpr int kN = 80;
  ASSERT_EQ(run({"create", "q", "--bound", "1000"}).rc, 0);
  ASSERT_EQ(run({"put", "q", "--close"}, numbered(0, kN)).rc, 0);
  const std::string log = file("log");
  // One write(2) per line to an O_APPEND file: lines do not interleave.
  Outcome r = run({"get", "q", "--exec", "printf '%s\\n' \"$(cat)\" >> " + log, "--parallel", "4",
                   "--batch", "8"});
  EXPECT_EQ(r.rc, 0) << r.err;
  std::vector<std::string> got = file_lines(log);
  std::sort(got.begin(), got.end());
  std::vector<std::string> want = file_lines("/dev/null");
  std::istringstream in(numbered(0, kN));
  for (std::string l; std::getline(in, l);) want.push_back(l);
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
  EXPECT_NE(stat("q").find("consumed=80\n"), std::string::npos) << stat("q");
}

// SIGKILL of get --exec loses nothing: the batch it had not acknowledged is
// delivered again to the next get, so every message is processed at least
// once. (The commands do not hold the channel's lock: it is O_CLOEXEC.)
TEST_F(CliExecTest, SigkillMidStreamThenRestartProcessesEveryMessage) {
  constexpr int kN = 60;
  ASSERT_EQ(run({"create", "q", "--bound", "1000"}).rc, 0);
  ASSERT_EQ(run({"put", "q", "--close"}, numbered(0, kN)).rc, 0);
  const std::string log = file("log");
  const std::vector<std::string> args = {
      "get",        "q", "--exec",  "printf '%s\\n' \"$(cat)\" >> " + log,
      "--parallel", "2", "--batch", "4"};
  {
    CliChild first(store_, args);
    ASSERT_TRUE(has_lines(log, kN / 3));
    first.signal(SIGKILL);
    EXPECT_EQ(first.finish().rc, 128 + SIGKILL);
  }
  const std::size_t before = file_lines(log).size();
  ASSERT_LT(before, static_cast<std::size_t>(kN)) << "killed too late to test anything";
  Outcome r = run(args);
  EXPECT_EQ(r.rc, 0) << r.err;
  std::map<std::string, int> seen;
  for (const std::string& l : file_lines(log)) {
    // A command whose stdin was being written when sluice died sees it end
    // early (a prefix of the message, often empty); the message comes again.
    if (!l.starts_with("m") || l.size() == 1) continue;
    ++seen[l];
  }
  for (int i = 0; i < kN; ++i) EXPECT_GE(seen["m" + std::to_string(i)], 1) << i;
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(kN));  // (prefixes of m0..m59 are names too)
  EXPECT_NE(stat("q").find("consumed=60\n"), std::string::npos) << stat("q");
}

TEST_F(CliExecTest, SigtermLetsARunningCommandFinishAndAcksOnlyIt) {
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  ASSERT_EQ(run({"put", "q"}, "m1\nm2\n").rc, 0);
  const std::string started = file("started"), go = file("go"), done = file("done");
  const std::string cmd =
      "echo x >> " + started + "; while [ ! -e " + go + " ]; do sleep 0.01; done; cat >> " + done;
  CliChild get(store_, {"get", "q", "--exec", cmd, "--batch", "1"});
  ASSERT_TRUE(has_lines(started, 1));
  get.signal(SIGTERM);
  std::ofstream(go).put('\n');  // now the running command may finish
  Outcome r = get.finish();
  EXPECT_EQ(r.rc, 130) << r.err;
  EXPECT_EQ(read_file(done), "m1");
  EXPECT_EQ(file_lines(started).size(), 1U);  // m2 was not started
  EXPECT_NE(stat("q").find("consumed=1\n"), std::string::npos) << stat("q");
  EXPECT_EQ(run({"get", "q", "--count", "1"}).out, "m2\n");
}

TEST_F(CliExecTest, SigtermKillsACommandAfterTheGraceAndAcksNothing) {
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  ASSERT_EQ(run({"put", "q"}, "m1\n").rc, 0);
  const std::string started = file("started");
  // The shell's child (sleep) is killed too: it is in the command's group.
  const std::string cmd = "echo x >> " + started + "; sleep 60; true";
  CliChild get(store_, {"get", "q", "--exec", cmd, "--grace", "200ms"});
  ASSERT_TRUE(has_lines(started, 1));
  const auto t0 = std::chrono::steady_clock::now();
  get.signal(SIGTERM);
  Outcome r = get.finish();  // ends at EOF of stdout: the sleep, which shares it, is dead too
  EXPECT_EQ(r.rc, 130) << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  EXPECT_NE(r.err.find("1 messages not acknowledged"), std::string::npos) << r.err;
  EXPECT_NE(stat("q").find("consumed=0\n"), std::string::npos) << stat("q");
  EXPECT_EQ(run({"get", "q", "--count", "1"}).out, "m1\n");
}

TEST_F(CliExecTest, ACommandThatCannotRunStopsWithXargsStatusAndAcksNothing) {
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  ASSERT_EQ(run({"put", "q", "--close"}, "a\nb\n").rc, 0);
  // Run directly (no shell syntax): posix_spawnp says ENOENT.
  Outcome r = run({"get", "q", "--exec", "no-such-program-for-sluice-tests --flag"});
  EXPECT_EQ(r.rc, 127) << r.err;
  EXPECT_NE(r.err.find("no-such-program-for-sluice-tests: No such file or directory (not found)"),
            std::string::npos)
      << r.err;
  // Through the shell (a redirection): the shell's own 127.
  r = run({"get", "q", "--exec", "no-such-program-for-sluice-tests >/dev/null"});
  EXPECT_EQ(r.rc, 127) << r.err;
  EXPECT_NE(r.err.find("could not run the command (exit 127: not found)"), std::string::npos)
      << r.err;
  const std::string plain = file("not-executable");
  std::ofstream(plain) << "true\n";
  r = run({"get", "q", "--exec", plain, "--parallel", "2"});
  EXPECT_EQ(r.rc, 126) << r.err;
  EXPECT_NE(r.err.find("not executable"), std::string::npos) << r.err;
  EXPECT_NE(stat("q").find("consumed=0\n"), std::string::npos) << stat("q");
  EXPECT_EQ(run({"ls"}).out, "q\n");  // nothing was dead-lettered
}

// What a command may hold: its stdin pipe, sluice's stdout and stderr, and
// whatever sluice itself inherited (from this test process). Not the
// store's files and locks, eventfds, pidfds, or other commands' pipes.
TEST_F(CliExecTest, CommandsInheritNoFdsButTheirStdio) {
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  ASSERT_EQ(run({"put", "q", "--close"}, "a\nb\nc\nd\n").rc, 0);
  std::set<std::string> ours;  // this process's fds that sluice inherits (not O_CLOEXEC)
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const int fd = std::stoi(e.path().filename().string());
    if (fcntl(fd, F_GETFD) == 0) ours.insert(std::filesystem::read_symlink(e.path(), ec).string());
  }
  // "; true": the shell must not exec ls in its place; $$ is the shell.
  Outcome r = run({"get", "q", "--exec", "cat >/dev/null; ls -l /proc/$$/fd; true", "--parallel",
                   "2", "--batch", "4"});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::istringstream in(r.out);
  int listed = 0;
  for (std::string l; std::getline(in, l);) {
    const std::size_t arrow = l.find(" -> ");
    if (arrow == std::string::npos) continue;
    const std::size_t sp = l.rfind(' ', arrow - 1);
    const int fd = std::stoi(l.substr(sp + 1, arrow - sp - 1));
    const std::string target = l.substr(arrow + 4);
    ++listed;
    if (fd <= 2) continue;
    EXPECT_TRUE(ours.contains(target)) << "fd " << fd << " -> " << target << " leaked";
    EXPECT_EQ(target.find(store_), std::string::npos) << l;
  }
  EXPECT_GE(listed, 4 * 3) << r.out;  // each of the 4 commands listed at least 0-2
}

TEST_F(CliExecTest, TimeoutEndsWithItsStatusAfterAcknowledging) {
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  ASSERT_EQ(run({"put", "q"}, "a\nb\n").rc, 0);
  Outcome r = run({"get", "q", "--exec", "cat >/dev/null", "--timeout", "0.5"});
  EXPECT_EQ(r.rc, 9) << r.err;
  EXPECT_NE(stat("q").find("consumed=2\n"), std::string::npos) << stat("q");
}

TEST_F(CliExecTest, OptionsOfExecAndHelp) {
  Outcome r = run({"get", "--help"});
  EXPECT_EQ(r.rc, 0);
  for (const char* opt : {"--exec", "--parallel", "--retries", "--dead-letter", "--grace"}) {
    EXPECT_NE(r.out.find(opt), std::string::npos) << opt;
  }
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  EXPECT_EQ(run({"get", "q", "--parallel", "2"}).rc, 2);  // needs --exec
  EXPECT_EQ(run({"get", "q", "--exec", "true", "-0"}).rc, 2);
  EXPECT_EQ(run({"get", "q", "--exec", "true", "--dead-letter", "q"}).rc, 2);
  EXPECT_EQ(run({"get", "q", "--exec", "true", "--dead-letter", "bad/name"}).rc, 2);
  EXPECT_EQ(run({"get", "nope", "--exec", "true"}).rc, 3);
}

}  // namespace
}  // namespace sluice
