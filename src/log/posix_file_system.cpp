// The production FileSystem: plain POSIX calls.
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>  // pthread_atfork
#include <signal.h>   // kill(pid, 0)
#include <stdio.h>    // renameat2
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>

#include "log/file_system.h"

namespace sluice::log {

Status io_error(const std::string& op, const std::string& path, int err) {
  return {StatusCode::kIOError, op + " " + path + ": " + std::strerror(err)};
}

namespace {

// kNotFound for a name that is not there (callers tell it from an error).
Status missing_or_error(const std::string& op, const std::string& path, int err) {
  if (err == ENOENT) return {StatusCode::kNotFound, op + " " + path + ": " + std::strerror(err)};
  return io_error(op, path, err);
}

}  // namespace

namespace {

// lock(): an open-file-description lock (F_OFD_SETLK), which belongs to
// the open file, not to the process: closing another descriptor of the same
// file in this process (a probe, a position read) does not drop it, and two
// opens in one process exclude each other. F_OFD_GETLK names no holder, so
// the holder's PID is written in the lock itself: it covers [0, kPidBase +
// pid), and its length is read back. Nothing on disk, nothing stale after a
// crash (the lock goes with its holder).
constexpr off_t kPidBase = off_t{1} << 40;

struct flock holder_range(int pid) {
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = kPidBase + pid;
  return fl;
}

// The files this process holds lock() on through a File still open here,
// by (device, inode, PID). A lock carrying this process's PID that is not
// among them was left with a child forked from it (it shares the open file
// and keeps the lock after this process closes its File): lock_holder()
// must not name this process then. Entries made in a parent never match
// in its child (another PID). Forks wait for the mutex, so a child never
// starts with it held.
struct HeldLocks {
  using Key = std::tuple<dev_t, ino_t, pid_t>;
  std::mutex mu;
  std::multiset<Key> held;
};

HeldLocks& held_locks() {
  static HeldLocks* const h = [] {
    auto* p = new HeldLocks;  // never destroyed: Files may close at exit
    ::pthread_atfork([] { held_locks().mu.lock(); }, [] { held_locks().mu.unlock(); },
                     [] { held_locks().mu.unlock(); });
    return p;
  }();
  return *h;
}

std::optional<HeldLocks::Key> lock_key(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return std::nullopt;
  return HeldLocks::Key{st.st_dev, st.st_ino, ::getpid()};
}

class PosixFile final : public File {
 public:
  PosixFile(std::string path, int fd) : File(std::move(path)), fd_(fd) {}
  ~PosixFile() override {
    if (map_ != nullptr) ::munmap(map_, map_len_);
    if (locked_) {
      HeldLocks& h = held_locks();
      std::lock_guard g(h.mu);
      if (auto it = h.held.find(*locked_); it != h.held.end()) h.held.erase(it);
    }
    ::close(fd_);
  }

  Result<std::size_t> pread(char* buf, std::size_t n, std::uint64_t off) override {
    std::size_t got = 0;
    while (got < n) {
      const ssize_t r = ::pread(fd_, buf + got, n - got, static_cast<off_t>(off + got));
      if (r < 0) {
        if (errno == EINTR) continue;
        return io_error("read", path(), errno);
      }
      if (r == 0) break;
      got += static_cast<std::size_t>(r);
    }
    return got;
  }

  Status pwrite(const char* buf, std::size_t n, std::uint64_t off) override {
    while (n > 0) {
      const ssize_t w = ::pwrite(fd_, buf, n, static_cast<off_t>(off));
      if (w < 0) {
        if (errno == EINTR) continue;
        return io_error("write", path(), errno);
      }
      buf += w;
      n -= static_cast<std::size_t>(w);
      off += static_cast<std::uint64_t>(w);
    }
    return Status::Ok();
  }

  Status sync() override {
    return ::fdatasync(fd_) == 0 ? Status::Ok() : io_error("sync", path(), errno);
  }

  Status start_writeback(std::uint64_t off, std::uint64_t len) override {
    return ::sync_file_range(fd_, static_cast<off_t>(off), static_cast<off_t>(len),
                             SYNC_FILE_RANGE_WRITE) == 0
               ? Status::Ok()
               : io_error("sync_file_range", path(), errno);
  }

  Status truncate(std::uint64_t size) override {
    return ::ftruncate(fd_, static_cast<off_t>(size)) == 0 ? Status::Ok()
                                                           : io_error("truncate", path(), errno);
  }

  Status preallocate(std::uint64_t off, std::uint64_t len) override {
    int rc = 0;
    do {
      rc = ::fallocate(fd_, 0, static_cast<off_t>(off), static_cast<off_t>(len));
    } while (rc != 0 && errno == EINTR);
    if (rc == 0) return Status::Ok();
    if (errno == EOPNOTSUPP || errno == ENOSYS) {
      return {StatusCode::kUnavailable, "fallocate not supported for " + path()};
    }
    return io_error("reserve space in", path(), errno);
  }

