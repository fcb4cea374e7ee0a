// The writer's durability modes at their edges, found by a second review:
// the interval flusher after a failed sync. Each test failed on the code
// before its fix.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "log/fault_file_system.h"
#include "log/format.h"
#include "log/topic_impl.h"
#include "sluice/log/channel.h"
#include "sluice/log/topic.h"
#include "testutil/forwarding_file_system.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;

// Fails the next `fail` syncs of segment files (nothing reaches the disk),
// and counts the segment syncs that failed and that succeeded.
class FlakySegmentSync final : public testutil::ForwardingFileSystem {
 public:
  explicit FlakySegmentSync(log::FileSystem& base) : ForwardingFileSystem(base) {}
  std::atomic<int> fail{0};
  std::atomic<int> failed{0};
  std::atomic<int> synced{0};

 protected:
  std::unique_ptr<log::File> wrap(std::unique_ptr<log::File> f) override {
    if (!f->path().ends_with(log::kSegmentSuffix)) return f;
    return std::make_unique<File>(std::move(f), *this);
  }

 private:
  class File final : public testutil::ForwardingFile {
   public:
    File(std::unique_ptr<log::File> f, FlakySegmentSync& fs)
        : ForwardingFile(std::move(f)), fs_(fs) {}
    Status sync() override {
      for (int n = fs_.fail.load(); n > 0;) {
        if (fs_.fail.compare_exchange_weak(n, n - 1)) {
          fs_.failed.fetch_add(1);
          return {StatusCode::kIOError, "fdatasync " + path() + ": Input/output error"};
        }
      }
      Status s = ForwardingFile::sync();
      if (s.ok()) fs_.synced.fetch_add(1);
      return s;
    }

   private:
    FlakySegmentSync& fs_;
  };
};

// kInterval promises that what a power cut takes is about one interval's
// appends. The flusher cleared its "written since the last sync" flag before
// it synced and left it cleared when the sync failed: with no further
// append, the record it did not make durable stayed unsynced for good (until
// sync() or close()), whatever the interval.
TEST(WriterSecondLookTest, TheIntervalFlusherSyncsAgainAfterAFailedSync) {
  testutil::FaultFileSystem disk;
  FlakySegmentSync fs(disk);
  TopicOptions o;
  o.durability = Durability::kInterval;
  o.sync_interval = 1ms;
  const std::string dir = "/fault/topic";
  auto opened = log::open_topic(fs, dir, o);
  ASSERT_TRUE(opened.ok()) << opened.status();
  fs.fail = 1;
  ASSERT_TRUE((*opened)->append("kept").ok());
  ASSERT_TRUE(testutil::eventually([&] { return fs.failed.load() == 1; }));
  const int before = fs.synced.load();
  // Hundreds of intervals: the flusher must have tried again.
  EXPECT_TRUE(testutil::eventually([&] { return fs.synced.load() > before; }, 5s))
      << "no sync after the failed one";
  // A power cut now keeps the record.
  auto image = disk.after_cut(testutil::CutMode::kDropUnsynced, 0);
  auto after = log::open_topic(*image, dir, o);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ((*after)->next_seq(), 1u);
  opened->reset();
}

}  // namespace
}  // namespace sluice
