#include "sluice/log/topic.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <stop_token>

#include "log/topic_impl.h"
#include "sluice/log/channel.h"

namespace sluice::log {

Segment::~Segment() {
  if (map != nullptr) ::munmap(map, map_len);
  if (fd >= 0) ::close(fd);
}

Status io_error(const std::string& op, const std::string& path, int err) {
  return {StatusCode::kIOError, op + " " + path + ": " + std::strerror(err)};
}

Status pwrite_all(int fd, const char* buf, std::size_t n, std::uint64_t off,
                  const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, buf, n, static_cast<off_t>(off));
    if (w < 0) {
      if (errno == EINTR) continue;
      return io_error("write", path, errno);
    }
    buf += w;
    n -= static_cast<std::size_t>(w);
    off += static_cast<std::uint64_t>(w);
  }
  return Status::Ok();
}

Result<std::size_t> pread_some(int fd, char* buf, std::size_t n, std::uint64_t off,
                               const std::string& path) {
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, buf + got, n - got, static_cast<off_t>(off + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return io_error("read", path, errno);
    }
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  return got;
}

Status lock_file(int fd, const std::string& what) {
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  if (::fcntl(fd, F_SETLK, &fl) == 0) return Status::Ok();
  struct flock who {};  // POSIX locks (unlike flock) name their holder
  who.l_type = F_WRLCK;
  who.l_whence = SEEK_SET;
  ::fcntl(fd, F_GETLK, &who);
  return {StatusCode::kInUse, what + " by PID " + std::to_string(who.l_pid)};
}

Result<NotifyPage*> map_notify(const std::string& dir) {
  const std::string path = dir + "/NOTIFY";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("open", path, errno);
  struct stat st {};
  int rc = ::fstat(fd, &st);
  if (rc == 0 && st.st_size < static_cast<off_t>(kNotifyFileSize)) {
    rc = ::ftruncate(fd, kNotifyFileSize);  // zeros; two openers agree
  }
  void* p = rc == 0 ? ::mmap(nullptr, kNotifyFileSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                    : MAP_FAILED;
  const int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) return io_error("map", path, err);
  return static_cast<NotifyPage*>(p);
}

void futex_wait_shared(std::uint32_t* word, std::uint32_t expected, const Context& ctx) {
  std::stop_callback on_stop(ctx.token(), [word] {
    std::atomic_ref<std::uint32_t>(*word).fetch_add(1);  // every sleeper wakes and looks again
    futex_wake_shared(word);
  });
  timespec at{};
  const timespec* deadline = nullptr;
  if (const auto& d = ctx.deadline()) {  // steady_clock is CLOCK_MONOTONIC
    const auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(d->time_since_epoch()).count();
    at.tv_sec = ns / 1000000000;
    at.tv_nsec = ns % 1000000000;
    deadline = &at;
  }
  if (ctx.stop_requested()) return;
  ::syscall(SYS_futex, word, FUTEX_WAIT_BITSET, expected, deadline, nullptr,
            FUTEX_BITSET_MATCH_ANY);
}

void futex_wake_shared(std::uint32_t* word) {
  ::syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

void wake_if_wanted(std::uint32_t* seq, std::uint32_t* want) {
  // A full barrier after what the sleeper looks for was published (Dekker
  // with the sleeper's store to `want` and its second look).
  if (std::atomic_ref<std::uint32_t>(*want).exchange(0) == 0) return;
  std::atomic_ref<std::uint32_t>(*seq).fetch_add(1);
  futex_wake_shared(seq);
}

Status fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return io_error("open", dir, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  return rc == 0 ? Status::Ok() : io_error("fsync", dir, err);
}

Result<std::string> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return io_error("open", path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return io_error("stat", path, err);
  }
  std::string data(static_cast<std::size_t>(st.st_size), '\0');
  auto got = pread_some(fd, data.data(), data.size(), 0, path);
  ::close(fd);
  if (!got.ok()) return got.status();
  data.resize(*got);
  return data;
}

