// A FileSystem and a File that forward every call to other ones (the real
// file system by default): a test derives from them to change one call
// (fail a read, hold a sync, record what was asked) and keeps the rest real.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "log/file_system.h"

namespace sluice::testutil {

class ForwardingFile : public log::File {
 public:
  explicit ForwardingFile(std::unique_ptr<log::File> f) : File(f->path()), f_(std::move(f)) {}

  Result<std::size_t> pread(char* buf, std::size_t n, std::uint64_t off) override {
    return f_->pread(buf, n, off);
  }
  Status pwrite(const char* buf, std::size_t n, std::uint64_t off) override {
    return f_->pwrite(buf, n, off);
  }
  Status sync() override { return f_->sync(); }
  Status start_writeback(std::uint64_t off, std::uint64_t len) override {
    return f_->start_writeback(off, len);
  }
  Status truncate(std::uint64_t size) override { return f_->truncate(size); }
  Status preallocate(std::uint64_t off, std::uint64_t len) override {
    return f_->preallocate(off, len);
  }
  Result<std::uint64_t> size() override { return f_->size(); }
  Result<std::chrono::system_clock::time_point> modified() override { return f_->modified(); }
  Result<std::chrono::system_clock::time_point> created() override { return f_->created(); }
  bool map_is_safe() override { return f_->map_is_safe(); }
  char* map(std::size_t len) override { return f_->map(len); }
  Status lock(const std::string& what) override { return f_->lock(what); }
  Result<int> lock_holder() override { return f_->lock_holder(); }
  Status try_flock() override { return f_->try_flock(); }

 private:
  std::unique_ptr<log::File> f_;
};

class ForwardingFileSystem : public log::FileSystem {
 public:
  explicit ForwardingFileSystem(log::FileSystem& base = log::posix_file_system()) : b_(base) {}

  Result<std::unique_ptr<log::File>> open(const std::string& path, log::OpenMode mode) override {
    auto f = b_.open(path, mode);
    if (!f.ok()) return f.status();
    return wrap(std::move(*f));
  }
  Status remove(const std::string& p) override { return b_.remove(p); }
  Status rename(const std::string& f, const std::string& t) override { return b_.rename(f, t); }
  Status rename_noreplace(const std::string& f, const std::string& t) override {
    return b_.rename_noreplace(f, t);
  }
  Status remove_tree(const std::string& p) override { return b_.remove_tree(p); }
  bool exists(const std::string& p) override { return b_.exists(p); }
  Status sync_dir(const std::string& d) override { return b_.sync_dir(d); }
  Status create_dir(const std::string& d) override { return b_.create_dir(d); }
  bool is_dir(const std::string& p) override { return b_.is_dir(p); }
  Result<std::vector<std::string>> list(const std::string& d) override { return b_.list(d); }
  Result<std::string> canonical(const std::string& p) override { return b_.canonical(p); }

 protected:
  // The File open() hands out for one the base opened: override to wrap it.
  virtual std::unique_ptr<log::File> wrap(std::unique_ptr<log::File> f) { return f; }

 private:
  log::FileSystem& b_;
};

}  // namespace sluice::testutil
