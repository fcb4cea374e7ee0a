#include "log/summary.h"

#include <cstring>

namespace sluice::log {

namespace {

// magic, version, flags, base, end, next seq, first/last/max time, entries
constexpr std::size_t kFixed = 8 + 4 + 4 + 8 * 7;
constexpr std::size_t kEntry = 24;  // seq, offset, time
constexpr std::uint32_t kTimed = 1;
constexpr std::uint32_t kHasTime = 2;

}  // namespace

std::string summary_path(const std::string& segment_path) {
  std::string p = segment_path;
  if (p.ends_with(kSegmentSuffix)) p.resize(p.size() - kSegmentSuffix.size());
  return p + std::string(kSummarySuffix);
}

Status write_summary(FileSystem& fs, const Segment& seg, std::uint64_t next_seq, TimeUs last_time) {
  const std::size_t n = seg.index.size();
  std::string buf(kFixed + kEntry * n + 4, '\0');
  char* p = buf.data();
  std::memcpy(p, kSummaryMagic.data(), 8);
  put32(p + 8, kSummaryVersion);
  put32(p + 12, (seg.timed ? kTimed : 0) | (seg.has_time ? kHasTime : 0));
  put64(p + 16, seg.base_seq);
  put64(p + 24, seg.written);  // the sealed segment's size
  put64(p + 32, next_seq);
  put64(p + 40, static_cast<std::uint64_t>(n > 0 ? seg.index.front().time : 0));
  put64(p + 48, static_cast<std::uint64_t>(last_time));
  put64(p + 56, static_cast<std::uint64_t>(seg.max_time));
  put64(p + 64, n);
  char* e = p + kFixed;
  for (const IndexEntry& x : seg.index) {
    put64(e, x.seq);
    put64(e + 8, x.off);
    put64(e + 16, static_cast<std::uint64_t>(x.time));
    e += kEntry;
  }
  put32(e, crc32c(p, static_cast<std::size_t>(e - p)));
  const std::string path = summary_path(seg.path);
  const std::string tmp = path + ".tmp";
  auto f = fs.open(tmp, OpenMode::kCreate);
  if (!f.ok()) return f.status();
  if (Status s = (*f)->truncate(0); !s.ok()) return s;
  if (Status s = (*f)->pwrite(buf.data(), buf.size(), 0); !s.ok()) return s;
  return fs.rename(tmp, path);
}

bool read_summary(FileSystem& fs, const std::string& path, std::uint64_t base, std::uint64_t size,
                  Scanned& s) {
  auto data = read_whole(fs, summary_path(path));
  if (!data.ok() || data->size() < kFixed + 4) return false;
  const char* p = data->data();
  const std::uint64_t n = get64(p + 64);
  if (std::memcmp(p, kSummaryMagic.data(), 8) != 0 || get32(p + 8) != kSummaryVersion ||
      n > (data->size() - kFixed - 4) / kEntry || data->size() != kFixed + kEntry * n + 4 ||
      get32(p + kFixed + kEntry * n) != crc32c(p, kFixed + kEntry * n)) {
    return false;
  }
  s = Scanned{};
  const std::uint32_t flags = get32(p + 12);
  s.base_seq = get64(p + 16);
  s.end = get64(p + 24);
  s.next_seq = get64(p + 32);
  s.path = path;
  s.timed = (flags & kTimed) != 0;
  s.has_time = (flags & kHasTime) != 0;
  s.first_time = static_cast<TimeUs>(get64(p + 40));
  s.last_time = static_cast<TimeUs>(get64(p + 48));
  s.max_time = static_cast<TimeUs>(get64(p + 56));
  s.verified = false;
  if (s.base_seq != base || s.end != size || s.next_seq < base || s.end < kSegmentHeaderSize) {
    return false;  // not this segment as it is now
  }
  s.index.reserve(n);
  const char* e = p + kFixed;
  for (std::uint64_t i = 0; i < n; ++i, e += kEntry) {
    const IndexEntry x{get64(e), get64(e + 8), static_cast<TimeUs>(get64(e + 16))};
    const bool ordered =
        s.index.empty() ||
        (x.seq > s.index.back().seq && x.off > s.index.back().off && x.time >= s.index.back().time);
    if (!ordered || x.seq < base || x.seq >= s.next_seq || x.off >= s.end) return false;
    s.index.push_back(x);
  }
  const bool empty = s.next_seq == base;
  if (empty != s.index.empty()) return false;
  if (!empty && (s.index.front().seq != base || s.index.front().off != kSegmentHeaderSize)) {
    return false;
  }
  return true;
}

}  // namespace sluice::log
