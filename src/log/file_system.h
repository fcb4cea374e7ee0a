// The log's one seam to the disk: every file-system call the log makes goes
// through FileSystem and File (cf. leveldb's Env). Production uses
// posix_file_system(); tests substitute a file system that records every
// call and can produce the disk as a power cut at any of them would leave it
// (tests/log/fault_file_system.h). Private to the log module.
//
// Errors are Status values: kIOError "<op> <path>: <strerror>", kNotFound
// when opening (not creating), removing or listing a missing name, kAlreadyExists for an exclusive
// create of an existing name, kInUse for a lock held elsewhere (naming the holder).
//
// Thread safety: a FileSystem may be used from any number of threads. A File
//   may be read (pread) and synced from several threads while one writes;
//   the log serializes its writes to one file.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

namespace sluice::log {

class File {
 public:
  virtual ~File() = default;
  const std::string& path() const { return path_; }

  // Reads up to n bytes at off; fewer only at the end of the file.
  virtual Result<std::size_t> pread(char* buf, std::size_t n, std::uint64_t off) = 0;
  // Writes all n bytes at off (short writes retried).
  virtual Status pwrite(const char* buf, std::size_t n, std::uint64_t off) = 0;
  // fdatasync: the file's bytes and size are durable when it returns.
  virtual Status sync() = 0;
  // Starts writing [off, off + len) back to the disk and returns without
  // waiting (sync_file_range's WRITE): a hint that makes nothing durable, so
  // that a later sync() finds less to do. The default does nothing.
  virtual Status start_writeback(std::uint64_t /*off*/, std::uint64_t /*len*/) {
    return Status::Ok();
  }
  virtual Status truncate(std::uint64_t size) = 0;
  // Reserves [off, off + len) so that later writes there cannot fail for
  // space (fallocate; the size grows). kUnavailable: not supported here.
  virtual Status preallocate(std::uint64_t off, std::uint64_t len) = 0;
  virtual Result<std::uint64_t> size() = 0;
  virtual Result<std::chrono::system_clock::time_point> modified() = 0;
  // When the file was made (statx's birth time); kUnavailable where the
  // file system does not keep it.
  virtual Result<std::chrono::system_clock::time_point> created() {
    return Status(StatusCode::kUnavailable, "no birth time for " + path_);
  }
  // True where writes through map() into preallocated space cannot fault for
  // lack of space (not on copy-on-write file systems).
  virtual bool map_is_safe() = 0;
  // A shared, writable map of [0, len), valid until the File is destroyed;
  // nullptr if it cannot be had. What reaches the disk is what is in the map
  // when sync() runs. Only bytes below size() may be touched.
  virtual char* map(std::size_t len) = 0;
  // An exclusive lock on the file, held while the File lives: an
  // open-file-description lock (F_OFD_SETLK), so closing another File of the
  // same path in this process does not drop it (a POSIX record lock would
  // be), and another File of it in this process is refused too. kInUse
  // "<what> by PID n" if another holds it ("by another process" when its PID
  // cannot be had). A child made by fork() shares the lock until it closes
  // the inherited descriptor (O_CLOEXEC: at exec).
  virtual Status lock(const std::string& what) = 0;
  // The PID of whoever holds lock() on this file through another File (this
  // process's PID if one of its open Files holds it), 0 if none, -1 if it
  // is held by a process that cannot be named (a forked child kept it: the
  // PID it recorded is gone, or is this process's, which let go of it). The
  // lock taken through this File does not count.
  virtual Result<int> lock_holder() = 0;
  // An exclusive flock on the file, held while the File lives. Like lock(),
  // it excludes a second holder in the same process too (another open of
  // the same file); kInUse "<path> is locked" if anyone holds it.
  virtual Status try_flock() = 0;

 protected:
  explicit File(std::string path) : path_(std::move(path)) {}

 private:
  std::string path_;
};

enum class OpenMode : std::uint8_t {
  kRead,       // existing file, read-only
  kReadWrite,  // existing file
  kCreate,     // read-write, created empty if missing
  kCreateNew,  // read-write, must not exist (kAlreadyExists)
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;
  virtual Result<std::unique_ptr<File>> open(const std::string& path, OpenMode mode) = 0;
  virtual Status remove(const std::string& path) = 0;
  virtual Status rename(const std::string& from, const std::string& to) = 0;
  // A rename (of a file or a directory) that never replaces: kAlreadyExists
  // if `to` exists, kNotFound if `from` does not.
  virtual Status rename_noreplace(const std::string& from, const std::string& to) = 0;
  // Removes `path` and, for a directory, everything in it; Ok if it is not
  // there. Not atomic: a crash may leave part of the tree.
  virtual Status remove_tree(const std::string& path) = 0;
  // Whether anything (a file or a directory) is at `path`.
  virtual bool exists(const std::string& path) = 0;
  // fsync of a directory: creations, renames and removals of its entries are
  // durable when it returns.
  virtual Status sync_dir(const std::string& dir) = 0;
  // Creates one directory (its parent must exist); kAlreadyExists if it does.
  virtual Status create_dir(const std::string& dir) = 0;
  virtual bool is_dir(const std::string& path) = 0;
  // Entry names (no "." or ".."), in no particular order.
  virtual Result<std::vector<std::string>> list(const std::string& dir) = 0;
  // An absolute path without symlinks, "." or ".." (the path must exist).
  virtual Result<std::string> canonical(const std::string& path) = 0;
};

// The real one: POSIX calls, no overhead beyond a virtual call.
FileSystem& posix_file_system();

// "<op> <path>: <strerror(err)>" as kIOError.
Status io_error(const std::string& op, const std::string& path, int err);

// Helpers over any FileSystem.
Result<std::string> read_whole(FileSystem& fs, const std::string& path);
// Creates `path` (kAlreadyExists if it is there), writes `bytes` and syncs
// the file (not its directory: the caller syncs that when it wants the name
// durable).
Status write_file_synced(FileSystem& fs, const std::string& path, std::string_view bytes);
// Replaces `path` whole: a synced `<path>.tmp` renamed over it, then the
// directory synced. A crash leaves the old contents or the new, never a mix.
Status replace_file_synced(FileSystem& fs, const std::string& path, std::string_view bytes);
// Creates dir and any missing parents, syncing each parent that gained an
// entry (so the directory survives a power cut).
Status create_dirs(FileSystem& fs, const std::string& dir);
// "<dir>/..." parent of a path ("" if none).
std::string parent_dir(const std::string& path);

}  // namespace sluice::log
