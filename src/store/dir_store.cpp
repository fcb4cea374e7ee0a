// The embedded QueueStore (dir_store.h): queues are Topics, the writer role
// is the topic's writer lock, a channel's reader role an flock'd file.
#include "store/dir_store.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "log/file_system.h"
#include "log/position.h"    // stat reads channel positions without opening (locking) them
#include "log/topic_impl.h"  // open_topic, open_for_writing_here
#include "sluice/log/channel.h"
#include "sluice/log/cursor.h"
#include "sluice/log/topic.h"

namespace sluice::store {
namespace {

constexpr std::string_view kMetaHeader = "sluice-queue 1\n";

// A unique name under <store>/tmp for staging a create or a delete.
std::string staging_name(std::string_view what, std::string_view name) {
  static std::atomic<unsigned> counter{0};
  return std::string(what) + "-" + std::to_string(getpid()) + "-" +
         std::to_string(counter.fetch_add(1, std::memory_order_relaxed)) + "-" + std::string(name);
}

// Beside each staging directory <store>/tmp/<s>, the lock file lock-<s>:
// made and flock'd before <s> is, removed only once <s> is gone (renamed
// into queues/ or removed). A <s> whose lock file nobody holds, or that has
// none, is what a crash left (DirStore::clean_tmp).
constexpr std::string_view kStageLock = "lock-";

bool is_stage(std::string_view n) { return n.starts_with("create-") || n.starts_with("delete-"); }

// A staging name taken: its path, and its lock file held until the stage
// is done. The lock file goes first, then the lock.
class Stage {
 public:
  Stage(log::FileSystem& fs, std::string path, std::unique_ptr<log::File> lock)
      : fs_(&fs), path_(std::move(path)), lock_(std::move(lock)) {}
  Stage(Stage&&) = default;
  Stage& operator=(Stage&&) = delete;
  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;
  ~Stage() {
    if (lock_ != nullptr) (void)fs_->remove(lock_->path());
  }
  const std::string& path() const { return path_; }

 private:
  log::FileSystem* fs_;
  std::string path_;
  std::unique_ptr<log::File> lock_;
};

Result<Stage> take_stage(log::FileSystem& fs, const std::string& tmp, std::string_view what,
                         std::string_view name) {
  for (int tries = 0;; ++tries) {
    const std::string stage = staging_name(what, name);
    const std::string lock_path = tmp + "/" + std::string(kStageLock) + stage;
    auto f = fs.open(lock_path, log::OpenMode::kCreateNew);
    if (!f.ok()) {
      // A crash's leftover of a process that had this PID: another name.
      if (f.code() == StatusCode::kAlreadyExists && tries < 100) continue;
      return f.status();
    }
    Status s = (*f)->try_flock();
    if (s.ok() && fs.exists(lock_path)) {
      Stage taken(fs, tmp + "/" + stage, std::move(*f));
      if (!fs.exists(taken.path())) return taken;
      if (tries < 100) continue;  // a leftover of that PID again (its lock file goes)
      return Status(StatusCode::kAlreadyExists, taken.path() + " exists");
    }
    // A clean_tmp() took our new lock file before we did (it removes it):
    // another name.
    if ((s.ok() || s.code() == StatusCode::kInUse) && tries < 100) continue;
    return s.ok() ? Status(StatusCode::kIOError, lock_path + " went while it was taken") : s;
  }
}

// Runs `attempt` until it gives something other than kInUse, sleeping with
// exponential backoff (1 ms .. 100 ms) between tries. A role has no wake-up
// to block on across processes (POSIX and flock locks have no timed wait),
// so this is a bounded-rate retry, not a spin. At the context's deadline the
// last kInUse (it names the holder) is returned; on a stop, kCancelled.
template <class T, class F>
Result<T> wait_for_role(const Context& ctx, F attempt) {
  std::chrono::milliseconds backoff{1};
  std::mutex mu;
  std::condition_variable_any cv;  // never notified: an interruptible sleep
  for (;;) {
    Result<T> r = attempt();
    if (r.ok() || r.code() != StatusCode::kInUse) return r;
    if (ctx.stop_requested()) return StatusCode::kCancelled;
    auto until = Context::Clock::now() + backoff;
    if (const auto& d = ctx.deadline()) {
      if (Context::Clock::now() >= *d) return r.status();
      until = std::min(until, *d);
    }
    std::unique_lock lk(mu);
    std::stop_token token = ctx.token();
    cv.wait_until(lk, token, until, [] { return false; });
    backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
  }
}

TopicOptions topic_options(const StoreOptions& o, std::uint64_t bound,
                           std::chrono::milliseconds max_age, bool read_only) {
  TopicOptions t;
  t.durability =
      o.durability == StoreDurability::kSync ? Durability::kGroupCommit : Durability::kNone;
  t.max_unconsumed = bound;
  t.max_retained_age = std::chrono::ceil<std::chrono::seconds>(max_age);
  t.on_bound = BoundPolicy::kBlock;
  t.read_only = read_only;
  return t;
}

class DirWriter final : public QueueWriter {
 public:
  DirWriter(std::unique_ptr<Topic> topic, std::uint64_t bound)
      : topic_(std::move(topic)), bound_(bound) {}

  Status put(std::span<const std::string_view> batch, const Context& ctx,
             std::size_t* done) override {
    std::size_t n = 0;
    in_doubt_ = 0;
    Status s = put_all(batch, ctx, n);
    if (done != nullptr) *done = n;
    return s;
  }
  std::size_t in_doubt() const override { return in_doubt_; }

  Status close() override { return topic_->close(); }

  std::size_t max_message_bytes() const override { return topic_->options().max_message_bytes; }
  double blocked_seconds() const override { return topic_->stats().bound_wait_s; }

 private:
  Status put_all(std::span<const std::string_view> batch, const Context& ctx, std::size_t& n) {
    const std::size_t limit = max_message_bytes();
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (batch[i].size() > limit) {
        // Everything before it still goes in: all-or-error counts a prefix.
        if (Status s = put_chunks(batch.first(i), ctx, n); !s.ok()) return s;
        return {StatusCode::kInvalidArgument,
                "message too large: " + std::to_string(batch[i].size()) + " bytes, limit " +
                    std::to_string(limit)};
      }
    }
    return put_chunks(batch, ctx, n);
  }

  // A topic batch may not exceed the bound, so a larger put goes in chunks,
  // each all-or-none. A chunk the disk has no room for (kIOError, nothing of
  // it written) is split in halves, down to one message, so a nearly full
  // disk takes what fits and *done says how much.
  Status put_chunks(std::span<const std::string_view> batch, const Context& ctx, std::size_t& n) {
    std::size_t most = bound_ == 0 ? batch.size() : static_cast<std::size_t>(bound_);
    while (n < batch.size()) {
      const std::size_t take = std::min(batch.size() - n, most);
      const std::uint64_t before = topic_->next_seq();
      auto r = topic_->append_batch(batch.subspan(n, take), ctx);
      if (!r.ok()) {
        if (topic_->next_seq() != before) {
          // Written, and its sync failed: the disk may or may not keep it
          // (a reopen shows), and sending it again could put it in twice.
          in_doubt_ = take;
          return r.status();
        }
        if (r.code() == StatusCode::kIOError && take > 1) {
          most = take / 2;
          continue;
        }
        return r.status();
      }
      n += take;
    }
    return Status::Ok();
  }

  std::unique_ptr<Topic> topic_;
  std::uint64_t bound_;
  std::size_t in_doubt_ = 0;
};

class DirReader final : public QueueReader {
 public:
  DirReader(std::unique_ptr<log::File> role, std::unique_ptr<Topic> topic,
            std::unique_ptr<Channel> channel)
      : role_(std::move(role)), topic_(std::move(topic)), channel_(std::move(channel)) {}
  ~DirReader() override {
    channel_.reset();  // its position file first, then the role
    topic_.reset();
    role_.reset();
  }
  DirReader(const DirReader&) = delete;
  DirReader& operator=(const DirReader&) = delete;

  using QueueReader::get;
  Status get(std::vector<StoreMessage>& out, std::size_t max, const Context& ctx) override {
    if (max == 0) return {StatusCode::kInvalidArgument, "get: max is 0"};
    msgs_.clear();
    Status s = channel_->next_batch(msgs_, max, ctx);
    if (!s.ok()) return s;
    for (LogMessage& m : msgs_) {
      StoreMessage& o = out.emplace_back();
      o.data = std::move(m.payload);
      o.seq = m.seq;
      o.time = m.time;  // as peek gives it
      held_.push_back(m.seq);
    }
    return Status::Ok();
  }

  Status get_batch(MessageBatch& out, std::size_t max, const Context& ctx) override {
    if (max == 0) return {StatusCode::kInvalidArgument, "get: max is 0"};
    const std::size_t base = out.size();
    Status s = channel_->next_batch(out, max, ctx);
    if (!s.ok()) return s;
    for (std::size_t i = base; i < out.size(); ++i) held_.push_back(*out.entry(i).seq);
    return Status::Ok();
  }

