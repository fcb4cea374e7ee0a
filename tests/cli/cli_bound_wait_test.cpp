// A put held at the queue's bound counts its wait (backpressure) on every
// backend: the --metrics counter sluice_cli_blocked_seconds_total (and the
// progress line's "waited at the bound") grows while the put waits. On Redis
// it read 0 however long the put waited; the embedded store added a wait
// only once it ended.
#include <gtest/gtest.h>

#include <string>

#include "cli/cli_backends.h"
#include "cli/metrics_client.h"
#include "testutil/prometheus.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using testutil::Child;
using testutil::CliBackendTest;
using testutil::parse_prometheus;
using testutil::port_in;
using testutil::scrape;

using CliBoundWaitTest = CliBackendTest;

TEST_P(CliBoundWaitTest, APutHeldAtTheBoundCountsItsWaitWhileItWaits) {
  create("q", "3");
  Child put(cmd({"put", "q", "--metrics", ":0"}));
  const int port = port_in(put.read_err_until("/metrics\n"));
  ASSERT_GT(port, 0) << put.err;
  put.write_stdin("1\n2\n3\n4\n5\n");  // two more than the bound: it waits
  const std::string length = "sluice_store_length{command=\"put\",queue=\"q\"}";
  const std::string blocked = "sluice_cli_blocked_seconds_total{command=\"put\",queue=\"q\"}";
  testutil::Exposition e;
  const auto scraped = [&] {
    e = parse_prometheus(scrape(port));
    return e.error.empty() && e.at(length) == 3 && e.at(blocked) > 0;
  };
  // Counted while it waits (the embedded store counted a wait once it
  // ended; Redis not at all).
  ASSERT_TRUE(testutil::eventually(scraped))
      << e.error << " length " << e.at(length) << ", blocked " << e.at(blocked);

  const testutil::Outcome g = run({"get", "q", "--count", "5"});
  EXPECT_EQ(g.out, "1\n2\n3\n4\n5\n") << g.err;
  ASSERT_TRUE(testutil::eventually([&] {
    e = parse_prometheus(scrape(port));
    return e.error.empty() && e.at(blocked) > 0;
  })) << e.error
      << " blocked " << e.at(blocked);
  put.close_stdin();
  const testutil::Outcome p = put.finish();
  EXPECT_EQ(p.rc, 0) << p.err;
}

INSTANTIATE_TEST_SUITE_P(Backends, CliBoundWaitTest, SLUICE_CLI_BACKENDS, testutil::backend_name);

}  // namespace
}  // namespace sluice
