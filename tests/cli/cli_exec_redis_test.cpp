// get --exec against a real redis-server: what a command inherits. The
// store's connections (hiredis sockets) are sluice's, not the command's: a
// command holding one keeps sluice's client alive in the server after
// sluice is gone, and may talk to Redis as sluice.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_child.h"
#include "testutil/redis_server.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

using testutil::Child;
using testutil::Outcome;

class CliExecRedisTest : public ::testing::Test {
 protected:
  Outcome run(std::vector<std::string> args, const std::string& input = "") {
    args.insert(args.begin(), {SLUICE_CLI, "--redis", url_});
    Child c(std::move(args), {{"SLUICE_STORE", ""}, {"SLUICE_REDIS", ""}, {"HOME", home_}});
    c.write_stdin(input);
    c.close_stdin();
    return c.finish();
  }

  testutil::RedisServer server_;
  std::string url_ = "redis://127.0.0.1:" + std::to_string(server_.port()) + "/0";
  std::string home_ = testutil::test_dir("cli-exec-redis").string();
};

// On both Redis kinds: each command's fds are its stdin pipe, sluice's stdout
// and stderr, and what sluice itself inherited from this test; no socket.
TEST_F(CliExecRedisTest, CommandsInheritNoRedisConnection) {
  std::set<std::string> ours;  // this process's fds that sluice inherits (not O_CLOEXEC)
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const int fd = std::stoi(e.path().filename().string());
    if (fcntl(fd, F_GETFD) == 0) ours.insert(std::filesystem::read_symlink(e.path(), ec).string());
  }
  for (const char* kind : {"", "--stream"}) {
    SCOPED_TRACE(*kind ? kind : "pressure");
    const std::string q = *kind ? "s" : "p";
    std::vector<std::string> create = {"create", q};
    if (*kind) create.push_back(kind);
    ASSERT_EQ(run(create).rc, 0);
    ASSERT_EQ(run({"put", q, "--close"}, "a\nb\nc\nd\n").rc, 0);
    // "; true": the shell must not exec ls in its place; $$ is the shell.
    // --parallel 2: workers spawn while the source reads and acknowledges.
    Outcome r = run({"get", q, "--exec", "cat >/dev/null; ls -l /proc/$$/fd; true", "--parallel",
                     "2", "--batch", "2", "--dead-letter", q + ".dl"});
    ASSERT_EQ(r.rc, 0) << r.err;
    std::istringstream in(r.out);
    int listed = 0;
    for (std::string l; std::getline(in, l);) {
      const std::size_t arrow = l.find(" -> ");
      if (arrow == std::string::npos) continue;
      const std::size_t sp = l.rfind(' ', arrow - 1);
      const int fd = std::stoi(l.substr(sp + 1, arrow - sp - 1));
      const std::string target = l.substr(arrow + 4);
      ++listed;
      if (fd <= 2) continue;
      EXPECT_TRUE(ours.contains(target)) << "fd " << fd << " -> " << target << " leaked";
    }
    EXPECT_GE(listed, 4 * 3) << r.out;  // each of the 4 commands listed at least 0-2
  }
}

}  // namespace
}  // namespace sluice
