// Reader::read_record (src/log/reader.h) at its edges: a cap deleting the
// segment it reads between its look at the segment and its return.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "log/reader.h"
#include "log/topic_impl.h"
#include "sluice/log/topic.h"
#include "testutil/forwarding_file_system.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

// The real disk without maps (the writer pwrites, readers pread), and a
// hook run once at the next pread, before it reads.
class HookedReads final : public testutil::ForwardingFileSystem {
 public:
  std::function<void()> before_next_read;

 protected:
  std::unique_ptr<log::File> wrap(std::unique_ptr<log::File> f) override {
    return std::make_unique<File>(std::move(f), *this);
  }

 private:
  class File final : public testutil::ForwardingFile {
   public:
    File(std::unique_ptr<log::File> f, HookedReads& fs) : ForwardingFile(std::move(f)), fs_(fs) {}
    bool map_is_safe() override { return false; }
    Result<std::size_t> pread(char* buf, std::size_t n, std::uint64_t off) override {
      if (auto hook = std::exchange(fs_.before_next_read, nullptr)) hook();
      return ForwardingFile::pread(buf, n, off);
    }

   private:
    HookedReads& fs_;
  };
};

// A cap deletes the segment while read_record reads its record (after its
// look at Segment::capped): the cap counted that record as lost (the
// writer's count for channels), so read_record must not hand it out, as
// read_more does not; it jumps to the next segment and counts it there.
TEST(ReaderReadRecordEdgesTest, ACapWhileARecordIsReadIsNotDeliveredToo) {
  const auto dir = testutil::test_dir("read-record-cap");
  std::filesystem::create_directories(dir);
  HookedReads disk;
  TopicOptions o;
  o.segment_bytes = 4096;  // four 900-byte records a segment
  o.max_message_bytes = 1024;
  o.durability = Durability::kNone;
  o.max_retained_bytes = 1;  // every roll deletes every sealed segment
  auto topic = log::open_topic(disk, dir.string(), o);
  ASSERT_TRUE(topic.ok()) << topic.status();
  const std::string payload(900, 'x');
  for (int i = 0; i < 4; ++i) ASSERT_TRUE((*topic)->append(payload).ok());

  log::Reader r(Topic::Impl::of(**topic));
  r.seek(0);
  bool capped = false;
  disk.before_next_read = [&] {
    // The fifth record rolls; the roll's trim caps segment 0 (seqs 0-3).
    ASSERT_TRUE((*topic)->append(payload).ok());
    capped = (*topic)->retention().segments_capped == 1;
  };
  log::RecordView v;
  bool have = false;
  ASSERT_TRUE(r.read_record(&v, have).ok());
  ASSERT_TRUE(capped) << "the hook did not run, or the cap did not come";
  ASSERT_TRUE(have);
  EXPECT_EQ(v.seq, 4u) << "a record of a capped segment delivered";
  EXPECT_EQ(r.capped(), 4u);
  EXPECT_EQ(r.next_seq(), 5u);
  topic->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice
