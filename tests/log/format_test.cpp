// The record encoders and decoders (src/log/format.h): encode_records, which
// computes CRCs three records at a time, writes exactly what encode_record
// does record by record, decode_record reads every record back, and
// decode_records (CRCs three at a time too) stops where decode_record would.
#include "log/format.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::log {
namespace {

std::string one_by_one(std::uint64_t first, std::optional<TimeUs> time,
                       const std::vector<std::string_view>& payloads) {
  std::string out;
  for (std::size_t i = 0; i < payloads.size(); ++i) {
    std::string rec(record_header_size(time.has_value()) + payloads[i].size(), '\0');
    encode_record(rec.data(), first + i, time, payloads[i]);
    out += rec;
  }
  return out;
}

TEST(FormatTest, EncodeRecordsWritesWhatEncodeRecordWritesForEverySizeMix) {
  std::mt19937 rng(26);
  // Sizes around the 8-byte steps, the short-CRC limit (256) and past it.
  const std::vector<std::size_t> sizes = {0, 1, 7, 8, 9, 15, 16, 100, 255, 256, 257, 1000};
  std::string bytes(2000, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  for (const std::optional<TimeUs> time : {std::optional<TimeUs>(), std::optional<TimeUs>(-5),
                                           std::optional<TimeUs>(1'790'000'000'000'000)}) {
    for (int round = 0; round < 200; ++round) {
      std::vector<std::string_view> payloads(rng() % 10);
      std::size_t total = 0;
      for (auto& p : payloads) {
        const std::size_t n = sizes[rng() % sizes.size()];
        p = std::string_view(bytes).substr(rng() % (bytes.size() - n), n);
        total += record_header_size(time.has_value()) + n;
      }
      const std::uint64_t first = rng();
      std::string got(total, '\0');
      encode_records(got.data(), first, time, payloads);
      ASSERT_EQ(got, one_by_one(first, time, payloads)) << "round " << round;
      std::size_t at = 0;
      for (std::size_t i = 0; i < payloads.size(); ++i) {
        const RecordView v =
            decode_record(got.data() + at, got.size() - at, first + i, time.has_value());
        ASSERT_EQ(v.kind, RecordView::kValid) << "round " << round << " record " << i;
        EXPECT_EQ(v.payload, payloads[i]);
        at += v.size;
      }
      EXPECT_EQ(at, got.size());
    }
  }
}

TEST(FormatTest, ADamagedByteInAnyOfThreeRecordsEncodedTogetherFailsItsCrcOnly) {
  const std::vector<std::string_view> payloads = {"first payload, forty bytes long........",
                                                  "second payload, forty bytes long.......",
                                                  "third payload, forty bytes long........"};
  const std::size_t rec = kRecordHeaderSize + payloads[0].size();
  std::string good(3 * rec, '\0');
  encode_records(good.data(), 7, TimeUs{1}, payloads);
  for (std::size_t k = 0; k < 3; ++k) {
    std::string bad = good;
    bad[k * rec + kRecordHeaderSize + 11] ^= 1;
    for (std::size_t i = 0; i < 3; ++i) {
      const RecordView v = decode_record(bad.data() + i * rec, rec, 7 + i, true);
      EXPECT_EQ(v.kind, i == k ? RecordView::kInvalid : RecordView::kValid) << k << " " << i;
    }
  }
}

// Records of every size mix, each with a time of its own (a reader meets
// records of many appends in one run), some outside the range the view
// clamps to (the CRC covers the stored time).
TEST(FormatTest, DecodeRecordsReadsWhatDecodeRecordReadsAndStopsWhereItWould) {
  std::mt19937 rng(27);
  const std::vector<std::size_t> sizes = {0, 1, 7, 8, 9, 16, 100, 255, 256, 257, 1000};
  std::string bytes(2000, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  for (const bool timed : {false, true}) {
    for (int round = 0; round < 300; ++round) {
      const std::size_t count = rng() % 12;
      const std::uint64_t first = rng();
      std::string log;
      for (std::size_t i = 0; i < count; ++i) {
        const std::size_t n = sizes[rng() % sizes.size()];
        const std::string_view p = std::string_view(bytes).substr(rng() % (bytes.size() - n), n);
        const TimeUs edge[3] = {-7, std::numeric_limits<TimeUs>::max(),
                                std::numeric_limits<TimeUs>::min()};  // the last two: clamped
        const TimeUs t = (rng() % 4 == 0) ? edge[rng() % 3] : static_cast<TimeUs>(rng() % 1000000);
        std::string rec(record_header_size(timed) + n, '\0');
        encode_record(rec.data(), first + i, timed ? std::optional<TimeUs>(t) : std::nullopt, p);
        log += rec;
      }
      // Damage one byte of one record (or none), and cut the end (or not).
      std::string bad = log;
      std::size_t damaged = count;
      if (count > 0 && rng() % 2 == 0) {
        std::size_t at = 0;
        damaged = rng() % count;
        for (std::size_t i = 0; i < damaged; ++i) {
          at += decode_record(log.data() + at, log.size() - at, first + i, timed).size;
        }
        const std::size_t size =
            decode_record(log.data() + at, log.size() - at, first + damaged, timed).size;
        bad[at + rng() % size] ^= static_cast<char>(1 + rng() % 255);
      }
      const std::size_t avail = rng() % 3 == 0 ? rng() % (bad.size() + 1) : bad.size();
      // What decode_record finds, one at a time.
      std::vector<RecordView> want;
      for (std::size_t at = 0;;) {
        const RecordView v = decode_record(bad.data() + at, avail - at, first + want.size(), timed);
        if (v.kind != RecordView::kValid) break;
        want.push_back(v);
        at += v.size;
      }
      for (const std::size_t max :
           {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{4}, std::size_t{32}}) {
        std::vector<RecordView> got(max);
        const std::size_t n = decode_records(bad.data(), avail, first, timed, got.data(), max);
        ASSERT_EQ(n, std::min(max, want.size())) << "round " << round << " max " << max;
        for (std::size_t i = 0; i < n; ++i) {
          EXPECT_EQ(got[i].seq, want[i].seq);
          EXPECT_EQ(got[i].payload.data(), want[i].payload.data());
          EXPECT_EQ(got[i].payload.size(), want[i].payload.size());
          EXPECT_EQ(got[i].size, want[i].size);
          EXPECT_EQ(got[i].time, want[i].time);
          EXPECT_EQ(got[i].timed, want[i].timed);
        }
      }
      if (damaged < count && avail == bad.size()) {
        EXPECT_LE(want.size(), damaged) << "round " << round << ": the damage went unseen";
      }
    }
  }
}

}  // namespace
}  // namespace sluice::log
