// The fixture of the recovery and summary tests: a topic in a directory of
// its own, synced at each roll (summaries are written then), with segments
// of kSegmentBytes and messages of 1,000 bytes, alike but for their seq.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "sluice/log/topic.h"
#include "testutil/temp_dir.h"

namespace sluice::testutil {

template <std::uint64_t kSegmentBytes>
class SyncedTopicTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test_dir("synced-topic"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static TopicOptions synced() {
    TopicOptions o;
    o.segment_bytes = kSegmentBytes;
    o.max_message_bytes = 2048;
    o.durability = Durability::kGroupCommit;
    return o;
  }
  std::unique_ptr<Topic> open(TopicOptions o = synced()) {
    auto t = Topic::open(dir_.string(), o);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::move(*t) : nullptr;
  }
  // The directory's files ending in `ext`, in name order.
  std::vector<std::filesystem::path> files(const std::string& ext) {
    std::vector<std::filesystem::path> out;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
      if (e.path().extension() == ext) out.push_back(e.path());
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  static std::string msg(std::uint64_t i) {
    std::string s = std::to_string(i);
    return "message " + std::string(8 - s.size(), '0') + s + std::string(984, 'x');
  }
  static void overwrite(const std::filesystem::path& file, std::uint64_t at,
                        const std::string& with) {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    f.write(with.data(), static_cast<std::streamsize>(with.size()));
  }

  std::filesystem::path dir_;
};

}  // namespace sluice::testutil
