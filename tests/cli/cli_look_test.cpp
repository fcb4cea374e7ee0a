// peek, seek and purge through the real binary, on every backend that can
// have them (docs/cli.md, "Looking back"): a pressure queue has no history
// or positions, so seek there is exit 2 with the reason.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/cli_backends.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using testutil::Child;
using testutil::Outcome;

class CliLookTest : public testutil::CliBackendTest {
 protected:
  static std::string lines(int from, int to) {
    std::string s;
    for (int i = from; i <= to; ++i) s += "m" + std::to_string(i) + "\n";
    return s;
  }
  // T as --to-time / --from-time take it: @SECONDS.MICROSECONDS.
  static std::string at(std::chrono::system_clock::time_point t) {
    const auto us =
        std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
    std::string f = std::to_string(us % 1000000);
    return "@" + std::to_string(us / 1000000) + "." + std::string(6 - f.size(), '0') + f;
  }
  // Puts m1..m2, then m3..m4 strictly later than the time returned.
  std::chrono::system_clock::time_point put_before_and_after() {
    EXPECT_EQ(run({"put", "q"}, lines(1, 2)).rc, 0);
    // T lies after the first put's clock reading (Streams ids have ms).
    const auto t = std::chrono::system_clock::now() + std::chrono::milliseconds(5);
    while (std::chrono::system_clock::now() < t + std::chrono::milliseconds(5)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the clock must pass T
    }
    EXPECT_EQ(run({"put", "q"}, lines(3, 4)).rc, 0);
    return t;
  }
};

// peek writes what the channel has not acknowledged and takes nothing: the
// counts stay, and a get then gets the same messages.
TEST_P(CliLookTest, PeekShowsWhatIsUnacknowledgedWithoutTakingIt) {
  create("q");
  ASSERT_EQ(run({"put", "q"}, lines(1, 5)).rc, 0);
  ASSERT_EQ(run({"get", "q", "--count", "2"}).out, lines(1, 2));
  Outcome p = run({"peek", "q"});
  EXPECT_EQ(p.rc, 0) << p.err;
  EXPECT_EQ(p.out, lines(3, 5));
  p = run({"peek", "q", "--count", "2"});
  EXPECT_EQ(p.out, lines(3, 4));
  p = run({"peek", "q", "--format", "json", "--count", "1"});
  ASSERT_EQ(p.rc, 0) << p.err;
  const auto j = nlohmann::json::parse(p.out);
  EXPECT_EQ(j["data"], "m3");
  if (embedded()) {
    EXPECT_EQ(j["seq"], 2);
  }
  if (stream()) {
    EXPECT_TRUE(j["id"].is_string());
    EXPECT_EQ(j["deliveries"], 0);  // not delivered yet
  }
  EXPECT_EQ(stat("q", "consumed"), "2");
  EXPECT_EQ(stat("q", "length"), "3");
  EXPECT_EQ(run({"get", "q", "--count", "3"}).out, lines(3, 5));
  EXPECT_EQ(run({"peek", "q"}).out, "");
  EXPECT_EQ(run({"peek", "q", "--channel", "nope"}).rc, pressure() ? 2 : 3);
}

// What a running get holds (delivered, not acknowledged) is still the
// channel's: peek shows it. (A pressure queue's readers take messages out of
// the queue: those are not there.)
TEST_P(CliLookTest, PeekIncludesWhatARunningGetHolds) {
  create("q");
  ASSERT_EQ(run({"put", "q"}, lines(1, 3)).rc, 0);
  // A get whose reader (this test) takes one line: it holds the other two.
  Child get(cmd({"get", "q", "--count", "3", "--linger", "60s"}));
  get.close_stdin();
  EXPECT_EQ(get.read_one_line(), "m1\n");
  EXPECT_TRUE(testutil::eventually([&] { return stat("q", "consumed") == "1"; }));
  Outcome p = run({"peek", "q"});
  EXPECT_EQ(p.rc, 0) << p.err;
  EXPECT_EQ(p.out, pressure() ? "" : lines(2, 3));
  get.kill_now();
}

