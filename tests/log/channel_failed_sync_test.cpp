// A channel's acknowledgement after a failed segment sync: durability.md
// says every later append, sync() and acknowledgement fails with kIOError
// until the topic is reopened (the records since the last good sync are in
// doubt). Failed on the code before its fix.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>

#include "log/fault_file_system.h"
#include "log/format.h"
#include "log/topic_impl.h"
#include "sluice/log/channel.h"
#include "sluice/log/topic.h"
#include "testutil/flaky_segment_sync.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;

using testutil::FlakySegmentSync;

constexpr Durability kModes[] = {Durability::kNone, Durability::kInterval, Durability::kGroupCommit,
                                 Durability::kPerAppend};

// A topic in `mode` on a disk whose segment syncs fail once asked to, with
// channel "c".
struct FlakyTopic {
  explicit FlakyTopic(Durability mode) {
    TopicOptions o;
    o.durability = mode;
    o.sync_interval = 1h;  // the flusher stays out of it
    auto opened = log::open_topic(fs, "/fault/topic", o);
    if (!opened.ok()) throw std::runtime_error(opened.status().to_string());
    topic = std::move(*opened);
    auto c = topic->channel("c");
    if (!c.ok()) throw std::runtime_error(c.status().to_string());
    channel = std::move(*c);
  }
  testutil::FaultFileSystem disk;
  FlakySegmentSync fs{disk};
  std::unique_ptr<Topic> topic;
  std::unique_ptr<Channel> channel;
};

TEST(ChannelFailedSyncTest, AnAckAfterAFailedSyncFailsUntilTheTopicIsReopened) {
  for (const Durability mode : kModes) {
    SCOPED_TRACE(static_cast<int>(mode));
    FlakyTopic f(mode);
    ASSERT_TRUE(f.topic->append("one").ok());
    auto m = f.channel->next(with_timeout(0ms));
    ASSERT_TRUE(m.ok()) << m.status();
    f.fs.fail = 1;
    ASSERT_EQ(f.topic->sync().code(), StatusCode::kIOError);
    const Status acked = f.channel->ack(m->seq);
    EXPECT_EQ(acked.code(), StatusCode::kIOError) << acked;
    EXPECT_EQ(f.channel->acked(), m->seq) << "the position moved";
  }
}

// A seek forward is an acknowledgement of what it skips: after a failed
// sync it fails as ack does, in every mode (in kNone and kInterval, whose
// records are visible before any sync, it moved past the records in doubt).
// A seek back moves past nothing in doubt and still works.
TEST(ChannelFailedSyncTest, ASeekForwardAfterAFailedSyncFailsAsAnAckDoes) {
  for (const Durability mode : kModes) {
    SCOPED_TRACE(static_cast<int>(mode));
    FlakyTopic f(mode);
    ASSERT_TRUE(f.topic->append("one").ok());
    ASSERT_TRUE(f.topic->append("two").ok());
    f.fs.fail = 1;
    ASSERT_EQ(f.topic->sync().code(), StatusCode::kIOError);
    const auto before = f.channel->acked();
    auto forward = f.channel->seek(f.topic->next_seq());
    EXPECT_EQ(forward.code(), StatusCode::kIOError) << forward.status();
    EXPECT_EQ(f.channel->acked(), before) << "the position moved past records in doubt";
    auto back = f.channel->seek(before);
    EXPECT_TRUE(back.ok()) << back.status();
  }
}

}  // namespace
}  // namespace sluice