  Status ack_prefix(std::uint64_t n) override {
    if (n > delivered()) return beyond(n, delivered());
    if (n <= acked_) return Status::Ok();
    // Seqs need not be consecutive (retention or damage may skip some), so
    // the position moves to the seq of the prefix's last message.
    const std::size_t take = static_cast<std::size_t>(n - acked_);
    if (Status s = channel_->ack(held_[take - 1]); !s.ok()) return s;
    held_.erase(held_.begin(), held_.begin() + static_cast<std::ptrdiff_t>(take));
    acked_ = n;
    return Status::Ok();
  }
  std::uint64_t delivered() const override { return acked_ + held_.size(); }
  std::uint64_t acked() const override { return acked_; }
  std::uint64_t skipped_damaged() const override { return channel_->skipped_corrupt(); }

  // The channel starts again at its acknowledged position: held messages
  // come again, in seq order, and the log counts no deliveries.
  Status release() override {
    channel_->nack();
    held_.clear();
    return Status::Ok();
  }

 private:
  std::unique_ptr<log::File> role_;  // the channel's flock'd lock file
  std::unique_ptr<Topic> topic_;
  std::unique_ptr<Channel> channel_;
  std::vector<LogMessage> msgs_;
  std::deque<std::uint64_t> held_;  // seqs delivered and not acknowledged, oldest first
  std::uint64_t acked_ = 0;         // the acknowledged prefix's length
};

// Takes the reader role of a channel: an exclusive flock on its lock file.
// flock (like the topic's open-file-description locks) excludes a second
// holder in the same process too. The holder's PID is written in the file for the
// message a waiting reader gets.
Result<std::unique_ptr<log::File>> lock_channel(log::FileSystem& fs, const std::string& path,
                                                std::string_view queue, std::string_view channel) {
  auto f = fs.open(path, log::OpenMode::kCreate);
  if (!f.ok()) return f.status();
  log::File& file = **f;
  if (Status s = file.try_flock(); !s.ok()) {
    if (s.code() != StatusCode::kInUse) return s;
    std::string holder;
    char buf[32] = {};
    if (auto n = file.pread(buf, sizeof buf - 1, 0); n.ok() && *n > 0) {
      holder = " by PID " + std::string(buf, *n);
    }
    return Status(StatusCode::kInUse, "channel '" + std::string(channel) + "' of queue '" +
                                          std::string(queue) + "' is being read" + holder);
  }
  const std::string pid = std::to_string(getpid());
  if (!file.truncate(0).ok() || !file.pwrite(pid.data(), pid.size(), 0).ok()) {
    // Only the message of a waiting reader uses it: not worth failing for.
  }
  return std::move(*f);
}

}  // namespace

Result<std::unique_ptr<QueueStore>> DirStore::open(log::FileSystem& fs, const std::string& dir,
                                                   const StoreOptions& options) {
  // Without create_if_missing, nothing is made here: a directory that is no
  // store yet is an empty one until the first create() makes it.
  if (options.create_if_missing) {
    if (Status s = make_dirs(fs, dir); !s.ok()) return s;
  }
  auto store = std::unique_ptr<DirStore>(new DirStore(fs, dir, options));
  store->clean_tmp();
  return std::unique_ptr<QueueStore>(std::move(store));
}

void DirStore::clean_tmp() {
  const std::string tmp = dir_ + "/tmp";
  auto names = fs_.list(tmp);
  if (!names.ok()) return;  // no store here yet: nothing to clean
  for (const std::string& n : *names) {
    const std::string path = tmp + "/" + n;
    if (n.starts_with(kStageLock)) {
      // Held: its process is at work in the stage. Gone: it finished.
      auto f = fs_.open(path, log::OpenMode::kReadWrite);
      if (!f.ok() || !(*f)->try_flock().ok()) continue;
      // The stage first: never a stage without its lock file.
      if (fs_.remove_tree(tmp + "/" + n.substr(kStageLock.size())).ok()) (void)fs_.remove(path);
    } else if (is_stage(n) && !fs_.exists(tmp + "/" + std::string(kStageLock) + n)) {
      // Its lock file was made before it and goes after it: without one,
      // nobody works in it (or it is gone already).
      (void)fs_.remove_tree(path);
    }
  }
}

Result<std::unique_ptr<QueueStore>> DirStore::open(const std::string& dir,
                                                   const StoreOptions& options) {
  return open(log::posix_file_system(), dir, options);
}

Status DirStore::make_dirs(log::FileSystem& fs, const std::string& dir) {
  for (const char* sub : {"queues", "tmp"}) {
    if (Status s = log::create_dirs(fs, dir + "/" + sub); !s.ok()) {
      return {s.code(),
              "create store directory " + dir + "/" + sub + ": " + std::string(s.message())};
    }
  }
  return Status::Ok();
}

Result<std::unique_ptr<Topic>> DirStore::topic_at(const std::string& dir,
                                                  const TopicOptions& o) const {
  return log::open_topic(fs_, dir, o);
}

std::string DirStore::queue_dir(std::string_view name) const {
  return dir_ + "/queues/" + std::string(name);
}