// docs/cli.md: peek "ends when it has written what was there when it
// began: messages put meanwhile are not shown". Its first page (1 MB) does
// not fit the pipe, so peek is still writing it when more are put; a peek
// that read on until a page came back empty showed those too.
TEST_P(CliLookTest, APeekEndsAtWhatWasThereWhenItBegan) {
  create("q", "0");
  const std::string pad(1000, 'x');
  std::string first, more;
  for (int i = 0; i < 1000; ++i) first += "a" + std::to_string(i) + pad + "\n";
  for (int i = 0; i < 1000; ++i) more += "b" + std::to_string(i) + pad + "\n";
  ASSERT_EQ(run({"put", "q"}, first).rc, 0);
  Child peek(cmd({"peek", "q"}));
  peek.close_stdin();
  peek.read_lines(1);  // it has begun: its first page is on its way
  ASSERT_EQ(run({"put", "q"}, more).rc, 0);
  const Outcome p = peek.finish();
  EXPECT_EQ(p.rc, 0) << p.err;
  EXPECT_EQ(p.out.size(), first.size()) << "messages put during the peek were shown";
  EXPECT_EQ(p.out, first);
}

TEST_P(CliLookTest, SeekBackReplaysAndForwardSkips) {
  create("q");
  ASSERT_EQ(run({"put", "q"}, lines(1, 5)).rc, 0);
  ASSERT_EQ(run({"get", "q", "--count", "5"}).out, lines(1, 5));
  Outcome s = run({"seek", "q", "--to-start"});
  if (pressure()) {
    EXPECT_EQ(s.rc, 2) << s.err;
    EXPECT_NE(s.err.find("no history"), std::string::npos) << s.err;
    return;
  }
  ASSERT_EQ(s.rc, 0) << s.err;
  EXPECT_NE(s.out.find("unacknowledged_before=0\nunacknowledged=5\n"), std::string::npos) << s.out;
  EXPECT_EQ(stat("q", "length"), "5");  // replayed: they count toward the bound again
  EXPECT_EQ(run({"get", "q", "--count", "5"}).out, lines(1, 5));
  ASSERT_EQ(run({"put", "q"}, lines(6, 8)).rc, 0);
  s = run({"seek", "q", "--to-end"});
  ASSERT_EQ(s.rc, 0) << s.err;
  EXPECT_NE(s.out.find("unacknowledged_before=3\nunacknowledged=0\n"), std::string::npos) << s.out;
  EXPECT_EQ(run({"get", "q", "--timeout", "200ms"}).out, "");
  // The backend's own kind of place only.
  s = run({"seek", "q", stream() ? "--to-seq" : "--to-id", stream() ? "2" : "0-1"});
  EXPECT_EQ(s.rc, 2) << s.err;
  s = run({"seek", "q"});
  EXPECT_EQ(s.rc, 2) << s.err;
  s = run({"seek", "q", "--to-time", "yesterday"});
  EXPECT_EQ(s.rc, 2) << s.err;
  EXPECT_NE(s.err.find("is not a time"), std::string::npos) << s.err;
}

// --to-time: the first message put at or after T.
TEST_P(CliLookTest, SeekToATimeReplaysFromTheFirstMessagePutThen) {
  if (pressure()) GTEST_SKIP() << "a pressure queue has no positions (SeekBack... checks exit 2)";
  create("q");
  const auto t = put_before_and_after();
  ASSERT_EQ(run({"get", "q", "--count", "4"}).out, lines(1, 4));
  Outcome s = run({"seek", "q", "--to-time", at(t)});
  ASSERT_EQ(s.rc, 0) << s.err;
  EXPECT_EQ(run({"get", "q", "--count", "2"}).out, lines(3, 4));
}

