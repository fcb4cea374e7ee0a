// A channel's acknowledgement after a failed segment sync: durability.md
// says every later append, sync() and acknowledgement fails with kIOError
// until the topic is reopened (the records since the last good sync are in
// doubt). Failed on the code before its fix.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
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

TEST(ChannelFailedSyncTest, AnAckAfterAFailedSyncFailsUntilTheTopicIsReopened) {
  for (const Durability mode : {Durability::kNone, Durability::kInterval, Durability::kGroupCommit,
                                Durability::kPerAppend}) {
    SCOPED_TRACE(static_cast<int>(mode));
    testutil::FaultFileSystem disk;
    FlakySegmentSync fs(disk);
    TopicOptions o;
    o.durability = mode;
    o.sync_interval = 1h;  // the flusher stays out of it
    auto opened = log::open_topic(fs, "/fault/topic", o);
    ASSERT_TRUE(opened.ok()) << opened.status();
    Topic& t = **opened;
    auto c = t.channel("c");
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_TRUE(t.append("one").ok());
    auto m = (*c)->next(with_timeout(0ms));
    ASSERT_TRUE(m.ok()) << m.status();
    fs.fail = 1;
    ASSERT_EQ(t.sync().code(), StatusCode::kIOError);
    const Status acked = (*c)->ack(m->seq);
    EXPECT_EQ(acked.code(), StatusCode::kIOError) << acked;
    EXPECT_EQ((*c)->acked(), m->seq) << "the position moved";
  }
}

// A seek forward is an acknowledgement of what it skips: after a failed
// sync it fails as ack does, in every mode (in kNone and kInterval, whose
// records are visible before any sync, it moved past the records in doubt).
// A seek back moves past nothing in doubt and still works.
TEST(ChannelFailedSyncTest, ASeekForwardAfterAFailedSyncFailsAsAnAckDoes) {
  for (const Durability mode : {Durability::kNone, Durability::kInterval, Durability::kGroupCommit,
                                Durability::kPerAppend}) {
    SCOPED_TRACE(static_cast<int>(mode));
    testutil::FaultFileSystem disk;
    FlakySegmentSync fs(disk);
    TopicOptions o;
    o.durability = mode;
    o.sync_interval = 1h;  // the flusher stays out of it
    auto opened = log::open_topic(fs, "/fault/topic", o);
    ASSERT_TRUE(opened.ok()) << opened.status();
    Topic& t = **opened;
    auto c = t.channel("c");
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_TRUE(t.append("one").ok());
    ASSERT_TRUE(t.append("two").ok());
    fs.fail = 1;
    ASSERT_EQ(t.sync().code(), StatusCode::kIOError);
    const auto before = (*c)->acked();
    auto forward = (*c)->seek(t.next_seq());
    EXPECT_EQ(forward.code(), StatusCode::kIOError) << forward.status();
    EXPECT_EQ((*c)->acked(), before) << "the position moved past records in doubt";
    auto back = (*c)->seek(before);
    EXPECT_TRUE(back.ok()) << back.status();
  }
}

}  // namespace
}  // namespace sluice
