// put (stdin -> queue) and get (queue -> stdout).
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <iostream>
#include <vector>

#include "cli.h"

namespace sluice::cli {
namespace {

struct IoArgs {
  std::string name;
  bool nul = false;  // -0: NUL-separated
  bool close = false;
  bool no_wait = false;
  std::uint64_t count = 0;  // get: 0 = no limit
  double timeout = -1;      // get: seconds; < 0 = none
  std::string channel = std::string(kDefaultChannel);
  std::size_t batch = 1000;
};

// Reads stdin and puts one message per separator. Each read's complete
// messages go in one put (one sync), so a busy pipe is batched and an
// interactive one is not delayed.
int run_put(Globals& g, const IoArgs& a) {
  auto store = open_store(g, "put", &g.rc);
  if (!store) return g.rc;
  const std::stop_token stop = stop_on_signals();
  const Context ctx = a.no_wait ? with_timeout(std::chrono::seconds(0), stop) : Context(stop);
  auto w = store->writer(a.name, ctx);
  if (!w.ok()) return fail("put", queue_label(a.name), w.status());
  const Context put_ctx(stop);  // --no-wait is about the role, not the bound
  const char sep = a.nul ? '\0' : '\n';
  const std::size_t limit = (*w)->max_message_bytes();
  std::uint64_t sent = 0;
  auto failed = [&](const Status& s) {
    std::cerr << "sluice put: " << queue_label(a.name) << ": " << sent
              << " messages enqueued; the rest of the input was not\n";
    return fail("put", queue_label(a.name), s);
  };

  // SIGINT/SIGTERM must also end a read of stdin that waits: the stop
  // wakes a poll through an eventfd.
  const int wake = ::eventfd(0, EFD_CLOEXEC);
  std::stop_callback on_stop(stop, [wake] {
    const std::uint64_t one = 1;
    if (::write(wake, &one, sizeof one) < 0) {
      // Nothing to do: the fd is ours and a counter write does not fail.
    }
  });
  struct CloseFd {
    int fd;
    ~CloseFd() { ::close(fd); }
  } close_wake{wake};

  std::string buf;
  std::vector<std::string_view> batch;
  std::size_t scanned = 0;  // bytes of buf already searched for a separator
  bool eof = false;
  while (!eof) {
    pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {wake, POLLIN, 0}};
    if (::poll(fds, wake >= 0 ? 2 : 1, -1) < 0 && errno != EINTR) {
      return failed({StatusCode::kIOError, std::string("poll stdin: ") + std::strerror(errno)});
    }
    if (stop.stop_requested()) return failed(StatusCode::kCancelled);
    if (fds[0].revents == 0) continue;
    char chunk[1 << 16];
    const ssize_t n = ::read(STDIN_FILENO, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return failed({StatusCode::kIOError, std::string("read stdin: ") + std::strerror(errno)});
    eof = n == 0;
    buf.append(chunk, static_cast<std::size_t>(n));
    batch.clear();
    std::size_t start = 0;
    for (std::size_t i = scanned; i < buf.size(); ++i) {
      if (buf[i] != sep) continue;
      batch.emplace_back(buf.data() + start, i - start);
      start = i + 1;
    }
    if (eof && start < buf.size()) {  // a last line without its separator
      batch.emplace_back(buf.data() + start, buf.size() - start);
      start = buf.size();
    }
    scanned = buf.size();
    std::size_t ok_until = batch.size();  // messages under the size limit
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (batch[i].size() > limit) {
        ok_until = i;
        break;
      }
    }
    const bool too_large = ok_until < batch.size() || buf.size() - start > limit;
    for (std::size_t off = 0; off < ok_until; off += a.batch) {
      const std::size_t take = std::min(a.batch, ok_until - off);
      std::size_t done = 0;
      Status s = (*w)->put(std::span(batch).subspan(off, take), put_ctx, &done);
      sent += done;
      if (!s.ok()) return failed(s);
    }
    if (too_large) {
      std::cerr << "sluice put: " << queue_label(a.name) << ": message " << (sent + 1)
                << " is over the limit of " << limit << " bytes\n";
      failed({StatusCode::kInvalidArgument, "message too large"});
      return kExitTooLarge;
    }
    buf.erase(0, start);
    scanned = buf.size();
  }
  if (a.close) {
    if (Status s = (*w)->close(); !s.ok()) {
      std::cerr << "sluice put: " << queue_label(a.name) << ": " << sent
                << " messages enqueued, but the queue was not closed\n";
      return fail("put", queue_label(a.name), s);
    }
  }
  return kExitOk;
}

bool write_all(int fd, const std::string& bytes) {
  std::size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    off += static_cast<std::size_t>(n);
  }
  return true;
}

