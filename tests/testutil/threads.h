// How many threads this process has now (/proc/self/task): leak checks.
#pragma once

#include <dirent.h>

#include <cstddef>

namespace sluice::testutil {

inline std::size_t thread_count() {
  std::size_t n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

}  // namespace sluice::testutil
