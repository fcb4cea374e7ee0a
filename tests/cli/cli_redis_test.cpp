// The sluice command against a real redis-server (--redis, SLUICE_REDIS, the
// pressure protocol's REDIS_* variables): what a shell user sees, and that
// its queues are the protocol's, read and written by the reference client.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/cli_child.h"
#include "redis/reference_client.h"
#include "sluice/redis/pressure_queue.h"
#include "testutil/redis_server.h"
#include "testutil/temp_dir.h"
#include "testutil/wait_for.h"

#ifndef SLUICE_CLI
#error "SLUICE_CLI: the path of the sluice binary (tests/CMakeLists.txt)"
#endif

namespace sluice {
namespace {

using testutil::Child;
using testutil::Outcome;
using Env = std::map<std::string, std::string>;
using namespace std::chrono_literals;

class CliRedisTest : public ::testing::Test {
 protected:
  // Every variable that picks a store is unset unless a test sets it; the
  // default directory store lands in a temporary HOME.
  Env base_env() const { return testutil::no_store_env(home_); }
  // sluice [global...] args... with stdin `input`, in base_env() + env.
  Outcome run_with(std::vector<std::string> args, const Env& env, const std::string& input = "") {
    Env e = base_env();
    for (const auto& [k, v] : env) e[k] = v;
    args.insert(args.begin(), SLUICE_CLI);
    Child c(std::move(args), e);
    c.write_stdin(input);
    c.close_stdin();
    return c.finish();
  }
  // sluice --redis URL args...
  Outcome run(std::vector<std::string> args, const std::string& input = "") {
    args.insert(args.begin(), {"--redis", url_});
    return run_with(std::move(args), {}, input);
  }
  Child start(std::vector<std::string> args) {
    args.insert(args.begin(), {SLUICE_CLI, "--redis", url_});
    return Child(std::move(args), base_env());
  }
  // A file's contents ("" if it does not exist).
  static std::string slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  static std::string lines(int from, int to) {
    std::string s;
    for (int i = from; i < to; ++i) s += "line " + std::to_string(i) + "\n";
    return s;
  }

