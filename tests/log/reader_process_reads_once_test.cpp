// A topic opened read-only beside its writer (a reader process: `sluice get`,
// the Python module) reads each byte of the records it delivers once: the
// bytes refresh() read to frame the writer's new records are the ones the
// channel delivers (Topic::Impl::take_tail), not read again.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "log/topic_impl.h"
#include "sluice/log/channel.h"
#include "sluice/log/topic.h"
#include "testutil/forwarding_file_system.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;

// Counts the bytes read from segment files.
class CountingFs final : public testutil::ForwardingFileSystem {
 public:
  std::uint64_t read() const { return read_.load(); }

 protected:
  std::unique_ptr<log::File> wrap(std::unique_ptr<log::File> f) override {
    return std::make_unique<Counting>(std::move(f), read_);
  }

 private:
  class Counting final : public testutil::ForwardingFile {
   public:
    Counting(std::unique_ptr<log::File> f, std::atomic<std::uint64_t>& read)
        : ForwardingFile(std::move(f)), read_(read) {}
    Result<std::size_t> pread(char* buf, std::size_t n, std::uint64_t off) override {
      auto got = ForwardingFile::pread(buf, n, off);
      if (got.ok() && path().ends_with(".seg")) read_ += *got;
      return got;
    }

   private:
    std::atomic<std::uint64_t>& read_;
  };
  std::atomic<std::uint64_t> read_{0};
};

TEST(ReaderProcessReadsOnceTest, AFollowerReadsEachDeliveredByteOnce) {
  const auto dir = testutil::test_dir("reads-once");
  TopicOptions o;
  o.durability = Durability::kNone;
  auto w = Topic::open(dir.string(), o);
  ASSERT_TRUE(w.ok()) << w.status();
  TopicOptions ro = o;
  ro.read_only = true;
  CountingFs fs;
  auto r = log::open_topic(fs, dir.string(), ro);
  ASSERT_TRUE(r.ok()) << r.status();
  auto c = (*r)->channel("r");
  ASSERT_TRUE(c.ok()) << c.status();
  const std::uint64_t at_open = fs.read();

  // The writer appends 100 records at a time and the reader takes them as
  // they come, as a consumer keeping up does.
  const std::string payload(100, 'x');
  const std::vector<std::string_view> batch(100, payload);
  std::uint64_t delivered = 0;
  for (int round = 0; round < 200; ++round) {
    ASSERT_TRUE((*w)->append_batch(batch).ok());
    while (delivered < static_cast<std::uint64_t>(round + 1) * batch.size()) {
      std::vector<LogMessage> out;
      const Status s = (*c)->next_batch(out, 1000, with_timeout(10s));
      ASSERT_TRUE(s.ok()) << s;
      for (const auto& m : out) ASSERT_EQ(m.payload, payload);
      delivered += out.size();
    }
  }
  const std::uint64_t record_bytes = delivered * (log::record_header_size(true) + payload.size());
  const double ratio = static_cast<double>(fs.read() - at_open) / static_cast<double>(record_bytes);
  std::printf("read %.2fx the bytes of the records delivered\n", ratio);
  EXPECT_LT(ratio, 1.2) << "bytes read twice (refresh, then the channel)";
  EXPECT_GE(ratio, 1.0);
  w->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice
