// A simulated disk for power-cut tests (cf. leveldb's FaultInjectionTestEnv):
// an in-memory log::FileSystem that records every call and can produce "the
// disk after a power cut at call K":
// - a file's bytes are what they were at its last sync; what was written
//   after is dropped, read back as zeros where the file had grown
//   (extended or preallocated), or torn (each 512-byte sector old or new);
// - a creation, rename or removal of a directory entry that no sync of the
//   directory followed is undone.
// Writes through map() land in the same bytes as pwrite, so what reaches the
// disk is what was in the map when the file was synced.
//
// Thread safety: every call may come from any thread (one lock). Bytes
// written through a map are copied at a cut without that lock, so under
// ThreadSanitizer map_is_safe() is false and the log writes with pwrite.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "log/file_system.h"

namespace sluice::testutil {

enum class CutMode : std::uint8_t {
  kDropUnsynced,  // files as of their last sync, sizes too
  kZeroFill,      // sizes survive; unsynced bytes read as zeros past the synced size
  kTorn,          // sizes survive; each unsynced 512-byte sector is old or new
};
const char* to_string(CutMode m);

class FaultFileSystem final : public log::FileSystem {
 public:
  // Files live under `root`, which exists and is durable.
  explicit FaultFileSystem(std::string root = "/fault");
  ~FaultFileSystem() override;

  // Calls that change the disk or sync it (creating opens, writes, syncs,
  // truncates, preallocations, renames, removals, directory creation and
  // sync), counted from 1. A remove_tree is one call (the tree's entry goes
  // at once). Locks (lock, try_flock) are not counted: they change nothing
  // on disk, and a cut drops them (the new file system has none).
  std::uint64_t calls() const;
  // The power goes off as call k starts: it and every later call fail with
  // kIOError, and the disk is frozen as it was.
  void cut_at(std::uint64_t k);
  bool power_lost() const;
  // The last `n` calls before the cut (or now), for failure messages.
  std::string recent_calls(std::size_t n) const;
  // Each sync (of a file or a directory) takes this long before it takes
  // effect, as a disk's would: concurrent workloads interleave as they do on
  // a real one.
  void set_sync_latency(std::chrono::microseconds d);
  // Runs `hook(path)` at the start of every file sync, on the syncing thread
  // and outside the disk's lock: a test can hold one sync while others run.
  void set_sync_hook(std::function<void(const std::string&)> hook);
  // Every start_writeback(off, len) asked of a file, in order, as
  // "<path> @off +len". A hint only: it changes nothing durable, so it is
  // not a counted call and a cut loses what it covered unless a sync came.
  std::vector<std::string> writebacks() const;
  // The disk the cut left (or the disk now, if the power never went off),
  // as a new file system with everything in it durable.
  std::unique_ptr<FaultFileSystem> after_cut(CutMode mode, std::uint64_t seed) const;

  Result<std::unique_ptr<log::File>> open(const std::string& path, log::OpenMode mode) override;
  Status remove(const std::string& path) override;
  Status rename(const std::string& from, const std::string& to) override;
  Status rename_noreplace(const std::string& from, const std::string& to) override;
  Status remove_tree(const std::string& path) override;
  bool exists(const std::string& path) override;
  Status sync_dir(const std::string& dir) override;
  Status create_dir(const std::string& dir) override;
  bool is_dir(const std::string& path) override;
  Result<std::vector<std::string>> list(const std::string& dir) override;
  Result<std::string> canonical(const std::string& path) override;

  struct Inode;

 private:
  friend class FaultFile;
  // Counts a disk-changing call; false once the power is off.
  bool count(const std::string& what);
  // rename (replace) and rename_noreplace: one entry moved, counted as a call.
  Status move_entry(const std::string& from, const std::string& to, bool replace);
  std::shared_ptr<Inode> lookup(const std::string& path) const;
  void wait_sync_latency() const;
  // The directory holding `path` and its last component.
  std::shared_ptr<Inode> parent_of(const std::string& path, std::string& name) const;

  mutable std::mutex mu_;
  std::string root_;
  std::shared_ptr<Inode> tree_;
  std::uint64_t calls_ = 0;
  std::uint64_t cut_at_ = 0;  // 0: never
  bool off_ = false;
  std::chrono::microseconds sync_latency_{0};
  std::function<void(const std::string&)> sync_hook_;
  std::shared_ptr<Inode> frozen_;  // the tree as the cut found it
  std::vector<std::string> log_;   // every counted call
  std::vector<std::string> writebacks_;
};

}  // namespace sluice::testutil
