// The record encoders (src/log/format.h): encode_records, which computes
// CRCs three records at a time, writes exactly what encode_record does
// record by record, and decode_record reads every record back.
#include "log/format.h"

#include <gtest/gtest.h>

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
            decode_record(got.data() + at, got.size() - at, 1 << 20, first + i, time.has_value());
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
      const RecordView v = decode_record(bad.data() + i * rec, rec, 1 << 20, 7 + i, true);
      EXPECT_EQ(v.kind, i == k ? RecordView::kInvalid : RecordView::kValid) << k << " " << i;
    }
  }
}

}  // namespace
}  // namespace sluice::log
