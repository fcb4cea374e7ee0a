// The hint after a role held elsewhere (exit 6), through the real binary: it
// must fit what the command did, waited until --timeout or gave up at once
// with --no-wait.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/cli_child.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

using testutil::CliChild;
using testutil::Outcome;

class CliRoleWaitHintTest : public ::testing::Test {
 protected:
  Outcome run(std::vector<std::string> args, const std::string& input = "") {
    return testutil::run_cli(store_, std::move(args), input);
  }
  std::string store_ = testutil::test_dir("cli-role-wait-hint").string();
};

// A put or get that waited for the whole --timeout was not given --no-wait:
// "drop --no-wait" would send its user looking for a flag that is not there.
TEST_F(CliRoleWaitHintTest, ATimeoutWhileWaitingForARoleDoesNotSayDropNoWait) {
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  // The writer role and the default channel's reader role, held.
  CliChild holder_put(store_, {"put", "q", "--metrics", "127.0.0.1:0"});
  holder_put.read_err_until("/metrics\n");  // printed once it has the role
  CliChild holder_get(store_, {"get", "q", "--metrics", "127.0.0.1:0"});
  holder_get.read_err_until("/metrics\n");

  for (const std::string cmd : {"put", "get"}) {
    SCOPED_TRACE(cmd);
    Outcome r = run({cmd, "q", "--timeout", "300ms"});
    EXPECT_EQ(r.rc, 6) << r.err;
    EXPECT_EQ(r.err.find("--no-wait"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--timeout"), std::string::npos) << r.err;

    r = run({cmd, "q", "--no-wait"});
    EXPECT_EQ(r.rc, 6) << r.err;
    EXPECT_NE(r.err.find("drop --no-wait"), std::string::npos) << r.err;
  }
  Outcome r = run({"get", "q", "--exec", "cat", "--timeout", "300ms"});
  EXPECT_EQ(r.rc, 6) << r.err;
  EXPECT_EQ(r.err.find("--no-wait"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--timeout"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace sluice