  testutil::RedisServer server_;
  std::string url_ = "redis://127.0.0.1:" + std::to_string(server_.port()) + "/0";
  std::string home_ = testutil::test_dir("cli_redis").string();
};

// put --timeout at the bound, on both Redis kinds: exit 9 with the count
// that went in, and exactly that many in the queue.
TEST_F(CliRedisTest, PutTimesOutAtTheBoundSayingHowManyWentIn) {
  for (const char* kind : {"", "--stream"}) {
    SCOPED_TRACE(*kind ? kind : "pressure");
    const std::string name = *kind ? "s" : "p";
    std::vector<std::string> create = {"create", name, "--bound", "2"};
    if (*kind) create.push_back(kind);
    ASSERT_EQ(run(create).rc, 0);
    Outcome r = run({"put", name, "--timeout", "300ms"}, lines(0, 4));
    EXPECT_EQ(r.rc, 9) << r.err;
    EXPECT_NE(r.err.find("2 messages enqueued"), std::string::npos) << r.err;
    r = run({"get", name, "--timeout", "0.2s"});
    EXPECT_EQ(r.rc, 9) << r.err;
    EXPECT_EQ(r.out, lines(0, 2));
  }
}

// SIGTERM ends a get waiting on an empty queue at once, not when Redis next
// ends its blocked command (at hz 1: up to a second), on both kinds; its
// role is given back, so the next get takes what comes.
TEST_F(CliRedisTest, ASignalEndsAGetBlockedOnTheServerAtOnce) {
  testutil::RawRedis raw(server_.port());
  raw.cmd({"CONFIG", "SET", "hz", "1"});
  for (const char* kind : {"", "--stream"}) {
    SCOPED_TRACE(*kind ? kind : "pressure");
    const std::string name = *kind ? "s" : "p";
    std::vector<std::string> create = {"create", name};
    if (*kind) create.push_back(kind);
    ASSERT_EQ(run(create).rc, 0);
    Child get = start({"get", name});
    get.close_stdin();
    ASSERT_TRUE(testutil::eventually([&] { return raw.blocked_clients() == 1; }));
    const auto t0 = std::chrono::steady_clock::now();
    get.signal(SIGTERM);
    const Outcome g = get.finish();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(900));
    EXPECT_EQ(g.rc, 130) << g.err;
    ASSERT_EQ(run({"put", name}, lines(0, 2)).rc, 0);
    const Outcome next = run({"get", name, "--count", "2", "--timeout", "10"});
    EXPECT_EQ(next.rc, 0) << next.err;
    EXPECT_EQ(next.out, lines(0, 2));
  }
  raw.cmd({"CONFIG", "SET", "hz", "10"});  // a shutdown waits for a tick
}

// docs/cli.md: a get still running when another client deletes its Streams
// topic exits 3 (not found). A get blocked on the server got Redis's
// "UNBLOCKED the stream key no longer exists" and exited 1.
TEST_F(CliRedisTest, AGetWaitingOnAStreamsTopicAnotherClientDeletesExitsNotFound) {
  testutil::RawRedis raw(server_.port());
  ASSERT_EQ(run({"create", "s", "--stream"}).rc, 0);
  Child get = start({"get", "s"});
  get.close_stdin();
  ASSERT_TRUE(testutil::eventually([&] { return raw.blocked_clients() == 1; }));
  ASSERT_EQ(run({"delete", "s"}).rc, 0);
  const Outcome g = get.finish();
  EXPECT_EQ(g.rc, 3) << g.err;
}

// create --max-age: recorded by a Streams topic (and applied by every
// put); refused for a pressure queue, which keeps messages until taken.
TEST_F(CliRedisTest, MaxAgeNeedsAStreamsTopic) {
  Outcome r = run({"create", "p", "--max-age", "1h"});
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--stream"), std::string::npos) << r.err;
  EXPECT_EQ(run({"ls"}).out, "");
  ASSERT_EQ(run({"create", "s", "--stream", "--max-age", "1h"}).rc, 0);
  r = run({"stat", "s"});
  EXPECT_NE(r.out.find("\nmax_age=3600\n"), std::string::npos) << r.out;
}

// --reconnect (default 60 s): get and put ride through a restart of the
// Redis server (persistent, so the queue comes back) on both kinds instead
// of ending, saying so on stderr; every message arrives. --reconnect 0
// gives up at once with the unavailable status.
TEST_F(CliRedisTest, GetAndPutRideThroughARestartOfTheServer) {
  testutil::RedisServer server(/*persistent=*/true);
  const std::string url = "redis://127.0.0.1:" + std::to_string(server.port()) + "/0";
  const auto cli = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {SLUICE_CLI, "--redis", url});
    return Child(std::move(args), base_env());
  };
  const auto run_here = [&](std::vector<std::string> args, const std::string& input = "") {
    Child c = cli(std::move(args));
    c.write_stdin(input);
    c.close_stdin();
    return c.finish();
  };
  int n = 0;
  for (const char* kind : {"", "--stream"}) {
    for (const bool exec : {false, true}) {  // get, and get --exec (one process per message)
      SCOPED_TRACE(std::string(*kind ? kind : "pressure") + (exec ? ", --exec" : ""));
      const std::string q = "q" + std::to_string(n++);
      std::vector<std::string> create = {"create", q, "--bound", "100"};
      if (*kind) create.push_back(kind);
      ASSERT_EQ(run_here(create).rc, 0);

      // A get waiting for more while the server goes away and comes back.
      // (--exec: each message is one run's stdin, without its newline.)
      Child get =
          cli(exec ? std::vector<std::string>{"get", q, "--count", "4", "--exec", "cat; echo"}
                   : std::vector<std::string>{"get", q, "--count", "4"});
      get.close_stdin();
      ASSERT_EQ(run_here({"put", q}, lines(0, 2)).rc, 0);
      EXPECT_EQ(get.read_lines(2), lines(0, 2));
      server.stop();
      EXPECT_NE(get.read_err_until("retrying").find("(--reconnect)"), std::string::npos) << get.err;
      // A put started while the server is down waits for it too.
      Child put = cli({"put", q});
      put.write_stdin(lines(2, 4));
      put.close_stdin();
      EXPECT_NE(put.read_err_until("retrying").find("retrying for up to 60 s"), std::string::npos)
          << put.err;
      server.restart();
      Outcome p = put.finish();
      EXPECT_EQ(p.rc, 0) << p.err;
      EXPECT_NE(p.err.find("reconnected after"), std::string::npos) << p.err;
      Outcome g = get.finish();
      EXPECT_EQ(g.rc, 0) << g.err;
      EXPECT_EQ(g.out, lines(0, 4));
      EXPECT_NE(g.err.find("reconnected after"), std::string::npos) << g.err;
    }
  }
  server.stop();
  Outcome r = run_here({"put", "q0", "--reconnect", "0"}, lines(0, 1));
  EXPECT_EQ(r.rc, 10) << r.err;
  EXPECT_EQ(r.err.find("retrying"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("connection refused"), std::string::npos) << r.err;
}

