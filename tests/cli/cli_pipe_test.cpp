// `sluice get` into a pipe, through the real binary and real shell
// pipelines, on every backend: a message is acknowledged only once the
// reader has taken all of it out of the pipe, a reader that goes is noticed
// while get waits, and what the reader did not take is given back at the
// end (docs/cli.md, "What get acknowledges").
#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_backends.h"

namespace sluice {
namespace {

using testutil::Child;
using testutil::Outcome;

class CliPipeTest : public testutil::CliBackendTest {
 protected:
  // A bash pipeline; "$SLUICE" is `sluice --store STORE`.
  Outcome shell(const std::string& script) {
    Child c({"/bin/bash", "-c", script}, env());
    c.close_stdin();
    return c.finish();
  }
  std::map<std::string, std::string> env() const {
    return {{"SLUICE", std::string(SLUICE_CLI) + " --store " + store_}};
  }
  // "m0001\n" ... : six bytes a line.
  static std::string lines(int from, int to) {
    std::string s;
    char buf[16];
    for (int i = from; i <= to; ++i) {
      std::snprintf(buf, sizeof buf, "m%04d\n", i);
      s += buf;
    }
    return s;
  }
};

// The case: 1,000 short messages on an open queue and a `while
// read` loop that takes three and exits. Before, get acknowledged all 1,000
// once they were in the pipe (997 lost) and then waited for more messages
// until --timeout. Now it notices the reader has gone while it waits, and
// the other 997 come to the next reader, in order.
TEST_P(CliPipeTest, AReaderThatTakesThreeAndExitsLosesNoneOfTheRest) {
  create("q");
  ASSERT_EQ(run({"put", "q"}, lines(1, 1000)).rc, 0);
  Outcome r = shell(
      "$SLUICE get q --timeout 60 | { read a; read b; read c; echo \"$a $b $c\"; }; "
      "echo \"get=${PIPESTATUS[0]}\"");
  EXPECT_EQ(r.out, "m0001 m0002 m0003\nget=7\n") << r.err;
  EXPECT_NE(r.err.find("997 given back"), std::string::npos) << r.err;
  EXPECT_EQ(stat("q", "consumed"), "3");
  EXPECT_EQ(stat("q", "length"), "997");
  Outcome rest = run({"get", "q", "--count", "997", "--timeout", "30"});
  EXPECT_EQ(rest.rc, 0) << rest.err;
  EXPECT_EQ(rest.out, lines(4, 1000));
  EXPECT_EQ(stat("q", "length"), "0");
}

// More messages than the pipe holds: get has fetched more than it wrote when
// the reader goes. The count given back covers both kinds and says so (it
// read as if more were given back than were written: "took 3 of the 655
// messages written; 8189 given back").
TEST_P(CliPipeTest, WhatIsGivenBackIsSplitIntoUnreadAndNotYetWritten) {
  create("q", "0");
  std::string big;
  for (int i = 0; i < 20000; ++i) big += std::string(99, static_cast<char>('a' + i % 26)) + "\n";
  ASSERT_EQ(run({"put", "q"}, big).rc, 0);
  Outcome r = shell("$SLUICE get q --timeout 60 | { read a; read b; read c; }");
  // "it took 3 of the W messages written; H given back" (no <regex>: GCC 12
  // warns inside it at -O1, which the sanitizer builds use with -Werror).
  const std::string took = "it took 3 of the ";
  const auto at = r.err.find(took);
  ASSERT_NE(at, std::string::npos) << r.err;
  std::size_t used = 0;
  const long written = std::stol(r.err.substr(at + took.size()), &used);
  const std::string mid = " messages written; ";
  ASSERT_EQ(r.err.compare(at + took.size() + used, mid.size(), mid), 0) << r.err;
  const long held = std::stol(r.err.substr(at + took.size() + used + mid.size()));
  ASSERT_GT(held, written - 3) << r.err;  // fetched beyond what the pipe took
  EXPECT_NE(r.err.find("(" + std::to_string(written - 3) + " written and not read, " +
                       std::to_string(held - (written - 3)) + " not yet written)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(stat("q", "consumed"), "3");
  EXPECT_EQ(stat("q", "length"), "19997");
}

// `head -c 15` reads exactly 15 bytes: two whole messages and half of the
// third. The half-read one was not taken: it comes again, whole. The queue
// is closed, so get is at its end (drained) when the reader goes.
TEST_P(CliPipeTest, AMessageTheReaderReadOnlyPartOfComesAgain) {
  create("q");
  ASSERT_EQ(run({"put", "q", "--close"}, lines(1, 100)).rc, 0);
  Outcome r = shell("$SLUICE get q | head -c 15; s=${PIPESTATUS[0]}; echo; echo \"get=$s\"");
  EXPECT_EQ(r.out, "m0001\nm0002\nm00\nget=7\n") << r.err;
  EXPECT_EQ(stat("q", "consumed"), "2");
  Outcome rest = run({"get", "q"});
  EXPECT_EQ(rest.rc, 0) << rest.err;
  EXPECT_EQ(rest.out, lines(3, 100));
}

// A reader that takes nothing before get's --linger ends: get exits 0 and
// gives all back (the bytes in the pipe are the reader's copy: they come
// again too, at least once). Then a slow reader that takes everything
// within the linger: all acknowledged, get ends as soon as it has.
TEST_P(CliPipeTest, AtItsEndGetWaitsForThePipeThenGivesBackTheRest) {
  create("q");
  ASSERT_EQ(run({"put", "q"}, lines(1, 10)).rc, 0);
  {
    // The test holds the pipe's read end and reads nothing until get exits.
    Child c({SLUICE_CLI, "--store", store_, "get", "q", "--count", "5", "--linger", "200ms"},
            env());
    c.close_stdin();
    const std::string err = c.read_err_until("given back");
    EXPECT_NE(err.find("5 given back"), std::string::npos) << err;
    const Outcome o = c.finish();
    EXPECT_EQ(o.rc, 0) << o.err;
    EXPECT_EQ(o.out, lines(1, 5));
  }
  EXPECT_EQ(stat("q", "consumed"), "0");
  // A reader that starts reading only after a while; get waits for it.
  Outcome r = shell("$SLUICE get q --count 5 --linger 60s | { sleep 0.3; cat; }");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, lines(1, 5));
  EXPECT_EQ(r.err.find("given back"), std::string::npos) << r.err;
  EXPECT_EQ(stat("q", "consumed"), "5");
}

// A give-back is not a delivery: on a Streams topic, giving a message back
// more often than the dead-letter limit (5 deliveries) leaves it in the
// channel. Each reader here reads one byte of it.
TEST_P(CliPipeTest, GivingBackOftenSendsNothingToTheDeadLetters) {
  create("q");
  ASSERT_EQ(run({"put", "q", "--close"}, "hello\n").rc, 0);
  for (int i = 0; i < 8; ++i) {
    Outcome r = shell("$SLUICE get q | head -c 1");
    ASSERT_EQ(r.out, "h") << r.err;
  }
  Outcome r = run({"get", "q"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "hello\n");
  if (stream()) {
    EXPECT_EQ(stat("q", "channel.default.dead_lettered"), "0");
  }
}

// get --format json: one object per message per line, with what each
// backend knows (seq on the embedded store; id, time and deliveries on a
// Streams topic; null otherwise), and bytes that are not UTF-8 in base64.
// Acknowledged as the other framings are; exclusive with them.
TEST_P(CliPipeTest, FormatJsonGivesEachMessageAsAnObjectWithWhatTheBackendKnows) {
  create("q");
  const auto before = std::chrono::system_clock::now() - std::chrono::seconds(1);
  ASSERT_EQ(run({"put", "q", "-0"}, std::string("hello\0w\xc3\xb6rld\0\xff\xfe\0", 17)).rc, 0);
  Outcome r = shell("$SLUICE get q --count 3 --format json | cat");
  ASSERT_EQ(r.rc, 0) << r.err;
  std::vector<nlohmann::json> lines;
  std::istringstream in(r.out);
  for (std::string l; std::getline(in, l);) lines.push_back(nlohmann::json::parse(l));
  ASSERT_EQ(lines.size(), 3U) << r.out;
  EXPECT_EQ(lines[0]["data"], "hello");
  EXPECT_EQ(lines[1]["data"], "w\xc3\xb6rld");
  EXPECT_EQ(lines[2]["data"], "//4=");
  EXPECT_EQ(lines[2]["encoding"], "base64");
  for (int i = 0; i < 3; ++i) {
    const auto& j = lines[static_cast<std::size_t>(i)];
    EXPECT_EQ(j["channel"], "default");
    if (embedded()) {
      EXPECT_EQ(j["seq"], i);
      EXPECT_TRUE(j["id"].is_null());
      EXPECT_TRUE(j["deliveries"].is_null());
    } else if (stream()) {
      EXPECT_TRUE(j["seq"].is_null());
      ASSERT_TRUE(j["id"].is_string()) << j;
      EXPECT_EQ(j["deliveries"], 1);
      // The id's time, in RFC 3339: not before the put.
      ASSERT_TRUE(j["time"].is_string()) << j;
      std::tm tm{};
      ASSERT_NE(strptime(j["time"].get<std::string>().c_str(), "%Y-%m-%dT%H:%M:%S", &tm), nullptr);
      EXPECT_GE(std::chrono::system_clock::from_time_t(timegm(&tm)),
                std::chrono::floor<std::chrono::seconds>(before));
    } else {
      EXPECT_TRUE(j["seq"].is_null());
      EXPECT_TRUE(j["id"].is_null());
      EXPECT_TRUE(j["time"].is_null());
      EXPECT_TRUE(j["deliveries"].is_null());
    }
  }
  EXPECT_EQ(stat("q", "consumed"), "3");
  Outcome bad = run({"get", "q", "--format", "json", "-b"});
  EXPECT_EQ(bad.rc, 2) << bad.err;
  bad = run({"get", "q", "--format", "xml"});
  EXPECT_EQ(bad.rc, 2) << bad.err;
}

// Into a file, a message counts as taken once written: all acknowledged.
TEST_P(CliPipeTest, IntoAFileEveryMessageWrittenIsAcknowledged) {
  create("q");
  ASSERT_EQ(run({"put", "q", "--close"}, lines(1, 50)).rc, 0);
  const auto dir = testutil::test_dir("cli_pipe_file");
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "out").string();
  Outcome r = shell("$SLUICE get q > " + file + " && wc -c < " + file);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "300\n");
  EXPECT_EQ(stat("q", "consumed"), "50");
}

INSTANTIATE_TEST_SUITE_P(Backends, CliPipeTest, SLUICE_CLI_BACKENDS, testutil::backend_name);

}  // namespace
}  // namespace sluice