Status DirStore::gone_or(std::string_view name, Status s) const {
  if (s.ok() || fs_.exists(queue_dir(name))) return s;
  return {StatusCode::kNotFound, "no queue '" + std::string(name) + "'"};
}

Result<DirStore::Meta> DirStore::read_meta(std::string_view name) const {
  if (Status s = validate_queue_name(name); !s.ok()) return s;
  const std::string path = queue_dir(name) + "/queue.meta";
  auto read = log::read_whole(fs_, path);
  if (read.code() == StatusCode::kNotFound) {
    return Status(StatusCode::kNotFound, "no queue '" + std::string(name) + "'");
  }
  if (!read.ok()) return read.status();
  const std::string& text = *read;
  // "key=N" on a line of its own; false if it is there and not a number.
  const auto field = [&](std::string_view key, std::uint64_t& v, bool required) {
    const auto at = text.find("\n" + std::string(key) + "=");
    if (at == std::string::npos) return !required;
    const char* from = text.data() + at + key.size() + 2;
    const auto [end, ec] = std::from_chars(from, text.data() + text.size(), v);
    return ec == std::errc() && end < text.data() + text.size() && *end == '\n';
  };
  Meta m;
  std::uint64_t age_ms = 0;
  if (!text.starts_with(kMetaHeader) || !field("bound", m.bound, true) ||
      !field("max_age_ms", age_ms, false) ||
      age_ms > static_cast<std::uint64_t>(std::chrono::milliseconds::max().count())) {
    return Status(StatusCode::kCorruption, path + ": not a sluice queue description");
  }
  m.max_age = std::chrono::milliseconds(static_cast<std::chrono::milliseconds::rep>(age_ms));
  return m;
}

Status DirStore::create(std::string_view name, const QueueSpec& spec) {
  if (Status s = validate_queue_name(name); !s.ok()) return s;
  if (spec.max_age.count() < 0) {
    return {StatusCode::kInvalidArgument, "max_age must not be negative"};
  }
  if (spec.replicas != 0) {
    return {StatusCode::kInvalidArgument,
            "replicas need a Redis Streams topic (sluice create --stream): the embedded store "
            "has no replicas"};
  }
  const std::string target = queue_dir(name);
  const std::string exists = "queue '" + std::string(name) + "' already exists";
  if (fs_.exists(target)) return {StatusCode::kAlreadyExists, exists};
  if (Status s = make_dirs(fs_, dir_); !s.ok()) return s;  // opened without create_if_missing

  // Built whole under tmp/, then renamed into queues/: a crash leaves either
  // no queue or a complete one (the leftover under tmp/ goes at the next open).
  auto staged = take_stage(fs_, dir_ + "/tmp", "create", name);
  if (!staged.ok()) return staged.status();
  const std::string& stage = staged->path();
  if (Status s = fs_.create_dir(stage); !s.ok()) return s;
  auto fail = [&](Status s) {
    (void)fs_.remove_tree(stage);
    return s;
  };
  if (Status s = fs_.create_dir(stage + "/readers"); !s.ok()) return fail(s);
  std::string meta = std::string(kMetaHeader) + "bound=" + std::to_string(spec.bound) + "\n";
  if (spec.max_age.count() > 0) meta += "max_age_ms=" + std::to_string(spec.max_age.count()) + "\n";
  if (Status s = log::write_file_synced(fs_, stage + "/queue.meta", meta); !s.ok()) {
    return fail(s);
  }
  {
    // The topic and its default channel, so the bound holds from the first put.
    auto topic = topic_at(stage + "/topic", topic_options(opt_, spec.bound, spec.max_age, false));
    if (!topic.ok()) return fail(topic.status());
    auto ch = (*topic)->channel(kDefaultChannel);
    if (!ch.ok()) return fail(ch.status());
  }
  if (Status s = fs_.sync_dir(stage); !s.ok()) return fail(s);
  if (Status s = fs_.rename_noreplace(stage, target); !s.ok()) {
    if (s.code() == StatusCode::kAlreadyExists) return fail({StatusCode::kAlreadyExists, exists});
    return fail(s);
  }
  return fs_.sync_dir(dir_ + "/queues");
}

Result<std::unique_ptr<Topic>> DirStore::writer_topic(std::string_view name, const Meta& meta,
                                                      const Context& ctx) {
  const std::string dir = queue_dir(name) + "/topic";
  const TopicOptions o = topic_options(opt_, meta.bound, meta.max_age, false);
  // Only the topic create() made: a delete may rename the queue away after
  // its queue.meta was read, and the writer's open must not make the
  // directory again (a queue with no queue.meta, that create calls existing).
  log::OpenHooks existing;
  existing.existing_only = true;
  auto topic = wait_for_role<std::unique_ptr<Topic>>(
      ctx, [&] { return log::open_topic(fs_, dir, o, existing); });
  if (!topic.ok() && topic.code() == StatusCode::kInUse) {
    return Status(StatusCode::kInUse, "queue '" + std::string(name) + "' has a writer: " +
                                          std::string(topic.status().message()));
  }
  if (!topic.ok() && !fs_.exists(queue_dir(name))) {  // deleted meanwhile
    return Status(StatusCode::kNotFound, "no queue '" + std::string(name) + "'");
  }
  return topic;
}

