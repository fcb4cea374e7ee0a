// `sluice get`'s stdout: which of the messages written to it the reader has
// taken out. On a pipe or FIFO, FIONREAD on the write end says how many
// bytes are still in the pipe, so the bytes written minus those is what the
// reader has read, and a message is taken once its last byte is. get
// acknowledges only taken messages and gives the rest back at its end, so a
// reader that stops early (`while read`, `head -c`) loses nothing it did not
// read. Elsewhere (a file, a terminal, a socket, whose queue counts do not
// show what the peer read) a message counts as taken once written.
//
// Exact when get is the pipe's only writer. Bytes another writer leaves in
// the pipe make the count lower (a message taken may be given back and come
// again), never higher; bytes already in the pipe when get starts are read
// first and are allowed for.
//
// Thread safety: one thread at a time, but for ReaderWatch (its own thread).
// Blocking: write() waits for room in the pipe, or for `wake` (a stop), or
//   for ctx's deadline; with no `wake` (-1), for ctx's stop, seen within
//   detail::StopFd::kSliceMs. No call waits otherwise.
// Ownership: the fd stays the caller's.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string_view>
#include <thread>

#include "sluice/context.h"
#include "sluice/status.h"

namespace sluice::cli {

class PipeOut {
 public:
  explicit PipeOut(int fd);

  // A pipe or FIFO: taken() counts what the reader read.
  bool is_pipe() const { return pipe_; }

  // Writes `bytes`, the frames of messages ending at the offsets `ends`
  // (increasing, the last one bytes.size()). On a pipe it writes only what
  // fits, waiting for room with poll() (so a reader that stops reading
  // without exiting cannot hold it past a stop or the deadline): returns OK
  // once all is written; kCancelled once `wake` is readable or ctx is
  // stopped (the caller's stop), kDeadlineExceeded at ctx's deadline,
  // kIOError for a reader that has gone (EPIPE, POLLERR: `reader_gone()` is
  // then true) or another error; the messages written whole before that
  // count in written().
  Status write(std::string_view bytes, const std::size_t* ends, std::size_t n, const Context& ctx,
               int wake);

  // Messages written whole, since this object was made.
  std::uint64_t written() const { return written_; }
  // Of those, how many the reader has taken out whole (all written ones
  // when not a pipe). Rises as the reader reads; one ioctl.
  std::uint64_t taken();
  // Messages written and not yet taken: 0 when not a pipe.
  std::uint64_t in_pipe() { return written_ - taken(); }
  // The reader has closed its end (POLLERR on the write end; a pipe only).
  bool reader_gone();

 private:
  // Bytes a write surely fits without blocking (0: not even a page).
  std::size_t room() const;
  // Waits until the pipe has room for a page (OK), `wake` is readable or ctx
  // is stopped (kCancelled), ctx's deadline (kDeadlineExceeded), or the
  // reader has gone.
  Status wait_for_room(const Context& ctx, int wake);

  int fd_;
  bool pipe_ = false;
  std::uint64_t capacity_ = 0;  // F_GETPIPE_SZ
  bool gone_ = false;
  std::uint64_t before_ = 0;  // bytes in the pipe when we started: read before ours
  std::uint64_t bytes_ = 0;   // bytes we wrote
  std::uint64_t written_ = 0;
  std::uint64_t taken_ = 0;
  std::deque<std::uint64_t> ends_;  // byte offsets (in bytes_) of messages not yet taken
};

// Watches a pipe's write end from a thread of its own and calls `gone`
// once its reader has closed it (POLLERR), so a `get` blocked waiting for
// messages notices. Nothing to do for a fd that is not a pipe. Stops and
// joins when destroyed.
class ReaderWatch {
 public:
  ReaderWatch(int fd, bool is_pipe, std::function<void()> gone);
  ~ReaderWatch();
  ReaderWatch(const ReaderWatch&) = delete;
  ReaderWatch& operator=(const ReaderWatch&) = delete;

 private:
  int wake_ = -1;
  std::thread thread_;
};

}  // namespace sluice::cli
