// Topic::Impl: the top layer of a topic (topic_core.h lists the layers):
// opening and recovering it (topic.cpp), and, for a topic opened read-only,
// following a writer in another process (tail.cpp). Private.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "log/file_system.h"
#include "log/read_buffer.h"
#include "log/recovery.h"
#include "log/retention.h"
#include "sluice/log/topic.h"

namespace sluice {

struct Topic::Impl final : log::Retention {
  Impl(log::FileSystem& file_system, std::string directory, TopicOptions options, bool read_only)
      : Retention(file_system, std::move(directory), options, read_only) {}
  ~Impl() override;

  // Opens the topic in `dir` on `fs` (Topic::open on the real disk).
  static Result<std::unique_ptr<Topic>> open(log::FileSystem& fs, const std::string& dir,
                                             const TopicOptions& options,
                                             const log::OpenHooks& hooks = {});

  RecoveryReport report;  // fixed after open

  // The Impl behind `t` (tests drive a log::Reader on it directly).
  static const std::shared_ptr<Impl>& of(const Topic& t) { return t.impl_; }

  // Read-only topics: pick up what the writer appended since we looked
  // (complete, valid records below its high watermark; a new segment once
  // the old one is final).
  void refresh() SLUICE_EXCLUDES(mu);
  // Read-only topics: if the bytes refresh() last read are of `seg` and hold
  // [at, at + n) below its readable end, swaps them into `buf` (refresh
  // needs none of them again, nor what `buf` held) and sets *buf_off to the
  // offset of their first byte. A reader process read every byte twice:
  // refresh's read to frame the records, then the channel's to deliver them.
  bool take_tail(const log::Segment* seg, std::uint64_t at, std::size_t n, log::ReadBuffer& buf,
                 std::uint64_t* buf_off) SLUICE_EXCLUDES(mu);

 private:
  // Read-only, caught up, and the writer said it closed: is the closed mark
  // right after our last record? Then we are closed too.
  void find_closed_mark(log::Segment& last) SLUICE_REQUIRES(mu);
  // Read-only: the first segment past seq `after` if the writer's recovery
  // flagged it `after gap` (it went on there after a loss).
  std::optional<std::uint64_t> after_gap_segment(std::uint64_t after);
  // The base of the oldest segment file past seq `after` (a listing).
  std::optional<std::uint64_t> oldest_segment_after(std::uint64_t after);
  // Read-only: drops the oldest listed segments the writer deleted.
  void forget_deleted_segments() SLUICE_REQUIRES(mu);
  Status open_writer();
  Status open_reader();
  // Opens the segments recovery found and makes them the topic's.
  Status adopt(log::Scan& scan) SLUICE_REQUIRES(mu);
  // Applies what the scan implies: leftovers removed, a headerless newest
  // segment reused, a torn tail cut off.
  Status repair(log::Scan& scan) SLUICE_REQUIRES(mu);
  void summarize_read_segments(const log::Scan& scan) SLUICE_REQUIRES(mu);
  // The highest position any channel file holds (0 if none).
  Result<std::uint64_t> highest_position();

  log::ReadBuffer tail_buf_ SLUICE_GUARDED_BY(mu);  // refresh's reads, kept for the next
  // What tail_buf_ holds: bytes of tail_seg_ from tail_at_ (none if expired).
  std::weak_ptr<log::Segment> tail_seg_ SLUICE_GUARDED_BY(mu);
  std::uint64_t tail_at_ SLUICE_GUARDED_BY(mu) = 0;
  std::size_t tail_have_ SLUICE_GUARDED_BY(mu) = 0;
  std::unique_ptr<log::File> lock_file_;  // the writer's LOCK
  bool registered_ = false;               // in the in-process registry
};

}  // namespace sluice

namespace sluice::log {

// Topic::open and verify_topic on any file system (tests use a simulated
// one), with the test and benchmark hooks.
Result<std::unique_ptr<Topic>> open_topic(FileSystem& fs, const std::string& dir,
                                          const TopicOptions& options, const OpenHooks& hooks = {});
Result<RecoveryReport> verify_topic(FileSystem& fs, const std::string& dir,
                                    const TopicOptions& options);
// Whether this process has the topic in `canonical_dir` open for writing
// (from the registry, without opening LOCK).
bool open_for_writing_here(const FileSystem& fs, const std::string& canonical_dir);
// The writer's place in the in-process registry, for what takes the
// writer's LOCK without opening a Topic (repair): held() false if a writer
// of this process has it.
class WritingHere {
 public:
  WritingHere(const FileSystem& fs, std::string canonical_dir);
  ~WritingHere();
  WritingHere(const WritingHere&) = delete;
  WritingHere& operator=(const WritingHere&) = delete;
  bool held() const { return held_; }

 private:
  const FileSystem* fs_;
  std::string dir_;
  bool held_ = false;
};
// The PID of a writer that has the topic open now, in this process or
// another (holding LOCK), -1 for one whose PID cannot be had, else 0.
int live_writer(FileSystem& fs, const std::string& canonical_dir);

}  // namespace sluice::log
