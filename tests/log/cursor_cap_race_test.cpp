// A LogCursor racing a retention cap: every seq from start() to position()
// is either returned or counted in skipped() (sluice/log/cursor.h), also
// when the cap deletes segments while the cursor is made or between its
// look at its segment and its step to the next.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sluice/log/cursor.h"
#include "sluice/log/topic.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

TEST(CursorCapRaceTest, SkippedCountsEverySeqACapTookFromUnderACursor) {
  const fs::path dir = testutil::test_dir("cursor_cap_race");
  TopicOptions o;
  o.segment_bytes = 4096;  // four records a segment
  o.max_message_bytes = 1024;
  o.durability = Durability::kNone;
  o.preallocate = false;
  o.max_retained_bytes = 1;  // every roll deletes all sealed segments
  auto topic = Topic::open(dir.string(), o);
  ASSERT_TRUE(topic.ok()) << topic.status();
  Topic& t = **topic;

  std::atomic<bool> stop{false};
  std::thread writer([&] {
    const std::string payload(900, 'x');
    while (!stop.load(std::memory_order_relaxed)) {
      if (!t.append(payload).ok()) return;
    }
  });
  // Cursors in several threads: one preempted between looking at its
  // segment and stepping to the next is what lets the cap in there.
  std::atomic<std::uint64_t> cursors{0};
  std::atomic<std::uint64_t> wrong{0};
  std::mutex mu;
  std::string first_wrong;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  const auto look = [&] {
    std::vector<LogMessage> got;
    while (std::chrono::steady_clock::now() < until && wrong.load() < 5) {
      auto c = t.cursor(0);  // from the oldest retained record, which a cap moves
      if (!c.ok()) {
        std::lock_guard lk(mu);
        ADD_FAILURE() << c.status();
        return;
      }
      std::uint64_t returned = 0;
      for (int i = 0; i < 3; ++i) {
        got.clear();
        if (Status s = (*c)->next_batch(got, 2); !s.ok()) {
          std::lock_guard lk(mu);
          ADD_FAILURE() << s;
          return;
        }
        returned += got.size();
      }
      ++cursors;
      const std::uint64_t passed = (*c)->position() - (*c)->start();
      if (returned + (*c)->skipped() != passed && wrong++ == 0) {
        std::lock_guard lk(mu);
        first_wrong = "start " + std::to_string((*c)->start()) + ", position " +
                      std::to_string((*c)->position()) + ", returned " + std::to_string(returned) +
                      ", skipped " + std::to_string((*c)->skipped());
      }
    }
  };
  std::vector<std::thread> lookers;
  for (int i = 0; i < 3; ++i) lookers.emplace_back(look);
  for (std::thread& l : lookers) l.join();
  stop = true;
  writer.join();
  EXPECT_EQ(wrong.load(), 0U) << "cursors that passed seqs they neither returned nor counted, of "
                              << cursors.load() << "; the first: " << first_wrong;
  EXPECT_GT(t.retention().segments_capped, 0U);
  topic->reset();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace sluice