// get --exec's dead-letter queue is made like its queue: a Streams topic's
// dead letters go to a Streams topic (a Redis Cluster can hold no pressure
// queue), with its bound; a pressure queue's to a pressure queue.
TEST_F(CliRedisTest, ADeadLetterQueueIsOfItsQueuesKind) {
  for (const char* kind : {"", "--stream"}) {
    SCOPED_TRACE(*kind ? kind : "pressure");
    const std::string q = *kind ? "s" : "p";
    std::vector<std::string> create = {"create", q, "--bound", "7"};
    if (*kind) create.push_back(kind);
    ASSERT_EQ(run(create).rc, 0);
    ASSERT_EQ(run({"put", q}, "bad\n").rc, 0);
    Outcome r = run({"get", q, "--count", "1", "--exec", "false", "--retries", "0"});
    EXPECT_EQ(r.rc, 0) << r.err;
    const std::string st = run({"stat", q + ".dead"}).out;
    EXPECT_NE(st.find(std::string("\nkind=") + (*kind ? "stream" : "pressure") + "\n"),
              std::string::npos)
        << st;
    EXPECT_NE(st.find("\nbound=7\n"), std::string::npos) << st;
    EXPECT_EQ(run({"get", q + ".dead", "--count", "1"}).out, "bad\n");
  }
}

// get --exec on a Streams topic: a job several visibility timeouts long
// (--visibility 1s, a job of 4 s) runs once while a second get waits on the
// channel all along: the first get keeps its message claimed while the job
// runs (without that, the second takes it after a second and runs it too).
TEST_F(CliRedisTest, AJobLongerThanTheVisibilityTimeoutRunsOnce) {
  ASSERT_EQ(run({"create", "q", "--stream"}).rc, 0);
  ASSERT_EQ(run({"put", "q", "--close"}, "job\n").rc, 0);
  std::filesystem::create_directories(home_);
  const std::string runs = home_ + "/runs";
  Child first = start({"get", "q", "--visibility", "1s", "--exec",
                       "echo first >> '" + runs + "'; echo started; sleep 4"});
  ASSERT_EQ(first.read_lines(1), "started\n");
  Child second = start({"get", "q", "--exec", "echo second >> '" + runs + "'"});
  const Outcome a = first.finish();
  const Outcome b = second.finish();
  EXPECT_EQ(a.rc, 0) << a.err;
  EXPECT_EQ(b.rc, 0) << b.err;  // the topic is closed: both end once the job is acknowledged
  EXPECT_EQ(slurp(runs), "first\n");
}

// A get SIGKILLed while its job runs gives the message up after the
// channel's visibility timeout (set by the first get, 1 s; the second gets
// no --visibility): the second get, waiting for three timeouts while the
// first lived, runs it only after the kill.
TEST_F(CliRedisTest, AGetKilledWhileItsJobRunsGivesItsMessageUpAfterTheTimeout) {
  ASSERT_EQ(run({"create", "q", "--stream"}).rc, 0);
  ASSERT_EQ(run({"put", "q"}, "job\n").rc, 0);
  std::filesystem::create_directories(home_);
  const std::string runs = home_ + "/runs";
  Child first = start({"get", "q", "--visibility", "1s", "--exec", "echo $$; exec sleep 60"});
  const pid_t job = std::stoi(first.read_lines(1));
  struct Reap {  // the job has its own process group: it outlives a SIGKILLed get
    pid_t pid;
    ~Reap() { kill(pid, SIGKILL); }
  } reap{job};
  Child second = start(
      {"get", "q", "--count", "1", "--timeout", "20", "--exec", "echo second >> '" + runs + "'"});
  std::this_thread::sleep_for(std::chrono::seconds(3));  // three timeouts pass
  EXPECT_EQ(slurp(runs), "") << "taken from a get that lives";
  first.kill_now();
  const Outcome b = second.finish();
  EXPECT_EQ(b.rc, 0) << b.err;
  EXPECT_EQ(slurp(runs), "second\n");
}

