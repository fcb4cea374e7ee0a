// A real full disk: a small tmpfs mounted for the test (needs root, as CI
// has; skipped otherwise). Appends fill it; the error must be clear, nothing
// reported durable may be lost, and appends must work again once space is
// freed.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "sluice/log/channel.h"
#include "sluice/log/topic.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class TopicDiskFullTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    mnt_ = testutil::test_dir("tmpfs");
    fs::create_directories(mnt_);
    if (::mount("tmpfs", mnt_.c_str(), "tmpfs", 0, "size=3m") != 0) {
      GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno)
                   << "); CI runs this as root";
    }
    mounted_ = true;
  }
  void TearDown() override {
    if (mounted_) ::umount2(mnt_.c_str(), MNT_DETACH);
    fs::remove_all(mnt_);
  }

  fs::path mnt_;
  bool mounted_ = false;
};

std::string record(std::uint64_t i) {
  std::string p = "record " + std::to_string(i) + " ";
  p.resize(1000, static_cast<char>('a' + i % 26));
  return p;
}

TEST_P(TopicDiskFullTest, FillingItIsAClearErrorLosesNothingAndAppendsResumeWhenFreed) {
  const fs::path dir = mnt_ / "topic";
  const fs::path filler = mnt_ / "filler";
  TopicOptions o;
  o.segment_bytes = 1 << 20;
  o.max_message_bytes = 4096;
  o.durability = Durability::kGroupCommit;
  o.preallocate = GetParam();
  std::map<std::uint64_t, std::string> returned;
  {
    auto t = Topic::open(dir.string(), o);
    ASSERT_TRUE(t.ok()) << t.status();
    std::ofstream(filler, std::ios::binary) << std::string(512 << 10, 'f');  // freed later
    Result<std::uint64_t> r = StatusCode::kOk;
    for (std::uint64_t i = 0; i < 10000; ++i) {
      r = (*t)->append(record(i));
      if (!r.ok()) break;
      returned[*r] = record(i);
    }
    ASSERT_FALSE(r.ok()) << "3 MiB never filled";
    EXPECT_EQ(r.code(), StatusCode::kIOError);
    EXPECT_NE(r.status().message().find("No space left on device"), std::string_view::npos)
        << r.status();
    EXPECT_NE(r.status().message().find(dir.string()), std::string_view::npos) << r.status();
    EXPECT_GT(returned.size(), 1000U);
    // Still full: refused again, nothing half-written.
    EXPECT_FALSE((*t)->append(record(99999)).ok());
    fs::remove(filler);
    auto after = (*t)->append("after space was freed");
    ASSERT_TRUE(after.ok()) << after.status();
    returned[*after] = "after space was freed";
  }
  auto t = Topic::open(dir.string(), o);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE((*t)->recovery().corrupt.empty());
  auto c = (*t)->channel("check");
  ASSERT_TRUE(c.ok()) << c.status();
  std::size_t seen = 0;
  for (;;) {
    auto m = (*c)->next(with_timeout(0ms));
    if (!m.ok()) break;
    auto it = returned.find(m->seq);
    ASSERT_NE(it, returned.end()) << "seq " << m->seq << " was never returned";
    ASSERT_EQ(m->payload, it->second) << "seq " << m->seq;
    ++seen;
  }
  EXPECT_EQ(seen, returned.size()) << "every returned append is there";
}

INSTANTIATE_TEST_SUITE_P(WritePaths, TopicDiskFullTest, ::testing::Values(true, false),
                         [](const auto& p) { return p.param ? "mapped" : "pwrite"; });

}  // namespace
}  // namespace sluice
