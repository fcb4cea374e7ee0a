// peek / seek / purge and the JSON envelope at their edges, through the real
// binary (embedded store): seek back beside a put at the bound and a get,
// missing channels, get's JSON against peek's.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/cli_backends.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using testutil::Child;
using testutil::Outcome;

// Whether someone holds the flock of `path` (a channel's reader role).
bool flock_held(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_EX | LOCK_NB) != 0;
  ::close(fd);
  return held;
}

class CliLookEdgesTest : public testutil::CliBackendTest {};

// docs/cli.md: peek's "Framings and --format json as for get". The embedded
// store's peek gives a message's append time, get gives null for the same
// message (and the table in "get --format json" still says the log records
// no append times).
TEST_P(CliLookEdgesTest, PeekAndGetGiveTheSameJsonForTheSameMessage) {
  create("q");
  ASSERT_EQ(run({"put", "q"}, "hello\n").rc, 0);
  Outcome p = run({"peek", "q", "--format", "json"});
  ASSERT_EQ(p.rc, 0) << p.err;
  Outcome g = run({"get", "q", "--format", "json", "--count", "1"});
  ASSERT_EQ(g.rc, 0) << g.err;
  const auto pj = nlohmann::json::parse(p.out);
  const auto gj = nlohmann::json::parse(g.out);
  EXPECT_EQ(pj["data"], gj["data"]);
  EXPECT_EQ(pj["seq"], gj["seq"]);
  EXPECT_EQ(pj["time"], gj["time"]) << "peek: " << p.out << "get:  " << g.out;
}

// A channel that does not exist is exit 3 for peek (and seek, purge); with
// --from-seq, peek prints the queue's messages for it and exits 0.
// A name no channel may have ('.x': the embedded store keeps files beside a
// channel's) is a usage error (exit 2) for peek, seek and purge, as for get,
// not "no such channel" (exit 3).
TEST_P(CliLookEdgesTest, ABadChannelNameIsAUsageErrorForPeekSeekAndPurge) {
  create("q");
  ASSERT_EQ(run({"put", "q"}, "m1\n").rc, 0);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"get", "q", "--channel", ".x", "--count", "1"},
        std::vector<std::string>{"peek", "q", "--channel", ".x"},
        std::vector<std::string>{"seek", "q", "--channel", ".x", "--to-start"},
        std::vector<std::string>{"purge", "q", "--channel", ".x"}}) {
    Outcome o = run(args);
    EXPECT_EQ(o.rc, 2) << args[0] << ": " << o.err;
    EXPECT_NE(o.err.find("bad channel name '.x'"), std::string::npos) << args[0] << ": " << o.err;
  }
  EXPECT_EQ(stat("q", "length"), "1");
}

TEST_P(CliLookEdgesTest, PeekFromSeqOfAChannelThatDoesNotExistFails) {
  create("q");
  ASSERT_EQ(run({"put", "q"}, "m1\nm2\n").rc, 0);
  EXPECT_EQ(run({"peek", "q", "--channel", "nope"}).rc, 3);
  Outcome p = run({"peek", "q", "--channel", "nope", "--from-seq", "0"});
  EXPECT_EQ(p.rc, 3) << "out: " << p.out;
  // Nothing was made for it.
  EXPECT_EQ(stat("q", "channels"), "default");
}

// The hint of a missing channel's error tells to create the queue, which
// exists.
TEST_P(CliLookEdgesTest, AMissingChannelsErrorDoesNotSayToCreateTheQueue) {
  create("q");
  for (const char* c : {"peek", "seek", "purge"}) {
    std::vector<std::string> args = {c, "q", "--channel", "nope"};
    if (std::string(c) == "seek") args.push_back("--to-start");
    Outcome r = run(args);
    EXPECT_EQ(r.rc, 3) << r.err;
    EXPECT_EQ(r.err.find("sluice create"), std::string::npos) << r.err;
  }
}

// A seek back holds the channel's reader role while it waits for the writer
// role. With a put waiting at the bound (holding the writer role until a
// reader acknowledges), that is a circular wait: the put waits for a get,
// the get for the seek's reader role, the seek for the put's writer role.
// None of the three ever ends; without the seek, the get would free the put.
TEST_P(CliLookEdgesTest, SeekBackDoesNotDeadlockAGetAndAPutWaitingAtTheBound) {
  create("q", "2");
  ASSERT_EQ(run({"put", "q"}, "m1\nm2\n").rc, 0);
  ASSERT_EQ(run({"get", "q", "--count", "2"}).out, "m1\nm2\n");
  // m3 and m4 go in; m5 waits for room, the writer role held.
  Child put(cmd({"put", "q"}));
  put.write_stdin("m3\nm4\nm5\n");
  put.close_stdin();
  ASSERT_TRUE(testutil::eventually([&] { return stat("q", "produced") == "4"; }));
  // seek back to m1: it takes the channel's role, then waits for the writer's.
  Child seek(cmd({"seek", "q", "--to-start"}));
  const std::string lock = store_ + "/queues/q/readers/default.lock";
  ASSERT_TRUE(testutil::eventually([&] { return flock_held(lock); }));
  // A consumer that would free the put.
  Outcome g = run({"get", "q", "--count", "1", "--timeout", "3"});
  EXPECT_EQ(g.rc, 0) << g.err;
  EXPECT_FALSE(g.out.empty()) << g.err;
  if (g.rc != 0) {  // the three are stuck: end them
    seek.signal(SIGTERM);
    put.signal(SIGTERM);
  }
  // With the get's acknowledgement the put finishes, and then the seek.
  Outcome p = put.finish();
  Outcome s = seek.finish();
  EXPECT_EQ(p.rc, 0) << p.err;
  EXPECT_EQ(s.rc, 0) << s.err;
  EXPECT_NE(s.out.find("position=seq 0"), std::string::npos) << s.out;
}

INSTANTIATE_TEST_SUITE_P(Backends, CliLookEdgesTest,
                         ::testing::Values(testutil::CliBackend{"embedded", false, ""}),
                         testutil::backend_name);

}  // namespace
}  // namespace sluice
