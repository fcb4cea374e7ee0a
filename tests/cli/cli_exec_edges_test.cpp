// get --exec edge cases through the real binary: plain commands (run
// directly, without the shell) must behave as `/bin/sh -c CMD` would.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/cli_child.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

using testutil::Outcome;

class CliExecEdgesTest : public ::testing::Test {
 protected:
  void SetUp() override { std::filesystem::create_directories(dir_); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  Outcome run(std::vector<std::string> args, const std::string& input = "") {
    return testutil::run_cli(store_, std::move(args), input);
  }
  std::string stat(const std::string& q) { return run({"stat", q}).out; }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  std::string store_ = testutil::test_dir("cli-exec-edges").string();
  std::filesystem::path dir_ = testutil::test_dir("cli-exec-edges-files");
};

// A CMD of plain words whose first word is a shell builtin or keyword
// (`exec`, `:`, `read`, `cd`, ...) has no program on PATH: it must still run
// as the shell runs it, not stop the get with 127 "not found".
TEST_F(CliExecEdgesTest, PlainCommandsThatAreShellBuiltinsRunThroughTheShell) {
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  ASSERT_EQ(run({"put", "q", "--close"}, "a\nb\n").rc, 0);
  Outcome r = run({"get", "q", "--exec", "exec cat"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "ab");
  EXPECT_NE(stat("q").find("consumed=2\n"), std::string::npos) << stat("q");

  ASSERT_EQ(run({"create", "q2"}).rc, 0);
  ASSERT_EQ(run({"put", "q2", "--close"}, "a\nb\n").rc, 0);
  r = run({"get", "q2", "--exec", ":"});  // the shell's no-op: succeeds
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(stat("q2").find("consumed=2\n"), std::string::npos) << stat("q2");

  ASSERT_EQ(run({"create", "q3"}).rc, 0);
  ASSERT_EQ(run({"put", "q3", "--close"}, "a\n").rc, 0);
  r = run({"get", "q3", "--exec", "exit 3", "--retries", "0"});  // a failure, dead-lettered
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("(last: exit 3); moved to queue 'q3.dead'"), std::string::npos) << r.err;
}

// An executable text file without a #! line: the shell runs it as a script
// (execve's ENOEXEC); run directly it must not be "not executable" (126).
TEST_F(CliExecEdgesTest, AnExecutableScriptWithoutShebangRunsAsTheShellRunsIt) {
  const std::string script = file("handler");
  std::ofstream(script) << "cat\necho\n";
  ASSERT_EQ(::chmod(script.c_str(), 0755), 0);
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  ASSERT_EQ(run({"put", "q", "--close"}, "a\nb\n").rc, 0);
  Outcome r = run({"get", "q", "--exec", script});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "a\nb\n");
  EXPECT_NE(stat("q").find("consumed=2\n"), std::string::npos) << stat("q");
}

// `sluice get q --exec cat | head -c 1`: once head is gone, every command
// writing to sluice's stdout dies of SIGPIPE. That is not the messages'
// fault: they must not be retried into the dead-letter queue and
// acknowledged; the get stops as a plain get does when its reader goes
// (exit 7), and what was not done comes again.
TEST_F(CliExecEdgesTest, AClosedStdoutStopsTheGetInsteadOfDeadLetteringEveryMessage) {
  ASSERT_EQ(run({"create", "q"}).rc, 0);
  std::string input;
  for (int i = 0; i < 20; ++i) input += "m" + std::to_string(i) + "\n";
  ASSERT_EQ(run({"put", "q", "--close"}, input).rc, 0);
  const std::string rc_file = file("rc");
  testutil::Child sh({"/bin/sh", "-c",
                      "{ \"$0\" --store \"$1\" get q --exec cat; echo $? > \"$2\"; } | head -c 2",
                      SLUICE_CLI, store_, rc_file});
  sh.close_stdin();
  Outcome o = sh.finish();
  EXPECT_EQ(o.out, "m0");
  std::ifstream in(rc_file);
  int rc = -1;
  in >> rc;
  EXPECT_EQ(rc, 7) << o.err;
  EXPECT_NE(o.err.find("stdout"), std::string::npos) << o.err;
  EXPECT_EQ(o.err.find("moved to"), std::string::npos) << o.err;
  EXPECT_EQ(run({"ls"}).out, "q\n");  // nothing was dead-lettered
  EXPECT_EQ(stat("q").find("consumed=20\n"), std::string::npos) << stat("q");
}

}  // namespace
}  // namespace sluice