// A place before what retention kept: the seek stops at the oldest message
// retained and says so on stderr (--to-start asks for that one: no note).
TEST_P(CliLookTest, SeekBeforeWhatRetentionKeptStopsThereAndSaysSo) {
  if (pressure()) GTEST_SKIP() << "a pressure queue has no positions or retention by age";
  std::vector<std::string> args = {"create", "q", "--max-age", "1s"};
  if (stream()) args.push_back("--stream");
  ASSERT_EQ(run(args).rc, 0);
  const auto t = std::chrono::system_clock::now();
  ASSERT_EQ(run({"put", "q"}, lines(1, 2)).rc, 0);
  // Puts until retention has deleted m1 and m2 (older than a second).
  int n = 3;
  ASSERT_TRUE(testutil::eventually([&] {
    run({"put", "q"}, "m" + std::to_string(n++) + "\n");
    const Outcome p = run({"peek", "q", "--count", "1"});
    return p.rc == 0 && p.out != "m1\n" && p.out != "m2\n";
  }));
  const std::string oldest = run({"peek", "q", "--count", "1"}).out;
  Outcome s = run({"seek", "q", "--to-time", at(t)});
  ASSERT_EQ(s.rc, 0) << s.err;
  EXPECT_NE(s.err.find("before the oldest one retained are gone: stopped at"), std::string::npos)
      << s.err;
  EXPECT_EQ(run({"get", "q", "--count", "1"}).out, oldest);
  s = run({"seek", "q", "--to-start"});
  ASSERT_EQ(s.rc, 0) << s.err;
  EXPECT_EQ(s.err, "");
  s = run({"seek", "q", "--to-end"});
  ASSERT_EQ(s.rc, 0) << s.err;
  EXPECT_EQ(s.err, "");
}

// get --from-time: a new channel starts at the first message put at or
// after T; a channel that exists keeps its position, and says so.
TEST_P(CliLookTest, GetFromATimeStartsANewChannelThere) {
  create("q");
  const auto t = put_before_and_after();
  if (pressure()) {
    const Outcome g = run({"get", "q", "--from-time", at(t), "--count", "2"});
    EXPECT_EQ(g.rc, 2) << g.err;
    EXPECT_NE(g.err.find("no positions"), std::string::npos) << g.err;
    EXPECT_EQ(stat("q", "length"), "4");  // nothing taken
    return;
  }
  Outcome g = run({"get", "q", "--channel", "late", "--from-time", at(t), "--count", "2"});
  ASSERT_EQ(g.rc, 0) << g.err;
  EXPECT_EQ(g.out, lines(3, 4));
  EXPECT_EQ(g.err, "");
  ASSERT_EQ(run({"put", "q"}, "m5\n").rc, 0);
  g = run({"get", "q", "--channel", "late", "--from-start", "--count", "1"});
  ASSERT_EQ(g.rc, 0) << g.err;
  EXPECT_EQ(g.out, "m5\n");  // not m1: the channel kept its place
  EXPECT_NE(g.err.find("keeps its position"), std::string::npos) << g.err;
  EXPECT_EQ(stat("q", "channel.default.lag"), "5");  // the other channel untouched
}

// get --from-seq (embedded) / --from-id (Streams): the place a peek showed.
TEST_P(CliLookTest, GetFromASeqOrIdStartsANewChannelThere) {
  if (pressure()) GTEST_SKIP() << "a pressure queue has no positions (GetFromATime checks exit 2)";
  create("q");
  ASSERT_EQ(run({"put", "q"}, lines(1, 4)).rc, 0);
  Outcome p = run({"peek", "q", "--format", "json", "--count", "2"});
  ASSERT_EQ(p.rc, 0) << p.err;
  std::istringstream in(p.out);
  std::string first;
  std::string second;
  ASSERT_TRUE(std::getline(in, first) && std::getline(in, second)) << p.out;
  const auto j = nlohmann::json::parse(second);  // m2
  std::vector<std::string> args = {"get", "q", "--channel", "c", "--count", "2"};
  if (embedded()) {
    args.insert(args.end(), {"--from-seq", std::to_string(j["seq"].get<std::uint64_t>())});
  } else {
    args.insert(args.end(), {"--from-id", j["id"].get<std::string>()});  // what comes after it
  }
  Outcome g = run(args);
  ASSERT_EQ(g.rc, 0) << g.err;
  EXPECT_EQ(g.out, embedded() ? lines(2, 3) : lines(3, 4));
  // The other backend's kind of place, or two places: exit 2, no channel made.
  g = run({"get", "q", "--channel", "d", embedded() ? "--from-id" : "--from-seq", "1"});
  EXPECT_EQ(g.rc, 2) << g.err;
  g = run({"get", "q", "--channel", "d", "--from-start", "--from-end"});
  EXPECT_EQ(g.rc, 2) << g.err;
  EXPECT_NE(g.err.find("give one place"), std::string::npos) << g.err;
  EXPECT_EQ(stat("q", "channel.d.lag"), "");
  if (embedded()) {
    g = run({"get", "q", "--channel", "d", "--from-seq", "5"});  // past the end (next is 4)
    EXPECT_EQ(g.rc, 2) << g.err;
    EXPECT_NE(g.err.find("past the end"), std::string::npos) << g.err;
  }
}