  Result<std::uint64_t> size() override {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) return io_error("stat", path(), errno);
    return static_cast<std::uint64_t>(st.st_size);
  }

  Result<std::chrono::system_clock::time_point> modified() override {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) return io_error("stat", path(), errno);
    return std::chrono::system_clock::time_point(std::chrono::seconds(st.st_mtim.tv_sec) +
                                                 std::chrono::nanoseconds(st.st_mtim.tv_nsec));
  }

  Result<std::chrono::system_clock::time_point> created() override {
    struct statx st {};
    if (::statx(fd_, "", AT_EMPTY_PATH, STATX_BTIME, &st) != 0) {
      return io_error("statx", path(), errno);
    }
    if ((st.stx_mask & STATX_BTIME) == 0) {
      return Status(StatusCode::kUnavailable, "no birth time for " + path());
    }
    return std::chrono::system_clock::time_point(std::chrono::seconds(st.stx_btime.tv_sec) +
                                                 std::chrono::nanoseconds(st.stx_btime.tv_nsec));
  }

  bool map_is_safe() override {
    struct statfs fs {};
    if (::fstatfs(fd_, &fs) != 0) return false;
    constexpr unsigned long kExt4 = 0xEF53;
    constexpr unsigned long kXfs = 0x58465342;
    constexpr unsigned long kTmpfs = 0x01021994;
    const auto type = static_cast<unsigned long>(fs.f_type);
    return type == kExt4 || type == kXfs || type == kTmpfs;
  }

  char* map(std::size_t len) override {
    if (map_ != nullptr) return map_len_ >= len ? map_ : nullptr;
    void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) return nullptr;
    map_ = static_cast<char*>(p);
    map_len_ = len;
    return map_;
  }

  Status lock(const std::string& what) override {
    struct flock fl = holder_range(static_cast<int>(::getpid()));
    if (::fcntl(fd_, F_OFD_SETLK, &fl) == 0) {
      if (!locked_) {
        locked_ = lock_key(fd_);
        if (locked_) {
          HeldLocks& h = held_locks();
          std::lock_guard g(h.mu);
          h.held.insert(*locked_);
        }
      }
      return Status::Ok();
    }
    if (errno != EAGAIN && errno != EACCES) return io_error("fcntl(F_OFD_SETLK)", path(), errno);
    auto pid = lock_holder();
    if (pid.ok() && *pid > 0) return {StatusCode::kInUse, what + " by PID " + std::to_string(*pid)};
    return {StatusCode::kInUse, what + " by another process"};
  }

  Result<int> lock_holder() override {
    struct flock who {};
    who.l_type = F_WRLCK;
    who.l_whence = SEEK_SET;
    who.l_start = 0;
    who.l_len = 1;  // every holder's range starts at byte 0
    if (::fcntl(fd_, F_OFD_GETLK, &who) != 0) return io_error("fcntl(F_OFD_GETLK)", path(), errno);
    if (who.l_type == F_UNLCK) return 0;
    if (who.l_pid > 0) return static_cast<int>(who.l_pid);  // a process-owned (F_SETLK) lock
    // An open-file-description lock reports no PID (-1): ours carry it in
    // their length. A holder's forked child shares the lock and keeps it
    // after its parent exits: a PID that is gone is not reported.
    if (who.l_start == 0 && who.l_len > kPidBase && who.l_len - kPidBase <= INT_MAX) {
      const auto pid = static_cast<pid_t>(who.l_len - kPidBase);
      if (pid == ::getpid()) {
        // Ours only if a File of this process holds it: else a child we
        // forked kept it after we let go.
        const auto key = lock_key(fd_);
        HeldLocks& h = held_locks();
        std::lock_guard g(h.mu);
        return key && h.held.contains(*key) ? static_cast<int>(pid) : -1;
      }
      if (::kill(pid, 0) == 0 || errno == EPERM) return static_cast<int>(pid);
    }
    return -1;  // held, by a process we cannot name
  }
  Status try_flock() override {
    if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return Status::Ok();
    if (errno == EWOULDBLOCK) return {StatusCode::kInUse, path() + " is locked"};
    return io_error("flock", path(), errno);
  }

 private:
  int fd_;
  char* map_ = nullptr;
  std::size_t map_len_ = 0;
  std::optional<HeldLocks::Key> locked_;  // in held_locks() while this File holds lock()
};