Result<std::unique_ptr<QueueWriter>> DirStore::writer(std::string_view name, const Context& ctx) {
  auto meta = read_meta(name);
  if (!meta.ok()) return meta.status();
  auto topic = writer_topic(name, *meta, ctx);
  if (!topic.ok()) return topic.status();
  if ((*topic)->closed()) {
    return Status(StatusCode::kClosed, "queue '" + std::string(name) + "' is closed");
  }
  return std::unique_ptr<QueueWriter>(new DirWriter(std::move(*topic), meta->bound));
}

namespace {

// The seq a SeekTarget names in topic `t` of queue `name` (not clamped to
// the oldest retained record: the caller's operation does that).
Result<std::uint64_t> seq_of(const Topic& t, const SeekTarget& to, std::string_view name) {
  switch (to.kind) {
    case SeekTarget::Kind::kStart:
      return t.first_seq();
    case SeekTarget::Kind::kEnd:
      return t.next_seq();
    case SeekTarget::Kind::kTime:
      return t.seq_at_time(to.time);
    case SeekTarget::Kind::kId:
      return Status(StatusCode::kInvalidArgument,
                    "the embedded store's messages have seqs, not ids: give a seq, a time, the "
                    "start or the end");
    case SeekTarget::Kind::kSeq:
      break;
  }
  if (to.seq > t.next_seq()) {
    return Status(StatusCode::kInvalidArgument, "seq " + std::to_string(to.seq) +
                                                    " is past the end of queue '" +
                                                    std::string(name) + "' (its next seq is " +
                                                    std::to_string(t.next_seq()) + ")");
  }
  return to.seq;
}

// Whether records appended at or after `t` may be gone: retention deleted
// records, and the oldest it kept was appended after `t`.
bool gone_since(Topic& t, std::chrono::system_clock::time_point when) {
  if (t.first_seq() == 0) return false;  // nothing deleted
  auto cursor = t.cursor(t.first_seq());
  if (!cursor.ok()) return false;
  std::vector<LogMessage> first;
  if (!(*cursor)->next_batch(first, 1).ok() || first.empty() || !first[0].time) return false;
  return *first[0].time > when;
}

}  // namespace

Result<std::unique_ptr<QueueReader>> DirStore::reader(std::string_view name,
                                                      std::string_view channel, const Context& ctx,
                                                      const ReaderOptions& options) {
  if (options.visibility.count() != 0) {
    return Status(StatusCode::kInvalidArgument,
                  "a visibility timeout needs a Redis Streams topic: the embedded store hands a "
                  "message held by a reader to no other reader (it comes again only once that "
                  "reader is gone)");
  }
  auto meta = read_meta(name);
  if (!meta.ok()) return meta.status();
  if (Status s = validate_channel_name(channel); !s.ok()) return s;
  const std::string qdir = queue_dir(name);
  const std::string lock_path = qdir + "/readers/" + std::string(channel) + ".lock";
  auto role = wait_for_role<std::unique_ptr<log::File>>(
      ctx, [&] { return lock_channel(fs_, lock_path, name, channel); });
  if (!role.ok()) return gone_or(name, role.status());
  auto topic = topic_at(qdir + "/topic", topic_options(opt_, meta->bound, meta->max_age, true));
  if (!topic.ok()) return gone_or(name, topic.status());
  ChannelOptions copt;
  if (options.start) {  // used only if the channel is new
    auto at = seq_of(**topic, *options.start, name);
    if (!at.ok()) return at.status();
    copt.start_seq = *at;
  }
  auto ch = (*topic)->channel(channel, copt);
  if (!ch.ok()) return gone_or(name, ch.status());
  return std::unique_ptr<QueueReader>(
      new DirReader(std::move(*role), std::move(*topic), std::move(*ch)));
}

namespace {

// Reads a channel's messages through a read-only topic and a LogCursor:
// nothing is locked or written, so it runs beside put and get.
// Reads the log up to `end`, the next seq when the peek began: a producer
// that outruns the peek does not keep it going.
class DirPeek final : public QueuePeek {
 public:
  DirPeek(std::unique_ptr<Topic> topic, std::unique_ptr<LogCursor> cursor, std::uint64_t end)
      : topic_(std::move(topic)), cursor_(std::move(cursor)), end_(end) {}
  Status next(std::vector<StoreMessage>& out, std::size_t max) override {
    msgs_.clear();
    if (done_) return Status::Ok();
    if (Status s = cursor_->next_batch(msgs_, max); !s.ok()) return s;
    for (LogMessage& m : msgs_) {
      if (m.seq >= end_) {
        done_ = true;
        break;
      }
      StoreMessage& o = out.emplace_back();
      o.data = std::move(m.payload);
      o.seq = m.seq;
      o.time = m.time;
    }
    return Status::Ok();
  }
  std::uint64_t skipped_damaged() const override { return cursor_->skipped_corrupt(); }

 private:
  std::unique_ptr<Topic> topic_;
  std::unique_ptr<LogCursor> cursor_;
  const std::uint64_t end_;
  bool done_ = false;
  std::vector<LogMessage> msgs_;
};

std::string purged_path(const std::string& qdir, std::string_view channel) {
  return qdir + "/readers/" + std::string(channel) + ".purged";
}

// The count in a channel's .purged file (0 if there is none).
std::uint64_t read_purged(log::FileSystem& fs, const std::string& path) {
  auto text = log::read_whole(fs, path);
  if (!text.ok()) return 0;
  const char* p = text->data();
  const char* end = p + text->size();
  while (p < end && std::isspace(static_cast<unsigned char>(*p)) != 0) ++p;
  std::uint64_t n = 0;
  const auto [last, ec] = std::from_chars(p, end, n);
  return ec == std::errc() ? n : 0;
}

Status no_channel(std::string_view queue, std::string_view channel) {
  return {StatusCode::kNotFound, "queue '" + std::string(queue) + "' has no channel '" +
                                     std::string(channel) + "' (sluice stat lists them)"};
}

}  // namespace

Result<std::unique_ptr<QueuePeek>> DirStore::peek(std::string_view name, std::string_view channel,
                                                  const PeekFrom& from) {
  auto meta = read_meta(name);
  if (!meta.ok()) return meta.status();
  if (Status s = validate_channel_name(channel); !s.ok()) return s;
  if (!from.after_id.empty()) {
    return Status(StatusCode::kInvalidArgument,
                  "the embedded store's messages have seqs, not ids: peek from a seq");
  }
  auto topic =
      topic_at(queue_dir(name) + "/topic", topic_options(opt_, meta->bound, meta->max_age, true));
  if (!topic.ok()) return gone_or(name, topic.status());
  // The channel must exist, --from-seq or not: a mistyped one is an error.
  auto pos = (*topic)->channel_position(channel);
  if (!pos.ok()) {
    if (!fs_.exists(queue_dir(name))) return gone_or(name, pos.status());
    if (pos.code() == StatusCode::kNotFound) return no_channel(name, channel);
    return pos.status();
  }
  // A seq past the next one was never given (seek and a reader's start
  // refuse it too): bad input, not "nothing there yet".
  const std::uint64_t end = (*topic)->next_seq();
  if (from.seq && *from.seq > end) {
    return Status(StatusCode::kInvalidArgument,
                  "seq " + std::to_string(*from.seq) + " is past the end of queue '" +
                      std::string(name) + "' (its next seq is " + std::to_string(end) + ")");
  }
  auto cursor = (*topic)->cursor(from.seq ? *from.seq : *pos);
  if (!cursor.ok()) return gone_or(name, cursor.status());
  return std::unique_ptr<QueuePeek>(new DirPeek(std::move(*topic), std::move(*cursor), end));
}

// The channel's role first (a running get of it finishes), then the place
// to go, read from a read-only topic. Forward (a purge, a skip) is what an
// acknowledgement does, so the read-only topic's channel makes it, and a put
// waiting at the bound (holding the writer role) is woken rather than
// waited for. Back needs the writer: retention and the bound's slowest
// position live with it.
Result<DirStore::Moved> DirStore::move_channel(
    std::string_view name, std::string_view channel, const Context& ctx,
    const std::function<Result<std::uint64_t>(Topic&)>& target, bool count_purged) {
  auto meta = read_meta(name);
  if (!meta.ok()) return meta.status();
  if (Status s = validate_channel_name(channel); !s.ok()) return s;
  const std::string qdir = queue_dir(name);
  auto ro = topic_at(qdir + "/topic", topic_options(opt_, meta->bound, meta->max_age, true));
  if (!ro.ok()) return gone_or(name, ro.status());
  if (auto pos = (*ro)->channel_position(channel); pos.code() == StatusCode::kNotFound) {
    if (!fs_.exists(qdir)) return gone_or(name, pos.status());
    return no_channel(name, channel);
  }
  const std::string lock_path = qdir + "/readers/" + std::string(channel) + ".lock";
  // Both roles, and never one held while waiting for the other: a seek back
  // holding the channel while it waited for the writer would deadlock with
  // a put waiting at the bound (for a get, which waits for the channel).
  // Each try takes what it needs without waiting, or lets go of all of it.
  const Context at_once = ctx.with_deadline(Context::Clock::now());
  auto moved = wait_for_role<Moved>(ctx, [&]() -> Result<Moved> {
    auto role = lock_channel(fs_, lock_path, name, channel);
    if (!role.ok()) return role.status();
    auto before = (*ro)->channel_position(channel);  // settled now: nobody reads it
    if (!before.ok()) return before.status();
    auto to = target(**ro);
    if (!to.ok()) return to.status();
    // Forward works in the read-only topic (Channel::seek: as an ack does);
    // back takes the writer's topic, and with it the writer role.
    Topic* topic = ro->get();
    std::unique_ptr<Topic> writer;
    if (*to < *before) {
      auto w = writer_topic(name, *meta, at_once);  // kInUse: the channel goes too, and we retry
      if (!w.ok()) return w.status();
      writer = std::move(*w);
      topic = writer.get();
    }
    auto ch = topic->channel(channel);
    if (!ch.ok()) return ch.status();
    auto at = (*ch)->seek(*to);
    if (!at.ok()) return at.status();
    Moved m{.from = *before, .to = *at, .next_seq = topic->next_seq()};
    if (count_purged && m.to > m.from) {
      const std::string path = purged_path(qdir, channel);
      const std::uint64_t total = read_purged(fs_, path) + (m.to - m.from);
      if (Status s = log::replace_file_synced(fs_, path, std::to_string(total) + "\n"); !s.ok()) {
        return s;
      }
    }
    return m;
  });
  if (!moved.ok()) return gone_or(name, moved.status());
  return moved;
}

Result<SeekResult> DirStore::seek(std::string_view name, std::string_view channel,
                                  const SeekTarget& to, const Context& ctx) {
  bool time_clamped = false;
  auto m = move_channel(
      name, channel, ctx,
      [&](Topic& t) -> Result<std::uint64_t> {
        auto at = seq_of(t, to, name);
        if (at.ok() && to.kind == SeekTarget::Kind::kTime) time_clamped = gone_since(t, to.time);
        return at;
      },
      false);
  if (!m.ok()) return m.status();
  SeekResult r;
  r.position = "seq " + std::to_string(m->to);
  r.clamped = (to.kind == SeekTarget::Kind::kSeq && m->to > to.seq) || time_clamped;
  r.unacknowledged_before = m->next_seq - std::min(m->from, m->next_seq);
  r.unacknowledged = m->next_seq - std::min(m->to, m->next_seq);
  return r;
}

Result<std::uint64_t> DirStore::purge(std::string_view name, std::string_view channel,
                                      const Context& ctx) {
  auto m = move_channel(
      name, channel, ctx, [](Topic& t) -> Result<std::uint64_t> { return t.next_seq(); }, true);
  if (!m.ok()) return m.status();
  return m->to > m->from ? m->to - m->from : 0;
}

Status DirStore::close(std::string_view name, const Context& ctx) {
  auto meta = read_meta(name);
  if (!meta.ok()) return meta.status();
  auto topic = writer_topic(name, *meta, ctx);
  if (!topic.ok()) return topic.status();
  return (*topic)->close();  // idempotent: closing a closed queue is fine
}