namespace {

// One segment as recovery found it.
struct Scanned {
  std::uint64_t base_seq = 0;
  std::string path;
  std::uint64_t end = 0;       // valid bytes (truncate here if torn)
  std::uint64_t next_seq = 0;  // after the last valid record
  std::vector<Skip> skips;
  bool torn = false;
  std::uint64_t file_size = 0;
};

std::string seq_range(std::uint64_t from, std::uint64_t count) {
  if (count == 0) return "no whole record lost";
  return "seqs " + std::to_string(from) + ".." + std::to_string(from + count - 1) + " lost";
}

// Scans one segment's bytes (docs/log_format.md, "Recovery on open").
void scan_segment(const std::string& data, std::uint32_t max_payload, bool last, Scanned& s,
                  RecoveryReport& report) {
  std::uint64_t expected = s.base_seq;
  std::size_t off = kSegmentHeaderSize;
  const std::size_t size = data.size();
  while (off < size) {
    RecordView v = decode_record(data.data() + off, size - off, max_payload, expected);
    if (v.kind == RecordView::kValid) {
      off += v.size;
      ++expected;
      continue;
    }
    // Zeros to the end: space the writer reserved and never wrote (a crash
    // before the close or roll that gives it back). Not damage.
    const std::size_t nonzero = data.find_last_not_of('\0');
    if (nonzero == std::string::npos || nonzero < off) {
      s.torn = true;
      break;
    }
    // Search for the next valid record with a larger seq.
    std::size_t found = size;
    std::uint64_t found_seq = 0;
    for (std::size_t o = off + 1; o + kRecordHeaderSize <= size; ++o) {
      const std::uint64_t seq = get64(data.data() + o + 8);
      if (seq <= expected || seq > expected + (size - off) / kRecordHeaderSize) continue;
      RecordView w = decode_record(data.data() + o, size - o, max_payload, seq);
      if (w.kind == RecordView::kValid) {
        found = o;
        found_seq = seq;
        break;
      }
    }
    if (found < size) {
      const std::uint64_t lost = found_seq - expected;
      s.skips.push_back({off, found, lost});
      report.corrupt.push_back({s.path, off, found - off, "corrupt: " + seq_range(expected, lost)});
      off = found;
      expected = found_seq;
      continue;
    }
    if (last) {
      s.torn = true;
      report.truncated.push_back({s.path, off, nonzero + 1 - off, "torn tail"});
    } else {
      s.skips.push_back({off, size, 0});
      report.corrupt.push_back({s.path, off, size - off,
                                "corrupt to the end of the segment: later seqs of this segment "
                                "lost"});
    }
    break;
  }
  s.end = s.torn ? off : size;
  s.next_seq = expected;
  s.file_size = size;
}

// Recovery shared by open() and verify_topic(). `modify`: delete leftovers.
Result<std::vector<Scanned>> scan_topic(const std::string& dir, const TopicOptions& opt,
                                        bool modify, RecoveryReport& report) {
  std::error_code ec;
  std::map<std::uint64_t, std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.ends_with(".tmp")) {
      report.removed.push_back(e.path().string());
      if (modify) std::filesystem::remove(e.path(), ec);
      continue;
    }
    if (auto base = parse_segment_name(name)) files[*base] = e.path().string();
  }
  if (ec) return io_error("list", dir, ec.value());
  std::vector<Scanned> out;
  std::size_t i = 0;
  for (const auto& [base, path] : files) {
    const bool last = ++i == files.size();
    auto data = read_file(path);
    if (!data.ok()) return data.status();
    Scanned s;
    s.base_seq = base;
    s.path = path;
    if (data->size() < kSegmentHeaderSize || !decode_segment_header(data->data()) ||
        *decode_segment_header(data->data()) != base) {
      if (last && data->size() <= kSegmentHeaderSize) {  // a roll that died half-way
        report.removed.push_back(path);
        if (modify) std::filesystem::remove(path, ec);
      } else {
        report.corrupt.push_back({path, 0, data->size(), "bad segment header: segment skipped"});
      }
      continue;
    }
    if (!out.empty() && base != out.back().next_seq) {
      report.corrupt.push_back({path, 0, 0,
                                base > out.back().next_seq
                                    ? "gap before this segment: " +
                                          seq_range(out.back().next_seq, base - out.back().next_seq)
                                    : "segment overlaps the previous one: skipped"});
      if (base < out.back().next_seq) continue;
    }
    scan_segment(*data, opt.max_message_bytes, last, s, report);
    out.push_back(std::move(s));
  }
  return out;
}

Status validate(const TopicOptions& o) {
  if (o.max_message_bytes == 0 ||
      o.segment_bytes < kSegmentHeaderSize + kRecordHeaderSize + o.max_message_bytes) {
    return {StatusCode::kInvalidArgument,
            "segment_bytes must hold at least one record of max_message_bytes (" +
                std::to_string(o.max_message_bytes) + " + " +
                std::to_string(kSegmentHeaderSize + kRecordHeaderSize) + " bytes)"};
  }
  return Status::Ok();
}

