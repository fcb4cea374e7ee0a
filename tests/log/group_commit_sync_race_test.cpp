// kGroupCommit's leader syncs outside the topic's lock, so another sync of
// the same segment (Topic::sync(), a roll) may run beside it. On Linux only
// one of two fdatasyncs learns of a failed write-back (the pages are marked
// clean): when the other one fails, the leader's returns 0 for records that
// may be lost. Each test failed on the code before its fix.
#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <string>
#include <thread>

#include "log/fault_file_system.h"
#include "log/format.h"
#include "log/topic_impl.h"
#include "sluice/log/topic.h"
#include "testutil/forwarding_file_system.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

// Segment syncs: the next `hold` ones wait for release() and then run; the
// next `fail` ones fail (nothing reaches the disk), as the one fdatasync
// told of a failed write-back.
class RacingSegmentSync final : public testutil::ForwardingFileSystem {
 public:
  explicit RacingSegmentSync(log::FileSystem& base) : ForwardingFileSystem(base) {}
  std::atomic<int> hold{0};
  std::atomic<int> fail{0};
  std::latch held{1};
  std::latch released{1};

 protected:
  std::unique_ptr<log::File> wrap(std::unique_ptr<log::File> f) override {
    if (!f->path().ends_with(log::kSegmentSuffix)) return f;
    return std::make_unique<File>(std::move(f), *this);
  }

 private:
  static bool take(std::atomic<int>& n) {
    for (int v = n.load(); v > 0;) {
      if (n.compare_exchange_weak(v, v - 1)) return true;
    }
    return false;
  }
  class File final : public testutil::ForwardingFile {
   public:
    File(std::unique_ptr<log::File> f, RacingSegmentSync& fs)
        : ForwardingFile(std::move(f)), fs_(fs) {}
    Status sync() override {
      if (take(fs_.hold)) {
        fs_.held.count_down();
        fs_.released.wait();
      } else if (take(fs_.fail)) {
        return {StatusCode::kIOError, "fdatasync " + path() + ": Input/output error"};
      }
      return ForwardingFile::sync();
    }

   private:
    RacingSegmentSync& fs_;
  };
};

// The leader is in its sync when sync() fails on the same segment: the
// leader's sync then says nothing of the records written before, so its
// appender must fail too, not be told its record is durable.
TEST(GroupCommitSyncRaceTest, ALeaderIsNotToldOkAfterASyncBesideItFailed) {
  testutil::FaultFileSystem disk;
  RacingSegmentSync fs(disk);
  TopicOptions o;
  o.durability = Durability::kGroupCommit;
  auto opened = log::open_topic(fs, "/fault/topic", o);
  ASSERT_TRUE(opened.ok()) << opened.status();
  Topic& t = **opened;
  fs.hold = 1;
  Status first;
  std::thread a([&] { first = t.append("first").status(); });
  fs.held.wait();  // the leader is in its sync, outside the lock
  fs.fail = 1;
  const Status synced = t.sync();
  fs.released.count_down();
  a.join();
  EXPECT_EQ(synced.code(), StatusCode::kIOError) << synced;
  EXPECT_EQ(first.code(), StatusCode::kIOError)
      << "told ok after a sync that covered it failed: " << first;
  EXPECT_EQ(t.append("later").status().code(), StatusCode::kIOError);
}

// The same with a roll: its sync of the sealed segment fails while the
// leader syncs that segment.
TEST(GroupCommitSyncRaceTest, ALeaderIsNotToldOkAfterARollBesideItFailedItsSync) {
  testutil::FaultFileSystem disk;
  RacingSegmentSync fs(disk);
  TopicOptions o;
  o.durability = Durability::kGroupCommit;
  o.segment_bytes = 4096;
  o.max_message_bytes = 2048;
  auto opened = log::open_topic(fs, "/fault/topic", o);
  ASSERT_TRUE(opened.ok()) << opened.status();
  Topic& t = **opened;
  const std::string big(1500, 'x');
  ASSERT_TRUE(t.append(big).ok());
  fs.hold = 1;
  Status first;
  std::thread a([&] { first = t.append(big).status(); });
  fs.held.wait();
  fs.fail = 1;
  const Status rolled = t.append(big).status();  // no room: a roll, whose sync fails
  fs.released.count_down();
  a.join();
  EXPECT_EQ(rolled.code(), StatusCode::kIOError) << rolled;
  EXPECT_EQ(first.code(), StatusCode::kIOError)
      << "told ok after a sync that covered it failed: " << first;
}

}  // namespace
}  // namespace sluice