Status DirStore::remove(std::string_view name) {
  if (Status s = validate_queue_name(name); !s.ok()) return s;
  const std::string from = queue_dir(name);
  const std::string label = "queue '" + std::string(name) + "'";
  if (!fs_.exists(from)) return {StatusCode::kNotFound, "no " + label};
  // A writer or reader still open would go on putting into (or acknowledging
  // in) files nobody can reach again, and report success: refuse instead.
  // Their locks are held until the rename, so none can start in between.
  log::FileSystem& lfs = fs_;
  const std::string tdir = from + "/topic";
  if (auto canon = lfs.canonical(tdir); canon.ok() && log::open_for_writing_here(lfs, *canon)) {
    return {StatusCode::kInUse, label + " has a writer in this process (PID " +
                                    std::to_string(getpid()) + "); close it first"};
  }
  std::unique_ptr<log::File> writer_lock;
  if (auto f = lfs.open(tdir + "/LOCK", log::OpenMode::kReadWrite); f.ok()) {
    if (Status s = (*f)->lock(label + " has a writer"); !s.ok()) return s;
    writer_lock = std::move(*f);
  } else if (f.code() != StatusCode::kNotFound) {
    return f.status();
  }
  std::vector<std::unique_ptr<log::File>> reader_locks;  // released on return
  std::vector<std::string> locked;                       // their file names
  auto readers = fs_.list(from + "/readers");
  if (!readers.ok() && readers.code() != StatusCode::kNotFound) return readers.status();
  if (readers.ok()) {
    constexpr std::string_view kLock = ".lock";
    for (const std::string& f : *readers) {
      if (f.size() <= kLock.size() || !f.ends_with(kLock)) continue;
      const std::string channel = f.substr(0, f.size() - kLock.size());
      auto role = lock_channel(fs_, from + "/readers/" + f, name, channel);
      if (!role.ok()) return role.status();
      reader_locks.push_back(std::move(*role));
      locked.push_back(f);
    }
  }

  auto staged = take_stage(fs_, dir_ + "/tmp", "delete", name);
  if (!staged.ok()) return staged.status();
  const std::string& to = staged->path();
  // The rename is the delete: the name is gone at once; the files follow.
  // (to is a fresh name: a rename that never replaces says kNotFound, not
  // an I/O error, when the queue went meanwhile.)
  if (Status s = fs_.rename_noreplace(from, to); !s.ok()) {
    if (s.code() == StatusCode::kNotFound) return {StatusCode::kNotFound, "no " + label};
    return s;
  }
  // A reader of a new channel may have taken its role after the listing
  // above and opened the queue before the rename: its lock file is in the
  // renamed directory now. Look again there; if one is held, put the queue
  // back (nothing of it was removed).
  if (auto again = fs_.list(to + "/readers"); again.ok()) {
    constexpr std::string_view kLock = ".lock";
    for (const std::string& f : *again) {
      if (f.size() <= kLock.size() || !f.ends_with(kLock)) continue;
      if (std::find(locked.begin(), locked.end(), f) != locked.end()) continue;  // ours
      const std::string channel = f.substr(0, f.size() - kLock.size());
      auto role = lock_channel(fs_, to + "/readers/" + f, name, channel);
      if (role.ok()) {
        reader_locks.push_back(std::move(*role));
        continue;
      }
      if (Status back = fs_.rename_noreplace(to, from); !back.ok()) {
        // Where clean_tmp() does not look: the reader still uses it.
        const std::string kept = dir_ + "/tmp/kept" + to.substr(to.rfind("/delete-") + 7);
        const std::string& at = fs_.rename_noreplace(to, kept).ok() ? kept : to;
        return {StatusCode::kIOError,
                label + " is in use (" + std::string(role.status().message()) +
                    ") and could not be put back from " + at + ": " + std::string(back.message())};
      }
      return role.status();
    }
  }
  if (Status s = fs_.sync_dir(dir_ + "/queues"); !s.ok()) return s;
  return fs_.remove_tree(to);
}

Result<std::vector<std::string>> DirStore::list() {
  std::vector<std::string> names;
  auto entries = fs_.list(dir_ + "/queues");
  if (entries.code() == StatusCode::kNotFound) return names;  // no store made here yet
  if (!entries.ok()) return entries.status();
  for (std::string& n : *entries) {
    if (validate_queue_name(n).ok()) names.push_back(std::move(n));
  }
  std::sort(names.begin(), names.end());
  return names;
}

Result<QueueInfo> DirStore::stat(std::string_view name) {
  auto meta = read_meta(name);
  if (!meta.ok()) return meta.status();
  QueueInfo info;
  info.name = std::string(name);
  info.kind = "log";
  info.bound = meta->bound;
  info.max_age = meta->max_age;
  const std::string tdir = queue_dir(name) + "/topic";
  // ls -l stats what it listed: a delete may have come since.
  auto topic = topic_at(tdir, topic_options(opt_, meta->bound, meta->max_age, true));
  if (!topic.ok()) return gone_or(name, topic.status());
  info.produced = (*topic)->next_seq();
  info.closed = (*topic)->closed();
  auto channels = (*topic)->channels();
  if (!channels.ok()) return gone_or(name, channels.status());
  info.channels = *channels;
  // The slowest channel's durable position, read from its file: opening the
  // channel would take it from a reader that has it.
  // What the age cap deleted is waiting for nobody any more.
  const std::uint64_t first = (*topic)->first_seq();
  std::uint64_t consumed = info.produced;
  for (const std::string& ch : info.channels) {
    auto bytes = log::read_whole(fs_, tdir + "/channels/" + ch + ".pos");
    const log::PositionRead p = log::decode_positions(bytes.ok() ? *bytes : std::string());
    const std::uint64_t at =
        std::max(p.state == log::PositionState::kValid ? p.slot.next_seq : 0, first);
    consumed = std::min(consumed, at);
    info.channel_info.push_back({.name = ch,
                                 .lag = info.produced - std::min(at, info.produced),
                                 .pending = 0,
                                 .dead_lettered = 0,
                                 .purged = read_purged(fs_, purged_path(queue_dir(name), ch))});
  }
  info.consumed = consumed;
  info.length = info.produced - info.consumed;
  return info;
}

}  // namespace sluice::store