// In-process registry: POSIX record locks do not conflict within a process.
std::mutex g_open_mu;
std::map<std::string, pid_t>
    g_open_dirs;  // with the opener's pid: a forked child is another process

Result<int> lock_dir(const std::string& dir) {
  const std::string path = dir + "/LOCK";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("open", path, errno);
  if (Status s = lock_file(fd, "topic " + dir + " is open for writing"); !s.ok()) {
    ::close(fd);
    return s;
  }
  return fd;
}

}  // namespace
}  // namespace sluice::log

namespace sluice {

using log::kRecordHeaderSize;
using log::kSegmentHeaderSize;
using log::Segment;

namespace {

constexpr std::uint64_t kReserveChunk = 1 << 20;
// Larger writes go through pwrite: the kernel copies big runs faster than
// first-touch page faults on the map.
constexpr std::size_t kMapWriteMax = 64 << 10;

// File systems on which writing to fallocate'd space through a shared map
// cannot fault for lack of space (copy-on-write ones such as btrfs can).
bool map_is_safe(int fd) {
  struct statfs fs {};
  if (::fstatfs(fd, &fs) != 0) return false;
  constexpr unsigned long kExt4 = 0xEF53;
  constexpr unsigned long kXfs = 0x58465342;
  constexpr unsigned long kTmpfs = 0x01021994;
  const auto type = static_cast<unsigned long>(fs.f_type);
  return type == kExt4 || type == kXfs || type == kTmpfs;
}

// Makes `seg` the segment appends go to: its size is its cap, and it is
// mapped when the topic preallocates on a file system where that is safe.
Status make_writable(Topic::Impl& t, Segment& seg) {
  struct stat st {};
  if (::fstat(seg.fd, &st) != 0) return log::io_error("stat", seg.path, errno);
  seg.cap = static_cast<std::uint64_t>(st.st_size);
  if (!t.preallocate || !map_is_safe(seg.fd)) return Status::Ok();
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t len = (t.opt.segment_bytes + page - 1) / page * page;
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, seg.fd, 0);
  if (p == MAP_FAILED) return Status::Ok();  // pwrite it is
  seg.map = static_cast<char*>(p);
  seg.map_len = len;
  return Status::Ok();
}

// Reserves file space up to `upto` (in chunks, never past the segment size
// unless one batch needs more). A full disk fails here, before anything is
// written. File systems without fallocate turn preallocation off.
Status reserve(Topic::Impl& t, Segment& seg, std::uint64_t upto) {
  if (upto <= seg.cap || !t.preallocate) return Status::Ok();
  const std::uint64_t want = (upto + kReserveChunk - 1) / kReserveChunk * kReserveChunk;
  const std::uint64_t to = std::max(upto, std::min(want, t.opt.segment_bytes));
  int rc = 0;
  do {
    rc = ::fallocate(seg.fd, 0, static_cast<off_t>(seg.cap), static_cast<off_t>(to - seg.cap));
  } while (rc != 0 && errno == EINTR);
  if (rc == 0) {
    seg.cap = to;
    return Status::Ok();
  }
  const int err = errno;
  if (err == EOPNOTSUPP || err == ENOSYS) {
    t.preallocate = false;
    return Status::Ok();
  }
  (void)::ftruncate(seg.fd, static_cast<off_t>(seg.cap));  // whatever it half did
  return log::io_error("reserve space in", seg.path, err);
}

// Gives the reserved, unwritten space of the writer's segment back.
Status trim_reserve(Segment& seg) {
  const std::uint64_t end = seg.end.load(std::memory_order_relaxed);
  if (seg.cap <= end) return Status::Ok();
  if (::ftruncate(seg.fd, static_cast<off_t>(end)) != 0) {
    return log::io_error("truncate", seg.path, errno);
  }
  seg.cap = end;
  return Status::Ok();
}

}  // namespace

Topic::Impl::~Impl() {
  {
    std::lock_guard lk(mu);
    stopping = true;
  }
  stop_cv.notify_all();
  if (flusher.joinable()) flusher.join();
  if (!reader && !segs.empty()) {
    (void)trim_reserve(*segs.back());  // a crash leaves zeros, which recovery ignores
    if (opt.durability != Durability::kNone) ::fdatasync(segs.back()->fd);
  }
  if (lock_fd >= 0) ::close(lock_fd);
  if (notify != nullptr) ::munmap(notify, log::kNotifyFileSize);
  if (reader) return;
  std::lock_guard g(log::g_open_mu);
  if (auto it = log::g_open_dirs.find(dir);
      it != log::g_open_dirs.end() && it->second == getpid()) {
    log::g_open_dirs.erase(it);
  }
}

