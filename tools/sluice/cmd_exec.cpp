// get --exec: runs a command once per message, the message on its stdin,
// on `--parallel` workers of the library's run_pipeline.
//
// Acknowledgement: QueueReader::ack() acknowledges every message get() has
// returned, so a batch is acknowledged only once each of its messages is
// finished (its command exited 0, or it was dead-lettered). The source (one
// thread at a time, run_pipeline's rule) waits for that before it reads the
// next batch; a message that is not finished (interrupted, or the command
// cannot run) stops the run and nothing from its batch on is acknowledged.
//
// Processes: posix_spawn (no fork of a threaded process) of /bin/sh -c CMD
// (or of CMD's words found on PATH, when CMD has no shell syntax),
// with the signal mask and the dispositions sluice changed (SIGINT, SIGTERM
// blocked; SIGPIPE ignored) reset. Every fd sluice opens is O_CLOEXEC (the
// store's files and locks, the pipes to other commands), so a command
// inherits only its stdin pipe, stdout and stderr. A pidfd per child lets a
// worker wait for the exit, the stop, and the grace period in one poll.
#include "cmd_exec.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "detail/stop_fd.h"
#include "metrics_server.h"
#include "place_options.h"
#include "progress.h"
#include "reconnect.h"
#include "sluice/run_pipeline.h"

extern char** environ;

namespace sluice::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Closes an fd on scope exit.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  void reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

// True once sluice's stdout (the commands' too) is a pipe or socket whose
// reader went away: a run that failed then most likely died writing to it
// (SIGPIPE), which is no fault of its message.
bool stdout_gone() {
  pollfd p{STDOUT_FILENO, 0, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP)) != 0;
}

// How one run of the command ended.
struct Attempt {
  enum Kind : std::uint8_t { kExited, kSignaled, kKilled, kSpawnFailed } kind = kExited;
  int code = 0;                     // exit status, signal, or errno (kSpawnFailed)
  std::string program = "/bin/sh";  // what could not be started (kSpawnFailed)
  std::string what() const {
    switch (kind) {
      case kExited:
        return "exit " + std::to_string(code);
      case kSignaled:
        return std::string("killed by signal ") + std::to_string(code) + " (" + ::strsignal(code) +
               ")";
      case kKilled:
        return "killed after the grace period";
      case kSpawnFailed:
        return "cannot start " + program + ": " + std::strerror(code) +
               (code == ENOENT   ? " (not found)"
                : code == EACCES ? " (not executable)"
                                 : "");
    }
    return "?";
  }
};

