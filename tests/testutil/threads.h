// How many threads this process has (/proc/self/task): leak checks.
#pragma once

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <string>
#include <thread>

#include "testutil/wait_for.h"

namespace sluice::testutil {

inline std::size_t thread_count() {
  std::size_t n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

// The count to compare a leak check against, taken once nothing is exiting.
// Two things make a plain first reading wrong: runtimes start helper threads
// of their own on the first thread creation (ThreadSanitizer does), and
// pthread_join returns when the kernel clears the thread's id, a moment
// before the task leaves /proc/self/task, so a reading right after a join
// can count a thread that is already gone. This starts and joins one thread,
// waits until the kernel has reaped it, then counts.
// The end of a leak check has the same window: compare with
// eventually([&] { return thread_count() == baseline; }).
inline std::size_t thread_baseline() {
  pid_t tid = 0;
  std::thread([&] { tid = gettid(); }).join();
  const std::string entry = "/proc/self/task/" + std::to_string(tid);
  struct stat st {};
  EXPECT_TRUE(eventually([&] { return stat(entry.c_str(), &st) != 0; }));
  return thread_count();
}

}  // namespace sluice::testutil
