// SIGKILL a child that appends (each durability mode; 100 B, 1 KiB and mixed
// sizes; small segments) while two channels consume, at random moments
// including during open and recovery; then reopen and check everything the
// child was told is there. Kills per mode: SLUICE_CRASH_KILLS (default 50).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "log/crash_payload.h"
#include "sluice/log/channel.h"
#include "sluice/log/topic.h"

extern char** environ;  // NOLINT

namespace sluice {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

int kills() {
  const char* v = std::getenv("SLUICE_CRASH_KILLS");  // NOLINT(concurrency-mt-unsafe)
  return v != nullptr ? std::max(1, std::atoi(v)) : 50;
}

// What the child reported before it died.
struct Reported {
  std::int64_t max_appended = -1;
  std::map<std::string, std::int64_t> acked;  // channel -> last acked seq
};

// Runs the child for about `run_us`, kills it, and collects its reports.
Reported run_and_kill(const std::string& dir, const char* mode, const char* sizes,
                      std::chrono::microseconds run_for) {
  int fds[2];
  EXPECT_EQ(pipe2(fds, O_CLOEXEC), 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  std::vector<std::string> args = {SLUICE_CRASH_CHILD, dir, mode, sizes};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  EXPECT_EQ(posix_spawn(&pid, SLUICE_CRASH_CHILD, &fa, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  ::close(fds[1]);
  std::string out;
  const auto until = std::chrono::steady_clock::now() + run_for;
  char buf[65536];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  kill(pid, SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  for (;;) {  // what it wrote before dying
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  EXPECT_TRUE(WIFSIGNALED(st)) << "the child exited by itself (status " << st
                               << "): it found something wrong";
  Reported r;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // a partial last line
    std::istringstream l(line);
    std::string kind;
    l >> kind;
    if (kind == "A") {
      std::int64_t s = -1;
      l >> s;
      r.max_appended = std::max(r.max_appended, s);
    } else if (kind == "C") {
      std::string name;
      std::int64_t s = -1;
      l >> name >> s;
      r.acked[name] = std::max(r.acked[name], s);
    }
  }
  return r;
}

void crash_loop(const char* mode) {
  const fs::path dir =
      fs::temp_directory_path() / ("sluice-crash-" + std::to_string(getpid()) + "-" + mode);
  fs::remove_all(dir);
  const TopicOptions o = testutil::crash_topic_options(mode);
  std::mt19937 rng(2026);
  std::uniform_int_distribution<int> run_us(0, 30000);
  std::int64_t max_acked_ever = -1;
  std::map<std::string, std::int64_t> channel_acked;
  const char* sizes[] = {"100", "1k", "mixed"};
  const int n = kills();
  for (int i = 0; i < n; ++i) {
    Reported r =
        run_and_kill(dir.string(), mode, sizes[i % 3], std::chrono::microseconds(run_us(rng)));
    max_acked_ever = std::max(max_acked_ever, r.max_appended);
    for (const auto& [name, s] : r.acked) channel_acked[name] = std::max(channel_acked[name], s);

    auto t = Topic::open(dir.string(), o);
    ASSERT_TRUE(t.ok()) << "iteration " << i << ": " << t.status();
    // A kill cuts at most the tail: never corruption in the middle.
    ASSERT_TRUE((*t)->recovery().corrupt.empty())
        << "iteration " << i << ": " << (*t)->recovery().corrupt[0].what;
    // Every acknowledged append is there.
    ASSERT_GT(static_cast<std::int64_t>((*t)->next_seq()), max_acked_ever) << "iteration " << i;
    // Every record is there once, in order, and whole.
    const std::string check = "check" + std::to_string(i);
    {
      auto c = (*t)->channel(check);
      ASSERT_TRUE(c.ok()) << c.status();
      std::uint64_t expect = (*t)->first_seq();
      for (;;) {
        auto m = (*c)->next(with_timeout(0ms));
        if (!m.ok()) break;
        ASSERT_EQ(m->seq, expect) << "iteration " << i;
        ASSERT_TRUE(testutil::payload_ok(m->payload)) << "torn record " << m->seq;
        ++expect;
      }
      ASSERT_EQ(expect, (*t)->next_seq());
      ASSERT_EQ((*c)->skipped_corrupt(), 0U);
    }
    ASSERT_TRUE((*t)->delete_channel(check).ok());
    // Each channel redelivers at most what it had not acknowledged.
    for (const auto& [name, s] : channel_acked) {
      auto c = (*t)->channel(name);
      ASSERT_TRUE(c.ok()) << c.status();
      ASSERT_GE(static_cast<std::int64_t>((*c)->acked()), s + 1) << name << " iteration " << i;
    }
  }
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    EXPECT_NE(e.path().extension(), ".tmp") << e.path();  // no temporary files remain
  }
  std::printf("%s: %d kills; %lld records acknowledged\n", mode, n,
              static_cast<long long>(max_acked_ever + 1));
  fs::remove_all(dir);
}

TEST(TopicCrashTest, NoDurability) { crash_loop("none"); }
TEST(TopicCrashTest, IntervalSync) { crash_loop("interval"); }
TEST(TopicCrashTest, SyncPerAppend) { crash_loop("append"); }
TEST(TopicCrashTest, GroupCommit) { crash_loop("group"); }

}  // namespace
}  // namespace sluice
