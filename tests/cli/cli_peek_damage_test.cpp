// peek on an embedded queue whose log has damaged records: it shows the
// rest, and says how many it left out, as get does (cli_log_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/cli_child.h"
#include "sluice/log/topic.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

using testutil::CliChild;
using testutil::Outcome;

class CliPeekDamageTest : public ::testing::Test {
 protected:
  void TearDown() override { fs::remove_all(store_); }

  Outcome run(std::vector<std::string> args) {
    CliChild c(store_, std::move(args));
    c.close_stdin();
    return c.finish();
  }
  std::string topic(const std::string& queue) const {
    return store_ + "/queues/" + queue + "/topic";
  }
  static std::string msg(int i) { return std::to_string(1000 + i); }
  static constexpr std::uint64_t kRecord = 24 + 4;  // header (with the append time) + msg(i)

  // A queue whose topic holds n records in 1 KiB segments (35 records each),
  // appended through the library (the store's own segments are 64 MiB).
  void make_queue(const std::string& name, int n) {
    ASSERT_EQ(run({"create", name, "--bound", "100000"}).rc, 0);
    TopicOptions o;
    o.segment_bytes = 1024;
    o.max_message_bytes = 512;
    o.durability = Durability::kNone;
    auto t = Topic::open(topic(name), o);
    ASSERT_TRUE(t.ok()) << t.status();
    for (int i = 0; i < n; ++i) ASSERT_TRUE((*t)->append(msg(i)).ok());
  }
  std::vector<fs::path> segments(const std::string& queue) const {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(topic(queue))) {
      if (e.path().extension() == ".seg") out.push_back(e.path());
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  static void overwrite(const fs::path& file, std::uint64_t at, const std::string& with) {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    f.write(with.data(), static_cast<std::streamsize>(with.size()));
  }

  std::string store_ = testutil::test_dir("cli_peek_damage").string();
};

// Not silently: a peek that leaves damaged messages out says so on stderr
// (once, with their count), and still exits 0 with the rest; one that meets
// no damage says nothing.
TEST_F(CliPeekDamageTest, PeekSaysHowManyDamagedMessagesItLeftOut) {
  make_queue("q", 100);
  Outcome r = run({"peek", "q", "--count", "3"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err.find("damaged"), std::string::npos) << r.err;
  const auto segs = segments("q");
  ASSERT_GE(segs.size(), 3u);
  overwrite(segs[1], 32 + 4 * kRecord + 24 + 1, "X");  // one record's payload
  overwrite(segs[2], 32 + 1 * kRecord + 24 + 1, "X");
  r = run({"peek", "q"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 98) << r.out;
  EXPECT_NE(r.err.find("sluice peek: queue 'q': 2 damaged messages skipped"), std::string::npos)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  // Before the damage: nothing to say.
  r = run({"peek", "q", "--count", "30"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err.find("damaged"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace sluice