// Spawns commands and waits for them, minding the stop.
//
// Thread safety: run() may be called from any number of threads at once.
// Cancellation: once the stop token is triggered, a running command gets
//   until stop time + grace to exit, then SIGKILL; no new one is started
//   by the caller (the caller checks).
class Runner {
 public:
  Runner(const ExecArgs& a, const std::stop_token& stop)
      : command_(a.command), grace_(std::chrono::duration<double>(a.grace)), stop_(stop) {
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string_view kv(*e);
      if (kv.starts_with("SLUICE_QUEUE=") || kv.starts_with("SLUICE_CHANNEL=") ||
          kv.starts_with("SLUICE_ATTEMPT=")) {
        continue;
      }
      env_.emplace_back(kv);
    }
    env_.push_back("SLUICE_QUEUE=" + a.name);
    env_.push_back("SLUICE_CHANNEL=" + a.channel);
    // A command with no shell syntax (words of plain characters) runs
    // directly, found on PATH: one exec instead of two, which halves the
    // cost of a message where process creation is the bottleneck.
    const bool plain =
        !command_.empty() && command_.find_first_not_of(
                                 "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 "
                                 "_-./,:=+@%") == std::string::npos;
    if (plain) {
      std::size_t i = 0;
      while (i < command_.size()) {
        while (i < command_.size() && command_[i] == ' ') ++i;
        const std::size_t j = command_.find(' ', i);
        if (i < command_.size()) words_.push_back(command_.substr(i, j - i));
        i = j == std::string::npos ? command_.size() : j;
      }
      // VAR=value words are the shell's: leave those to it. So are its
      // builtins and reserved words (exec, :, exit, read, cd, ...): most
      // have no program on PATH, and those that do (echo, test, ...) may
      // behave otherwise.
      static constexpr std::string_view kShellWords[] = {
          "!",       ".",        ":",      "[",     "alias",  "bg",   "break", "case",     "cd",
          "command", "continue", "do",     "done",  "echo",   "elif", "else",  "esac",     "eval",
          "exec",    "exit",     "export", "fc",    "fg",     "fi",   "for",   "getopts",  "hash",
          "if",      "jobs",     "kill",   "local", "printf", "pwd",  "read",  "readonly", "return",
          "set",     "shift",    "test",   "then",  "times",  "trap", "type",  "ulimit",   "umask",
          "unalias", "unset",    "until",  "wait",  "while",  "{",    "}"};
      if (!words_.empty() && (words_[0].find('=') != std::string::npos ||
                              std::find(std::begin(kShellWords), std::end(kShellWords),
                                        words_[0]) != std::end(kShellWords))) {
        words_.clear();
      }
    }
    wake_.fd = ::eventfd(0, EFD_CLOEXEC);
    on_stop_.emplace(stop_, [this] {
      stop_at_.store(Clock::now().time_since_epoch().count(), std::memory_order_release);
      const std::uint64_t one = 1;
      if (::write(wake_.fd, &one, sizeof one) < 0) {
        // A counter write on our own eventfd does not fail.
      }
    });
  }

  bool stopped() const { return stop_.stop_requested(); }

  // Runs the command once with `message` on its stdin.
  Attempt run(std::string_view message, unsigned attempt) const {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return {Attempt::kSpawnFailed, errno};
    Fd in_read(p[0]), in_write(p[1]);

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in_read.fd, STDIN_FILENO);  // dup2 clears CLOEXEC
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    for (int sig : {SIGINT, SIGTERM, SIGPIPE, SIGQUIT, SIGHUP}) sigaddset(&defaults, sig);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    // Its own process group: the kill after the grace period reaches what
    // the command started too, and a terminal's ^C reaches sluice only.
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(
        &attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);

    std::string attempt_var = "SLUICE_ATTEMPT=" + std::to_string(attempt);
    std::vector<char*> envp;
    envp.reserve(env_.size() + 2);
    for (const std::string& kv : env_) envp.push_back(const_cast<char*>(kv.c_str()));
    envp.push_back(attempt_var.data());
    envp.push_back(nullptr);
    char sh[] = "sh", dash_c[] = "-c";
    std::vector<char*> argv;
    if (words_.empty()) {
      argv = {sh, dash_c, const_cast<char*>(command_.c_str())};
    } else {
      for (const std::string& w : words_) argv.push_back(const_cast<char*>(w.c_str()));
    }
    argv.push_back(nullptr);

    pid_t pid = -1;
    int err = words_.empty()
                  ? ::posix_spawn(&pid, "/bin/sh", &fa, &attr, argv.data(), envp.data())
                  : ::posix_spawnp(&pid, words_[0].c_str(), &fa, &attr, argv.data(), envp.data());
    if (err == ENOEXEC && !words_.empty()) {
      // An executable file without a #! line: the shell runs it as a script
      // (as sh -c CMD would have).
      std::vector<char*> sh_argv = {sh, dash_c, const_cast<char*>(command_.c_str()), nullptr};
      err = ::posix_spawn(&pid, "/bin/sh", &fa, &attr, sh_argv.data(), envp.data());
    }
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (err != 0) {
      Attempt failed{Attempt::kSpawnFailed, err};
      if (!words_.empty()) failed.program = words_[0];
      return failed;
    }
    in_read.reset();
    // glibc 2.36's <sys/pidfd.h> lacks extern "C": the system call directly.
    Fd child(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
    if (child.fd < 0) {  // cannot happen on Linux >= 5.3; do not leave the child behind
      const int e = errno;
      ::kill(pid, SIGKILL);
      reap(pid);
      return {Attempt::kSpawnFailed, e};
    }

    // Feed stdin without blocking: a command may exit (or be killed) before
    // it reads everything, or never read at all.
    ::fcntl(in_write.fd, F_SETFL, O_NONBLOCK);
    std::size_t off = 0;
    bool exited = false;
    while (in_write.fd >= 0 && !exited) {
      if (off == message.size()) {
        in_write.reset();  // EOF for the command
        break;
      }
      pollfd fds[3] = {{in_write.fd, POLLOUT, 0}, {child.fd, POLLIN, 0}, {wake_.fd, POLLIN, 0}};
      const int timeout = wait_ms();
      if (timeout >= 0) fds[2].fd = -1;  // stop seen: now the grace period's clock counts
      if (timeout == 0) return kill_and_reap(pid);
      if (::poll(fds, 3, poll_ms(timeout)) < 0 && errno != EINTR) break;
      if (fds[1].revents != 0) exited = true;
      if ((fds[0].revents & (POLLERR | POLLHUP)) != 0) break;  // the command closed its stdin
      if ((fds[0].revents & POLLOUT) != 0) {
        const ssize_t n = ::write(in_write.fd, message.data() + off, message.size() - off);
        if (n > 0) off += static_cast<std::size_t>(n);
        if (n < 0 && errno != EAGAIN && errno != EINTR) break;  // EPIPE: it stopped reading
      }
    }
    in_write.reset();
    while (!exited) {
      pollfd fds[2] = {{child.fd, POLLIN, 0}, {wake_.fd, POLLIN, 0}};
      const int timeout = wait_ms();
      if (timeout >= 0) fds[1].fd = -1;
      if (timeout == 0) return kill_and_reap(pid);
      if (::poll(fds, 2, poll_ms(timeout)) < 0 && errno != EINTR) break;
      if (fds[0].revents != 0) exited = true;
    }
    return reap(pid);
  }

 private:
  // poll()'s timeout for a wait of `ms`: with no wake_ (no descriptor was
  // free for it), in slices, so the stop still starts the grace period.
  int poll_ms(int ms) const { return wake_.fd >= 0 ? ms : detail::StopFd::sliced(ms); }
  // -1: no stop yet (wait for ever); else ms left of the grace period.
  int wait_ms() const {
    const auto at = stop_at_.load(std::memory_order_acquire);
    if (at == 0) return -1;
    const auto end =
        Clock::time_point(Clock::duration(at)) + std::chrono::ceil<Clock::duration>(grace_);
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(end - Clock::now()).count();
    return static_cast<int>(std::clamp<std::int64_t>(left, 0, 1 << 30));
  }
  static Attempt kill_and_reap(pid_t pid) {
    ::kill(-pid, SIGKILL);  // the group: the shell and whatever it started
    reap(pid);
    return {Attempt::kKilled, SIGKILL};
  }
  static Attempt reap(pid_t pid) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFSIGNALED(status)) return {Attempt::kSignaled, WTERMSIG(status)};
    return {Attempt::kExited, WEXITSTATUS(status)};
  }

  const std::string command_;
  std::vector<std::string> words_;  // a plain command, run without the shell; else empty
  const std::chrono::duration<double> grace_;
  std::vector<std::string> env_;
  const std::stop_token stop_;
  Fd wake_;                             // readable once the stop is requested
  std::atomic<Clock::rep> stop_at_{0};  // steady clock at the stop; 0: none yet
  std::optional<std::stop_callback<std::function<void()>>> on_stop_;
};

