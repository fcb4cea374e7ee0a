#include "log/fault_file_system.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <sstream>
#include <thread>

#if defined(__SANITIZE_THREAD__)
#define SLUICE_FAULT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SLUICE_FAULT_TSAN 1
#endif
#endif

namespace sluice::testutil {

namespace {

constexpr std::size_t kMaxFileBytes = std::size_t{1} << 20;  // the tests write far less
constexpr std::size_t kSector = 512;

Status power_off(const std::string& op, const std::string& path) {
  return {StatusCode::kIOError, op + " " + path + ": power cut (simulated)"};
}

}  // namespace

const char* to_string(CutMode m) {
  switch (m) {
    case CutMode::kDropUnsynced:
      return "drop-unsynced";
    case CutMode::kZeroFill:
      return "zero-fill";
    case CutMode::kTorn:
      return "torn";
  }
  return "?";
}

struct FaultFileSystem::Inode {
  bool dir = false;
  // A file: live bytes [0, size) in a fixed reservation (so a map stays
  // valid as the file grows), and its bytes as of the last sync.
  char* data = nullptr;
  std::uint64_t size = 0;
  std::string durable;
  bool mapped = false;
  std::chrono::system_clock::time_point mtime = std::chrono::system_clock::now();
  // The File holding each lock: like the real disk's open-file-description
  // locks and flock, another File of the same file is refused (in this
  // process too) and only closing the holder releases it.
  const void* locker = nullptr;   // lock()
  const void* flocker = nullptr;  // try_flock()
  // A directory: its entries now, and as of its last sync.
  std::map<std::string, std::shared_ptr<Inode>> entries, durable_entries;

  static std::shared_ptr<Inode> file() {
    auto n = std::make_shared<Inode>();
    void* p = ::mmap(nullptr, kMaxFileBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) std::abort();
    n->data = static_cast<char*>(p);
    return n;
  }
  static std::shared_ptr<Inode> directory() {
    auto n = std::make_shared<Inode>();
    n->dir = true;
    return n;
  }
  ~Inode() {
    if (data != nullptr) ::munmap(data, kMaxFileBytes);
  }
  Inode() = default;
  Inode(const Inode&) = delete;
  Inode& operator=(const Inode&) = delete;

  // The live bytes. A mapped file may be written through its map by the log
  // at any time: read it byte by byte with atomic loads (the log's mapped
  // writes of shared state, NOTIFY, are atomic too).
  std::string live() const {
    std::string out(size, '\0');
    if (!mapped) {
      std::memcpy(out.data(), data, size);
      return out;
    }
    for (std::uint64_t i = 0; i < size; ++i) {
      out[i] = std::atomic_ref<char>(data[i]).load(std::memory_order_relaxed);
    }
    return out;
  }
  // Grows the file to `to`, zeroing what a shrink may have left.
  void grow(std::uint64_t to) {
    if (to <= size) return;
    std::memset(data + size, 0, to - size);
    size = to;
  }
};

namespace {

using Inode = FaultFileSystem::Inode;
using Seen = std::map<const Inode*, std::shared_ptr<Inode>>;

std::shared_ptr<Inode> clone(const std::shared_ptr<Inode>& n, Seen& seen) {
  if (auto it = seen.find(n.get()); it != seen.end()) return it->second;
  auto c = n->dir ? Inode::directory() : Inode::file();
  seen[n.get()] = c;
  if (!n->dir) {
    const std::string bytes = n->live();
    std::memcpy(c->data, bytes.data(), bytes.size());
    c->size = bytes.size();
    c->durable = n->durable;
    c->mtime = n->mtime;
  }
  for (const auto& [name, e] : n->entries) c->entries[name] = clone(e, seen);
  for (const auto& [name, e] : n->durable_entries) c->durable_entries[name] = clone(e, seen);
  return c;
}

// What of a file survives the cut.
std::string survivor(const Inode& n, CutMode mode, std::mt19937_64& rng) {
  if (mode == CutMode::kDropUnsynced) return n.durable;
  const std::string live = n.live();
  std::string out(live.size(), '\0');
  const std::size_t old = std::min(n.durable.size(), live.size());
  std::memcpy(out.data(), n.durable.data(), old);  // zeros past the synced size
  if (mode == CutMode::kZeroFill) return out;
  for (std::size_t at = 0; at < live.size(); at += kSector) {
    if ((rng() & 1) != 0) {  // this sector reached the disk
      std::memcpy(out.data() + at, live.data() + at, std::min(kSector, live.size() - at));
    }
  }
  return out;
}

std::shared_ptr<Inode> rebuild(const Inode& n, CutMode mode, std::mt19937_64& rng) {
  if (!n.dir) {
    auto f = Inode::file();
    f->durable = survivor(n, mode, rng);
    std::memcpy(f->data, f->durable.data(), f->durable.size());
    f->size = f->durable.size();
    f->mtime = n.mtime;
    return f;
  }
  auto d = Inode::directory();
  for (const auto& [name, e] : n.durable_entries) {
    d->entries[name] = d->durable_entries[name] = rebuild(*e, mode, rng);
  }
  return d;
}

}  // namespace

// One open file. Every call takes the file system's lock.
class FaultFile final : public log::File {
 public:
  FaultFile(FaultFileSystem* fs, std::string path, std::shared_ptr<Inode> node, bool writable)
      : File(std::move(path)), fs_(fs), node_(std::move(node)), writable_(writable) {}
  ~FaultFile() override {
    std::lock_guard lk(fs_->mu_);
    if (node_->locker == this) node_->locker = nullptr;
    if (node_->flocker == this) node_->flocker = nullptr;
  }

