// Topic is an embedded durable log: a directory of append-only segment files
// (docs/log_format.md) with named consumer channels, each with its own
// persisted position (channel.h). No server: open the directory.
//
// Thread safety: every member may be called concurrently from any number of
//   threads. Appends are serialized in one order (the seq order).
// Blocking: append blocks on the disk according to the durability mode (see
//   Durability). A slow or absent channel never blocks the publisher, unless
//   the topic is bounded (max_unconsumed): then an append waits for the
//   slowest channel's acknowledgements (or fails, per on_bound).
// Ordering: seqs are consecutive across the topic's life; every channel
//   sees records in seq order. An append returns after its record is
//   visible to channels in this process.
// Cancellation: append takes a Context: a stop requested before the call,
//   or while it waits for room under the bound, returns kCancelled (a
//   deadline: kDeadlineExceeded) with nothing written. Once written, a record stays
//   written; waiting for its sync is not cancellable (its durability is the
//   point of the call).
// Ownership: the Topic owns its files and a flusher thread (kInterval).
//   Destroying it stops appends (flusher stopped, reserve given back, synced
//   except in kNone); channels still open keep the files (and the writer's
//   lock) until the last is gone. Records are copied in.
// End of stream: close() marks the topic closed for good (appends return
//   kClosed; channels return kClosed once they delivered every record).
// Errors: kInvalidArgument (message too large, bad options), kIOError with
//   the errno text (disk full included: the failed record is cut off again,
//   so the log stays consistent), kNotFound/kAlreadyExists for channels,
//   kClosed after close().
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/bound_policy.h"
#include "sluice/context.h"
#include "sluice/status.h"

