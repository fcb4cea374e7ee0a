// A command blocked on the server (Connection::call_blocking) in a process
// out of file descriptors: without an eventfd for the stop (detail::StopFd),
// await_reply() waits in 100 ms slices and looks at the stop between them,
// so a stop ends the command long before the server's own timeout
// (docs/design.md, "With no descriptor left for the stop's eventfd").
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "redis/transport/connection.h"
#include "sluice/context.h"
#include "sluice/redis/redis_options.h"
#include "testutil/redis_server.h"

namespace sluice {
namespace {

using testutil::RedisServer;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How many of this process's descriptors are open on an eventfd; `fds` is
// /proc/self/fd, opened while a descriptor was left.
int eventfds(DIR* fds) {
  ::rewinddir(fds);
  int n = 0;
  while (const dirent* e = ::readdir(fds)) {
    char link[PATH_MAX];
    const std::string path = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t len = ::readlink(path.c_str(), link, sizeof link);
    if (len > 0 &&
        std::string(link, static_cast<std::size_t>(len)).find("eventfd") != std::string::npos) {
      ++n;
    }
  }
  return n;
}

// Takes every free descriptor (under a soft RLIMIT_NOFILE lowered to a few
// above those open, so there are few to take); gives them and the limit
// back when destroyed.
class NoDescriptorsLeft {
 public:
  NoDescriptorsLeft() {
    ::getrlimit(RLIMIT_NOFILE, &saved_);
    int highest = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (highest >= 0) ::close(highest);
    rlimit lower = saved_;
    lower.rlim_cur = static_cast<rlim_t>(highest + 64);
    if (lower.rlim_cur < saved_.rlim_cur) ::setrlimit(RLIMIT_NOFILE, &lower);
    for (int fd; (fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) held_.push_back(fd);
  }
  ~NoDescriptorsLeft() {
    for (const int fd : held_) ::close(fd);
    ::setrlimit(RLIMIT_NOFILE, &saved_);
  }
  NoDescriptorsLeft(const NoDescriptorsLeft&) = delete;
  NoDescriptorsLeft& operator=(const NoDescriptorsLeft&) = delete;

 private:
  rlimit saved_{};
  std::vector<int> held_;
};

// Under ASan+UBSan the runtime needs descriptors of its own (UBSan's vptr
// check makes a pipe at the first virtual call): none are left here.
#if defined(__SANITIZE_ADDRESS__)
#define SKIP_UNDER_ASAN() GTEST_SKIP() << "the sanitizer runtime needs descriptors of its own"
#else
#define SKIP_UNDER_ASAN() (void)0
#endif

// BLPOP with a 10 s timeout on the server, the stop requested while it
// waits with no eventfd: it must end within a few slices (its second
// connection for CLIENT UNBLOCK was opened before, while descriptors were
// left), with the timeout's reply, and the connection must still work.
TEST(TransportStopFdLimit, StopEndsABlockedCommandWithoutAnEventfdWithinASlice) {
  SKIP_UNDER_ASAN();
  RedisServer server;
  testutil::RawRedis raw(server.port());
  RedisOptions o = server.options();
  o.io_timeout = milliseconds(30000);
  redis::Connection conn(o, "fd-limit");
  redis::CallError err;
  const std::string_view blpop[] = {"BLPOP", "nothing", "10"};
  {
    // With descriptors: the deadline ends it with CLIENT UNBLOCK, from the
    // second connection, which stays open.
    const Context ctx = Context().with_timeout(milliseconds(100));
    const auto t0 = Clock::now();
    redis::Reply r = conn.call_blocking(blpop, ctx, err);
    ASSERT_TRUE(r) << err.status;
    ASSERT_LT(Clock::now() - t0, std::chrono::seconds(5)) << "CLIENT UNBLOCK did not end it";
  }

  DIR* fds = ::opendir("/proc/self/fd");
  ASSERT_NE(fds, nullptr);
  std::stop_source stop;
  const Context ctx(stop.get_token());
  redis::Reply r;
  Clock::time_point ended{};
  {
    const NoDescriptorsLeft none;
    std::thread blocked([&] {
      r = conn.call_blocking(blpop, ctx, err);
      ended = Clock::now();
    });
    bool waiting = false;
    for (const auto until = Clock::now() + std::chrono::seconds(30);
         !waiting && Clock::now() < until;) {
      waiting = raw.blocked_in("blpop");
    }
    EXPECT_TRUE(waiting) << "BLPOP never blocked on the server";
    EXPECT_EQ(eventfds(fds), 0) << "the blocked command made its stop's eventfd";
    const auto stopped = Clock::now();
    stop.request_stop();
    blocked.join();
    EXPECT_LT(ended - stopped, std::chrono::seconds(2))
        << "the stop was not seen between slices: the command ended at the server's 10 s timeout";
  }
  ::closedir(fds);
  ASSERT_TRUE(r) << err.status;
  EXPECT_EQ(r->type, REDIS_REPLY_NIL);  // BLPOP's timeout, as CLIENT UNBLOCK makes it

  // Nothing lost, and the connection is in step: a push is there to pop.
  EXPECT_EQ(raw.integer({"RPUSH", "list", "m1"}), 1);
  const std::string_view pop[] = {"BLPOP", "list", "1"};
  redis::Reply p = conn.call_blocking(pop, Context().with_timeout(milliseconds(5000)), err);
  ASSERT_TRUE(p) << err.status;
  ASSERT_EQ(p->type, REDIS_REPLY_ARRAY);
  ASSERT_EQ(p->elements, 2u);
  EXPECT_EQ(std::string(p->element[1]->str, p->element[1]->len), "m1");
}

}  // namespace
}  // namespace sluice
