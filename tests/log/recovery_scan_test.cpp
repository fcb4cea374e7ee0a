// Recovery reads a segment it has no summary for (the newest one while its
// writer is live, every one in mode none) through a window of about 1 MiB,
// not whole: a reader opening a topic held its 64 MiB newest segment in
// memory to read one message. The window must find what the whole read
// found: records across its edges, the writer's reserved zeros, damage.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "log/format.h"
#include "log/topic_impl.h"
#include "sluice/log/channel.h"
#include "sluice/log/topic.h"
#include "testutil/forwarding_file_system.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// Records the largest pread asked of a segment file.
class ReadSizes final : public testutil::ForwardingFileSystem {
 public:
  std::size_t largest() const { return largest_.load(); }
  void reset() { largest_ = 0; }

 protected:
  std::unique_ptr<log::File> wrap(std::unique_ptr<log::File> f) override {
    return std::make_unique<Recording>(std::move(f), largest_);
  }

 private:
  class Recording final : public testutil::ForwardingFile {
   public:
    Recording(std::unique_ptr<log::File> f, std::atomic<std::size_t>& largest)
        : ForwardingFile(std::move(f)), largest_(largest) {}
    Result<std::size_t> pread(char* buf, std::size_t n, std::uint64_t off) override {
      if (path().ends_with(".seg")) {
        std::size_t seen = largest_.load();
        while (n > seen && !largest_.compare_exchange_weak(seen, n)) {
        }
      }
      return ForwardingFile::pread(buf, n, off);
    }

   private:
    std::atomic<std::size_t>& largest_;
  };
  std::atomic<std::size_t> largest_{0};
};

constexpr std::size_t kMaxMessage = 512 << 10;
// A window, or one record, and a little: the old scan read the whole
// segment (~6 MiB here) at once.
constexpr std::size_t kBoundedRead = (1 << 20) + kMaxMessage + 64;

TopicOptions options() {
  TopicOptions o;
  o.segment_bytes = std::uint64_t{64} << 20;  // everything in one segment
  o.max_message_bytes = kMaxMessage;
  o.durability = Durability::kNone;  // no summaries: every open reads the segment
  return o;
}

// Payload i: a size from 0 to ~400 KiB (many small, some large, so records
// straddle the window's edges), bytes that depend on i.
std::string payload(std::uint64_t i) {
  std::uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ULL;
  x ^= x >> 29;
  const std::size_t size =
      (i % 7 == 0) ? static_cast<std::size_t>(x % (400 << 10)) : static_cast<std::size_t>(x % 3000);
  std::string p(size, '\0');
  for (std::size_t k = 0; k < size; ++k) p[k] = static_cast<char>('a' + (i + k) % 26);
  return p;
}

class RecoveryScanTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testutil::test_dir("recovery-scan"); }

  // Appends records until the segment passes `bytes`; their count.
  std::uint64_t write(std::uint64_t bytes) {
    auto t = log::open_topic(disk_, dir_.string(), options());
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return 0;
    std::uint64_t n = 0, total = 0;
    while (total < bytes) {
      const std::string p = payload(n++);
      EXPECT_TRUE((*t)->append(p).ok());
      total += p.size() + log::kRecordHeaderSize;
    }
    return n;
  }

  fs::path segment() const {
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().extension() == ".seg") return e.path();
    }
    return {};
  }

  // Reads every record through a new channel; the seqs it skipped as
  // damaged go to *corrupt.
  std::vector<LogMessage> read_all(Topic& t, std::uint64_t* corrupt = nullptr) {
    auto c = t.channel("c");
    EXPECT_TRUE(c.ok()) << c.status();
    std::vector<LogMessage> out;
    if (!c.ok()) return out;
    for (;;) {
      std::vector<LogMessage> batch;
      if (!(*c)->next_batch(batch, 64, with_timeout(0ms)).ok()) break;
      for (auto& m : batch) out.push_back(std::move(m));
    }
    if (corrupt != nullptr) *corrupt = (*c)->skipped_corrupt();
    return out;
  }

  fs::path dir_;
  ReadSizes disk_;
};

TEST_F(RecoveryScanTest, AnOpenReadsASegmentWithoutSummaryThroughAWindowAndFindsEveryRecord) {
  const std::uint64_t n = write(6 << 20);
  ASSERT_GT(fs::file_size(segment()), std::uintmax_t{5} << 20);
  ASSERT_EQ(options().durability, Durability::kNone);
  disk_.reset();
  auto t = log::open_topic(disk_, dir_.string(), options());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE((*t)->recovery().clean());
  EXPECT_EQ((*t)->recovery().summarized, 0U);  // the segment was read
  EXPECT_EQ((*t)->stats().next_seq, n);
  EXPECT_LE(disk_.largest(), kBoundedRead);
  // The index it built finds records in the middle.
  const std::vector<LogMessage> all = read_all(**t);
  ASSERT_EQ(all.size(), n);
  for (std::uint64_t i = 0; i < n; ++i) {
    ASSERT_EQ(all[i].seq, i);
    ASSERT_EQ(all[i].payload, payload(i)) << "seq " << i;
  }
}

