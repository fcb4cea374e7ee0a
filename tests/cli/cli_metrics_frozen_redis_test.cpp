// sluice --metrics with a Redis that does not answer (stopped with SIGSTOP):
// a scrape must not wait for the queue's stat (up to the 5 s Redis timeout)
// nor hold the other scrapes behind it; it answers with the command's own
// counters and the queue as last known, saying how old that is.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <string>
#include <vector>

#include "cli/cli_child.h"
#include "cli/metrics_client.h"
#include "testutil/prometheus.h"
#include "testutil/redis_server.h"
#include "testutil/temp_dir.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using testutil::Child;
using testutil::Outcome;
using testutil::parse_prometheus;
using testutil::port_in;
using testutil::scrape;
using Clock = std::chrono::steady_clock;

TEST(CliMetricsFrozenRedisTest, ScrapesAnswerPromptlyWithTheLastKnownQueue) {
  testutil::RedisServer server;
  const std::string url = "redis://127.0.0.1:" + std::to_string(server.port()) + "/0";
  const auto env = testutil::no_store_env(testutil::test_dir("cli-metrics-frozen").string());
  const auto run = [&](std::vector<std::string> args, const std::string& input) {
    args.insert(args.begin(), {SLUICE_CLI, "--redis", url});
    Child c(std::move(args), env);
    c.write_stdin(input);
    c.close_stdin();
    return c.finish();
  };
  ASSERT_EQ(run({"create", "q", "--bound", "7"}, "").rc, 0);
  Child put({SLUICE_CLI, "--redis", url, "put", "q", "--metrics", "127.0.0.1:0"}, env);
  const int port = port_in(put.read_err_until("/metrics\n"));
  ASSERT_GT(port, 0) << put.err;
  const std::string labels = "{command=\"put\",queue=\"q\"}";

  testutil::Exposition e = parse_prometheus(scrape(port));
  EXPECT_EQ(e.at("sluice_store_bound" + labels), 7);
  EXPECT_EQ(e.at("sluice_store_stat_ok" + labels), 1);

  server.pause();  // SIGSTOP: every stat now waits for the Redis timeout (5 s)
  const auto t0 = Clock::now();
  std::vector<std::future<std::string>> scrapes;
  for (int i = 0; i < 3; ++i) scrapes.push_back(std::async(std::launch::async, scrape, port));
  std::vector<std::string> bodies;
  for (auto& s : scrapes) bodies.push_back(s.get());
  const auto took = Clock::now() - t0;
  server.resume();
  EXPECT_LT(took, std::chrono::milliseconds(2500)) << "scrapes waited for the frozen Redis";
  for (const std::string& body : bodies) {
    e = parse_prometheus(body);
    EXPECT_EQ(e.error, "") << body;
    EXPECT_EQ(e.at("sluice_cli_messages_total" + labels), 0) << body;
    EXPECT_EQ(e.at("sluice_store_bound" + labels), 7) << body;  // the last known
    EXPECT_EQ(e.at("sluice_store_stat_ok" + labels), 0) << body;
    EXPECT_GE(e.at("sluice_store_stat_age_seconds" + labels), 0) << body;
  }

  // Redis back: a scrape gets a fresh stat again.
  EXPECT_TRUE(testutil::eventually(
      [&] { return parse_prometheus(scrape(port)).at("sluice_store_stat_ok" + labels) == 1; },
      std::chrono::seconds(20)));
  put.close_stdin();
  const Outcome o = put.finish();
  EXPECT_EQ(o.rc, 0) << o.err;
}

}  // namespace
}  // namespace sluice
