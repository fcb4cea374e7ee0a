// The sluice command, run as a child process (fork + exec, pipes for
// stdin/stdout/stderr): what a shell user sees, exit statuses included.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/cli_child.h"
#include "testutil/temp_dir.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using testutil::CliChild;
using testutil::Outcome;

class CliTest : public ::testing::Test {
 protected:
  Outcome run(std::vector<std::string> args, const std::string& input = "") {
    CliChild c(store_, std::move(args));
    c.write_stdin(input);
    c.close_stdin();
    return c.finish();
  }
  static std::string lines(int from, int to) {
    std::string s;
    for (int i = from; i < to; ++i) s += "line " + std::to_string(i) + "\n";
    return s;
  }

  std::string store_ = testutil::test_dir("cli").string();
};

TEST_F(CliTest, CreatePutGetStat) {
  Outcome r = run({"create", "jobs", "--bound", "100"});
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run({"put", "jobs"}, lines(0, 5));
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run({"get", "jobs", "--count", "3"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, lines(0, 3));
  r = run({"stat", "jobs"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out,
            "name=jobs\nbound=100\nclosed=false\nlength=2\nproduced=5\nconsumed=3\n"
            "channels=default\nkind=log\nmax_age=0\nreplicas=0\nchannel.default.lag=2\n"
            "channel.default.pending=0\n"
            "channel.default.dead_lettered=0\nchannel.default.purged=0\n");
  // The embedded store keeps no byte counts (docs/cli.md), and waiting and
  // in_flight are pressure queues': left out above, null here.
  r = run({"stat", "jobs", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out,
            "{\"name\":\"jobs\",\"bound\":100,\"closed\":false,\"length\":2,\"waiting\":null,"
            "\"in_flight\":null,\"produced\":5,\"consumed\":3,\"produced_bytes\":null,"
            "\"consumed_bytes\":null,\"channels\":[\"default\"],\"kind\":\"log\",\"max_age\":0,"
            "\"replicas\":0,"
            "\"channel_info\":[{\"name\":\"default\",\"lag\":2,\"pending\":0,\"dead_lettered\":0,"
            "\"purged\":0}]}\n");
  r = run({"get", "jobs", "--count", "2"});
  EXPECT_EQ(r.out, lines(3, 5));
}

TEST_F(CliTest, ALastLineWithoutNewlineAndNulFraming) {
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  ASSERT_EQ(run({"put", "q"}, "a\n\nb").rc, 0);  // the empty line is a message
  EXPECT_EQ(run({"get", "q", "--count", "3"}).out, "a\n\nb\n");
  ASSERT_EQ(run({"put", "q", "-0"}, std::string("x\ny\0z\0", 6)).rc, 0);
  EXPECT_EQ(run({"get", "q", "-0", "--count", "2"}).out, std::string("x\ny\0z\0", 6));
}

TEST_F(CliTest, GetTimesOutWithItsOwnStatus) {
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  ASSERT_EQ(run({"put", "q"}, "one\n").rc, 0);
  Outcome r = run({"get", "q", "--timeout", "0.2"});
  EXPECT_EQ(r.rc, 9) << r.err;
  EXPECT_EQ(r.out, "one\n");
}

TEST_F(CliTest, TimeoutsTakeAUnitAndAPutTimesOutAtTheBound) {
  ASSERT_EQ(run({"create", "q", "--bound", "3"}).rc, 0);
  // The bound holds the fourth message until --timeout: exit 9, and the
  // message says how many went in; the rest of the input did not.
  Outcome r = run({"put", "q", "--timeout", "300ms"}, lines(0, 5));
  EXPECT_EQ(r.rc, 9) << r.err;
  EXPECT_NE(r.err.find("3 messages enqueued"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("timed out after 0.3 s (--timeout)"), std::string::npos) << r.err;
  r = run({"get", "q", "--timeout", "0.2s"});
  EXPECT_EQ(r.rc, 9) << r.err;
  EXPECT_EQ(r.out, lines(0, 3));
  // An input that ends first is a success, whatever the timeout.
  r = run({"put", "q", "--timeout", "1h"}, lines(5, 7));
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(run({"get", "q", "--count", "2", "--timeout", "1m"}).out, lines(5, 7));
  // A duration CLI11 alone took, wrongly: 1e300 s overflowed into the past.
  r = run({"get", "q", "--timeout", "1e300"});
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("'1e300' is not a duration: give seconds (30, 1.5) or a number with a "
                       "unit: 500ms, 2s, 1m, 1h"),
            std::string::npos)
      << r.err;
}

// create --max-age: a queue nobody reads holds put at the bound only until
// what it holds is older than the age; stat shows the age and counts only
// what is still there to read.
TEST_F(CliTest, MaxAgeLetsAPutPastAReaderThatStopped) {
  ASSERT_EQ(run({"create", "q", "--bound", "2", "--max-age", "1s"}).rc, 0);
  ASSERT_EQ(run({"put", "q"}, lines(0, 2)).rc, 0);
  Outcome r = run({"put", "q", "--timeout", "30s"}, lines(2, 3));
  EXPECT_EQ(r.rc, 0) << r.err;  // without --max-age: exit 9 after 30 s
  r = run({"stat", "q"});
  EXPECT_NE(r.out.find("\nmax_age=1\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nlength=1\n"), std::string::npos) << r.out;
  EXPECT_EQ(run({"get", "q", "--count", "1"}).out, lines(2, 3));
  ASSERT_EQ(run({"create", "q2", "--max-age", "1.5m"}).rc, 0);
  EXPECT_NE(run({"stat", "q2", "--json"}).out.find("\"max_age\":90,"), std::string::npos);
  r = run({"create", "q3", "--max-age", "-1s"});
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("--max-age"), std::string::npos) << r.err;
}

// Whether files made in `dir` have a birth time (statx), which the age of a
// segment being written goes by across processes.
bool birth_times(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const auto probe = dir / "probe";
  std::ofstream(probe) << "x";
  struct statx st {};
  const bool kept = ::statx(AT_FDCWD, probe.c_str(), 0, STATX_BTIME, &st) == 0 &&
                    (st.stx_mask & STATX_BTIME) != 0;
  std::filesystem::remove(probe);
  return kept;
}

// One `put` process per message (a shell loop, cron): the segment being
// written keeps its age across them (its birth time on disk), so --max-age
// still deletes what nobody read. The wait is the age under test.
TEST_F(CliTest, MaxAgeHoldsWithOnePutProcessPerMessage) {
  if (!birth_times(store_)) GTEST_SKIP() << "this file system keeps no birth time (statx)";
  using namespace std::chrono_literals;
  ASSERT_EQ(run({"create", "q", "--bound", "0", "--max-age", "1s"}).rc, 0);
  ASSERT_EQ(run({"put", "q"}, "m0\n").rc, 0);
  std::this_thread::sleep_for(1100ms);         // m0 is older than the age now
  ASSERT_EQ(run({"put", "q"}, "m1\n").rc, 0);  // seals m0's segment and deletes it
  const Outcome got = run({"get", "q", "--count", "1", "--timeout", "10s"});
  EXPECT_EQ(got.out, "m1\n") << got.err;  // with the age since this put opened it: m0
  const Outcome st = run({"stat", "q"});
  EXPECT_NE(st.out.find("\nproduced=2\n"), std::string::npos) << st.out;
  EXPECT_NE(st.out.find("\nlength=0\n"), std::string::npos) << st.out;
}

// Numbers out of range say so in words, not with CLI11's "not in range
// 0.000000 to 179769313486231570814527423731704356...".
TEST_F(CliTest, BadNumbersAndDurationsAreUsageErrorsThatSayWhy) {
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  const struct {
    std::vector<std::string> args;
    std::string says;
  } cases[] = {
      {{"create", "z", "--bound", "-1"}, "--bound: '-1' is not a whole number (0 or more)"},
      {{"create", "z", "--bound", "99999999999999999999999"},
       "--bound: '99999999999999999999999' is too large (0 or more)"},
      {{"get", "q", "--count", "0"}, "--count: '0' is too small (1 or more)"},
      {{"get", "q", "--batch", "abc"}, "--batch: 'abc' is not a whole number (1 or more)"},
      {{"put", "q", "--batch", "0"}, "--batch: '0' is too small (1 or more)"},
      {{"get", "q", "--timeout", "5x"}, "--timeout: '5x' is not a duration"},
      {{"get", "q", "--timeout", "inf"}, "--timeout: 'inf' is not a duration"},
      {{"put", "q", "--timeout", "-1"}, "--timeout: '-1' is not a duration"},
      {{"get", "q", "--exec", "true", "--parallel", "0"},
       "--parallel: '0' is too small (from 1 to 1024)"},
      {{"get", "q", "--exec", "true", "--grace", "nan"}, "--grace: 'nan' is not a duration"},
  };
  for (const auto& c : cases) {
    Outcome r = run(c.args);
    EXPECT_EQ(r.rc, 2) << c.says;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("179769"), std::string::npos) << r.err;
  }
  EXPECT_EQ(run({"ls"}).out, "q\n");  // nothing was created on the way
}

// Only create makes a store directory: ls, stat, get, put on a mistyped
// --store report an empty store and leave nothing behind.
TEST_F(CliTest, OnlyCreateMakesTheStoreDirectory) {
  const std::string typo = store_ + "/typo";
  auto in = [&](std::vector<std::string> args, const std::string& input = "") {
    CliChild c(typo, std::move(args));
    c.write_stdin(input);
    c.close_stdin();
    return c.finish();
  };
  Outcome r = in({"ls"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(in({"stat", "q"}).rc, 3);
  EXPECT_EQ(in({"get", "q"}).rc, 3);
  EXPECT_EQ(in({"put", "q"}, "x\n").rc, 3);
  EXPECT_FALSE(std::filesystem::exists(typo));
  ASSERT_EQ(in({"create", "q"}).rc, 0);
  EXPECT_EQ(in({"ls"}).out, "q\n");
}

TEST_F(CliTest, LsAndDelete) {
  ASSERT_EQ(run({"create", "b"}).rc, 0);
  ASSERT_EQ(run({"create", "a"}).rc, 0);
  EXPECT_EQ(run({"ls"}).out, "a\nb\n");
  Outcome r = run({"delete", "a"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(run({"ls"}).out, "b\n");
  EXPECT_EQ(run({"delete", "a"}).rc, 3);
}

TEST_F(CliTest, ExitStatusesAndOneLineErrors) {
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  Outcome r = run({"create", "q"});
  EXPECT_EQ(r.rc, 4);
  EXPECT_NE(r.err.find("already exists"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  r = run({"get", "nope"});
  EXPECT_EQ(r.rc, 3);
  EXPECT_NE(r.err.find("sluice ls"), std::string::npos) << r.err;  // says what to do
  EXPECT_EQ(run({"put", "nope"}, "x\n").rc, 3);
  EXPECT_EQ(run({"stat", "nope"}).rc, 3);
  EXPECT_EQ(run({"create", "bad/name"}).rc, 2);
  EXPECT_EQ(run({"frobnicate"}).rc, 2);
  EXPECT_EQ(run({"create"}).rc, 2);
  EXPECT_EQ(run({"create", "z", "--bound", "-1"}).rc, 2);  // 0 is unbounded
}

TEST_F(CliTest, ASecondReaderOfAChannelWithNoWaitExitsInUse) {
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  ASSERT_EQ(run({"put", "q"}, "a\n").rc, 0);
  CliChild first(store_, {"get", "q"});
  first.read_lines(1);  // it holds the channel now
  Outcome r = run({"get", "q", "--no-wait"});
  EXPECT_EQ(r.rc, 6) << r.err;
  r = run({"get", "q", "--no-wait", "--channel", "other", "--count", "1"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "a\n");
}

TEST_F(CliTest, DeleteOfAQueueBeingReadExitsInUseAndKeepsIt) {
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  ASSERT_EQ(run({"put", "q"}, "a\n").rc, 0);
  {
    CliChild reader(store_, {"get", "q", "--count", "2"});
    reader.read_lines(1);  // it holds the channel, waiting for a second message
    Outcome r = run({"delete", "q"});
    EXPECT_EQ(r.rc, 6) << r.err;
    EXPECT_NE(r.err.find("PID"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("sluice close"), std::string::npos) << r.err;  // says what to do
    EXPECT_EQ(run({"ls"}).out, "q\n");
    ASSERT_EQ(run({"put", "q"}, "b\n").rc, 0);
    Outcome rest = reader.finish();
    EXPECT_EQ(rest.rc, 0) << rest.err;
    EXPECT_EQ(rest.out, "a\nb\n");
  }
  EXPECT_EQ(run({"delete", "q"}).rc, 0);  // nobody uses it now
}

TEST_F(CliTest, PutOfAMessageOverTheLimitEnqueuesThoseBefore) {
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  std::string input = "a\nb\n" + std::string((16U << 20) + 1, 'x') + "\nc\n";
  Outcome r = run({"put", "q"}, input);
  EXPECT_EQ(r.rc, 8) << r.err;
  EXPECT_NE(r.err.find("2 messages enqueued"), std::string::npos) << r.err;
  EXPECT_EQ(run({"get", "q", "--timeout", "0.2"}).out, "a\nb\n");
}

TEST_F(CliTest, PutCloseThenGetEndsAtTheEnd) {
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  Outcome r = run({"put", "q", "--close"}, lines(0, 4));
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run({"get", "q"});  // no --count, no --timeout: ends because the queue is closed
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, lines(0, 4));
  EXPECT_NE(run({"stat", "q"}).out.find("closed=true"), std::string::npos);
  r = run({"put", "q"}, "more\n");
  EXPECT_EQ(r.rc, 5) << r.err;
  EXPECT_EQ(run({"close", "q"}).rc, 0);  // idempotent
  EXPECT_EQ(run({"close", "nope"}).rc, 3);
}

TEST_F(CliTest, CloseEndsARunningGet) {
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  ASSERT_EQ(run({"put", "q"}, "a\n").rc, 0);
  CliChild get(store_, {"get", "q"});
  get.read_lines(1);
  ASSERT_EQ(run({"close", "q"}).rc, 0);
  Outcome r = get.finish();
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "a\n");
}

TEST_F(CliTest, HelpOfEverySubcommandExitsZero) {
  for (std::vector<std::string> args : {std::vector<std::string>{"--help"},
                                        {"create", "--help"},
                                        {"put", "--help"},
                                        {"get", "--help"},
                                        {"close", "--help"},
                                        {"delete", "--help"},
                                        {"ls", "--help"},
                                        {"stat", "--help"}}) {
    Outcome r = run(args);
    EXPECT_EQ(r.rc, 0) << args[0] << ": " << r.err;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << args[0] << ": " << r.out;
  }
}

// A get killed mid-stream loses nothing: what it had not acknowledged comes
// again, so the two runs' output covers every line, each run in order.
TEST_F(CliTest, GetKilledMidStreamLosesNothing) {
  constexpr int kLines = 3000;
  ASSERT_EQ(run({"create", "q", "--bound", "10000"}).rc, 0);
  Outcome p = run({"put", "q"}, lines(0, kLines));
  ASSERT_EQ(p.rc, 0) << p.err;

  std::string first;
  {
    CliChild c(store_, {"get", "q", "--batch", "7"});
    c.read_lines(kLines / 3);
    c.kill_now();
    first = c.finish().out;  // and whatever was in the pipe
  }
  first.erase(first.rfind('\n') + 1);  // a torn last line does not count
  const std::string all = lines(0, kLines);
  ASSERT_TRUE(all.starts_with(first));
  const std::size_t seen = static_cast<std::size_t>(std::count(first.begin(), first.end(), '\n'));
  ASSERT_GE(seen, static_cast<std::size_t>(kLines / 3));

  Outcome second = run({"get", "q", "--timeout", "1"});
  EXPECT_EQ(second.rc, 9) << second.err;
  ASSERT_FALSE(second.out.empty());
  // It starts at or before where the first left off, and runs to the end.
  const std::size_t at = all.find(second.out);
  ASSERT_NE(at, std::string::npos) << "second run out of order";
  EXPECT_LE(at, first.size());
  EXPECT_TRUE(at == 0 || all[at - 1] == '\n');
  EXPECT_EQ(at + second.out.size(), all.size());
}

// A nearly full disk (a 4 MiB tmpfs; needs root, as CI runs): put enqueues
// what fits, then exits 7 saying how many messages went in and at which
// input byte the unsent rest begins; exactly those are in the queue, and
// nothing more fits. Before, --bound 0 made the whole read one all-or-none
// put ("0 messages enqueued"), and the default bound's 1000-message chunks
// left up to a chunk of room unused. With the bound, a get reads alongside
// (the log keeps what it acknowledged until the segment goes, so the disk
// fills all the same).
TEST_F(CliTest, ANearlyFullDiskTakesWhatFitsAndSaysWhereTheRestBegins) {
  const std::filesystem::path mnt = testutil::test_dir("cli_full");
  std::filesystem::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=4m") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno)
                 << "); CI runs this as root";
  }
  struct Unmount {
    std::filesystem::path p;
    ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
  } unmount{mnt};
  std::string input;  // 6,000 lines of 1,001 bytes: more than the disk holds
  for (int i = 0; i < 6000; ++i) {
    std::string l = std::to_string(100000 + i);
    l.resize(1000, 'x');
    input += l + "\n";
  }
  for (const char* bound : {"0", "1000"}) {
    SCOPED_TRACE(std::string("--bound ") + bound);
    store_ = (mnt / (std::string("store") + bound)).string();
    ASSERT_EQ(run({"create", "q", "--bound", bound}).rc, 0);
    // The reader writes to a file (off the full disk): a pipe this test
    // does not read while put runs would fill and hold the bound.
    const std::string out_file = testutil::test_dir("cli_full_out").string() + bound;
    std::optional<testutil::Child> reader;
    if (std::string(bound) != "0") {
      reader.emplace(std::vector<std::string>{"/bin/sh", "-c",
                                              "exec '" + std::string(SLUICE_CLI) + "' --store '" +
                                                  store_ + "' get q > '" + out_file + "'"});
    }
    Outcome p = run({"put", "q"}, input);
    EXPECT_EQ(p.rc, 7) << p.err;
    EXPECT_NE(p.err.find("No space left on device"), std::string::npos) << p.err;
    unsigned long long n = 0, at = 0;
    const auto m = p.err.find("sluice put: queue 'q': ");
    ASSERT_NE(m, std::string::npos) << p.err;
    ASSERT_EQ(std::sscanf(p.err.c_str() + m,
                          "sluice put: queue 'q': %llu messages enqueued; the rest of the input, "
                          "from byte %llu, was not",
                          &n, &at),
              2)
        << p.err;
    EXPECT_GT(n, 1000U);
    EXPECT_EQ(at, n * 1001);
    Outcome more = run({"put", "q"}, input.substr(at, 1001));
    EXPECT_EQ(more.rc, 7) << "a line still fits: the first put left room unused\n" << more.err;
    std::string got;
    if (reader) {
      // It has them all once the file does (it acknowledges as it writes).
      EXPECT_TRUE(testutil::eventually([&] {
        std::error_code ec;
        return std::filesystem::file_size(out_file, ec) >= at;
      }));
      reader->signal(SIGTERM);
      const Outcome r = reader->finish();
      EXPECT_EQ(r.rc, 130) << r.err;
      std::ifstream f(out_file, std::ios::binary);
      got.assign(std::istreambuf_iterator<char>(f), {});
    } else {
      const Outcome r = run({"get", "q", "--count", std::to_string(n), "--timeout", "10"});
      EXPECT_EQ(r.rc, 0) << r.err;
      got = r.out;
    }
    EXPECT_TRUE(got == input.substr(0, at)) << "the first " << n << " lines, in order";
    reader.reset();
    std::filesystem::remove_all(store_);  // room for the next store
  }
}

}  // namespace
}  // namespace sluice