namespace sluice {

class Channel;
class LogCursor;
struct ChannelOptions;

// What an append's return promises (docs/durability.md):
enum class Durability : std::uint8_t {
  kNone,         // written to the OS page cache: survives a process crash, not power loss
  kInterval,     // as kNone, plus an fdatasync at most every sync_interval (power loss
                 // loses at most the last interval)
  kPerAppend,    // fdatasync before each append returns: durable on return
  kGroupCommit,  // durable on return; concurrent appenders share one fdatasync
};

struct TopicOptions {
  std::uint64_t segment_bytes = std::uint64_t{64} << 20;  // roll after this size
  // Larger appends: kInvalidArgument. Appends only: records of any length
  // (a writer's with a larger limit) are read and delivered.
  std::uint32_t max_message_bytes = 16U << 20;
  Durability durability = Durability::kGroupCommit;
  std::chrono::milliseconds sync_interval{100};  // kInterval only
  // The writer reserves segment space ahead in 1 MiB chunks (fallocate), so
  // an append never grows the file: syncs are cheaper (no size change to
  // journal) and a full disk shows as an error before anything is written.
  // On ext4, xfs and tmpfs, where reserved space cannot fault later, appends
  // also go through a shared memory map instead of one pwrite each. A clean
  // close or a roll gives the unused space back. false: plain pwrite.
  bool preallocate = true;
  // Modes kNone and kInterval: each time this many bytes of a segment have
  // filled, the writer starts writing them back to the disk without waiting
  // (sync_file_range; RocksDB's bytes_per_sync), whole pages only. Nothing
  // becomes durable sooner, but dirty pages no longer pile up for the next
  // sync: a close after 100 MB in kNone took 75-90 ms, now ~2. 0: leave it
  // to the kernel. The durable modes sync each append or group anyway.
  std::uint64_t writeback_bytes = std::uint64_t{1} << 20;
  // Caps for channels that never come back (0: no cap). The oldest sealed
  // segments are deleted while the retained records exceed
  // max_retained_bytes, or while the oldest was sealed more than
  // max_retained_age ago, even if a channel has not acknowledged them. They
  // are checked on each roll and when an acknowledgement crosses a segment.
  // What a cap drops is counted: Topic::retention() and, per channel,
  // Channel::skipped_retention(). The segment being written is never
  // deleted, so the byte cap is at least one segment. With an age cap, the
  // segment being written is sealed at the next append once it holds a
  // record and was made more than a quarter of the cap ago (its birth time
  // on disk, kept across writers; else since this writer opened it), so
  // records live at most
  // about 1.5x the cap while appends come (an idle topic deletes nothing
  // until its next append). Records a cap deleted no longer count toward
  // max_unconsumed, and an append waiting at the bound applies the age cap
  // as time passes: a channel that stopped holds appends back for about
  // 1.5x the age cap at most.
  std::uint64_t max_retained_bytes = 0;
  std::chrono::seconds max_retained_age{0};
  // Topic bound (0: none): at most this many records past the slowest
  // channel's acknowledged position, whichever process it is open in, or
  // none. An append that would pass it blocks or fails (on_bound); channels'
  // acks wake blocked appenders across processes. A topic without channels
  // is not bounded. A batch larger than the bound is kInvalidArgument.
  std::uint64_t max_unconsumed = 0;
  BoundPolicy on_bound = BoundPolicy::kBlock;
  // Open as a reader, e.g. in another process than the writer: no writer
  // lock, no segment is changed, append() is refused. Channels see the
  // writer's appends as they land, woken through the shared page NOTIFY (a
  // futex: no polling, no CPU while idle), which readers need write access to.
  bool read_only = false;
};

// One damaged range found by recovery or verify_topic().
struct LogDamage {
  std::string file;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::string what;  // e.g. "corrupt: seqs 17..20 lost", "torn tail truncated"
};

struct RecoveryReport {
  std::vector<LogDamage> corrupt;    // skipped, never delivered
  std::vector<LogDamage> truncated;  // torn tails cut off (open only)
  std::vector<std::string> removed;  // leftover files deleted (.tmp, empty segment)
  bool closed = false;               // the newest segment is the closed mark (not damage)
  // Older segments taken from their summaries, not read (docs/log_format.md,
  // "Segment summaries"): damage there is found when a reader meets it
  // (skipped and counted as above, Channel::skipped_corrupt), not listed here.
  std::uint64_t summarized = 0;
  bool clean() const { return corrupt.empty() && truncated.empty() && removed.empty(); }
};

// Retention since this Topic was opened.
struct RetentionStats {
  std::uint64_t segments_deleted = 0;  // by acknowledgement or by a cap
  std::uint64_t segments_capped = 0;   // deleted by a cap before every channel passed them
  // Records a cap deleted before the slowest channel acknowledged them
  // (other channels may have lost fewer: see Channel::skipped_retention());
  // in a topic without channels, every record a cap deleted.
  std::uint64_t records_dropped = 0;
};

// A snapshot of a topic's state and counters (Topic::stats), exact as of
// the last time the topic's lock was let go (or a sync let the appends it
// covered return): an append, roll or sync that holds the lock across the
// disk (a per-append fdatasync) is not in it yet; every call that returned
// before stats() is.
struct TopicStats {
  std::uint64_t first_seq = 0;    // the oldest retained record
  std::uint64_t next_seq = 0;     // the seq the next append gets
  std::uint64_t visible_seq = 0;  // channels see records below it (in kPerAppend and
                                  // kGroupCommit, only once synced)
  std::uint64_t segments = 0;
  std::uint64_t disk_bytes = 0;  // in retained segments
  std::uint64_t appended = 0;    // records appended since this Topic was opened
  std::uint64_t syncs = 0;       // fdatasyncs of segments since then
  bool closed = false;           // Topic::close() (here, or by the writer elsewhere)
  // Appends that found the topic bound reached, and the time they waited
  // for the slowest channel (backpressure), since this Topic was opened; a
  // wait still under way counts up to the call.
  std::uint64_t bound_waits = 0;
  double bound_wait_s = 0;
  RetentionStats retention;
  struct Position {
    std::string channel;
    std::uint64_t acked = 0;  // first seq not durably acknowledged
  };
  std::vector<Position> channels;  // channels open through this Topic
};

// The snapshot in the Prometheus text format (sluice/metrics.h), labelled
// name="<name>" (and channel="<channel>" for positions and lag).
std::string to_prometheus(const TopicStats& stats, std::string_view name);

class Topic {
 public:
  // Opens (creating if missing) the topic in `dir`, recovering it: a torn
  // tail is truncated, corruption is reported (recovery()) and skipped.
  static Result<std::unique_ptr<Topic>> open(const std::string& dir, TopicOptions options = {});
  ~Topic();
  Topic(const Topic&) = delete;
  Topic& operator=(const Topic&) = delete;

