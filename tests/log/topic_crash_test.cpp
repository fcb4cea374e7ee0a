// SIGKILL a child that appends (each durability mode; 100 B, 1 KiB and mixed
// sizes; small segments) while two channels consume, at random moments: half
// while it may still be opening and recovering, half at any time after it
// started working. The topic lives on across kills, so later kills land in
// an older log (rolls, retention). After each kill the topic is reopened and
// every record verified by its identity (writer, counter) and its bytes; the
// verdict counts lost, duplicated, reordered and corrupted records apart.
// Every mode promises the same for a process crash: nothing that returned
// is lost. Kills per mode: SLUICE_CRASH_KILLS (default 50).
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
#include <optional>
#include <random>
#include <set>
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
  std::map<std::uint64_t, std::uint64_t> appended;  // seq -> tag of appends that returned
  std::map<std::string, std::int64_t> acked;        // channel -> last acked seq
};

// Runs the child, kills it `run_for` after it starts (after its first report
// if `after_progress`), and collects its reports.
Reported run_and_kill(const std::string& dir, const char* mode, const char* sizes,
                      std::chrono::microseconds run_for, bool after_progress) {
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
  if (after_progress) {  // under sanitizers a child takes a while to start
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    char b[4096];
    while (out.find('\n') == std::string::npos && std::chrono::steady_clock::now() < give_up) {
      pollfd p{fds[0], POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      const ssize_t n = ::read(fds[0], b, sizeof b);
      if (n <= 0) break;
      out.append(b, static_cast<std::size_t>(n));
    }
  }
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
      std::uint64_t s = 0;
      std::uint64_t tag = 0;
      if (l >> s >> tag) r.appended[s] = tag;
    } else if (kind == "C") {
      std::string name;
      std::int64_t s = -1;
      l >> name >> s;
      r.acked[name] = std::max(r.acked[name], s);
    }
  }
  return r;
}

// What reading the whole topic back found.
struct Verdict {
  std::uint64_t records = 0;
  std::uint64_t lost = 0;        // an append that returned is not there at its seq
  std::uint64_t duplicated = 0;  // the same identity twice
  std::uint64_t reordered = 0;   // one writer's appends out of their order
  std::uint64_t corrupted = 0;   // bytes that are not what was written
  std::uint64_t gaps = 0;        // seqs missing between first and next
  // Records without an append time, or whose time is before the one before
  // it, or whose time a search (seq_at_time, through the index recovery
  // rebuilt) does not lead back to.
  std::uint64_t bad_times = 0;
  bool clean() const { return lost + duplicated + reordered + corrupted + gaps + bad_times == 0; }
  std::string str() const {
    return std::to_string(records) + " records: " + std::to_string(lost) + " lost, " +
           std::to_string(duplicated) + " duplicated, " + std::to_string(reordered) +
           " reordered, " + std::to_string(corrupted) + " corrupted, " + std::to_string(gaps) +
           " gaps, " + std::to_string(bad_times) + " bad times";
  }
};

Verdict verify(Topic& t, Channel& c, const std::map<std::uint64_t, std::uint64_t>& returned) {
  Verdict v;
  std::set<std::uint64_t> tags;
  std::set<std::uint64_t> present;
  std::map<std::uint64_t, std::uint32_t> last_counter;  // per writer
  std::uint64_t expect = t.first_seq();
  std::optional<std::chrono::system_clock::time_point> last_time;
  for (;;) {
    auto m = c.next(with_timeout(0ms));
    if (!m.ok()) break;
    ++v.records;
    if (!m->time || (last_time && *m->time < *last_time)) {
      ++v.bad_times;
    } else if (m->time != last_time) {  // the first record of its time
      auto found = t.seq_at_time(*m->time);
      if (!found.ok() || *found != m->seq) ++v.bad_times;
    }
    if (m->time) last_time = m->time;
    if (m->seq != expect) ++v.gaps;
    expect = m->seq + 1;
    present.insert(m->seq);
    if (!testutil::payload_ok(m->payload)) {
      ++v.corrupted;
      continue;
    }
    const std::uint64_t tag = testutil::payload_tag(m->payload);
    if (!tags.insert(tag).second) ++v.duplicated;
    const std::uint64_t writer = testutil::tag_writer(tag);
    auto [it, first] = last_counter.try_emplace(writer, testutil::tag_counter(tag));
    if (!first) {
      if (testutil::tag_counter(tag) <= it->second) ++v.reordered;
      it->second = testutil::tag_counter(tag);
    }
    if (auto r = returned.find(m->seq); r != returned.end() && r->second != tag) ++v.lost;
  }
  if (expect != t.next_seq()) ++v.gaps;
  for (auto it = returned.lower_bound(t.first_seq()); it != returned.end(); ++it) {
    if (!present.contains(it->first)) ++v.lost;
  }
  return v;
}

void crash_loop(const char* mode) {
  const fs::path dir =
      fs::temp_directory_path() / ("sluice-crash-" + std::to_string(getpid()) + "-" + mode);
  fs::remove_all(dir);
  const TopicOptions o = testutil::crash_topic_options(mode);
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> early_us(0, 30000);   // open, recovery, first appends
  std::uniform_int_distribution<int> later_us(0, 150000);  // any time after it started working
  std::map<std::uint64_t, std::uint64_t> returned;         // every append that returned
  std::map<std::string, std::int64_t> channel_acked;
  const char* sizes[] = {"100", "1k", "mixed"};
  const int n = kills();
  std::uint64_t records = 0;
  for (int i = 0; i < n; ++i) {
    const bool later = i % 2 == 1;
    Reported r =
        run_and_kill(dir.string(), mode, sizes[i % 3],
                     std::chrono::microseconds(later ? later_us(rng) : early_us(rng)), later);
    returned.insert(r.appended.begin(), r.appended.end());
    for (const auto& [name, s] : r.acked) channel_acked[name] = std::max(channel_acked[name], s);

    auto t = Topic::open(dir.string(), o);
    ASSERT_TRUE(t.ok()) << "iteration " << i << ": " << t.status();
    // A kill cuts at most the tail: never corruption in the middle.
    ASSERT_TRUE((*t)->recovery().corrupt.empty())
        << "iteration " << i << ": " << (*t)->recovery().corrupt[0].what;
    const std::string check = "check" + std::to_string(i);
    {
      auto c = (*t)->channel(check);
      ASSERT_TRUE(c.ok()) << c.status();
      const Verdict v = verify(**t, **c, returned);
      ASSERT_TRUE(v.clean()) << mode << " iteration " << i << ": " << v.str();
      ASSERT_EQ((*c)->skipped_corrupt(), 0U);
      records = v.records;
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
  std::printf("%s: %d kills; %zu appends returned; %llu records retained at the end\n", mode, n,
              returned.size(), static_cast<unsigned long long>(records));
  fs::remove_all(dir);
}

TEST(TopicCrashTest, NoDurability) { crash_loop("none"); }
TEST(TopicCrashTest, IntervalSync) { crash_loop("interval"); }
TEST(TopicCrashTest, SyncPerAppend) { crash_loop("append"); }
TEST(TopicCrashTest, GroupCommit) { crash_loop("group"); }

}  // namespace
}  // namespace sluice