  Result<std::size_t> pread(char* buf, std::size_t n, std::uint64_t off) override {
    std::lock_guard lk(fs_->mu_);
    if (fs_->off_) return power_off("read", path());
    if (off >= node_->size) return std::size_t{0};
    const auto got = static_cast<std::size_t>(std::min<std::uint64_t>(n, node_->size - off));
    std::memcpy(buf, node_->data + off, got);
    return got;
  }

  Status pwrite(const char* buf, std::size_t n, std::uint64_t off) override {
    std::lock_guard lk(fs_->mu_);
    if (!fs_->count("write " + path() + " @" + std::to_string(off) + " +" + std::to_string(n))) {
      return power_off("write", path());
    }
    if (!writable_) return {StatusCode::kIOError, "write " + path() + ": not open for writing"};
    if (off + n > kMaxFileBytes) return {StatusCode::kIOError, "write " + path() + ": too large"};
    node_->grow(off);
    std::memcpy(node_->data + off, buf, n);
    node_->size = std::max<std::uint64_t>(node_->size, off + n);
    node_->mtime = std::chrono::system_clock::now();
    return Status::Ok();
  }

  Status start_writeback(std::uint64_t off, std::uint64_t len) override {
    std::lock_guard lk(fs_->mu_);
    if (fs_->off_) return power_off("writeback", path());
    fs_->writebacks_.push_back(path() + " @" + std::to_string(off) + " +" + std::to_string(len));
    return Status::Ok();
  }

  Status sync() override {
    std::function<void(const std::string&)> hook;
    {
      std::lock_guard lk(fs_->mu_);
      hook = fs_->sync_hook_;
    }
    if (hook) hook(path());
    fs_->wait_sync_latency();
    std::lock_guard lk(fs_->mu_);
    if (!fs_->count("sync " + path())) return power_off("sync", path());
    node_->durable = node_->live();
    return Status::Ok();
  }

  Status truncate(std::uint64_t size) override {
    std::lock_guard lk(fs_->mu_);
    if (!fs_->count("truncate " + path() + " " + std::to_string(size))) {
      return power_off("truncate", path());
    }
    if (size > kMaxFileBytes) return {StatusCode::kIOError, "truncate " + path() + ": too large"};
    if (size > node_->size) {
      node_->grow(size);
    } else {
      node_->size = size;
    }
    node_->mtime = std::chrono::system_clock::now();
    return Status::Ok();
  }

  Status preallocate(std::uint64_t off, std::uint64_t len) override {
    std::lock_guard lk(fs_->mu_);
    if (!fs_->count("preallocate " + path() + " " + std::to_string(off + len))) {
      return power_off("reserve space in", path());
    }
    if (off + len > kMaxFileBytes) return {StatusCode::kIOError, "reserve " + path() + ": full"};
    node_->grow(off + len);
    return Status::Ok();
  }

  Result<std::uint64_t> size() override {
    std::lock_guard lk(fs_->mu_);
    if (fs_->off_) return power_off("stat", path());
    return node_->size;
  }

  Result<std::chrono::system_clock::time_point> modified() override {
    std::lock_guard lk(fs_->mu_);
    return node_->mtime;
  }

  bool map_is_safe() override {
#ifdef SLUICE_FAULT_TSAN
    return false;  // a cut copies mapped bytes while the log may write them
#else
    return true;
#endif
  }

  char* map(std::size_t len) override {
    std::lock_guard lk(fs_->mu_);
    if (len > kMaxFileBytes || fs_->off_) return nullptr;
    node_->mapped = true;
    return node_->data;
  }

  Result<int> lock_holder() override {
    std::lock_guard lk(fs_->mu_);
    return node_->locker != nullptr && node_->locker != this ? static_cast<int>(getpid()) : 0;
  }

