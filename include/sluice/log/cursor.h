// LogCursor reads a Topic's records from a seq on without taking them: no
// position, no lock, no file written, no role. For looking into a queue
// (`sluice peek`) while its producers and consumers run, here or in other
// processes.
//
// Thread safety: one thread at a time per LogCursor; any number of cursors
//   run beside the topic's appenders and channels (in this process, or in
//   others through a read-only Topic).
// Blocking: never waits for records: next_batch returns what is there now
//   (possibly nothing). It reads the disk (page cache) and takes the topic's
//   lock briefly, as a channel does.
// Ordering: seq order, each record once, from the start on. What it
//   returns is a prefix of the log: every record below the topic's high
//   watermark (the records channels may see: in kPerAppend and kGroupCommit
//   only synced ones), complete and checked (CRC), with no gap but what the
//   topic itself lost (skipped(): deleted by a retention cap while the
//   cursor was behind, or corrupt). In a read-only topic it follows the
//   writer as far as the writer has published.
// Cancellation: N/A (nothing waits).
// Ownership: the cursor shares its topic's files: it may outlive the Topic
//   object (it reads what is there). A record it is reading stays readable
//   even if retention deletes its segment meanwhile (the file stays open).
//   Messages are copied out.
// Errors: kInvalidArgument (Topic::cursor past next_seq(), next_batch with
//   max 0), kIOError (a read failed), kCorruption (a record damaged after
//   the topic was opened; ranges recovery found damaged are skipped and
//   counted instead).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "sluice/log/channel.h"
#include "sluice/status.h"

namespace sluice {

class LogCursor {
 public:
  ~LogCursor();
  LogCursor(const LogCursor&) = delete;
  LogCursor& operator=(const LogCursor&) = delete;

  // Appends 0..max records to out, from the cursor's position on, and moves
  // past them. Ok with none added: nothing more right now (call again later
  // for what is appended meanwhile). Never waits, never writes.
  Status next_batch(std::vector<LogMessage>& out, std::size_t max);

  // Where it started: the seq asked for, or the oldest retained record if
  // that seq was before it (the records between were deleted).
  std::uint64_t start() const;
  // The seq of the next record it returns, once that record is there.
  std::uint64_t position() const;
  // Records from start() on that it passed without returning: deleted by a
  // retention cap before it read them, or lost to corruption.
  std::uint64_t skipped() const;
  // Of those, the records lost to corruption (Channel::skipped_corrupt).
  std::uint64_t skipped_corrupt() const;

  struct Impl;

 private:
  friend class Topic;
  explicit LogCursor(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
