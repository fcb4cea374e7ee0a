#include "log/segment.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace sluice::log {

namespace {

constexpr std::uint64_t kReserveChunk = 1 << 20;
// Larger writes go through pwrite: the kernel copies whole pages into the
// page cache faster than the map takes a first-touch fault (and zeroes the
// page) per 4 KiB. Measured on the 2-vCPU EPYC VM, 100-byte records
// (bench/store_peer produce, CPU per record): 1 per append, the map 256-389
// ns against pwrite 1005-1228; 10 (1.2 KiB) a tie; 30 (3.7 KiB) 199-211
// against 160-168; 100 (12 KiB) 195-286 against 120-170; 300 (37 KiB)
// 202-215 against 87-128. (The bound was 64 KiB until 2026-11-26.)
constexpr std::size_t kMapWriteMax = 2 << 10;

}  // namespace

Result<std::shared_ptr<Segment>> create_segment(FileSystem& fs, const std::string& dir,
                                                std::uint64_t base, bool sync, std::uint32_t flags,
                                                std::uint32_t version) {
  auto seg = std::make_shared<Segment>();
  seg->base_seq = base;
  seg->timed = version != kUntimedFormatVersion;
  seg->path = dir + "/" + segment_name(base);
  auto f = fs.open(seg->path, OpenMode::kCreateNew);
  if (!f.ok()) return f.status();
  seg->file = std::move(*f);
  char header[kSegmentHeaderSize];
  encode_segment_header(header, base, flags, version);
  Status s = seg->file->pwrite(header, sizeof header, 0);
  if (s.ok() && sync) s = seg->file->sync();
  if (!s.ok()) {
    // The removal synced too: the creation may have reached the disk (on
    // ext4 an fsync of the new file commits it), and appends may go on in
    // the segment before, past `base`. If this sync fails as well, a power
    // cut may bring the file back: recovery removes a segment without
    // records named inside the log.
    seg->file.reset();
    (void)fs.remove(seg->path);
    (void)fs.sync_dir(dir);
    return s;
  }
  return seg;
}

Status make_writable(Segment& seg, const WriteOptions& w) {
  auto size = seg.file->size();
  if (!size.ok()) return size.status();
  seg.cap = *size;
  if (!w.preallocate || !seg.file->map_is_safe()) return Status::Ok();
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const auto len = static_cast<std::size_t>((w.segment_bytes + page - 1) / page * page);
  seg.map = seg.file->map(len);  // null: pwrite it is
  seg.map_len = seg.map != nullptr ? len : 0;
  return Status::Ok();
}

Status reserve(Segment& seg, std::uint64_t upto, WriteOptions& w) {
  if (upto <= seg.cap || !w.preallocate) return Status::Ok();
  const std::uint64_t want = (upto + kReserveChunk - 1) / kReserveChunk * kReserveChunk;
  const std::uint64_t to = std::max(upto, std::min(want, w.segment_bytes));
  Status s = seg.file->preallocate(seg.cap, to - seg.cap);
  if (!s.ok() && s.code() != StatusCode::kUnavailable && to > upto) {
    // A nearly full disk may still hold this batch: reserve just that.
    (void)seg.file->truncate(seg.cap);
    s = seg.file->preallocate(seg.cap, upto - seg.cap);
    if (s.ok()) {
      seg.cap = upto;
      return s;
    }
  }
  if (s.ok()) {
    seg.cap = to;
    return s;
  }
  if (s.code() == StatusCode::kUnavailable) {
    w.preallocate = false;
    return Status::Ok();
  }
  (void)seg.file->truncate(seg.cap);  // whatever it half did
  return s;
}

Status trim_reserve(Segment& seg) {
  if (seg.cap <= seg.written) return Status::Ok();
  if (Status s = seg.file->truncate(seg.written); !s.ok()) return s;
  seg.cap = seg.written;
  return Status::Ok();
}

Status write_records(Segment& seg, std::span<const std::string_view> payloads,
                     std::uint64_t first_seq, TimeUs time, std::size_t bytes, std::string& buf) {
  const std::uint64_t at = seg.written;
  const std::optional<TimeUs> t = seg.timed ? std::optional<TimeUs>(time) : std::nullopt;
  if (seg.map != nullptr && at + bytes <= seg.cap && bytes <= kMapWriteMax) {
    // Reserved and mapped: no system call. The bytes are in the page cache
    // (surviving a process crash) as soon as they are copied.
    encode_records(seg.map + at, first_seq, t, payloads);
  } else {
    buf.resize(bytes);
    encode_records(buf.data(), first_seq, t, payloads);
    if (Status s = seg.file->pwrite(buf.data(), bytes, at); !s.ok()) {
      // Disk full or I/O error: cut the partial write off so the log stays clean.
      (void)seg.file->truncate(at);
      seg.cap = at;
      return s;
    }
    seg.cap = std::max(seg.cap, at + bytes);
  }
  seg.written = at + bytes;
  return Status::Ok();
}

}  // namespace sluice::log