// What became of the messages handed out: the source waits on it before
// acknowledging a batch.
//
// Thread safety: every member may be called from any thread.
class Tracker {
 public:
  // A message is finished: acked-ok or dead-lettered.
  void finished() { complete(std::nullopt); }
  // A message is not finished (interrupted): nothing more may be acknowledged.
  void unfinished() { complete(Status(StatusCode::kCancelled)); }
  // A message could not be processed at all: stop, exit `rc`.
  void fatal(Status s, int rc) {
    {
      std::lock_guard lk(mu_);
      if (rc_ == 0) rc_ = rc;
    }
    complete(std::move(s));
  }
  // Waits until `n` messages are complete or one failed; true if all n are
  // finished.
  bool wait_finished(std::uint64_t n) {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return completed_ >= n || failed_; });
    return !failed_;
  }
  bool failed() {
    std::lock_guard lk(mu_);
    return failed_;
  }
  // The first fatal error and its exit status (0 if none).
  std::pair<Status, int> fatal_error() {
    std::lock_guard lk(mu_);
    return {error_, rc_};
  }

 private:
  void complete(std::optional<Status> failure) {
    std::lock_guard lk(mu_);
    ++completed_;
    if (failure) {
      failed_ = true;
      if (error_.ok() && failure->code() != StatusCode::kCancelled) error_ = std::move(*failure);
    }
    cv_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::uint64_t completed_ = 0;
  bool failed_ = false;
  Status error_;
  int rc_ = 0;
};

}  // namespace

