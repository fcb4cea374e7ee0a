// An eventfd that becomes readable once a stop is requested, so one poll()
// waits for its input (or room) and for a stop (SIGINT/SIGTERM, the reader
// gone; a Redis command blocked on the server) at once. Closed when
// destroyed, after the stop callback is gone. Used by the command and the
// Redis transport. Without a descriptor to make the eventfd (the process at
// its limit), a poll waits in slices of kSliceMs instead (poll_ms()), and the
// caller, which looks at the stop after each poll, sees it within one: a
// signal still ends the command.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>
#include <stop_token>

namespace sluice::detail {

class StopFd {
 public:
  explicit StopFd(const std::stop_token& stop)
      : fd_{::eventfd(0, EFD_CLOEXEC)}, on_stop_(stop, Poke{fd_.fd}) {}
  StopFd(const StopFd&) = delete;
  StopFd& operator=(const StopFd&) = delete;

  static constexpr int kSliceMs = 100;

  // -1 if no eventfd could be made: then poll with poll_ms().
  int fd() const { return fd_.fd; }
  // poll()'s timeout for a wait of `ms` (-1: none) on fd(): `ms`, or at most
  // kSliceMs when there is no eventfd to end it.
  int poll_ms(int ms) const { return fd_.fd >= 0 ? ms : sliced(ms); }
  static int sliced(int ms) { return ms < 0 || ms > kSliceMs ? kSliceMs : ms; }

 private:
  struct Fd {
    int fd;
    ~Fd() {
      if (fd >= 0) ::close(fd);
    }
  };
  struct Poke {
    int fd;
    void operator()() const {
      const std::uint64_t one = 1;
      if (fd >= 0 && ::write(fd, &one, sizeof one) < 0) {
        // A counter write on our own eventfd does not fail.
      }
    }
  };
  Fd fd_;  // destroyed last: the callback goes first
  std::stop_callback<Poke> on_stop_;
};

}  // namespace sluice::detail