void Topic::Impl::wake_other_processes() { log::wake_if_wanted(&notify->seq, &notify->want); }

bool Topic::Impl::over_cap(const Segment& oldest) const {
  if (opt.max_retained_bytes > 0 && disk_bytes > opt.max_retained_bytes) return true;
  if (opt.max_retained_age.count() <= 0) return false;
  struct stat st {};  // a sealed segment's last change is its seal
  if (::fstat(oldest.fd, &st) != 0) return false;
  const auto sealed_at = std::chrono::system_clock::time_point(
      std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec));
  return std::chrono::system_clock::now() - sealed_at >
         std::chrono::duration_cast<std::chrono::system_clock::duration>(opt.max_retained_age);
}

std::shared_ptr<Segment> Topic::Impl::segment_after(const Segment* s, std::uint64_t* first) const {
  std::lock_guard lk(mu);
  if (first != nullptr) *first = first_seq;
  // By base_seq, not identity: `s` may already have been trimmed away.
  for (const auto& seg : segs) {
    if (seg->base_seq > s->base_seq) return seg;
  }
  return nullptr;
}

std::shared_ptr<Segment> Topic::Impl::segment_for(std::uint64_t seq) const {
  std::lock_guard lk(mu);
  std::shared_ptr<Segment> best = segs.empty() ? nullptr : segs.front();
  for (const auto& s : segs) {
    if (s->base_seq <= seq) best = s;
  }
  return best;
}

std::string Topic::Impl::channel_path(std::string_view name) const {
  return dir + "/channels/" + std::string(name) + ".pos";
}

Status Topic::Impl::trim() {
  std::unique_lock lk(mu);
  return trim_locked(lk);
}

Result<std::map<std::string, std::uint64_t>> Topic::Impl::channel_positions() const {
  // Channels not open here: their files (their durable state); open ones:
  // memory (updated after their sync).
  std::map<std::string, std::uint64_t> pos;
  for (const auto& [name, c] : open_channels) pos[name] = c.acked;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/channels", ec)) {
    const std::string name = e.path().filename().string();
    if (!name.ends_with(".pos")) continue;
    const std::string ch = name.substr(0, name.size() - 4);
    if (pos.contains(ch)) continue;
    auto data = log::read_file(e.path().string());
    if (!data.ok()) {
      if (!std::filesystem::exists(e.path(), ec)) continue;  // deleted meanwhile
      return data.status();
    }
    std::optional<log::PositionSlot> best;
    for (std::size_t at = 0; at + log::kPositionSlotSize <= data->size();
         at += log::kPositionSlotSize) {
      auto slot = log::decode_position_slot(data->data() + at);
      if (slot && (!best || slot->generation > best->generation)) best = slot;
    }
    // Unreadable: it has passed nothing (never trim early; a cap still holds).
    pos[ch] = best ? best->next_seq : 0;
  }
  if (ec) return log::io_error("list", dir + "/channels", ec.value());
  return pos;
}

Status Topic::Impl::wait_for_room(std::unique_lock<std::mutex>& lk, std::size_t n,
                                  const Context& ctx) {
  const std::uint64_t bound = opt.max_unconsumed;
  if (n > bound) {
    return {StatusCode::kInvalidArgument, "a batch of " + std::to_string(n) +
                                              " records can never fit the topic bound of " +
                                              std::to_string(bound)};
  }
  for (;;) {
    if (next_seq + n <= floor + bound) return Status::Ok();  // as of the last look
    std::atomic_ref<std::uint32_t> acked(notify->acked_seq);
    const std::uint32_t seen = acked.load();
    std::atomic_ref<std::uint32_t>(notify->acked_want).store(1);  // then look again
    auto pos = channel_positions();
    if (!pos.ok()) return pos.status();
    // Without channels nobody consumes: look again after `bound` more.
    floor = next_seq;
    for (const auto& [name, p] : *pos) floor = std::min(floor, p);
    if (next_seq + n <= floor + bound) return Status::Ok();
    if (opt.on_bound == BoundPolicy::kFail) {
      return {StatusCode::kRejected, "topic bound of " + std::to_string(bound) +
                                         " unconsumed records reached (slowest channel at seq " +
                                         std::to_string(floor) + ", next seq " +
                                         std::to_string(next_seq) + ")"};
    }
    if (StatusCode e = ctx.err(); e != StatusCode::kOk) return e;
    lk.unlock();
    log::futex_wait_shared(&notify->acked_seq, seen, ctx);
    lk.lock();
  }
}