// --visibility and --replicas need a Streams topic: exit 2 saying so, for a
// pressure queue and on the embedded store. stat shows a topic's replicas.
TEST_F(CliRedisTest, VisibilityAndReplicasNeedAStreamsTopic) {
  ASSERT_EQ(run({"create", "p"}).rc, 0);
  Outcome r = run({"get", "p", "--visibility", "1s", "--timeout", "5"});
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("needs a Redis Streams topic"), std::string::npos) << r.err;
  r = run({"create", "p2", "--replicas", "1"});
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("--stream"), std::string::npos) << r.err;
  EXPECT_EQ(run({"ls"}).out, "p\n");
  ASSERT_EQ(run({"create", "s", "--stream", "--replicas", "1"}).rc, 0);
  // Under a second a live reader's renewals (every third) can come late: at
  // 5 ms a second reader took a message the first still held.
  r = run({"get", "s", "--visibility", "500ms", "--timeout", "5"});
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("at least 1s"), std::string::npos) << r.err;
  r = run({"stat", "s"});
  EXPECT_NE(r.out.find("\nreplicas=1\n"), std::string::npos) << r.out;
  EXPECT_NE(run({"stat", "s", "--json"}).out.find("\"replicas\":1,"), std::string::npos);

  const std::string dir = home_ + "/store";
  r = run_with({"--store", dir, "create", "e", "--replicas", "1"}, {});
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("Redis Streams"), std::string::npos) << r.err;
  ASSERT_EQ(run_with({"--store", dir, "create", "e"}, {}).rc, 0);
  r = run_with({"--store", dir, "get", "e", "--visibility", "1s", "--timeout", "5"}, {});
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("Redis Streams"), std::string::npos) << r.err;
}

