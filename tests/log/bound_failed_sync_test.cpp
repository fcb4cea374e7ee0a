// An append asleep at the topic bound when a segment sync fails: it can
// only fail from then on (every later append fails with kIOError until the
// topic is reopened, docs/durability.md), and no acknowledgement in this
// process can make room any more, so it must wake and fail at once, not
// sleep until its deadline (for ever without one). Failed on the code
// before its fix.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "log/fault_file_system.h"
#include "log/format.h"
#include "log/topic_impl.h"
#include "sluice/log/channel.h"
#include "sluice/log/topic.h"
#include "testutil/flaky_segment_sync.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;

using testutil::FlakySegmentSync;

TEST(BoundFailedSyncTest, AnAppendAsleepAtTheBoundFailsWhenASyncFails) {
  testutil::FaultFileSystem disk;
  FlakySegmentSync fs(disk);
  TopicOptions o;
  o.durability = Durability::kNone;
  o.max_unconsumed = 1;
  auto opened = log::open_topic(fs, "/fault/topic", o);
  ASSERT_TRUE(opened.ok()) << opened.status();
  Topic& t = **opened;
  auto c = t.channel("c");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(t.append("fills the bound").ok());
  Status waited;
  std::atomic<bool> returned{false};
  std::thread a([&] {
    waited = t.append("waits", with_timeout(10s)).status();
    returned = true;
  });
  ASSERT_TRUE(testutil::eventually([&] { return t.stats().bound_waits == 1; }));
  fs.fail = 1;
  ASSERT_EQ(t.sync().code(), StatusCode::kIOError);
  const auto t0 = std::chrono::steady_clock::now();
  a.join();
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(waited.code(), StatusCode::kIOError) << waited;
  EXPECT_LT(took, 5s) << "slept at the bound after the failed sync";
  // A later append fails at once too, not after waiting for room.
  EXPECT_EQ(t.append("later", with_timeout(10s)).status().code(), StatusCode::kIOError);
}

}  // namespace
}  // namespace sluice
