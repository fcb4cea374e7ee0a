// sluice put/get --metrics: the real binary serves Prometheus text over HTTP
// while it runs; scraped here with a plain socket and checked by a strict
// parser of the format.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "cli/cli_child.h"
#include "cli/metrics_client.h"
#include "testutil/prometheus.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

using testutil::CliChild;
using testutil::Outcome;
using testutil::parse_prometheus;
using testutil::port_in;
using testutil::run_cli;
using testutil::scrape;

// Polls the scrape until `key` reads `want` (a state, not a moment): counters
// move just after what the test can see from outside.
testutil::Exposition scrape_until(int port, const std::string& key, double want) {
  testutil::Exposition e;
  for (int i = 0; i < 5000; ++i) {
    e = parse_prometheus(scrape(port));
    if (e.at(key) == want) break;
  }
  return e;
}

class CliMetricsTest : public ::testing::Test {
 protected:
  Outcome run(std::vector<std::string> args, const std::string& input = "") {
    return run_cli(store_, std::move(args), input);
  }
  std::string store_ = testutil::test_dir("cli-metrics").string();
};

TEST_F(CliMetricsTest, AWaitingGetServesItsCountsAndTheQueue) {
  ASSERT_EQ(run({"create", "q", "--bound", "100"}).rc, 0);
  CliChild get(store_, {"get", "q", "--count", "7", "--metrics", "127.0.0.1:0"});
  const int port = port_in(get.read_err_until("/metrics\n"));
  ASSERT_GT(port, 0) << get.err;

  auto before = parse_prometheus(scrape(port));
  ASSERT_EQ(before.error, "");
  EXPECT_EQ(before.at("sluice_cli_messages_total{command=\"get\",queue=\"q\"}"), 0);
  EXPECT_EQ(before.at("sluice_store_bound{command=\"get\",queue=\"q\"}"), 100);

  // Five messages of 3 bytes: get writes them, and acknowledges them once
  // they are read out of the pipe; then it waits.
  ASSERT_EQ(run({"put", "q"}, "aaa\nbbb\nccc\nddd\neee\n").rc, 0);
  get.read_lines(5);
  // The counters move once get has seen the pipe empty.
  auto e = scrape_until(port, "sluice_cli_messages_total{command=\"get\",queue=\"q\"}", 5);
  ASSERT_EQ(e.error, "");
  EXPECT_EQ(e.at("sluice_cli_messages_total{command=\"get\",queue=\"q\"}"), 5);
  EXPECT_EQ(e.at("sluice_cli_bytes_total{command=\"get\",queue=\"q\"}"), 15);
  EXPECT_EQ(e.at("sluice_store_produced_total{command=\"get\",queue=\"q\"}"), 5);
  EXPECT_EQ(e.at("sluice_store_consumed_total{command=\"get\",queue=\"q\"}"), 5);
  EXPECT_EQ(e.at("sluice_store_length{command=\"get\",queue=\"q\"}"), 0);
  EXPECT_EQ(e.types["sluice_cli_messages_total"], "counter");

  ASSERT_EQ(run({"put", "q"}, "f\ng\n").rc, 0);
  Outcome r = get.finish();  // --count 7 reached: it exits, and its server with it
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(scrape(port), "");
}

TEST_F(CliMetricsTest, APutHeldAtTheBoundShowsTheQueueFullThenTheWait) {
  ASSERT_EQ(run({"create", "q", "--bound", "3"}).rc, 0);
  CliChild put(store_, {"put", "q", "--metrics", ":0"});
  const int port = port_in(put.read_err_until("/metrics\n"));
  ASSERT_GT(port, 0) << put.err;
  put.write_stdin("1\n2\n3\n4\n5\n");  // two more than the bound: it waits
  auto e = scrape_until(port, "sluice_store_length{command=\"put\",queue=\"q\"}", 3);
  ASSERT_EQ(e.error, "");
  EXPECT_EQ(e.at("sluice_store_length{command=\"put\",queue=\"q\"}"), 3);
  EXPECT_EQ(e.at("sluice_store_produced_total{command=\"put\",queue=\"q\"}"), 3);

  Outcome g = run({"get", "q", "--count", "5"});
  EXPECT_EQ(g.out, "1\n2\n3\n4\n5\n");
  e = scrape_until(port, "sluice_cli_messages_total{command=\"put\",queue=\"q\"}", 5);
  EXPECT_EQ(e.at("sluice_cli_messages_total{command=\"put\",queue=\"q\"}"), 5);
  EXPECT_EQ(e.at("sluice_cli_bytes_total{command=\"put\",queue=\"q\"}"), 5);
  EXPECT_GT(e.at("sluice_cli_blocked_seconds_total{command=\"put\",queue=\"q\"}"), 0);
  put.close_stdin();
  Outcome r = put.finish();
  EXPECT_EQ(r.rc, 0) << r.err;
}

TEST_F(CliMetricsTest, GetExecCountsRunsAndDeadLetters) {
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  ASSERT_EQ(run({"put", "q"}, "ok\nbad\nok\n").rc, 0);
  // Fails on "bad": two runs (--retries 1), then the dead-letter queue.
  CliChild get(
      store_, {"get", "q", "--exec", "grep -qv bad", "--retries", "1", "--metrics", "127.0.0.1:0"});
  const int port = port_in(get.read_err_until("/metrics\n"));
  ASSERT_GT(port, 0) << get.err;
  const std::string l = "command=\"get\",queue=\"q\"";
  auto e = scrape_until(port, "sluice_cli_messages_total{" + l + "}", 3);
  ASSERT_EQ(e.error, "");
  EXPECT_EQ(e.at("sluice_cli_messages_total{" + l + "}"), 3);
  EXPECT_EQ(e.at("sluice_cli_bytes_total{" + l + "}"), 7);
  EXPECT_EQ(e.at("sluice_cli_exec_runs_total{" + l + ",outcome=\"ok\"}"), 2);
  EXPECT_EQ(e.at("sluice_cli_exec_runs_total{" + l + ",outcome=\"failed\"}"), 2);
  EXPECT_EQ(e.at("sluice_cli_dead_lettered_total{" + l + "}"), 1);
  ASSERT_EQ(run({"close", "q"}).rc, 0);
  Outcome r = get.finish();
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(run({"get", "q.dead", "--count", "1"}).out, "bad\n");
}

TEST_F(CliMetricsTest, BadAddressesAreUsageErrors) {
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  Outcome r = run({"get", "q", "--metrics", "nonsense"});
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("HOST:PORT"), std::string::npos) << r.err;
  r = run({"get", "q", "--metrics", "127.0.0.1:99999"});
  EXPECT_EQ(r.rc, 2) << r.err;

  CliChild holder(store_, {"get", "q", "--metrics", "127.0.0.1:0"});
  const int port = port_in(holder.read_err_until("/metrics\n"));
  ASSERT_GT(port, 0) << holder.err;
  r = run({"put", "q", "--metrics", "127.0.0.1:" + std::to_string(port)}, "x\n");
  EXPECT_EQ(r.rc, 2) << r.err;  // the port is taken
  EXPECT_NE(r.err.find("cannot listen"), std::string::npos) << r.err;
  EXPECT_EQ(run({"stat", "q"}).out.find("produced=0") != std::string::npos, true);
}

}  // namespace
}  // namespace sluice