// get --from-end: a new channel gets only what is put after it came.
TEST_P(CliLookTest, GetFromTheEndSkipsWhatIsThere) {
  if (pressure()) GTEST_SKIP() << "a pressure queue has no positions (GetFromATime checks exit 2)";
  create("q");
  ASSERT_EQ(run({"put", "q"}, lines(1, 3)).rc, 0);
  Child get(cmd({"get", "q", "--channel", "new", "--from-end", "--count", "1"}));
  get.close_stdin();
  ASSERT_TRUE(testutil::eventually([&] { return stat("q", "channel.new.lag") == "0"; }));
  ASSERT_EQ(run({"put", "q"}, "m4\n").rc, 0);
  const Outcome g = get.finish();
  EXPECT_EQ(g.rc, 0) << g.err;
  EXPECT_EQ(g.out, "m4\n");
}

// purge drops what the channel has not acknowledged, counts it, and a put
// waiting at the bound goes on.
TEST_P(CliLookTest, PurgeDropsTheBacklogAndWakesAPutAtTheBound) {
  create("q", "3");
  Child put(cmd({"put", "q"}));
  put.write_stdin(lines(1, 5));
  put.close_stdin();
  ASSERT_TRUE(testutil::eventually([&] { return stat("q", "produced") == "3"; }));
  Outcome p = run({"purge", "q"});
  ASSERT_EQ(p.rc, 0) << p.err;
  EXPECT_NE(p.out.find("purged=3\n"), std::string::npos) << p.out;
  const Outcome rest = put.finish();  // room again: the last two go in
  EXPECT_EQ(rest.rc, 0) << rest.err;
  EXPECT_EQ(run({"get", "q", "--count", "2"}).out, lines(4, 5));
  EXPECT_EQ(stat("q", "channel.default.purged"), "3");
  // What was purged counts as consumed (it left unread): the numbers add up.
  EXPECT_EQ(stat("q", "produced"), "5");
  EXPECT_EQ(stat("q", "consumed"), "5");
  EXPECT_EQ(stat("q", "length"), "0");
}

// seek and purge wait for a running get of the channel (embedded: its role);
// --no-wait is exit 6 naming it.
TEST_P(CliLookTest, SeekWaitsForTheChannelsReaderOrFailsFastWithNoWait) {
  if (!embedded()) GTEST_SKIP() << "Redis roles are held only while a call waits";
  create("q");
  ASSERT_EQ(run({"put", "q"}, lines(1, 2)).rc, 0);
  Child get(cmd({"get", "q"}));
  get.close_stdin();
  ASSERT_EQ(get.read_lines(2), lines(1, 2));
  Outcome s = run({"seek", "q", "--to-start", "--no-wait"});
  EXPECT_EQ(s.rc, 6) << s.err;
  EXPECT_NE(s.err.find("PID"), std::string::npos) << s.err;
  s = run({"purge", "q", "--no-wait"});
  EXPECT_EQ(s.rc, 6) << s.err;
  get.signal(SIGTERM);
  get.finish();
  s = run({"seek", "q", "--to-start", "--no-wait"});
  EXPECT_EQ(s.rc, 0) << s.err;
}

INSTANTIATE_TEST_SUITE_P(Backends, CliLookTest, SLUICE_CLI_BACKENDS, testutil::backend_name);

}  // namespace
}  // namespace sluice