// A crash before the close leaves the writer's reserved space as zeros
// after the last record: not damage, and appends go on from the last record.
TEST_F(RecoveryScanTest, ReservedZerosAfterTheRecordsAreNotDamage) {
  const std::uint64_t n = write(3 << 20);
  const fs::path seg = segment();
  const std::uintmax_t size = fs::file_size(seg);
  fs::resize_file(seg, size + (3 << 20));  // zeros, as a preallocation leaves
  disk_.reset();
  {
    auto t = log::open_topic(disk_, dir_.string(), options());
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_TRUE((*t)->recovery().corrupt.empty());
    EXPECT_EQ((*t)->stats().next_seq, n);
    EXPECT_LE(disk_.largest(), kBoundedRead);
    ASSERT_TRUE((*t)->append("after the zeros").ok());
  }
  auto t = log::open_topic(disk_, dir_.string(), options());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE((*t)->recovery().corrupt.empty());
  const std::vector<LogMessage> all = read_all(**t);
  ASSERT_EQ(all.size(), n + 1);
  EXPECT_EQ(all[n - 1].payload, payload(n - 1));
  EXPECT_EQ(all[n].payload, "after the zeros");
}

// Damage past the first window: the scan finds it as the whole read did
// (one record lost, counted; every other one delivered).
TEST_F(RecoveryScanTest, DamageBeyondTheFirstWindowIsSkippedAndCounted) {
  const std::uint64_t n = write(4 << 20);
  // A byte in the payload of the first record that starts past 2.5 MiB.
  std::uint64_t off = log::kSegmentHeaderSize, victim = 0;
  for (std::uint64_t i = 0;; ++i) {
    if (off > (5 << 19)) {
      victim = i;
      break;
    }
    off += log::kRecordHeaderSize + payload(i).size();
  }
  ASSERT_LT(victim, n - 1);
  ASSERT_GT(payload(victim).size(), 0U) << "pick a record with a payload";
  {
    std::FILE* f = std::fopen(segment().c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fseek(f, static_cast<long>(off + log::kRecordHeaderSize), SEEK_SET), 0);
    const int c = std::fgetc(f);
    ASSERT_EQ(std::fseek(f, static_cast<long>(off + log::kRecordHeaderSize), SEEK_SET), 0);
    std::fputc(c ^ 0x55, f);
    std::fclose(f);
  }
  auto t = log::open_topic(disk_, dir_.string(), options());
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ((*t)->recovery().corrupt.size(), 1U);
  EXPECT_EQ((*t)->recovery().corrupt[0].offset, off);
  std::uint64_t corrupt = 0;
  const std::vector<LogMessage> all = read_all(**t, &corrupt);
  EXPECT_EQ(corrupt, 1U);
  ASSERT_EQ(all.size(), n - 1);
  for (const LogMessage& m : all) {
    ASSERT_NE(m.seq, victim);
    ASSERT_EQ(m.payload, payload(m.seq)) << "seq " << m.seq;
  }
}

// A reader process opening the topic while its writer is live scans the
// newest segment (no summary while it grows) the same way.
TEST_F(RecoveryScanTest, AReadOnlyOpenBesideALiveWriterReadsThroughAWindow) {
  TopicOptions o = options();
  o.durability = Durability::kGroupCommit;  // summaries for sealed segments; none for the live one
  auto w = log::open_topic(disk_, dir_.string(), o);
  ASSERT_TRUE(w.ok()) << w.status();
  std::uint64_t n = 0, total = 0;
  while (total < (4 << 20)) {
    const std::string p = payload(n++);
    ASSERT_TRUE((*w)->append(p).ok());
    total += p.size() + log::kRecordHeaderSize;
  }
  disk_.reset();
  TopicOptions ro = o;
  ro.read_only = true;
  auto r = log::open_topic(disk_, dir_.string(), ro);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->recovery().summarized, 0U);
  EXPECT_LE(disk_.largest(), kBoundedRead);
  const std::vector<LogMessage> all = read_all(**r);
  ASSERT_EQ(all.size(), n);
  EXPECT_EQ(all.back().payload, payload(n - 1));
}

}  // namespace
}  // namespace sluice