Status Topic::Impl::trim_locked(std::unique_lock<std::mutex>& lk) {
  (void)lk;                         // held throughout: retention is rare (on segment boundaries)
  if (reader) return Status::Ok();  // the writer's job
  auto positions = channel_positions();
  if (!positions.ok()) return positions.status();
  const std::map<std::string, std::uint64_t>& pos = *positions;
  // A topic without channels keeps everything (unless capped).
  std::uint64_t min = pos.empty() ? 0 : UINT64_MAX;
  for (const auto& [name, p] : pos) min = std::min(min, p);
  std::vector<std::shared_ptr<Segment>> gone;
  while (segs.size() > 1) {
    const std::uint64_t after = segs[1]->base_seq;  // first seq past the oldest segment
    const bool passed = !pos.empty() && after <= min;
    if (!passed && !over_cap(*segs.front())) break;
    if (!passed) {  // capped: what the slowest channel had not acknowledged is dropped
      const std::uint64_t base = segs.front()->base_seq;
      ++retention.segments_capped;
      retention.records_dropped += after - std::max(min, base);
      for (auto& [name, c] : open_channels) {  // closed ones count when they reopen
        if (c.acked < after) c.capped += after - std::max(c.acked, base);
      }
    }
    ++retention.segments_deleted;
    gone.push_back(segs.front());
    disk_bytes -= std::min(disk_bytes, segs.front()->end.load(std::memory_order_relaxed));
    segs.erase(segs.begin());
  }
  first_seq = segs.front()->base_seq;
  if (gone.empty()) return Status::Ok();
  for (const auto& s : gone) {
    if (::unlink(s->path.c_str()) != 0 && errno != ENOENT) {
      return log::io_error("delete", s->path, errno);
    }
  }
  return log::fsync_dir(dir);  // readers still holding a segment keep its fd
}

void Topic::Impl::refresh() {
  std::lock_guard lk(mu);
  char header[kSegmentHeaderSize];
  std::string rec;
  for (;;) {
    auto seg = segs.back();
    std::uint64_t end = seg->end.load(std::memory_order_relaxed);
    bool advanced = false;
    for (;;) {  // records the writer completed since we looked
      char h[kRecordHeaderSize];
      auto got = log::pread_some(seg->fd, h, sizeof h, end, seg->path);
      if (!got.ok() || *got < sizeof h) break;
      const std::size_t len = log::get32(h);
      if (len > opt.max_message_bytes) break;
      rec.resize(kRecordHeaderSize + len);
      got = log::pread_some(seg->fd, rec.data(), rec.size(), end, seg->path);
      if (!got.ok() || *got < rec.size()) break;
      auto v = log::decode_record(rec.data(), rec.size(), opt.max_message_bytes, next_seq);
      if (v.kind != log::RecordView::kValid) break;  // not complete yet
      end += v.size;
      ++next_seq;
      advanced = true;
    }
    if (advanced) seg->end.store(end, std::memory_order_release);
    // A next segment exists only once this one is final (and the writer
    // rolls only non-empty segments): take it, after one more look at this
    // one (it may have grown since).
    if (next_seq == seg->base_seq) return;
    std::uint64_t base = next_seq;
    std::string next_path = dir + "/" + log::segment_name(base);
    int fd = ::open(next_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
      // A retention cap may have deleted it, and more, before we got here:
      // then a later segment exists, and ours (sealed) is final.
      std::error_code ec;
      std::optional<std::uint64_t> later;
      for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
        const auto b = log::parse_segment_name(e.path().filename().string());
        if (b && *b > next_seq && (!later || *b < *later)) later = b;
      }
      if (later && advanced) continue;  // look at the old one again first
      if (later) {
        base = *later;
        next_path = dir + "/" + log::segment_name(base);
        fd = ::open(next_path.c_str(), O_RDONLY | O_CLOEXEC);
      }
    }
    if (fd < 0) return;
    if (pread(fd, header, sizeof header, 0) != static_cast<ssize_t>(sizeof header) ||
        log::decode_segment_header(header) != std::optional<std::uint64_t>(base)) {
      ::close(fd);  // being created: the header is not written yet
      return;
    }
    if (advanced) {
      ::close(fd);
      continue;  // look at the old one again first
    }
    auto nseg = std::make_shared<Segment>();
    nseg->base_seq = base;
    nseg->path = next_path;
    nseg->fd = fd;
    segs.push_back(std::move(nseg));
    if (base > next_seq) first_seq = next_seq = base;  // the rest is gone
    seg->sealed.store(true, std::memory_order_release);
  }
}