  // Appends one record; returns its seq once the mode's promise holds.
  Result<std::uint64_t> append(std::string_view payload, const Context& ctx = {});
  // Appends all records (consecutive seqs) with one write and, in the durable
  // modes, one sync; returns the first seq. All or none.
  Result<std::uint64_t> append_batch(std::span<const std::string_view> payloads,
                                     const Context& ctx = {});
  // Makes everything appended so far durable.
  Status sync();

  // Marks the topic closed, durably in every durability mode: everything
  // appended before it is synced first, then the mark. From then on appends
  // (in this process, and after any reopen) return kClosed and write
  // nothing; a channel that has delivered every record returns kClosed from
  // next/next_batch/consume instead of waiting, in this process and in
  // read-only topics in other processes (woken if asleep). Idempotent (a
  // second close returns Ok). Not reversible. Appenders blocked on the topic
  // bound (BoundPolicy::kBlock) return kClosed. A read-only topic refuses it
  // (kInvalidArgument).
  Status close();
  // close() returned Ok here, or (read-only topic) the writer's mark was
  // found after the last record.
  bool closed() const;

  std::uint64_t next_seq() const;   // the seq the next append gets
  std::uint64_t first_seq() const;  // the oldest retained seq

  // The first retained record appended at or after `t`: its seq, or
  // next_seq() if there is none (every record is older, or there is none).
  // A search, not a scan: each segment keeps a sparse index of its records'
  // append times (docs/log_format.md), so it reads at most 64 KiB of one
  // segment. Append times never decrease along the log (LogMessage::time).
  // Records of format 1 segments (written by a sluice before the append
  // time) have no time: a segment of them counts as appended when its file
  // was last modified (its seal, or its last append), so such a segment
  // whose file changed at or after t answers with its first record. The
  // answer is then never after a record appended at or after t, but may be
  // before records appended earlier (replay gives more, never less). In a
  // read-only topic, among the records the writer has published. kIOError
  // if a segment cannot be read; kCorruption for a record damaged since the
  // topic was opened.
  Result<std::uint64_t> seq_at_time(std::chrono::system_clock::time_point t) const;

  // A cursor over the records from `from_seq` on, reading without taking
  // (cursor.h): no position, no lock, nothing written, so it may run beside
  // the channels and appenders of this and other processes (open the topic
  // read_only there). A from_seq before the oldest retained record starts
  // at that record (LogCursor::start() says where); past next_seq():
  // kInvalidArgument. Works on a read-only topic (it looks for what the
  // writer published first).
  Result<std::unique_ptr<LogCursor>> cursor(std::uint64_t from_seq) const;

  // A channel's acknowledged position (the first seq it has not
  // acknowledged) read without opening the channel and without taking its
  // lock: from memory if the channel is open through this Topic, else from
  // its position file. Clamped to the retained log as opening the channel
  // would: at least first_seq() (a cap deleted what is below) and at most
  // next_seq(); a position file that never reached the disk gives
  // first_seq(). kNotFound if there is no such channel; kCorruption if its
  // file holds no valid position; kIOError.
  Result<std::uint64_t> channel_position(std::string_view name) const;
  std::uint64_t disk_bytes() const;  // bytes in retained segments
  const RecoveryReport& recovery() const;
  RetentionStats retention() const;
  // Neither waits for the disk: they read the counters the topic lock's
  // holder published when it last let go (TopicStats), so a scrape returns
  // while an fdatasync or a roll holds the lock.
  TopicStats stats() const;
  const std::string& dir() const;
  const TopicOptions& options() const;

  // Channels: named readers with persisted positions (channel.h).
  // Retention: a sealed segment is deleted once every channel, open or not,
  // has durably acknowledged past it; a topic with no channel keeps all.
  Result<std::unique_ptr<Channel>> channel(std::string_view name, const ChannelOptions& options);
  Result<std::unique_ptr<Channel>> channel(std::string_view name);
  Result<std::vector<std::string>> channels() const;
  Status delete_channel(std::string_view name);

  struct Impl;

 private:
  explicit Topic(std::unique_ptr<Impl> impl);
  static Result<std::unique_ptr<Topic>> open_reader(const std::string& canon,
                                                    const TopicOptions& options);
  std::shared_ptr<Impl> impl_;  // channels share it: one may outlive the Topic
};

// Checks every segment of the topic in `dir` without changing anything.
Result<RecoveryReport> verify_topic(const std::string& dir, TopicOptions options = {});

}  // namespace sluice