class PosixFileSystem final : public FileSystem {
 public:
  Result<std::unique_ptr<File>> open(const std::string& path, OpenMode mode) override {
    int flags = O_CLOEXEC;
    switch (mode) {
      case OpenMode::kRead:
        flags |= O_RDONLY;
        break;
      case OpenMode::kReadWrite:
        flags |= O_RDWR;
        break;
      case OpenMode::kCreate:
        flags |= O_RDWR | O_CREAT;
        break;
      case OpenMode::kCreateNew:
        flags |= O_RDWR | O_CREAT | O_EXCL;
        break;
    }
    const int fd = ::open(path.c_str(), flags, 0644);
    if (fd < 0) {
      if (errno == EEXIST) return Status(StatusCode::kAlreadyExists, path + " exists");
      if (mode == OpenMode::kRead || mode == OpenMode::kReadWrite) {
        return missing_or_error("open", path, errno);
      }
      return io_error(mode == OpenMode::kCreateNew ? "create" : "open", path, errno);
    }
    return std::unique_ptr<File>(new PosixFile(path, fd));
  }

  Status remove(const std::string& path) override {
    return ::unlink(path.c_str()) == 0 ? Status::Ok() : missing_or_error("delete", path, errno);
  }

  Status rename(const std::string& from, const std::string& to) override {
    return ::rename(from.c_str(), to.c_str()) == 0 ? Status::Ok()
                                                   : io_error("rename", from + " to", errno);
  }

  Status rename_noreplace(const std::string& from, const std::string& to) override {
    if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) {
      return Status::Ok();
    }
    if (errno == EEXIST || errno == ENOTEMPTY) return {StatusCode::kAlreadyExists, to + " exists"};
    return missing_or_error("rename", from + " to " + to, errno);
  }

  Status remove_tree(const std::string& path) override {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
    return ec ? io_error("remove", path, ec.value()) : Status::Ok();
  }

  bool exists(const std::string& path) override { return ::access(path.c_str(), F_OK) == 0; }

  Status sync_dir(const std::string& dir) override {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return io_error("open", dir, errno);
    const int rc = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    return rc == 0 ? Status::Ok() : io_error("sync", dir, err);
  }

  Status create_dir(const std::string& dir) override {
    if (::mkdir(dir.c_str(), 0755) == 0) return Status::Ok();
    if (errno == EEXIST) return {StatusCode::kAlreadyExists, dir + " exists"};
    return io_error("create directory", dir, errno);
  }

  bool is_dir(const std::string& path) override {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  }

  Result<std::vector<std::string>> list(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return missing_or_error("list", dir, errno);
    std::vector<std::string> out;
    errno = 0;
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") out.push_back(name);
    }
    const int err = errno;
    ::closedir(d);
    if (err != 0) return io_error("list", dir, err);
    return out;
  }

  Result<std::string> canonical(const std::string& path) override {
    char buf[PATH_MAX];
    if (::realpath(path.c_str(), buf) == nullptr) return io_error("resolve", path, errno);
    return std::string(buf);
  }
};

}  // namespace

FileSystem& posix_file_system() {
  static PosixFileSystem fs;
  return fs;
}

Result<std::string> read_whole(FileSystem& fs, const std::string& path) {
  auto f = fs.open(path, OpenMode::kRead);
  if (!f.ok()) return f.status();
  auto size = (*f)->size();
  if (!size.ok()) return size.status();
  std::string data(static_cast<std::size_t>(*size), '\0');
  auto got = (*f)->pread(data.data(), data.size(), 0);
  if (!got.ok()) return got.status();
  data.resize(*got);
  return data;
}

std::string parent_dir(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return "";
  return slash == 0 ? "/" : path.substr(0, slash);
}

Status write_file_synced(FileSystem& fs, const std::string& path, std::string_view bytes) {
  auto f = fs.open(path, OpenMode::kCreateNew);
  if (!f.ok()) return f.status();
  if (Status s = (*f)->pwrite(bytes.data(), bytes.size(), 0); !s.ok()) return s;
  return (*f)->sync();
}

Status replace_file_synced(FileSystem& fs, const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp";
  if (Status s = fs.remove(tmp); !s.ok() && s.code() != StatusCode::kNotFound) return s;
  if (Status s = write_file_synced(fs, tmp, bytes); !s.ok()) return s;
  if (Status s = fs.rename(tmp, path); !s.ok()) return s;
  const std::string dir = parent_dir(path);
  return fs.sync_dir(dir.empty() ? "." : dir);
}

Status create_dirs(FileSystem& fs, const std::string& dir) {
  if (dir.empty() || fs.is_dir(dir)) return Status::Ok();
  const std::string parent = parent_dir(dir);
  if (!parent.empty() && parent != dir) {
    if (Status s = create_dirs(fs, parent); !s.ok()) return s;
  }
  Status s = fs.create_dir(dir);
  if (s.code() == StatusCode::kAlreadyExists) return Status::Ok();  // a racing creator
  if (!s.ok()) return s;
  return fs.sync_dir(parent.empty() ? "." : parent);
}

}  // namespace sluice::log
