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

#include "cli/cli_child.h"
#include "testutil/temp_dir.h"
#ifdef SLUICE_TEST_REDIS
#include "testutil/redis_server.h"
#endif

namespace sluice {
namespace {

using testutil::Child;
using testutil::Outcome;

struct Backend {
  std::string name;
  bool redis = false;
  std::string create_flag;  // "--stream" for a Streams topic
};

std::ostream& operator<<(std::ostream& os, const Backend& b) { return os << b.name; }

class CliPipeTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
#ifdef SLUICE_TEST_REDIS
    if (GetParam().redis) {
      server_ = std::make_unique<testutil::RedisServer>();
      store_ = "redis://127.0.0.1:" + std::to_string(server_->port()) + "/0";
    }
#endif
  }

  // sluice --store STORE args... with stdin `input`, to the end.
  Outcome run(std::vector<std::string> args, const std::string& input = "") {
    args.insert(args.begin(), {SLUICE_CLI, "--store", store_});
    Child c(std::move(args), env());
    c.write_stdin(input);
    c.close_stdin();
    return c.finish();
  }
  // A bash pipeline; "$SLUICE" is `sluice --store STORE`.
  Outcome shell(const std::string& script) {
    Child c({"/bin/bash", "-c", script}, env());
    c.close_stdin();
    return c.finish();
  }
  std::map<std::string, std::string> env() const {
    return {{"SLUICE", std::string(SLUICE_CLI) + " --store " + store_}};
  }
  void create(const std::string& q) {
    std::vector<std::string> args = {"create", q};
    if (!GetParam().create_flag.empty()) args.push_back(GetParam().create_flag);
    Outcome r = run(args);
    ASSERT_EQ(r.rc, 0) << r.err;
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
  std::string stat(const std::string& q, const std::string& key) {
    Outcome r = run({"stat", q});
    EXPECT_EQ(r.rc, 0) << r.err;
    const auto at = r.out.find("\n" + key + "=");
    if (at == std::string::npos) return "";
    const auto from = at + key.size() + 2;
    return r.out.substr(from, r.out.find('\n', from) - from);
  }

#ifdef SLUICE_TEST_REDIS
  std::unique_ptr<testutil::RedisServer> server_;
#endif
  std::string store_ = testutil::test_dir("cli_pipe").string();
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
  if (GetParam().create_flag == "--stream") {
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
    if (GetParam().name == "embedded") {
      EXPECT_EQ(j["seq"], i);
      EXPECT_TRUE(j["id"].is_null());
      EXPECT_TRUE(j["deliveries"].is_null());
    } else if (GetParam().name == "redis_stream") {
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

#ifdef SLUICE_TEST_REDIS
INSTANTIATE_TEST_SUITE_P(Backends, CliPipeTest,
                         ::testing::Values(Backend{"embedded", false, ""},
                                           Backend{"redis", true, ""},
                                           Backend{"redis_stream", true, "--stream"}),
                         [](const ::testing::TestParamInfo<Backend>& p) { return p.param.name; });
#else
INSTANTIATE_TEST_SUITE_P(Backends, CliPipeTest, ::testing::Values(Backend{"embedded", false, ""}),
                         [](const ::testing::TestParamInfo<Backend>& p) { return p.param.name; });
#endif

}  // namespace
}  // namespace sluice
