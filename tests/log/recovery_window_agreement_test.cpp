// Recovery scans a segment through a window of 1 MiB and falls back to the
// whole file where the window cannot decide (recovery.cpp, SegmentWindow).
// Both must make the same of the same bytes: each case here is scanned
// twice, once as recovery does and once with every windowed read failing
// (the whole-file scan), and the two scans compared field by field, with
// damage and zeros at and around the window's edge, lengths pointing past
// it, and sizes that are a multiple of nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "log/format.h"
#include "log/recovery.h"
#include "testutil/forwarding_file_system.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

// A segment file's reads past its header fail: the window gives up at its
// first read and the scan reads the file whole (read_whole reads from 0).
class WholeOnly final : public testutil::ForwardingFileSystem {
 protected:
  std::unique_ptr<log::File> wrap(std::unique_ptr<log::File> f) override {
    return std::make_unique<Failing>(std::move(f));
  }

 private:
  class Failing final : public testutil::ForwardingFile {
   public:
    using ForwardingFile::ForwardingFile;
    Result<std::size_t> pread(char* buf, std::size_t n, std::uint64_t off) override {
      if (path().ends_with(".seg") && off != 0) return Status(StatusCode::kIOError, "refused");
      return ForwardingFile::pread(buf, n, off);
    }
  };
};

constexpr std::uint64_t kWindow = std::uint64_t{1} << 20;
constexpr std::uint64_t kEdge = log::kSegmentHeaderSize + kWindow;  // the first window's end
constexpr std::uint32_t kMaxMessage = 128 << 10;

// One segment's bytes: a header, 16 records of 64 KiB exactly (so the 17th
// starts at the first window's edge), then 40 of 1,000 bytes.
std::string segment(std::uint64_t base, bool timed) {
  std::string out(log::kSegmentHeaderSize, '\0');
  log::encode_segment_header(out.data(), base, 0,
                             timed ? log::kFormatVersion : log::kUntimedFormatVersion);
  const std::size_t h = log::record_header_size(timed);
  std::uint64_t seq = base;
  const auto add = [&](std::size_t record_bytes) {
    std::string payload(record_bytes - h, static_cast<char>('a' + seq % 26));
    std::string rec(record_bytes, '\0');
    log::encode_record(rec.data(), seq,
                       timed ? std::optional<log::TimeUs>(1000 + seq) : std::nullopt, payload);
    out += rec;
    ++seq;
  };
  for (int i = 0; i < 16; ++i) add(64 << 10);
  for (int i = 0; i < 40; ++i) add(1000);
  return out;
}

std::string describe(const log::Scan& scan, const RecoveryReport& r) {
  std::ostringstream o;
  for (const log::Scanned& s : scan.segments) {
    o << s.path.substr(s.path.rfind('/') + 1) << " end " << s.end << " next " << s.next_seq
      << " torn " << s.torn << " timed " << s.timed << " times " << s.has_time << "/"
      << s.first_time << "/" << s.last_time << "/" << s.max_time << " skips";
    for (const log::Skip& k : s.skips) o << " [" << k.from << "," << k.to << " " << k.lost << "]";
    o << " index";
    for (const log::IndexEntry& e : s.index) o << " " << e.seq << "@" << e.off;
    o << "\n";
  }
  for (const LogDamage& d : r.corrupt) {
    o << "corrupt " << d.file.substr(d.file.rfind('/') + 1) << " " << d.offset << "+" << d.length
      << " " << d.what << "\n";
  }
  for (const LogDamage& d : r.truncated) {
    o << "truncated " << d.file.substr(d.file.rfind('/') + 1) << " " << d.offset << "+" << d.length
      << " " << d.what << "\n";
  }
  return o.str();
}

struct Case {
  const char* name;
  std::function<void(std::string&)> change;  // of the first segment's bytes
};

void put(std::string& s, std::uint64_t at, char c) { s[static_cast<std::size_t>(at)] = c; }

TEST(RecoveryWindowAgreementTest, TheWindowedScanAndTheWholeFileScanAgreeOnEveryCase) {
  const std::uint64_t rec16 = kEdge;  // the 17th record, at the edge
  const std::vector<Case> cases = {
      {"clean", [](std::string&) {}},
      {"a partial header after the last record", [](std::string& s) { s += "\x07\x01\x02"; }},
      {"zeros of no whole size after the records", [](std::string& s) { s.append(1237, '\0'); }},
      {"a byte flipped at the edge",
       [&](std::string& s) { put(s, rec16, static_cast<char>(s[rec16] ^ 1)); }},
      {"a byte flipped just before the edge",
       [&](std::string& s) { put(s, rec16 - 1, static_cast<char>(s[rec16 - 1] ^ 1)); }},
      {"a byte flipped just after the edge",
       [&](std::string& s) { put(s, rec16 + 17, static_cast<char>(s[rec16 + 17] ^ 1)); }},
      {"a length past the window and the file",
       [&](std::string& s) { log::put32(s.data() + rec16, 0x00ffff00); }},
      {"a length past the file, under the maximum",
       [&](std::string& s) {
         log::put32(s.data() + rec16 - (64 << 10), kMaxMessage);  // record 15 claims more
       }},
      {"cut in the middle of the record before the edge",
       [&](std::string& s) { s.resize(rec16 - 100); }},
      {"cut in a record header at the edge", [&](std::string& s) { s.resize(rec16 + 9); }},
      {"zeros from the edge to the end",
       [&](std::string& s) {
         std::fill(s.begin() + static_cast<std::ptrdiff_t>(rec16), s.end(), '\0');
       }},
      {"zeros from the edge, then a record",
       [&](std::string& s) {
         std::fill(s.begin() + static_cast<std::ptrdiff_t>(rec16),
                   s.begin() + static_cast<std::ptrdiff_t>(rec16 + 5000), '\0');
       }},
      {"a zeroed sector inside the first window",
       [&](std::string& s) { std::fill(s.begin() + 4096, s.begin() + 4608, '\0'); }},
      {"garbage to the end from the edge",
       [&](std::string& s) {
         for (std::size_t i = rec16; i < s.size(); ++i) s[i] = static_cast<char>(i * 7 + 1);
       }},
  };
  const fs::path root = testutil::test_dir("window-agreement");
  int n = 0;
  for (const bool timed : {true, false}) {
    for (const bool newest : {true, false}) {
      for (const Case& c : cases) {
        SCOPED_TRACE(std::string(c.name) + (timed ? ", format 2" : ", format 1") +
                     (newest ? ", newest segment" : ", older segment"));
        const fs::path dir = root / std::to_string(n++);
        fs::create_directories(dir);
        std::string first = segment(0, timed);
        const std::uint64_t next = 56;
        c.change(first);
        std::ofstream(dir / log::segment_name(0), std::ios::binary) << first;
        if (!newest) {
          std::ofstream(dir / log::segment_name(next), std::ios::binary) << segment(next, timed);
        }
        RecoveryReport windowed_report;
        auto windowed = log::scan_topic(log::posix_file_system(), dir.string(), windowed_report);
        ASSERT_TRUE(windowed.ok()) << windowed.status();
        WholeOnly whole_fs;
        RecoveryReport whole_report;
        auto whole = log::scan_topic(whole_fs, dir.string(), whole_report);
        ASSERT_TRUE(whole.ok()) << whole.status();
        EXPECT_EQ(describe(*windowed, windowed_report), describe(*whole, whole_report));
      }
    }
  }
  fs::remove_all(root);
}

}  // namespace
}  // namespace sluice