int run_exec(Globals& g, const ExecArgs& a) {
  const std::string dlq = a.dead_letter.empty() ? a.name + ".dead" : a.dead_letter;
  if (Status s = validate_queue_name(dlq); !s.ok()) {
    return fail("get", "dead-letter " + queue_label(dlq), s);
  }
  if (dlq == a.name) {
    return fail("get", queue_label(a.name),
                {StatusCode::kInvalidArgument, "--dead-letter must name another queue"});
  }
  // Shared: a stat of --metrics still in progress at the end holds it (and
  // finishes alone, StatSampler).
  std::shared_ptr<QueueStore> store = open_store(g, "get", &g.rc);
  if (!store) return g.rc;
  if (a.start && !g.quiet) note_kept_position(*store, a.name, a.channel);
  std::signal(SIGPIPE, SIG_IGN);  // a command that does not read its stdin is not our death
  const std::stop_token stop = stop_on_signals();
  Context ctx(stop);
  if (a.timeout >= 0) ctx = with_timeout(std::chrono::duration<double>(a.timeout), stop);
  Reconnect reconnect("sluice get: " + queue_label(a.name),
                      std::chrono::duration<double>(a.reconnect));
  const auto take_the_role = [&] {
    return take_role(g.quiet, "get", a.no_wait, ctx, [&](const Context& c) {
      return store->reader(a.name, a.channel, c, reader_options(a));
    });
  };
  auto r = reconnect.retry(ctx, take_the_role);
  // An outage that outlasted --timeout (or a signal) ends as they do.
  if (r.code() == StatusCode::kUnavailable && ctx.err() != StatusCode::kOk) r = Status(ctx.err());
  if (!r.ok()) return fail_role("get", queue_label(a.name), r.status(), a.no_wait);
  QueueReader& reader = **r;
  // Acknowledges what was got so far, through an outage (--reconnect).
  const auto ack = [&] { return reconnect.retry(ctx, [&] { return reader.ack(); }); };
  const std::size_t batch = a.batch != 0 ? a.batch : std::max<std::size_t>(32, 4 * a.parallel);
  CommandMetrics metrics;
  metrics.command = "get";
  metrics.queue = a.name;
  metrics.exec = true;
  metrics.stat = [store, name = a.name] { return store->stat(name); };
  auto server = serve_metrics(a.metrics, "get", metrics, &g.rc);
  if (!a.metrics.empty() && !server) return g.rc;

  Runner runner(a, stop);
  Tracker tracker;
  std::mutex dlq_mu;  // one dead-letter writer at a time

  // Moves a message to the dead-letter queue (created with NAME's bound if
  // missing). The writer role is taken per message and let go at once, so
  // other readers of NAME may dead-letter too.
  // The dead-letter queue is made like NAME: its bound and kind (a Streams
  // topic's dead letters in a Streams topic: a Redis Cluster holds no other
  // kind), without NAME's max_age (dead letters wait for someone to look).
  auto dead_letter_once = [&](std::string_view msg) -> Status {
    auto w = store->writer(dlq, Context(stop));
    if (w.status().code() == StatusCode::kNotFound) {
      auto info = store->stat(a.name);
      if (!info.ok()) return info.status();
      const QueueSpec spec{
          .bound = info->bound,
          .kind = info->kind == "stream" ? QueueKind::kStream : QueueKind::kDefault};
      if (Status s = store->create(dlq, spec); !s.ok() && s.code() != StatusCode::kAlreadyExists) {
        return s;
      }
      w = store->writer(dlq, Context(stop));
    }
    if (!w.ok()) return w.status();
    const std::string_view one[] = {msg};
    return (*w)->put(one, Context(stop));
  };
  auto dead_letter = [&](std::string_view msg) -> Status {
    std::lock_guard lk(dlq_mu);
    Reconnect outage("sluice get: " + queue_label(dlq), std::chrono::duration<double>(a.reconnect));
    return outage.retry(Context(stop), [&] { return dead_letter_once(msg); });
  };

  // One message: attempts, then the dead-letter queue. Reports to the
  // tracker exactly once.
  auto attempts = [&](const std::string& msg) -> bool {
    Attempt last;
    for (unsigned attempt = 1; attempt <= a.retries + 1; ++attempt) {
      if (runner.stopped()) {
        tracker.unfinished();  // not started again after a stop
        return false;
      }
      last = runner.run(msg, attempt);
      if (last.kind == Attempt::kSpawnFailed) {
        tracker.fatal({StatusCode::kInternal, last.what()},
                      last.code == ENOENT ? kExitNotFound : kExitCannotRun);
        return false;
      }
      if (last.kind == Attempt::kExited && last.code == 0) {
        metrics.runs_ok.fetch_add(1, std::memory_order_relaxed);
        tracker.finished();
        return true;
      }
      metrics.runs_failed.fetch_add(1, std::memory_order_relaxed);
      if (runner.stopped()) {  // it may have failed because of the stop: not its fault
        tracker.unfinished();
        return false;
      }
      if (stdout_gone()) {  // as a plain get whose reader closed stdout: stop, exit 7
        tracker.fatal({StatusCode::kIOError, "stdout was closed by its reader (" + last.what() +
                                                 "); the message was not done"},
                      kExitIO);
        return false;
      }
      if (last.kind == Attempt::kExited &&
          (last.code == kExitNotFound || last.code == kExitCannotRun)) {
        tracker.fatal({StatusCode::kInternal,
                       "the shell could not run the command (" + last.what() +
                           (last.code == kExitNotFound ? ": not found)" : ": not executable)")},
                      last.code);
        return false;
      }
    }
    if (Status s = dead_letter(msg); !s.ok()) {
      if (s.code() == StatusCode::kCancelled) {
        tracker.unfinished();
      } else {
        tracker.fatal({s.code(), "moving a message to " + queue_label(dlq) + ": " +
                                     std::string(s.message().empty() ? status_code_name(s.code())
                                                                     : s.message())},
                      exit_code_for(s));
      }
      return false;
    }
    // One string, one write: lines of concurrent workers do not interleave.
    std::cerr << ("sluice get: " + queue_label(a.name) + ": a message failed " +
                  std::to_string(a.retries + 1) + (a.retries == 0 ? " time" : " times") +
                  " (last: " + last.what() + "); moved to " + queue_label(dlq) + "\n");
    metrics.dead_lettered.fetch_add(1, std::memory_order_relaxed);
    tracker.finished();
    return true;
  };
  auto process = [&](std::string&& msg, const Context&) -> Result<bool> {
    try {
      return attempts(msg);
    } catch (const std::exception& e) {  // e.g. bad_alloc: the source must not wait for ever
      tracker.fatal({StatusCode::kInternal, e.what()}, kExitOther);
      return false;
    }
  };

  // The source: hands out the messages of one batch, then (once each is
  // finished) acknowledges it and reads the next.
  std::vector<std::string> msgs;
  std::size_t next = 0;
  std::uint64_t taken = 0, acked = 0;
  std::uint64_t batch_bytes = 0;  // of msgs, counted before they are moved out
  std::uint64_t damage_seen = 0;  // damaged messages the reader passed over, said on stderr
  auto count_acked = [&] {
    metrics.messages.fetch_add(taken - acked, std::memory_order_relaxed);
    metrics.bytes.fetch_add(batch_bytes, std::memory_order_relaxed);
    acked = taken;
  };
  Status end;  // why the source stopped: kClosed, kDeadlineExceeded, ...
  auto source = [&]() -> std::optional<std::string> {
    if (next == msgs.size()) {
      if (!tracker.wait_finished(taken)) return std::nullopt;
      if (taken > acked) {
        if (Status s = ack(); !s.ok()) {
          tracker.fatal(s, exit_code_for(s));
          return std::nullopt;
        }
        count_acked();
      }
      if (stop.stop_requested() || (a.count != 0 && taken >= a.count)) return std::nullopt;
      msgs.clear();
      next = 0;
      std::size_t want = batch;
      if (a.count != 0)
        want = static_cast<std::size_t>(std::min<std::uint64_t>(want, a.count - taken));
      Status got = reconnect.get(reader, msgs, want, ctx);
      note_damage_skipped(a.name, reader, damage_seen);
      if (!got.ok()) {
        end = std::move(got);
        return std::nullopt;
      }
      batch_bytes = 0;
      for (const std::string& m : msgs) batch_bytes += m.size();
    }
    if (stop.stop_requested()) return std::nullopt;
    ++taken;
    return std::move(msgs[next++]);
  };

  PipelineOptions po;
  po.width = a.parallel;
  po.ordering = Ordering::kUnordered;  // completion order; acks wait for whole batches anyway
  auto ran = run_pipeline(
      source, process, [](Result<bool>&&) { return Status::Ok(); }, po);
  if (!ran.ok()) return fail("get", queue_label(a.name), ran.status());  // not expected

  // Every message taken is complete now (the workers are joined): the last
  // batch may be acknowledged if all of it was taken and finished.
  if (next == msgs.size() && !tracker.failed() && taken > acked) {
    if (Status s = ack(); !s.ok()) return fail("get", queue_label(a.name), s);
    count_acked();
  }
  if (auto [err, rc] = tracker.fatal_error(); rc != 0) {
    std::cerr << "sluice get: " << queue_label(a.name) << ": --exec '" << a.command
              << "': " << err.message() << "; " << acked
              << " messages acknowledged, the rest will be delivered again\n";
    return rc;
  }
  if (stop.stop_requested()) {
    if (acked < taken) {
      std::cerr << "sluice get: " << queue_label(a.name) << ": interrupted; " << (taken - acked)
                << " messages not acknowledged will be delivered again\n";
    }
    return kExitInterrupted;
  }
  if (end.code() == StatusCode::kDeadlineExceeded) return kExitTimeout;
  if (end.ok() || end.code() == StatusCode::kClosed) return kExitOk;
  return fail("get", queue_label(a.name), end);
}

}  // namespace sluice::cli
