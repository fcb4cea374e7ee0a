// A FileSystem over another whose segment-file syncs fail on demand, for
// tests of what the log does after a failed fdatasync.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "log/format.h"
#include "testutil/forwarding_file_system.h"

namespace sluice::testutil {

// Fails the next `fail` syncs of segment files (nothing reaches the disk),
// and counts the segment syncs that failed and that succeeded.
class FlakySegmentSync final : public ForwardingFileSystem {
 public:
  explicit FlakySegmentSync(log::FileSystem& base) : ForwardingFileSystem(base) {}
  std::atomic<int> fail{0};
  std::atomic<int> failed{0};
  std::atomic<int> synced{0};
  std::atomic<int> fail_dir_syncs{0};  // the next n directory syncs fail
  std::function<void()> hold;          // runs in a failing sync, before it fails

  Status sync_dir(const std::string& d) override {
    for (int n = fail_dir_syncs.load(); n > 0;) {
      if (fail_dir_syncs.compare_exchange_weak(n, n - 1)) {
        return {StatusCode::kIOError, "fsync " + d + ": Input/output error"};
      }
    }
    return ForwardingFileSystem::sync_dir(d);
  }

 protected:
  std::unique_ptr<log::File> wrap(std::unique_ptr<log::File> f) override {
    if (!f->path().ends_with(log::kSegmentSuffix)) return f;
    return std::make_unique<File>(std::move(f), *this);
  }

 private:
  class File final : public ForwardingFile {
   public:
    File(std::unique_ptr<log::File> f, FlakySegmentSync& fs)
        : ForwardingFile(std::move(f)), fs_(fs) {}
    Status sync() override {
      for (int n = fs_.fail.load(); n > 0;) {
        if (fs_.fail.compare_exchange_weak(n, n - 1)) {
          if (fs_.hold) fs_.hold();
          fs_.failed.fetch_add(1);
          return {StatusCode::kIOError, "fdatasync " + path() + ": Input/output error"};
        }
      }
      Status s = ForwardingFile::sync();
      if (s.ok()) fs_.synced.fetch_add(1);
      return s;
    }

   private:
    FlakySegmentSync& fs_;
  };
};

}  // namespace sluice::testutil
