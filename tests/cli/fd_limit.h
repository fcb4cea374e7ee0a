// For the tests of the command at its descriptor limit (RLIMIT_NOFILE):
// what a child has open, and whether it ends soon after a signal.
#pragma once

#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <string>

#include "cli/cli_child.h"

namespace sluice::testutil {

// How many of `pid`'s descriptors are open on a file whose link has `what`.
inline int open_on(pid_t pid, const std::string& what) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;
  int n = 0;
  while (const dirent* e = ::readdir(d)) {
    char link[PATH_MAX];
    const ssize_t len = ::readlink((dir + "/" + e->d_name).c_str(), link, sizeof link);
    if (len > 0 && std::string(link, static_cast<std::size_t>(len)).find(what) != std::string::npos)
      ++n;
  }
  ::closedir(d);
  return n;
}

// Polls (up to 5 s) until the child has exited.
inline bool ends_soon(const Child& c) {
  for (const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
       std::chrono::steady_clock::now() < until;) {
    if (main_thread_state(c.pid()) == 'Z') return true;
  }
  return false;
}

// Sends `sig` to `c` and finishes it: it must end within 5 s (else the test
// fails and the child is killed) with 130, the exit of an interrupted command.
inline Outcome interrupt(Child& c, int sig, const std::string& what) {
  c.signal(sig);
  const bool ended = ends_soon(c);
  EXPECT_TRUE(ended) << what << " did not end within 5 s of the signal";
  if (!ended) c.kill_now();
  Outcome r = c.finish();
  if (ended) {
    EXPECT_EQ(r.rc, 130) << r.err;
  }
  return r;
}

}  // namespace sluice::testutil

// Under ASan+UBSan the runtime opens descriptors of its own (UBSan's vptr
// check makes a pipe at the first virtual call), so the lowest limit at
// which the command opens the queue is not one at which its eventfd fails:
// these tests run in the default and TSan builds.
#if defined(__SANITIZE_ADDRESS__)
#define SKIP_UNDER_ASAN() GTEST_SKIP() << "the sanitizer runtime's own descriptors move the limit"
#else
#define SKIP_UNDER_ASAN() (void)0
#endif