  Status lock(const std::string& what) override {
    std::lock_guard lk(fs_->mu_);
    if (node_->locker != nullptr && node_->locker != this) {
      return {StatusCode::kInUse, what + " by PID " + std::to_string(getpid())};
    }
    node_->locker = this;
    return Status::Ok();
  }

  Status try_flock() override {
    std::lock_guard lk(fs_->mu_);
    if (fs_->off_) return power_off("flock", path());
    if (node_->flocker != nullptr && node_->flocker != this) {
      return {StatusCode::kInUse, path() + " is locked"};
    }
    node_->flocker = this;
    return Status::Ok();
  }

 private:
  FaultFileSystem* fs_;
  std::shared_ptr<Inode> node_;
  bool writable_;
};

FaultFileSystem::FaultFileSystem(std::string root)
    : root_(std::move(root)), tree_(Inode::directory()) {}
FaultFileSystem::~FaultFileSystem() = default;

std::uint64_t FaultFileSystem::calls() const {
  std::lock_guard lk(mu_);
  return calls_;
}

void FaultFileSystem::cut_at(std::uint64_t k) {
  std::lock_guard lk(mu_);
  cut_at_ = k;
}

void FaultFileSystem::set_sync_latency(std::chrono::microseconds d) {
  std::lock_guard lk(mu_);
  sync_latency_ = d;
}

std::vector<std::string> FaultFileSystem::writebacks() const {
  std::lock_guard lk(mu_);
  return writebacks_;
}

void FaultFileSystem::set_sync_hook(std::function<void(const std::string&)> hook) {
  std::lock_guard lk(mu_);
  sync_hook_ = std::move(hook);
}

void FaultFileSystem::wait_sync_latency() const {
  std::chrono::microseconds d{};
  {
    std::lock_guard lk(mu_);
    d = sync_latency_;
  }
  if (d.count() > 0) std::this_thread::sleep_for(d);
}

bool FaultFileSystem::power_lost() const {
  std::lock_guard lk(mu_);
  return off_;
}

std::string FaultFileSystem::recent_calls(std::size_t n) const {
  std::lock_guard lk(mu_);
  std::ostringstream out;
  for (std::size_t i = log_.size() > n ? log_.size() - n : 0; i < log_.size(); ++i) {
    out << "  #" << (i + 1) << " " << log_[i] << (i + 1 == cut_at_ ? "   <- power cut" : "")
        << "\n";
  }
  return out.str();
}

bool FaultFileSystem::count(const std::string& what) {
  if (off_) return false;
  ++calls_;
  log_.push_back(what);
  if (cut_at_ != 0 && calls_ >= cut_at_) {
    Seen seen;
    frozen_ = clone(tree_, seen);
    off_ = true;
    return false;
  }
  return true;
}

std::unique_ptr<FaultFileSystem> FaultFileSystem::after_cut(CutMode mode,
                                                            std::uint64_t seed) const {
  std::shared_ptr<Inode> disk;
  {
    std::lock_guard lk(mu_);
    if (frozen_) {
      disk = frozen_;
    } else {
      Seen seen;
      disk = clone(tree_, seen);
    }
  }
  std::mt19937_64 rng(seed);
  auto out = std::make_unique<FaultFileSystem>(root_);
  out->tree_ = rebuild(*disk, mode, rng);
  return out;
}

std::shared_ptr<Inode> FaultFileSystem::lookup(const std::string& path) const {
  if (path == root_) return tree_;
  if (!path.starts_with(root_ + "/")) return nullptr;
  std::shared_ptr<Inode> n = tree_;
  std::istringstream parts(path.substr(root_.size() + 1));
  std::string part;
  while (std::getline(parts, part, '/')) {
    if (part.empty() || part == ".") continue;
    if (!n->dir) return nullptr;
    auto it = n->entries.find(part);
    if (it == n->entries.end()) return nullptr;
    n = it->second;
  }
  return n;
}

std::shared_ptr<Inode> FaultFileSystem::parent_of(const std::string& path,
                                                  std::string& name) const {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return nullptr;
  name = path.substr(slash + 1);
  auto dir = lookup(path.substr(0, slash));
  return dir && dir->dir && !name.empty() ? dir : nullptr;
}

Result<std::unique_ptr<log::File>> FaultFileSystem::open(const std::string& path,
                                                         log::OpenMode mode) {
  std::lock_guard lk(mu_);
  if (off_) return power_off("open", path);
  auto node = lookup(path);
  if (node && node->dir) return Status(StatusCode::kIOError, "open " + path + ": a directory");
  const bool create = mode == log::OpenMode::kCreate || mode == log::OpenMode::kCreateNew;
  if (node && mode == log::OpenMode::kCreateNew) {
    return Status(StatusCode::kAlreadyExists, path + " exists");
  }
  if (!node) {
    if (!create) return Status(StatusCode::kNotFound, "open " + path + ": no such file");
    std::string name;
    auto dir = parent_of(path, name);
    if (!dir) return Status(StatusCode::kIOError, "create " + path + ": no such directory");
    if (!count("create " + path)) return power_off("create", path);
    node = Inode::file();
    dir->entries[name] = node;
  }
  return std::unique_ptr<log::File>(new FaultFile(this, path, node, mode != log::OpenMode::kRead));
}

Status FaultFileSystem::remove(const std::string& path) {
  std::lock_guard lk(mu_);
  if (off_) return power_off("delete", path);
  std::string name;
  auto dir = parent_of(path, name);
  if (!dir || !dir->entries.contains(name)) {
    return {StatusCode::kNotFound, "delete " + path + ": no such file"};
  }
  if (!count("remove " + path)) return power_off("delete", path);
  dir->entries.erase(name);
  return Status::Ok();
}

Status FaultFileSystem::rename(const std::string& from, const std::string& to) {
  return move_entry(from, to, /*replace=*/true);
}

Status FaultFileSystem::rename_noreplace(const std::string& from, const std::string& to) {
  return move_entry(from, to, /*replace=*/false);
}

Status FaultFileSystem::move_entry(const std::string& from, const std::string& to, bool replace) {
  std::lock_guard lk(mu_);
  if (off_) return power_off("rename", from);
  std::string from_name;
  std::string to_name;
  auto from_dir = parent_of(from, from_name);
  auto to_dir = parent_of(to, to_name);
  if (!from_dir || !to_dir || !from_dir->entries.contains(from_name)) {
    return {StatusCode::kNotFound, "rename " + from + ": no such file"};
  }
  if (!replace && to_dir->entries.contains(to_name)) {
    return {StatusCode::kAlreadyExists, to + " exists"};
  }
  if (!count((replace ? "rename " : "rename-noreplace ") + from + " " + to)) {
    return power_off("rename", from);
  }
  to_dir->entries[to_name] = from_dir->entries[from_name];
  from_dir->entries.erase(from_name);
  return Status::Ok();
}

Status FaultFileSystem::remove_tree(const std::string& path) {
  std::lock_guard lk(mu_);
  if (off_) return power_off("remove", path);
  std::string name;
  auto dir = parent_of(path, name);
  if (!dir || !dir->entries.contains(name)) return Status::Ok();
  if (!count("remove-tree " + path)) return power_off("remove", path);
  dir->entries.erase(name);
  return Status::Ok();
}

bool FaultFileSystem::exists(const std::string& path) {
  std::lock_guard lk(mu_);
  return lookup(path) != nullptr;
}

Status FaultFileSystem::sync_dir(const std::string& dir) {
  wait_sync_latency();
  std::lock_guard lk(mu_);
  if (off_) return power_off("sync", dir);
  auto node = lookup(dir);
  if (!node || !node->dir) return {StatusCode::kIOError, "sync " + dir + ": no such directory"};
  if (!count("syncdir " + dir)) return power_off("sync", dir);
  node->durable_entries = node->entries;
  return Status::Ok();
}

Status FaultFileSystem::create_dir(const std::string& dir) {
  std::lock_guard lk(mu_);
  if (off_) return power_off("create directory", dir);
  if (lookup(dir)) return {StatusCode::kAlreadyExists, dir + " exists"};
  std::string name;
  auto parent = parent_of(dir, name);
  if (!parent) return {StatusCode::kIOError, "create directory " + dir + ": no parent"};
  if (!count("mkdir " + dir)) return power_off("create directory", dir);
  parent->entries[name] = Inode::directory();
  return Status::Ok();
}

bool FaultFileSystem::is_dir(const std::string& path) {
  std::lock_guard lk(mu_);
  auto node = lookup(path);
  return node && node->dir;
}

Result<std::vector<std::string>> FaultFileSystem::list(const std::string& dir) {
  std::lock_guard lk(mu_);
  if (off_) return power_off("list", dir);
  auto node = lookup(dir);
  if (!node || !node->dir) return Status(StatusCode::kNotFound, "list " + dir + ": no such dir");
  std::vector<std::string> out;
  for (const auto& [name, e] : node->entries) out.push_back(name);
  return out;
}

Result<std::string> FaultFileSystem::canonical(const std::string& path) {
  std::lock_guard lk(mu_);
  if (!lookup(path)) return Status(StatusCode::kNotFound, "resolve " + path + ": no such file");
  std::string out = path;
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

}  // namespace sluice::testutil