Topic::Topic(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Topic::~Topic() = default;

namespace {

Result<std::shared_ptr<Segment>> create_segment(const std::string& dir, std::uint64_t base) {
  auto seg = std::make_shared<Segment>();
  seg->base_seq = base;
  seg->path = dir + "/" + log::segment_name(base);
  seg->fd = ::open(seg->path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (seg->fd < 0) return log::io_error("create", seg->path, errno);
  char header[kSegmentHeaderSize];
  log::encode_segment_header(header, base);
  if (Status s = log::pwrite_all(seg->fd, header, sizeof header, 0, seg->path); !s.ok()) {
    ::unlink(seg->path.c_str());
    return s;
  }
  return seg;
}

}  // namespace

namespace {

// Opens the segments recovery found and makes them the topic's. The writer
// opens the last one read-write and cuts its torn tail off.
Status adopt(Topic::Impl& t, std::vector<log::Scanned>& scanned, bool writer) {
  for (std::size_t i = 0; i < scanned.size(); ++i) {
    auto& s = scanned[i];
    const bool writable = writer && i + 1 == scanned.size();
    auto seg = std::make_shared<Segment>();
    seg->base_seq = s.base_seq;
    seg->path = s.path;
    seg->fd = ::open(s.path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (seg->fd < 0) return log::io_error("open", s.path, errno);
    if (writable && s.torn && ::ftruncate(seg->fd, static_cast<off_t>(s.end)) != 0) {
      return log::io_error("truncate", s.path, errno);
    }
    seg->end.store(s.end);
    seg->sealed.store(i + 1 < scanned.size());
    seg->skips = std::move(s.skips);
    t.next_seq = s.next_seq;
    t.disk_bytes += s.end;
    if (writable) {
      if (Status st = make_writable(t, *seg); !st.ok()) return st;
    }
    t.segs.push_back(std::move(seg));
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Topic>> Topic::open_reader(const std::string& canon,
                                                  const TopicOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->dir = canon;
  impl->opt = options;
  impl->reader = true;
  RecoveryReport scan;
  auto scanned = log::scan_topic(canon, options, /*modify=*/false, scan);
  if (!scanned.ok()) return scanned.status();
  if (scanned->empty()) return Status(StatusCode::kNotFound, "no topic in " + canon);
  impl->report.corrupt = std::move(scan.corrupt);  // a torn tail may be a write in progress
  auto notify = log::map_notify(canon);
  if (!notify.ok()) return notify.status();
  impl->notify = *notify;
  if (Status s = adopt(*impl, *scanned, /*writer=*/false); !s.ok()) return s;
  impl->first_seq = impl->segs.front()->base_seq;
  return std::unique_ptr<Topic>(new Topic(std::move(impl)));
}

Result<std::unique_ptr<Topic>> Topic::open(const std::string& dir, TopicOptions options) {
  if (Status s = log::validate(options); !s.ok()) return s;
  std::error_code ec;
  std::filesystem::create_directories(dir + "/channels", ec);
  if (ec) return log::io_error("create directory", dir, ec.value());
  const std::string canon = std::filesystem::canonical(dir, ec).string();
  if (ec) return log::io_error("resolve", dir, ec.value());
  if (options.read_only) return open_reader(canon, options);
  {
    std::lock_guard g(log::g_open_mu);
    auto [it, fresh] = log::g_open_dirs.try_emplace(canon, getpid());
    if (!fresh && it->second != getpid()) {
      it->second = getpid();  // inherited through fork: not open in this process
      fresh = true;
    }
    if (!fresh) {
      return Status(StatusCode::kInUse, "topic " + dir + " is already open in this process (PID " +
                                            std::to_string(getpid()) + ")");
    }
  }
  auto impl = std::make_unique<Impl>();
  impl->dir = canon;
  impl->opt = options;
  impl->preallocate = options.preallocate;
  auto lock = log::lock_dir(canon);
  if (!lock.ok()) return lock.status();  // Impl's destructor unregisters
  impl->lock_fd = *lock;
  auto notify = log::map_notify(canon);
  if (!notify.ok()) return notify.status();
  impl->notify = *notify;

  auto scanned = log::scan_topic(canon, options, /*modify=*/true, impl->report);
  if (!scanned.ok()) return scanned.status();
  if (Status s = adopt(*impl, *scanned, /*writer=*/true); !s.ok()) return s;
  if (impl->segs.empty()) {
    auto seg = create_segment(canon, 0);
    if (!seg.ok()) return seg.status();
    if (Status s = make_writable(*impl, **seg); !s.ok()) return s;
    impl->segs.push_back(*seg);
    impl->disk_bytes = kSegmentHeaderSize;
    if (Status s = log::fsync_dir(canon); !s.ok()) return s;
  } else if (impl->report.truncated.size() > 0 && ::fdatasync(impl->segs.back()->fd) != 0) {
    return log::io_error("sync", impl->segs.back()->path, errno);
  }
  impl->first_seq = impl->segs.front()->base_seq;
  if (options.durability == Durability::kInterval) {
    Impl* p = impl.get();
    impl->flusher = std::thread([p] {
      std::unique_lock lk(p->mu);
      while (!p->stopping) {
        p->stop_cv.wait_for(lk, p->opt.sync_interval);
        if (!p->dirty) continue;
        p->dirty = false;
        auto seg = p->segs.back();
        lk.unlock();
        ::fdatasync(seg->fd);  // an error shows on the next sync() or append
        lk.lock();
      }
    });
  }
  return std::unique_ptr<Topic>(new Topic(std::move(impl)));
}

Result<std::uint64_t> Topic::append(std::string_view payload, const Context& ctx) {
  return append_batch(std::span<const std::string_view>(&payload, 1), ctx);
}

Result<std::uint64_t> Topic::append_batch(std::span<const std::string_view> payloads,
                                          const Context& ctx) {
  Impl& t = *impl_;
  if (t.reader) {
    return Status(StatusCode::kInvalidArgument, "topic " + t.dir + " was opened read-only");
  }
  if (ctx.stop_requested()) return StatusCode::kCancelled;
  if (payloads.empty()) return Status(StatusCode::kInvalidArgument, "append_batch: no records");
  std::size_t bytes = 0;
  for (std::string_view p : payloads) {
    if (p.size() > t.opt.max_message_bytes) {
      return Status(StatusCode::kInvalidArgument, "message of " + std::to_string(p.size()) +
                                                      " bytes exceeds max_message_bytes " +
                                                      std::to_string(t.opt.max_message_bytes));
    }
    bytes += kRecordHeaderSize + p.size();
  }
  std::unique_lock lk(t.mu);
  if (t.opt.max_unconsumed > 0) {
    if (Status s = t.wait_for_room(lk, payloads.size(), ctx); !s.ok()) return s;
  }
  Segment* seg = t.segs.back().get();
  std::uint64_t end = seg->end.load(std::memory_order_relaxed);
  // Roll when this batch would pass the segment size (a batch never spans
  // segments; a record alone in a segment may be as large as allowed).
  if (end > kSegmentHeaderSize && end + bytes > t.opt.segment_bytes) {
    if (Status s = trim_reserve(*seg); !s.ok()) return s;
    if (t.opt.durability != Durability::kNone && ::fdatasync(seg->fd) != 0) {
      return log::io_error("sync", seg->path, errno);
    }
    auto next = create_segment(t.dir, t.next_seq);
    if (!next.ok()) return next.status();
    if (Status s = make_writable(t, **next); !s.ok()) return s;
    if (t.opt.durability != Durability::kNone) {
      if (Status s = log::fsync_dir(t.dir); !s.ok()) return s;
    }
    // The sealed segment is read-only from now on; readers keep its fd.
    t.segs.push_back(*next);
    seg->sealed.store(true, std::memory_order_release);
    t.disk_bytes += kSegmentHeaderSize;
    seg = next->get();
    end = kSegmentHeaderSize;
    t.synced = t.written;  // everything before the roll was synced above
    // Channels in other processes release segments through their files;
    // look at them on every roll.
    if (Status s = t.trim_locked(lk); !s.ok()) return s;
  }
  if (Status s = reserve(t, *seg, end + bytes); !s.ok()) return s;
  const std::uint64_t first = t.next_seq;
  std::uint64_t seq = first;
  if (seg->map != nullptr && end + bytes <= seg->cap && bytes <= kMapWriteMax) {
    // Reserved and mapped: no system call. The bytes are in the page cache
    // (surviving a process crash) as soon as they are copied.
    char* p = seg->map + end;
    for (std::string_view payload : payloads) {
      log::encode_record(p, seq++, payload);
      p += kRecordHeaderSize + payload.size();
    }
  } else {
    t.buf.resize(bytes);
    char* p = t.buf.data();
    for (std::string_view payload : payloads) {
      log::encode_record_header(p, seq++, payload);
      std::memcpy(p + kRecordHeaderSize, payload.data(), payload.size());
      p += kRecordHeaderSize + payload.size();
    }
    if (Status s = log::pwrite_all(seg->fd, t.buf.data(), bytes, end, seg->path); !s.ok()) {
      // Disk full or I/O error: cut the partial write off so the log stays clean.
      (void)::ftruncate(seg->fd, static_cast<off_t>(end));
      seg->cap = end;
      return s;
    }
    seg->cap = std::max(seg->cap, end + bytes);
  }
  if (t.opt.durability == Durability::kPerAppend && ::fdatasync(seg->fd) != 0) {
    const int err = errno;
    (void)::ftruncate(seg->fd, static_cast<off_t>(end));
    seg->cap = end;
    return log::io_error("sync", seg->path, err);
  }
  seg->end.store(end + bytes, std::memory_order_release);
  t.next_seq = seq;
  t.written += bytes;
  t.disk_bytes += bytes;
  t.dirty = true;
  if (t.waiters > 0) t.data_cv.notify_all();
  t.wake_other_processes();
  if (t.opt.durability != Durability::kGroupCommit) return first;

  // Group commit: whoever finds no sync running syncs everything written so
  // far; the others wait for a sync that covers them.
  const std::uint64_t mine = t.written;
  while (t.synced < mine) {
    if (!t.syncing) {
      t.syncing = true;
      const std::uint64_t target = t.written;
      auto last = t.segs.back();
      lk.unlock();
      const int rc = ::fdatasync(last->fd);
      const int err = errno;
      lk.lock();
      t.syncing = false;
      t.sync_cv.notify_all();
      if (rc != 0) return log::io_error("sync", last->path, err);
      t.synced = std::max(t.synced, target);
    } else {
      t.sync_cv.wait(lk);
    }
  }
  return first;
}

Status Topic::sync() {
  Impl& t = *impl_;
  std::shared_ptr<Segment> seg;
  {
    std::lock_guard lk(t.mu);
    seg = t.segs.back();
  }
  if (::fdatasync(seg->fd) != 0) return log::io_error("sync", seg->path, errno);
  return Status::Ok();
}

std::uint64_t Topic::next_seq() const {
  std::lock_guard lk(impl_->mu);
  return impl_->next_seq;
}
std::uint64_t Topic::first_seq() const {
  std::lock_guard lk(impl_->mu);
  return impl_->first_seq;
}
std::uint64_t Topic::disk_bytes() const {
  std::lock_guard lk(impl_->mu);
  return impl_->disk_bytes;
}
const RecoveryReport& Topic::recovery() const { return impl_->report; }
RetentionStats Topic::retention() const {
  std::lock_guard lk(impl_->mu);
  return impl_->retention;
}
const std::string& Topic::dir() const { return impl_->dir; }
const TopicOptions& Topic::options() const { return impl_->opt; }

Result<std::vector<std::string>> Topic::channels() const {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(impl_->dir + "/channels", ec)) {
    const std::string name = e.path().filename().string();
    if (name.ends_with(".pos")) out.push_back(name.substr(0, name.size() - 4));
  }
  if (ec) return log::io_error("list", impl_->dir + "/channels", ec.value());
  std::sort(out.begin(), out.end());
  return out;
}

Status Topic::delete_channel(std::string_view name) {
  {
    std::lock_guard lk(impl_->mu);
    if (impl_->open_channels.contains(std::string(name))) {
      return {StatusCode::kInUse, "channel '" + std::string(name) + "' is open"};
    }
  }
  const std::string path = impl_->channel_path(name);
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) {
      return {StatusCode::kNotFound, "no channel '" + std::string(name) + "'"};
    }
    return log::io_error("delete", path, errno);
  }
  if (Status s = log::fsync_dir(impl_->dir + "/channels"); !s.ok()) return s;
  log::wake_if_wanted(&impl_->notify->acked_seq, &impl_->notify->acked_want);  // room, maybe
  return impl_->trim();  // it may have been the one holding old segments
}

Result<std::unique_ptr<Channel>> Topic::channel(std::string_view name) {
  return channel(name, ChannelOptions{});
}

Result<RecoveryReport> verify_topic(const std::string& dir, TopicOptions options) {
  if (Status s = log::validate(options); !s.ok()) return s;
  if (!std::filesystem::is_directory(dir)) {
    return Status(StatusCode::kNotFound, "no topic directory " + dir);
  }
  RecoveryReport report;
  auto scanned = log::scan_topic(dir, options, /*modify=*/false, report);
  if (!scanned.ok()) return scanned.status();
  return report;
}

}  // namespace sluice
