// A fresh directory per test, named after the test and the process, removed
// before and after (the real file system, not a mock).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace sluice::testutil {

inline std::filesystem::path test_dir(const std::string& kind) {
  auto p = std::filesystem::temp_directory_path() /
           ("sluice-" + kind + "-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(p);
  return p;
}

}  // namespace sluice::testutil