TEST_F(CliRedisTest, CreatePutGetStatLsCloseDelete) {
  Outcome r = run({"create", "jobs", "--bound", "100"});
  ASSERT_EQ(r.rc, 0) << r.err;
  ASSERT_EQ(run({"create", "other", "--bound", "0"}).rc, 0);  // unbounded
  r = run({"put", "jobs"}, lines(0, 5));
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run({"get", "jobs", "--count", "3"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, lines(0, 3));
  r = run({"stat", "jobs"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out,
            "name=jobs\nbound=100\nclosed=false\nlength=2\nwaiting=2\nin_flight=0\nproduced=5\n"
            "consumed=3\nproduced_bytes=30\nconsumed_bytes=18\nchannels=default\nkind=pressure\n"
            "max_age=0\nreplicas=0\nchannel.default.lag=2\nchannel.default.pending=0\n"
            "channel.default.dead_lettered=0\nchannel.default.purged=0\n");
  EXPECT_NE(run({"stat", "other"}).out.find("\nbound=0\n"), std::string::npos);
  r = run({"ls"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "jobs\nother\n");
  ASSERT_EQ(run({"close", "jobs"}).rc, 0);
  EXPECT_EQ(run({"close", "jobs"}).rc, 0);  // idempotent
  r = run({"put", "jobs"}, "late\n");
  EXPECT_EQ(r.rc, 5) << r.err;
  r = run({"get", "jobs"});  // closed: drains and ends
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, lines(3, 5));
  EXPECT_EQ(run({"create", "jobs"}).rc, 4);
  r = run({"delete", "jobs"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(run({"ls"}).out, "other\n");
  EXPECT_EQ(run({"delete", "jobs"}).rc, 3);
  EXPECT_EQ(run({"stat", "jobs"}).rc, 3);
  r = run({"get", "other", "--channel", "audit", "--count", "1"});
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("sluice create --stream"), std::string::npos) << r.err;
}

// A Redis Streams topic (create --stream) from the shell: named channels
// each get every message, stat shows each channel's lag and pending, ls -l
// tells the kinds apart, close ends every channel's get once drained, and
// a pressure queue asked for a named channel says how to get one.
TEST_F(CliRedisTest, AStreamsTopicHasNamedChannelsLagAndPending) {
  ASSERT_EQ(run({"create", "events", "--bound", "100", "--stream"}).rc, 0);
  ASSERT_EQ(run({"create", "jobs"}).rc, 0);
  Outcome r = run({"put", "events"}, lines(0, 5));
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run({"get", "events", "--channel", "audit", "--count", "5"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, lines(0, 5));
  r = run({"get", "events", "--count", "3"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, lines(0, 3));
  r = run({"stat", "events"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out,
            "name=events\nbound=100\nclosed=false\nlength=2\nproduced=5\nconsumed=3\n"
            "produced_bytes=30\nchannels=audit,default\nkind=stream\nmax_age=0\nreplicas=0\n"
            "channel.audit.lag=0\nchannel.audit.pending=0\nchannel.audit.dead_lettered=0\nchannel."
            "audit.purged=0\n"
            "channel.default.lag=2\nchannel.default.pending=0\n"
            "channel.default.dead_lettered=0\nchannel.default.purged=0\n");
  // Streams topics count the bytes put, not those taken, and have no
  // waiting list (docs/cli.md): left out above, null in JSON.
  r = run({"stat", "events", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("\"length\":2,\"waiting\":null,\"in_flight\":null,\"produced\":5,"
                       "\"consumed\":3,\"produced_bytes\":30,\"consumed_bytes\":null,"),
            std::string::npos)
      << r.out;
  r = run({"ls", "-l"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "events\tstream\taudit,default\njobs\tpressure\tdefault\n");

  ASSERT_EQ(run({"close", "events"}).rc, 0);
  r = run({"put", "events"}, "late\n");
  EXPECT_EQ(r.rc, 5) << r.err;  // closed
  r = run({"get", "events"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, lines(3, 5));
  r = run({"get", "events", "--channel", "audit"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "");

  r = run({"get", "jobs", "--channel", "audit"});
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("sluice create --stream"), std::string::npos) << r.err;
  r = run({"create", "events", "--stream"});
  EXPECT_EQ(r.rc, 4) << r.err;
  ASSERT_EQ(run({"delete", "events"}).rc, 0);
  EXPECT_EQ(run({"stat", "events"}).rc, 3);
}

// (get with --reconnect 0: by default it retries for 60 s, saying so on a
// line of its own, GetAndPutRideThroughARestartOfTheServer.)
TEST_F(CliRedisTest, ADeadRedisExitsTenWithOneLineNamingIt) {
  const std::string where = "127.0.0.1:" + std::to_string(server_.port());
  server_.stop();
  for (std::vector<std::string> args : {std::vector<std::string>{"stat", "q"},
                                        {"ls"},
                                        {"create", "q"},
                                        {"get", "q", "--count", "1", "--reconnect", "0"}}) {
    Outcome r = run(args);
    EXPECT_EQ(r.rc, 10) << args[0] << ": " << r.err;
    EXPECT_NE(r.err.find(where), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

// An IPv6 address goes in brackets (docs/cli.md, "URL"); unbracketed, the
// command exits 2 saying so.
TEST_F(CliRedisTest, AnIPv6AddressGoesInBrackets) {
  Outcome r = run_with({"--redis", "redis://::1", "ls"}, {});
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("brackets"), std::string::npos) << r.err;
  // Bracketed, the address parses (TransportEdges.UrlWithBracketedIpv6Host
  // has the host and port); nothing listens there, so the store is
  // unreachable (10), not a bad URL (2).
  r = run_with({"--redis", "redis://[::1]:1/0", "ls"}, {});
  EXPECT_EQ(r.rc, 10) << r.err;
}

TEST_F(CliRedisTest, APasswordIsCheckedAndNeverPrinted) {
  testutil::RedisServer locked(false, {"requirepass s3cr:t@x"});
  const std::string at = "127.0.0.1:" + std::to_string(locked.port()) + "/0";
  Outcome r = run_with({"--redis", "redis://:wrong@" + at, "ls"}, {});
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("authentication failed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("PASSWORD"), std::string::npos) << r.err;  // the hint says where
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  r = run_with({"--redis", "redis://" + at, "create", "q"}, {});
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("authentication failed"), std::string::npos) << r.err;
  // Percent-encoded in the URL, or plain in REDIS_PASSWORD.
  r = run_with({"--redis", "redis://:s3cr%3At%40x@" + at, "create", "q"}, {});
  EXPECT_EQ(r.rc, 0) << r.err;
  r = run_with({"stat", "q"},
               {{"REDIS_PORT", std::to_string(locked.port())}, {"REDIS_PASSWORD", "s3cr:t@x"}});
  EXPECT_EQ(r.rc, 0) << r.err;
  // A store that fails to open names its location, without the password.
  r = run_with({"--redis", "redis://:s3cr@h:notaport/0", "ls"}, {});
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_EQ(r.err.find("s3cr"), std::string::npos) << r.err;
}

TEST_F(CliRedisTest, LocationsFromTheEnvironmentInOrder) {
  ASSERT_EQ(run({"create", "here"}).rc, 0);
  const std::string port = std::to_string(server_.port());
  // The pressure protocol's variables, when nothing else names a store.
  Outcome r = run_with({"ls"}, {{"REDIS_SERVER", "127.0.0.1"}, {"REDIS_PORT", port}});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "here\n");
  // SLUICE_REDIS comes first; SLUICE_STORE before it; --store before all.
  r = run_with({"ls"}, {{"SLUICE_REDIS", url_}, {"REDIS_PORT", "1"}});
  EXPECT_EQ(r.out, "here\n") << r.err;
  const std::string dir = testutil::test_dir("cli_redis_dir").string();
  r = run_with({"ls"}, {{"SLUICE_STORE", dir}, {"SLUICE_REDIS", url_}});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "");
  r = run_with({"--store", dir, "ls"}, {{"REDIS_PORT", port}});
  EXPECT_EQ(r.out, "");
  // PRESSURE_PREFIX picks the key space.
  r = run_with({"--redis", url_, "create", "p"}, {{"PRESSURE_PREFIX", "mine"}});
  ASSERT_EQ(r.rc, 0) << r.err;
  testutil::RawRedis raw(server_.port());
  EXPECT_EQ(raw.get("mine:p:bound"), "1000");
  EXPECT_EQ(run_with({"--redis", url_, "ls"}, {{"PRESSURE_PREFIX", "mine"}}).out, "p\n");
  EXPECT_EQ(run({"ls"}).out, "here\n");
  // Usage errors.
  r = run_with({"--redis", url_, "--store", dir, "ls"}, {});
  EXPECT_EQ(r.rc, 2) << r.err;
  r = run_with({"--redis", "rediss://:hush@127.0.0.1:" + port, "ls"}, {});
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("TLS"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("hush"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// A get killed mid-stream loses nothing: what it had taken and not
// acknowledged is put back at the head of the queue by the next get.
TEST_F(CliRedisTest, GetKilledMidStreamLosesNothing) {
  constexpr int kLines = 3000;
  ASSERT_EQ(run({"create", "q", "--bound", "10000"}).rc, 0);
  Outcome p = run({"put", "q"}, lines(0, kLines));
  ASSERT_EQ(p.rc, 0) << p.err;

  std::string first;
  {
    Child c = start({"get", "q", "--batch", "7"});
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
  Outcome st = run({"stat", "q"});
  EXPECT_NE(st.out.find("length=0\n"), std::string::npos) << st.out;
}

// A put whose reply never comes (the server is stopped after the put took the
// writer role) cannot know whether its messages went in: it says so, and
// counts none of them as sent.
TEST_F(CliRedisTest, APutWhoseReplyIsLostSaysItsMessagesAreInDoubt) {
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  // --reconnect 0: no retry (which would send the three again, at least once).
  Child put = start({"put", "q", "--metrics", "127.0.0.1:0", "--reconnect", "0"});
  put.read_err_until("/metrics\n");  // printed once it has the writer
  server_.pause();                   // SIGSTOP: the request is sent, no reply comes
  put.write_stdin("a\nb\nc\n");
  put.close_stdin();
  Outcome r = put.finish();  // after the 5 s reply timeout
  server_.resume();
  EXPECT_EQ(r.rc, 10) << r.err;
  EXPECT_NE(r.err.find("0 messages enqueued; 3 more may or may not have been"), std::string::npos)
      << r.err;
  // One script holds the three: all went in or none did.
  Outcome st = run({"stat", "q"});
  ASSERT_EQ(st.rc, 0) << st.err;
  EXPECT_TRUE(st.out.find("\nproduced=0\n") != std::string::npos ||
              st.out.find("\nproduced=3\n") != std::string::npos)
      << st.out;

  // With --reconnect (the default), the put sends the three again once the
  // server answers, and says they may be in twice: at least once.
  const std::string before = st.out.find("\nproduced=3\n") != std::string::npos ? "3" : "0";
  Child again = start({"put", "q", "--metrics", "127.0.0.1:0"});
  again.read_err_until("/metrics\n");
  server_.pause();
  again.write_stdin("a\nb\nc\n");
  again.close_stdin();
  again.read_err_until("retrying");  // after the 5 s reply timeout
  server_.resume();
  r = again.finish();
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("3 messages were sent again after a connection broke with them in doubt"),
            std::string::npos)
      << r.err;
  st = run({"stat", "q"});
  const int produced = std::stoi(st.out.substr(st.out.find("\nproduced=") + 10));
  EXPECT_TRUE(produced == std::stoi(before) + 3 || produced == std::stoi(before) + 6) << st.out;
}

TEST_F(CliRedisTest, InterleavesWithThePressureProtocolsReferenceClient) {
  testutil::ReferenceClient ref(server_.port(), "q");
  ASSERT_EQ(run({"create", "q", "--bound", "50"}).rc, 0);
  // sluice -> reference client.
  ASSERT_EQ(run({"put", "q"}, "a\nb\n").rc, 0);
  EXPECT_EQ(ref.get(), "a");
  ref.put("c");
  EXPECT_EQ(ref.get(), "b");
  // reference client -> sluice, after sluice's own.
  ref.put("d");
  ASSERT_EQ(run({"put", "q"}, "e\n").rc, 0);
  Outcome r = run({"get", "q", "--count", "3"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "c\nd\ne\n");
  r = run({"stat", "q"});
  EXPECT_EQ(r.out,
            "name=q\nbound=50\nclosed=false\nlength=0\nwaiting=0\nin_flight=0\nproduced=5\n"
            "consumed=5\nproduced_bytes=5\nconsumed_bytes=5\nchannels=default\nkind=pressure\n"
            "max_age=0\nreplicas=0\nchannel.default.lag=0\nchannel.default.pending=0\n"
            "channel.default.dead_lettered=0\nchannel.default.purged=0\n");
  // A queue the reference client made is a sluice queue; its close ends a get.
  testutil::ReferenceClient ref2(server_.port(), "theirs");
  ref2.create(0);
  ref2.put("x");
  ref2.close();
  EXPECT_EQ(run({"ls"}).out, "q\ntheirs\n");
  r = run({"get", "theirs"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "x\n");
  // And sluice's delete removes every key the protocol defines.
  ASSERT_EQ(run({"delete", "q"}).rc, 0);
  EXPECT_FALSE(ref.exists());
  testutil::RawRedis raw(server_.port());
  EXPECT_TRUE(raw.dump("__pressure__:q*", "").empty());
}

// A get killed while its command runs leaves the batch in flight. Then the
// reference client, which knows only the protocol's 12 keys, deletes the
// queue, and it is made again: by `sluice create` (which removes the old
// in-flight list) or by the reference client (sluice never sees the
// re-create; the list's mark tells it from the new queue). Either way the
// next get delivers the new queue's messages and none of the old.
TEST_F(CliRedisTest, AKilledGetsMessagesStayDeletedWhenTheQueueIsMadeAgain) {
  for (const bool sluice_creates : {true, false}) {
    SCOPED_TRACE(sluice_creates ? "made again by sluice create" : "by the reference client");
    ASSERT_EQ(run({"create", "q", "--bound", "10"}).rc, 0);
    ASSERT_EQ(run({"put", "q"}, lines(0, 3)).rc, 0);
    const std::filesystem::path dir = testutil::test_dir("cli_redis_files");
    std::filesystem::create_directories(dir);
    const std::string started = dir / "started";
    {
      // The command runs until its parent, the get, is gone (it is then
      // another process's child: a killed get stays a zombie until reaped).
      Child get = start({"get", "q", "--exec",
                         "echo x >> " + started +
                             "; while [ \"$(cut -d' ' -f4 /proc/$$/stat)\" = $PPID ]; do sleep "
                             "0.01; done"});
      ASSERT_TRUE(testutil::eventually([&] { return std::filesystem::exists(started); }));
      get.kill_now();
      get.finish();  // once the command has ended too (it shares the output)
    }
    Outcome st = run({"stat", "q"});
    ASSERT_NE(st.out.find("\nlength=3\n"), std::string::npos) << st.out;
    ASSERT_NE(st.out.find("\nconsumed=0\n"), std::string::npos) << st.out;

    testutil::ReferenceClient ref(server_.port(), "q");
    ref.del();
    std::string fresh;
    if (sluice_creates) {
      ASSERT_EQ(run({"create", "q", "--bound", "10"}).rc, 0);
      fresh = lines(10, 15);  // more puts than the old queue had: the mark cannot tell
      ASSERT_EQ(run({"put", "q"}, fresh).rc, 0);
    } else {
      ref.create(10);
      ref.put("line 10");
      fresh = "line 10\n";
    }
    Outcome r = run({"get", "q", "--timeout", "1"});
    EXPECT_EQ(r.rc, 9) << r.err;  // the timeout ended it: nothing more to get
    EXPECT_EQ(r.out, fresh);
    st = run({"stat", "q"});
    EXPECT_NE(st.out.find("\nlength=0\n"), std::string::npos) << st.out;
    ASSERT_EQ(run({"delete", "q"}).rc, 0);
  }
}

// A pressure queue's length adds the messages waiting in the queue and those
// readers hold unacknowledged, so a full queue with a reader holding as many
// shows twice its bound: stat says which is which, with the byte counters the
// protocol keeps. A dead reader's messages go back to the queue at the next
// reader's open, past the bound, and stat shows that too.
TEST_F(CliRedisTest, StatSplitsAPressureQueuesLengthIntoWaitingAndInFlight) {
  ASSERT_EQ(run({"create", "q", "--bound", "3"}).rc, 0);
  ASSERT_EQ(run({"put", "q"}, lines(0, 3)).rc, 0);
  // A reader of the store (its consumer name) whose process has exited.
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  std::array<char, 256> host{};
  gethostname(host.data(), host.size() - 1);
  const std::string reader = "sluice.default." + std::string(host.data()) + "_pid" +
                             std::to_string(pid) + "_tid" + std::to_string(pid) + "_r0";
  PressureQueue q(server_.options(), "q");
  std::vector<std::string> held;
  ASSERT_TRUE(q.get_many_reliable(reader, held, 3).ok());
  ASSERT_EQ(held.size(), 3U);
  ASSERT_TRUE(q.ack(reader, 1).ok());
  ASSERT_EQ(run({"put", "q"}, lines(3, 6)).rc, 0);  // in-flight ones leave room

  Outcome r = run({"stat", "q"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out,
            "name=q\nbound=3\nclosed=false\nlength=5\nwaiting=3\nin_flight=2\nproduced=6\n"
            "consumed=1\nproduced_bytes=36\nconsumed_bytes=6\nchannels=default\nkind=pressure\n"
            "max_age=0\nreplicas=0\nchannel.default.lag=3\nchannel.default.pending=2\n"
            "channel.default.dead_lettered=0\nchannel.default.purged=0\n");
  r = run({"stat", "q", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("\"length\":5,\"waiting\":3,\"in_flight\":2,\"produced\":6,\"consumed\":1,"
                       "\"produced_bytes\":36,\"consumed_bytes\":6,"),
            std::string::npos)
      << r.out;

  // The next reader puts the dead one's two back at the head: 5 wait for a
  // bound of 3; it takes one.
  r = run({"get", "q", "--count", "1"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "line 1\n");
  r = run({"stat", "q"});
  EXPECT_NE(r.out.find("\nlength=4\nwaiting=4\nin_flight=0\nproduced=6\nconsumed=2\n"
                       "produced_bytes=36\nconsumed_bytes=12\n"),
            std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace sluice
