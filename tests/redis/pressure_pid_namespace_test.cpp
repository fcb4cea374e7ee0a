// Pressure queues from processes in PID namespaces of their own on one
// host, as containers with host networking run (Kubernetes' hostNetwork
// pods: the node's hostname, their own process numbers). By hostname and
// PID alone two such processes have one id, and a process table that is
// not the holder's says nothing about it. Needs CAP_SYS_ADMIN (unshare);
// skipped without it.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>

#include "redis/transport/host_id.h"
#include "sluice/redis/pressure_queue.h"
#include "testutil/redis_server.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testutil::RawRedis;
using testutil::RedisServer;

TEST(HostIdTest, NamesThePidNamespaceOnlyWhereItIsNotTheInitialOne) {
  EXPECT_EQ(redis::host_id_of("node7", "pid:[4026531836]"), "node7");
  EXPECT_EQ(redis::host_id_of("node7", ""), "node7");  // /proc could not say
  EXPECT_EQ(redis::host_id_of("node7", "pid:[4026532201]"), "node7~pidns4026532201");
  EXPECT_EQ(redis::host_id_of("node7", "pid:[]"), "node7");
  EXPECT_EQ(redis::host_id_of("", "pid:[4026531836]"), "unknown");
}

// Runs `body` in a process of a new PID namespace whose PID there is `pid`
// (0: whatever comes, 2 as it happens), and returns the outer child to
// wait for (its exit status is body's). -1: namespaces not permitted here.
pid_t in_new_pid_namespace(long pid, const std::function<int()>& body) {
  const pid_t outer = fork();
  if (outer != 0) return outer;
  if (unshare(CLONE_NEWPID) != 0) _exit(77);
  const pid_t init = fork();  // PID 1 of the new namespace
  if (init < 0) _exit(78);
  if (init == 0) {
    if (pid > 1) {  // the namespace's next PID (its own counter; needs CAP_SYS_ADMIN)
      std::ofstream last("/proc/sys/kernel/ns_last_pid");
      last << pid - 1;
      last.close();
      if (!last) _exit(77);
    }
    const pid_t worker = fork();
    if (worker < 0) _exit(78);
    if (worker == 0) _exit(body());
    int status = 0;
    if (waitpid(worker, &status, 0) != worker || !WIFEXITED(status)) _exit(79);
    _exit(WEXITSTATUS(status));
  }
  int status = 0;
  if (waitpid(init, &status, 0) != init || !WIFEXITED(status)) _exit(79);
  _exit(WEXITSTATUS(status));
}

int exit_status(pid_t child) {
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

class PressurePidNamespaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const pid_t probe = in_new_pid_namespace(100, [] { return getpid() == 100 ? 0 : 1; });
    ASSERT_GE(probe, 0);
    if (exit_status(probe) != 0) GTEST_SKIP() << "no PID namespaces here (needs CAP_SYS_ADMIN)";
  }
  std::string key(const std::string& suffix) { return "__pressure__:q" + suffix; }

  RedisServer server_;
  RawRedis raw_{server_.port()};
};

// Reads one line a child wrote to `fd`.
std::string read_line(int fd) {
  std::string out;
  char c = 0;
  while (read(fd, &c, 1) == 1 && c != '\n') out += c;
  return out;
}

// Two processes, each the same PID in its own namespace on this host: by
// "<hostname>_pid<N>_tid<M>" they were one client, and a waiting call of
// either took a role the other held for its own.
TEST_F(PressurePidNamespaceTest, TwoProcessesWithOnePidInTwoNamespacesHaveTwoIds) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const auto report_id = [&] {
    const std::string id = PressureQueue(server_.options(), "q").client_id() + "\n";
    return write(fds[1], id.data(), id.size()) == static_cast<ssize_t>(id.size()) ? 0 : 1;
  };
  const pid_t a = in_new_pid_namespace(2, report_id);
  const std::string id_a = read_line(fds[0]);
  const pid_t b = in_new_pid_namespace(2, report_id);
  const std::string id_b = read_line(fds[0]);
  close(fds[0]);
  close(fds[1]);
  ASSERT_EQ(exit_status(a), 0);
  ASSERT_EQ(exit_status(b), 0);
  ASSERT_NE(id_a.find("_pid2_"), std::string::npos) << id_a;
  EXPECT_NE(id_a, id_b) << "one id for two live processes";
}

// A consumer in another PID namespace waits for data, holding the role. A
// get here that must wait for the role asks every second whether the
// holder is gone: by this namespace's process table (no such PID here) it
// was, so the get "restored" the live holder's role and took it.
TEST_F(PressurePidNamespaceTest, AHolderInAnotherPidNamespaceIsNotTakenForGone) {
  long pid_max = 32768;
  if (FILE* f = std::fopen("/proc/sys/kernel/pid_max", "r")) {
    if (std::fscanf(f, "%ld", &pid_max) != 1) pid_max = 32768;
    std::fclose(f);
  }
  const long holder_pid = pid_max - 7;
  if (kill(static_cast<pid_t>(holder_pid), 0) == 0 || errno != ESRCH) {
    GTEST_SKIP() << "PID " << holder_pid << " is in use here";
  }
  PressureQueue q(server_.options(), "q");
  ASSERT_TRUE(q.create(0).ok());
  const pid_t holder = in_new_pid_namespace(holder_pid, [&] {
    PressureQueue c(server_.options(), "q");
    auto got = c.get(Context().with_timeout(30s));
    return got.ok() && *got == "for the holder" ? 0 : 1;
  });
  ASSERT_GE(holder, 0);
  std::string held;
  ASSERT_TRUE(testutil::eventually([&] {
    held = raw_.get(key(":consumer"));
    return raw_.lrange(key(":consumer_free")).empty() &&
           held.find("_pid" + std::to_string(holder_pid) + "_") != std::string::npos &&
           raw_.blocked_clients() == 1;
  }));
  // Long enough for two looks at the holder (one a second).
  auto mine = q.get(Context().with_timeout(2500ms));
  EXPECT_EQ(mine.status().code(), StatusCode::kDeadlineExceeded) << mine.status();
  EXPECT_EQ(raw_.get(key(":consumer")), held) << "the live holder's role was taken";
  EXPECT_TRUE(raw_.lrange(key(":consumer_free")).empty()) << "a second consumer token";
  ASSERT_TRUE(PressureQueue(server_.options(), "q").put("for the holder").ok());
  EXPECT_EQ(exit_status(holder), 0) << "the holder did not get its message";
}

}  // namespace
}  // namespace sluice
