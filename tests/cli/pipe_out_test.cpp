// PipeOut (tools/sluice/pipe_out.h) on real pipes: which messages the
// reader has taken, what was in the pipe before, another writer, a reader
// that goes, and a write into a full pipe that a stop or the deadline ends.
#include "pipe_out.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "testutil/temp_dir.h"
#include "testutil/wait_for.h"

namespace sluice::cli {
namespace {

using namespace std::chrono_literals;

struct Pipe {
  Pipe() {
    EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    ::signal(SIGPIPE, SIG_IGN);
  }
  ~Pipe() {
    for (int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
  }
  std::string read(std::size_t n) {
    std::string s(n, '\0');
    std::size_t got = 0;
    while (got < n) {
      const ssize_t r = ::read(fds[0], s.data() + got, n - got);
      if (r <= 0) break;
      got += static_cast<std::size_t>(r);
    }
    s.resize(got);
    return s;
  }
  void close_reader() {
    ::close(fds[0]);
    fds[0] = -1;
  }
  int fds[2] = {-1, -1};
};

// Frames "aaaa\n" ... of `len` bytes each: their ends.
std::vector<std::size_t> frames(std::string& bytes, int n, std::size_t len) {
  std::vector<std::size_t> ends;
  for (int i = 0; i < n; ++i) {
    bytes.append(len - 1, static_cast<char>('a' + i % 26));
    bytes += '\n';
    ends.push_back(bytes.size());
  }
  return ends;
}

TEST(PipeOutTest, AMessageIsTakenOnceItsLastByteIsRead) {
  Pipe p;
  PipeOut out(p.fds[1]);
  ASSERT_TRUE(out.is_pipe());
  std::string bytes;
  const auto ends = frames(bytes, 10, 5);
  ASSERT_EQ(out.write(bytes, ends.data(), ends.size(), {}, -1), StatusCode::kOk);
  EXPECT_EQ(out.written(), 10U);
  EXPECT_EQ(out.taken(), 0U);
  EXPECT_EQ(p.read(12), "aaaa\nbbbb\ncc");  // two whole, part of a third
  EXPECT_EQ(out.taken(), 2U);
  EXPECT_EQ(out.in_pipe(), 8U);
  EXPECT_EQ(p.read(3), "cc\n");
  EXPECT_EQ(out.taken(), 3U);
  EXPECT_EQ(p.read(35), bytes.substr(15));
  EXPECT_EQ(out.taken(), 10U);
  EXPECT_FALSE(out.reader_gone());
}

// Bytes in the pipe before are read first: they do not count as ours.
// Bytes another writer adds make the count lower, never higher.
TEST(PipeOutTest, BytesOfOthersNeverCountAsTaken) {
  Pipe p;
  ASSERT_EQ(::write(p.fds[1], "xyz", 3), 3);
  PipeOut out(p.fds[1]);
  std::string bytes;
  const auto ends = frames(bytes, 2, 5);
  ASSERT_EQ(out.write(bytes, ends.data(), ends.size(), {}, -1), StatusCode::kOk);
  EXPECT_EQ(p.read(3), "xyz");
  EXPECT_EQ(out.taken(), 0U);
  EXPECT_EQ(p.read(5), "aaaa\n");
  EXPECT_EQ(out.taken(), 1U);
  ASSERT_EQ(::write(p.fds[1], "other", 5), 5);  // another writer
  EXPECT_EQ(p.read(5), "bbbb\n");
  EXPECT_EQ(out.taken(), 1U);  // the other's unread bytes look like ours
  EXPECT_EQ(p.read(5), "other");
  EXPECT_EQ(out.taken(), 2U);
}

TEST(PipeOutTest, AReaderThatClosesItsEndIsGone) {
  Pipe p;
  PipeOut out(p.fds[1]);
  std::string bytes;
  const auto ends = frames(bytes, 3, 5);
  ASSERT_EQ(out.write(bytes, ends.data(), ends.size(), {}, -1), StatusCode::kOk);
  EXPECT_EQ(p.read(5), "aaaa\n");
  p.close_reader();
  EXPECT_TRUE(out.reader_gone());
  EXPECT_EQ(out.taken(), 1U);  // the unread bytes are still counted
  const Status s = out.write(bytes, ends.data(), ends.size(), {}, -1);
  EXPECT_EQ(s, StatusCode::kIOError) << s;
  EXPECT_EQ(out.written(), 3U);
}

// A reader that stops reading without exiting: the write waits for room,
// and a stop (the wake fd) or the deadline ends it, counting only the
// messages written whole.
TEST(PipeOutTest, AWriteIntoAFullPipeEndsAtAStopOrTheDeadline) {
  Pipe p;
  PipeOut out(p.fds[1]);
  std::string bytes;
  const auto ends = frames(bytes, 40000, 10);  // 400 KB: more than the pipe holds
  const auto t0 = std::chrono::steady_clock::now();
  Status s = out.write(bytes, ends.data(), ends.size(), with_timeout(100ms), -1);
  EXPECT_EQ(s, StatusCode::kDeadlineExceeded) << s;
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 100ms);
  const std::uint64_t first = out.written();
  EXPECT_GT(first, 0U);
  EXPECT_LT(first, 40000U);

  const int wake = ::eventfd(1, EFD_CLOEXEC);  // a stop already requested
  s = out.write(bytes, ends.data(), ends.size(), {}, wake);
  EXPECT_EQ(s, StatusCode::kCancelled) << s;
  ::close(wake);
  EXPECT_EQ(out.taken(), 0U);
  // Everything written whole is in the pipe, in order.
  const std::string got = p.read(static_cast<std::size_t>(first) * 10);
  EXPECT_EQ(got, bytes.substr(0, got.size()));
  EXPECT_EQ(out.taken(), first);
}

TEST(PipeOutTest, IntoAFileEveryMessageWrittenIsTaken) {
  const auto dir = testutil::test_dir("pipe_out");
  std::filesystem::create_directories(dir);
  const int fd = ::open((dir / "f").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  PipeOut out(fd);
  EXPECT_FALSE(out.is_pipe());
  std::string bytes;
  const auto ends = frames(bytes, 4, 5);
  ASSERT_EQ(out.write(bytes, ends.data(), ends.size(), {}, -1), StatusCode::kOk);
  EXPECT_EQ(out.taken(), 4U);
  EXPECT_EQ(out.in_pipe(), 0U);
  EXPECT_FALSE(out.reader_gone());
  ::close(fd);
}

TEST(ReaderWatchTest, CallsOnceTheReaderHasGone) {
  Pipe p;
  std::atomic<bool> gone{false};
  {
    ReaderWatch w(p.fds[1], true, [&] { gone = true; });
    p.close_reader();
    EXPECT_TRUE(testutil::eventually([&] { return gone.load(); }));
  }
  // Destroyed while the reader is still there: it stops without calling.
  Pipe q;
  std::atomic<bool> called{false};
  {
    ReaderWatch w(q.fds[1], true, [&] { called = true; });
  }
  EXPECT_FALSE(called);
}

}  // namespace
}  // namespace sluice::cli
