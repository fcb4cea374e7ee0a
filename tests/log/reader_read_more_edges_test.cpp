// Reader::read_more (src/log/reader.h), the batch fast path of a channel:
// it hands out no record read_record would not.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "log/reader.h"
#include "log/topic_impl.h"
#include "sluice/log/topic.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

// A cap deletes the segment being read in the middle of a batch: the rest
// of it was counted as the reader's loss (Segment::capped), so the batch
// must stop there, as read_record stops before each record, rather than
// deliver records also counted as lost.
TEST(ReaderReadMoreEdgesTest, ACapInTheMiddleOfABatchStopsIt) {
  const auto dir = testutil::test_dir("read-more-cap");
  TopicOptions o;
  o.segment_bytes = 4096;  // four 900-byte records a segment
  o.max_message_bytes = 1024;
  o.durability = Durability::kNone;
  o.max_retained_bytes = 1;  // every roll deletes every sealed segment
  auto topic = Topic::open(dir.string(), o);
  ASSERT_TRUE(topic.ok()) << topic.status();
  const std::string payload(900, 'x');
  for (int i = 0; i < 4; ++i) ASSERT_TRUE((*topic)->append(payload).ok());

  log::Reader r(Topic::Impl::of(**topic));
  r.seek(0);
  log::RecordView v;
  bool have = false;
  ASSERT_TRUE(r.read_record(&v, have).ok());
  ASSERT_TRUE(have);
  ASSERT_EQ(v.seq, 0u);

  std::vector<std::uint64_t> taken;
  r.read_more(10, [&](const log::RecordView& w) {
    taken.push_back(w.seq);
    if (taken.size() == 1) {
      // The fifth record rolls; the roll's trim caps segment 0 (seqs 0-3).
      ASSERT_TRUE((*topic)->append(payload).ok());
    }
  });
  EXPECT_EQ(taken, std::vector<std::uint64_t>{1}) << "records of a capped segment delivered";

  // read_record jumps to the next segment and counts what it passed over.
  ASSERT_TRUE(r.read_record(&v, have).ok());
  ASSERT_TRUE(have);
  EXPECT_EQ(v.seq, 4u);
  EXPECT_EQ(r.capped(), 2u);
  topic->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice
