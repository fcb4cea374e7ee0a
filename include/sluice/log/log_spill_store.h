// LogSpillStore<T> is the disk-backed overflow store for a Queue with
// OverflowPolicy::kSpill: items that do not fit in memory go to a private
// topic directory, and come back in FIFO order. Its disk use is bounded by a
// byte budget: a put that would pass it is refused (kRejected), which the
// queue reports and counts.
//
// Thread safety: none needed: the queue serializes calls to its store.
// Blocking: put/take do file I/O on the calling thread (no fsync: the store
//   does not outlive the process).
// Ordering: FIFO.
// Cancellation: N/A (calls do not wait).
// Ownership: the store owns its directory: open() refuses a directory that
//   holds anything but a previous spill store's files, and wipes those.
//   Items are encoded by SpillCodec<T> (std::string and trivially copyable
//   types provided; specialize it for others).
// Errors: kRejected (budget), kIOError, kInvalidArgument (options).
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "sluice/log/channel.h"
#include "sluice/log/topic.h"
#include "sluice/spill_store.h"

namespace sluice {

template <class T, class Enable = void>
struct SpillCodec;  // encode(const T&) -> std::string; decode(std::string_view) -> optional<T>

template <>
struct SpillCodec<std::string> {
  static std::string encode(const std::string& v) { return v; }
  static std::optional<std::string> decode(std::string_view s) { return std::string(s); }
};

template <class T>
struct SpillCodec<T, std::enable_if_t<std::is_trivially_copyable_v<T>>> {
  static std::string encode(const T& v) {
    return std::string(reinterpret_cast<const char*>(&v), sizeof v);
  }
  static std::optional<T> decode(std::string_view s) {
    if (s.size() != sizeof(T)) return std::nullopt;
    T v;
    std::memcpy(&v, s.data(), sizeof v);
    return v;
  }
};

struct LogSpillOptions {
  std::string dir;                  // private to the store
  std::uint64_t budget_bytes = 0;   // disk budget (>= 2 segments)
  std::uint64_t segment_bytes = 0;  // 0: budget / 4, at most 4 MiB
};

template <class T>
class LogSpillStore final : public SpillStore<T> {
 public:
  static Result<std::shared_ptr<LogSpillStore>> open(LogSpillOptions o) {
    namespace fs = std::filesystem;
    if (o.segment_bytes == 0)
      o.segment_bytes = std::min<std::uint64_t>(o.budget_bytes / 4, 4 << 20);
    if (o.dir.empty() || o.segment_bytes < 4096 || o.budget_bytes < 2 * o.segment_bytes) {
      return Status(StatusCode::kInvalidArgument,
                    "spill store: needs a dir and budget_bytes >= 2 * segment_bytes >= 8 KiB");
    }
    std::error_code ec;
    if (fs::exists(o.dir, ec)) {
      if (!fs::is_directory(o.dir, ec)) {
        return Status(StatusCode::kAlreadyExists,
                      "spill store: " + o.dir + " is not a directory; refusing to remove it");
      }
      fs::directory_iterator it(o.dir, ec);
      if (ec) {
        return Status(StatusCode::kIOError,
                      "spill store: cannot list " + o.dir + ": " + ec.message());
      }
      // Only what a spill store leaves: regular files by the log's names, and
      // `channels` holding only positions. Anything else (a user's directory
      // named like a segment, a file in `channels`) is not ours to wipe.
      const auto ours = [](const fs::directory_entry& e, bool in_channels) {
        const std::string n = e.path().filename().string();
        std::error_code fe;
        if (in_channels)
          return e.is_regular_file(fe) && (n.ends_with(".pos") || n.ends_with(".tmp"));
        if (n == "channels") return e.is_directory(fe) && !e.is_symlink(fe);
        return e.is_regular_file(fe) && !e.is_symlink(fe) &&
               (n == "LOCK" || n == "NOTIFY" || n.ends_with(".seg") || n.ends_with(".sum") ||
                n.ends_with(".tmp"));
      };
      for (const auto& e : it) {
        bool fine = ours(e, false);
        if (fine && e.path().filename() == "channels") {
          for (const auto& c : fs::directory_iterator(e.path(), ec)) {
            if (!ours(c, true)) {
              fine = false;
              break;
            }
          }
          if (ec) fine = false;
        }
        if (!fine) {
          return Status(StatusCode::kAlreadyExists,
                        "spill store: " + o.dir + " holds other files (" +
                            e.path().filename().string() + "); refusing to wipe it");
        }
      }
      // A live store (this process or another) holds its topic's lock: its
      // files are not leftovers.
      if (fs::exists(fs::path(o.dir) / "LOCK", ec)) {
        auto held = Topic::open(o.dir, topic_options(o));
        if (!held.ok() && held.code() == StatusCode::kInUse) {
          return Status(StatusCode::kInUse, "spill store: " + o.dir + " is in use: " +
                                                std::string(held.status().message()));
        }
      }
      fs::remove_all(o.dir, ec);
      if (ec) return Status(StatusCode::kIOError, "spill store: cannot clear " + o.dir);
    }
    auto topic = Topic::open(o.dir, topic_options(o));
    if (!topic.ok()) return topic.status();
    ChannelOptions co;
    co.durable_positions = false;
    auto channel = (*topic)->channel("spill", co);
    if (!channel.ok()) return channel.status();
    return std::shared_ptr<LogSpillStore>(
        new LogSpillStore(std::move(*topic), std::move(*channel), o.budget_bytes));
  }

  static TopicOptions topic_options(const LogSpillOptions& o) {
    TopicOptions to;
    to.durability = Durability::kNone;
    to.segment_bytes = o.segment_bytes;
    to.max_message_bytes = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(o.segment_bytes - 64, std::uint64_t{16} << 20));
    return to;
  }

  ~LogSpillStore() override {
    channel_.reset();  // before its topic
  }

  Status put(T& item) override {
    const std::string bytes = SpillCodec<T>::encode(item);
    // A record takes a 24-byte header (format 2: length, CRC, seq, time),
    // and may roll to a new segment, whose header takes 32 more.
    constexpr std::uint64_t kRecordOverhead = 24 + 32;
    if (topic_->disk_bytes() + bytes.size() + kRecordOverhead > budget_) {
      return {StatusCode::kRejected,
              "spill store budget of " + std::to_string(budget_) + " bytes is spent"};
    }
    auto seq = topic_->append(bytes);
    if (!seq.ok()) return seq.status();
    ++size_;
    return Status::Ok();
  }

  Status take(std::optional<T>& out) override {
    if (size_ == 0) return StatusCode::kWouldBlock;
    auto m = channel_->next(Context());
    if (!m.ok()) return m.status();
    // The channel has moved past it: whatever follows, it is no longer held
    // (size_ must say so, or a later take waits for ever for a record).
    --size_;
    // Frees whole segments. A failure (a segment that cannot be deleted)
    // only keeps them, counted in disk_bytes(): the item is still handed out.
    (void)channel_->ack(m->seq);
    auto v = SpillCodec<T>::decode(m->payload);
    if (!v) return {StatusCode::kCorruption, "spill store: an item does not decode"};
    out.emplace(std::move(*v));
    return Status::Ok();
  }

  std::uint64_t size() const override { return size_; }
  std::uint64_t disk_bytes() const { return topic_->disk_bytes(); }

 private:
  LogSpillStore(std::unique_ptr<Topic> t, std::unique_ptr<Channel> c, std::uint64_t budget)
      : topic_(std::move(t)), channel_(std::move(c)), budget_(budget) {}

  std::unique_ptr<Topic> topic_;
  std::unique_ptr<Channel> channel_;
  std::uint64_t budget_;
  std::uint64_t size_ = 0;
};

}  // namespace sluice
