// See pipe_out.h.
#include "pipe_out.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "detail/stop_fd.h"

namespace sluice::cli {
namespace {

// A pipe holds its bytes in page-sized slots (F_GETPIPE_SZ / 4096 of them).
// It reports room (POLLOUT) once one slot is free, and a write of at most a
// page then always fits, so it never blocks (as the only writer): a stop or
// the deadline is seen within one poll.
constexpr std::size_t kPage = 4096;

int poll_ms(const Context& ctx) {
  if (!ctx.deadline()) return -1;
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(*ctx.deadline() - Context::Clock::now());
  return static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 1 << 30));
}

std::uint64_t unread_bytes(int fd) {
  int n = 0;
  if (::ioctl(fd, FIONREAD, &n) != 0 || n < 0) return 0;
  return static_cast<std::uint64_t>(n);
}

}  // namespace

PipeOut::PipeOut(int fd) : fd_(fd) {
  struct stat st {};
  pipe_ = ::fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
  if (pipe_) {
    before_ = unread_bytes(fd);
    const int cap = ::fcntl(fd, F_GETPIPE_SZ);
    capacity_ = cap > 0 ? static_cast<std::uint64_t>(cap) : 0;  // 0: a page per poll
  }
}

std::size_t PipeOut::room() const {
  // Unread bytes fill at most unread / page slots and two part-filled ones
  // (the one the reader is in and the last one written).
  const std::uint64_t unread = unread_bytes(fd_);
  return capacity_ > unread + 2 * kPage ? static_cast<std::size_t>(capacity_ - unread - 2 * kPage)
                                        : 0;
}

Status PipeOut::wait_for_room(const Context& ctx, int wake) {
  for (;;) {
    pollfd fds[2] = {{fd_, POLLOUT, 0}, {wake, POLLIN, 0}};
    // No wake (no descriptor for it): in slices, looking at ctx's stop.
    const int ms = wake >= 0 ? poll_ms(ctx) : detail::StopFd::sliced(poll_ms(ctx));
    const int r = ::poll(fds, wake >= 0 ? 2 : 1, ms);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return {StatusCode::kIOError, std::string("poll stdout: ") + std::strerror(errno)};
    if ((fds[0].revents & POLLERR) != 0) {
      gone_ = true;
      return {StatusCode::kIOError, "write stdout: its reader has closed it"};
    }
    if (fds[1].revents != 0 || ctx.stop_requested()) return StatusCode::kCancelled;
    if ((fds[0].revents & POLLOUT) != 0) return Status::Ok();
    if (ctx.expired()) return StatusCode::kDeadlineExceeded;
  }
}

Status PipeOut::write(std::string_view bytes, const std::size_t* ends, std::size_t n,
                      const Context& ctx, int wake) {
  std::size_t off = 0;
  std::size_t next = 0;  // the first message not yet written whole
  const auto count_whole = [&] {
    while (next < n && ends[next] <= off) {
      ends_.push_back(bytes_ - off + ends[next]);
      ++next;
      ++written_;
    }
  };
  Status result = Status::Ok();
  while (off < bytes.size()) {
    std::size_t len = bytes.size() - off;
    if (pipe_) {
      // What surely fits goes without a poll; else a page once there is room.
      const std::size_t fits = room();
      if (fits >= kPage) {
        len = std::min(len, fits);
      } else {
        result = wait_for_room(ctx, wake);
        if (!result.ok()) break;
        len = std::min(len, kPage);
      }
    }
    const ssize_t w = ::write(fd_, bytes.data() + off, len);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      if (errno == EPIPE) gone_ = true;
      result = {StatusCode::kIOError, std::string("write stdout: ") + std::strerror(errno)};
      break;
    }
    off += static_cast<std::size_t>(w);
    bytes_ += static_cast<std::size_t>(w);
    count_whole();
  }
  if (!pipe_) {
    taken_ = written_;
    ends_.clear();
  }
  return result;
}

std::uint64_t PipeOut::taken() {
  if (!pipe_ || ends_.empty()) return pipe_ ? taken_ : written_;
  const std::uint64_t unread = unread_bytes(fd_);
  // Bytes read of ours: the pipe is FIFO, so what was in it before us went
  // first; more unread bytes than that (another writer's) count against us.
  const std::uint64_t read = before_ + bytes_ - std::min(unread, before_ + bytes_);
  const std::uint64_t ours = read > before_ ? read - before_ : 0;
  while (!ends_.empty() && ends_.front() <= ours) {
    ends_.pop_front();
    ++taken_;
  }
  return taken_;
}

bool PipeOut::reader_gone() {
  if (!pipe_) return false;
  if (!gone_) {
    pollfd p{fd_, 0, 0};
    gone_ = ::poll(&p, 1, 0) == 1 && (p.revents & POLLERR) != 0;
  }
  return gone_;
}

ReaderWatch::ReaderWatch(int fd, bool is_pipe, std::function<void()> gone) {
  if (!is_pipe) return;
  wake_ = ::eventfd(0, EFD_CLOEXEC);
  if (wake_ < 0) return;  // no watch: a gone reader is then seen at the next write
  thread_ = std::thread([fd, wake = wake_, gone = std::move(gone)] {
    for (;;) {
      // No events asked for: poll() reports POLLERR on a pipe's write end
      // whatever the events, once no reader is left.
      pollfd fds[2] = {{fd, 0, 0}, {wake, POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[1].revents != 0) return;
      if ((fds[0].revents & POLLERR) != 0) {
        gone();
        return;
      }
    }
  });
}

ReaderWatch::~ReaderWatch() {
  if (wake_ < 0) return;
  const std::uint64_t one = 1;
  if (::write(wake_, &one, sizeof one) < 0) {
    // An eventfd counter write does not fail.
  }
  if (thread_.joinable()) thread_.join();
  ::close(wake_);
}

}  // namespace sluice::cli