// Writes messages to stdout; acknowledges each batch only once it is written
// (write(2) on fd 1: no stdio buffer in between), so a reader that dies or a
// pipe that closes loses nothing: the unacknowledged batch comes again.
int run_get(Globals& g, const IoArgs& a) {
  auto store = open_store(g, "get", &g.rc);
  if (!store) return g.rc;
  std::signal(SIGPIPE, SIG_IGN);  // a closed stdout is an EPIPE to report, not a silent death
  const std::stop_token stop = stop_on_signals();
  Context ctx(stop);
  if (a.timeout >= 0) ctx = with_timeout(std::chrono::duration<double>(a.timeout), stop);
  auto r =
      store->reader(a.name, a.channel, a.no_wait ? ctx.with_timeout(std::chrono::seconds(0)) : ctx);
  if (!r.ok()) return fail("get", queue_label(a.name), r.status());
  const char sep = a.nul ? '\0' : '\n';
  std::uint64_t got = 0;
  std::vector<std::string> msgs;
  std::string out;
  while (a.count == 0 || got < a.count) {
    std::size_t want = a.batch;
    if (a.count != 0) want = static_cast<std::size_t>(std::min<std::uint64_t>(want, a.count - got));
    msgs.clear();
    Status s = (*r)->get(msgs, want, ctx);
    if (s.code() == StatusCode::kClosed) return kExitOk;  // closed and drained: the normal end
    if (s.code() == StatusCode::kDeadlineExceeded) return kExitTimeout;
    if (s.code() == StatusCode::kCancelled) return kExitInterrupted;
    if (!s.ok()) return fail("get", queue_label(a.name), s);
    out.clear();
    for (const std::string& m : msgs) {
      out += m;
      out += sep;
    }
    if (!write_all(STDOUT_FILENO, out)) {
      const int err = errno;
      std::cerr << "sluice get: " << queue_label(a.name) << ": write stdout: " << std::strerror(err)
                << "; the last " << msgs.size()
                << " messages were not acknowledged and will be delivered again\n";
      return kExitIO;
    }
    if (Status as = (*r)->ack(); !as.ok()) return fail("get", queue_label(a.name), as);
    got += msgs.size();
  }
  return kExitOk;
}

}  // namespace

void add_io_commands(CLI::App& app, Globals& g) {
  auto a = std::make_shared<IoArgs>();

  auto* put = app.add_subcommand(
      "put", "put stdin into a queue, one message per line (newline stripped); waits at the bound");
  put->add_option("NAME", a->name, "queue name")->required();
  put->add_flag("-0,--null", a->nul, "messages are separated by NUL bytes, not newlines");
  put->add_flag("--close", a->close, "close the queue after the end of the input");
  put->add_flag("--no-wait", a->no_wait, "fail at once if another writer holds the queue");
  put->add_option("--batch", a->batch, "most messages per put (one sync each)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  put->callback([&g, a] { g.rc = run_put(g, *a); });

  auto* get = app.add_subcommand(
      "get",
      "write messages to stdout, one per line, until the queue is closed and drained; each batch "
      "is acknowledged once written");
  get->add_option("NAME", a->name, "queue name")->required();
  get->add_flag("-0,--null", a->nul, "end each message with a NUL byte, not a newline");
  get->add_option("--count", a->count, "stop after N messages")->check(CLI::PositiveNumber);
  get->add_option("--timeout", a->timeout,
                  "stop after SECONDS (exit 9 unless --count or the end came first)")
      ->check(CLI::NonNegativeNumber);
  get->add_option("--channel", a->channel, "the channel to read (each channel gets every message)")
      ->capture_default_str();
  get->add_flag("--no-wait", a->no_wait, "fail at once if another reader holds the channel");
  get->add_option("--batch", a->batch, "most messages per read and acknowledgement")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  get->callback([&g, a] { g.rc = run_get(g, *a); });
}

}  // namespace sluice::cli
