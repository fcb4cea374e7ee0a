// Threads of this process as /proc sees them: how many (leak checks), and
// whether one sleeps for good.
#pragma once

#include <dirent.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <string>
#include <thread>

#include "testutil/wait_for.h"

namespace sluice::testutil {

// True once thread `tid` sleeps in a futex wait without a timeout: parked
// for good, past a waiter's brief timed sleep (whose re-check would rescue
// a lost wake-up). Linux: /proc/<pid>/task/<tid>/syscall is "nr arg1 .. arg6".
inline bool parked_for_good(pid_t tid) {
  std::FILE* f = std::fopen(("/proc/self/task/" + std::to_string(tid) + "/syscall").c_str(), "r");
  if (f == nullptr) return false;
  long nr = -1;
  unsigned long args[4] = {};
  const int n = std::fscanf(f, "%ld %lx %lx %lx %lx", &nr, &args[0], &args[1], &args[2], &args[3]);
  std::fclose(f);
  return n == 5 && nr == SYS_futex && args[3] == 0;
}

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
