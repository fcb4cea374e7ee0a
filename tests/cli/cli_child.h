// A program (usually the sluice binary) run as a child process: fork + exec,
// pipes for stdin, stdout and stderr, an environment of the test's choosing,
// signals, binary-safe reads. For the end-to-end tests of the real binary.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#ifndef SLUICE_CLI
#error "SLUICE_CLI: the path of the sluice binary (tests/CMakeLists.txt)"
#endif

extern char** environ;  // NOLINT

namespace sluice::testutil {

struct Outcome {
  int rc = -1;  // exit status, or 128 + signal
  std::string out;
  std::string err;
};

// A running `argv[0] argv[1...]`.
class Child {
 public:
  // `env` is set over this process's environment (an empty value unsets the
  // variable).
  explicit Child(std::vector<std::string> argv,
                 const std::map<std::string, std::string>& env = {}) {
    ::signal(SIGPIPE, SIG_IGN);  // a child that exits early: EPIPE, not our death
    std::vector<std::string> envs;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string kv(*e);
      if (!env.contains(kv.substr(0, kv.find('=')))) envs.push_back(kv);
    }
    for (const auto& [k, v] : env) {
      if (!v.empty()) envs.push_back(k + "=" + v);
    }
    int in[2], po[2], pe[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(po, O_CLOEXEC) != 0 || pipe2(pe, O_CLOEXEC) != 0) {
      ADD_FAILURE() << "pipe: " << std::strerror(errno);
      return;
    }
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    std::vector<char*> envp;
    for (std::string& e : envs) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(po[1], 1);
      dup2(pe[1], 2);
      execve(args[0], args.data(), envp.data());
      _exit(127);
    }
    close(in[0]);
    close(po[1]);
    close(pe[1]);
    in_ = in[1];
    out_ = po[0];
    err_ = pe[0];
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      wait();
    }
    for (int fd : {in_, out_, err_}) {
      if (fd >= 0) close(fd);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // Writes all of data (a child that stops reading must exit for this to end).
  void write_stdin(const std::string& data) {
    std::size_t off = 0;
    while (off < data.size()) {
      const ssize_t n = ::write(in_, data.data() + off, data.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // EPIPE: the child exited early; its status tells why
      off += static_cast<std::size_t>(n);
    }
  }
  void close_stdin() {
    if (in_ >= 0) close(in_);
    in_ = -1;
  }
  void signal(int sig) { kill(pid_, sig); }
  // As finish(), but nothing is read before the child has exited: what it
  // wrote to stdout stays in the pipe, never taken while it runs (its
  // output must fit in the pipes, 64 KiB each).
  Outcome finish_unread() {
    Outcome r;
    r.rc = wait();
    while (read_some(out_, out)) {
    }
    while (read_some(err_, err)) {
    }
    r.out = out;
    r.err = err;
    return r;
  }
  pid_t pid() const { return pid_; }
  void kill_now() { kill(pid_, SIGKILL); }

  // Reads stdout until it holds `lines` newlines (or EOF, or kQuiet without
  // a byte: a hung child fails the test instead of hanging it); returns all read.
  std::string read_lines(std::size_t lines) {
    while (static_cast<std::size_t>(std::count(out.begin(), out.end(), '\n')) < lines) {
      if (!readable(out_) || !read_some(out_, out)) break;
    }
    return out;
  }
  // Reads stdout a byte at a time up to and including the next newline (a
  // reader that takes exactly one line out of the pipe); returns the line.
  std::string read_one_line() {
    std::string line;
    char c = 0;
    while (::read(out_, &c, 1) == 1) {
      line += c;
      if (c == '\n') break;
    }
    return line;
  }
  // Reads stderr until it holds `needle` (or EOF); returns all read so far.
  std::string read_err_until(std::string_view needle) {
    while (err.find(needle) == std::string::npos) {
      if (!readable(err_) || !read_some(err_, err)) break;
    }
    return err;
  }

  // Reads stdout and stderr to EOF, then reaps the child.
  Outcome finish() {
    Outcome r;
    pollfd fds[2] = {{out_, POLLIN, 0}, {err_, POLLIN, 0}};
    bool open_out = true, open_err = true;
    while (open_out || open_err) {
      if (poll(fds, 2, static_cast<int>(kQuiet.count())) <= 0) {
        kill(pid_, SIGKILL);  // hung: reap it (status 137) rather than wait for ever
        break;
      }
      if (open_out && (fds[0].revents & (POLLIN | POLLHUP)) != 0) {
        open_out = read_some(out_, out);
        if (!open_out) fds[0].fd = -1;
      }
      if (open_err && (fds[1].revents & (POLLIN | POLLHUP)) != 0) {
        open_err = read_some(err_, err);
        if (!open_err) fds[1].fd = -1;
      }
    }
    r.rc = wait();
    r.out = out;
    r.err = err;
    return r;
  }

  std::string out, err;

 private:
  // How long a read waits for the child to write anything.
  static constexpr std::chrono::milliseconds kQuiet{120000};
  static bool readable(int fd) {
    pollfd p{fd, POLLIN, 0};
    int n = 0;
    while ((n = poll(&p, 1, static_cast<int>(kQuiet.count()))) < 0 && errno == EINTR) {
    }
    return n > 0;
  }
  static bool read_some(int fd, std::string& to) {
    char buf[1 << 16];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return false;
    to.append(buf, static_cast<std::size_t>(n));
    return true;
  }
  int wait() {
    int status = 0;
    if (waitpid(pid_, &status, 0) != pid_) return -1;
    pid_ = -1;
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
  }

  pid_t pid_ = -1;
  int in_ = -1, out_ = -1, err_ = -1;
};

// A running `sluice --store <dir> args...`.
class CliChild : public Child {
 public:
  CliChild(const std::string& store, std::vector<std::string> args)
      : Child(with_store(store, std::move(args))) {}

 private:
  static std::vector<std::string> with_store(const std::string& store,
                                             std::vector<std::string> args) {
    args.insert(args.begin(), {SLUICE_CLI, "--store", store});
    return args;
  }
};

// The environment with every variable that picks a store unset (a test sets
// what it needs); the default directory store lands in `home`.
inline std::map<std::string, std::string> no_store_env(const std::string& home) {
  return {{"SLUICE_STORE", ""},   {"SLUICE_REDIS", ""},   {"REDIS_SERVER", ""},
          {"REDIS_PORT", ""},     {"REDIS_DB", ""},       {"PRESSURE_PREFIX", ""},
          {"REDIS_USERNAME", ""}, {"REDIS_PASSWORD", ""}, {"REDIS_URL", ""},
          {"XDG_DATA_HOME", ""},  {"HOME", home}};
}

// Runs `sluice --store store args...` with `input` on stdin, to the end.
// The state (R, S, D, Z, ...) of the main thread of `pid` ('?' if gone).
inline char main_thread_state(pid_t pid) {
  const std::string p = std::to_string(pid);
  std::ifstream in("/proc/" + p + "/task/" + p + "/stat");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto end = all.rfind(')');
  return end == std::string::npos || end + 2 >= all.size() ? '?' : all[end + 2];
}

inline Outcome run_cli(const std::string& store, std::vector<std::string> args,
                       const std::string& input = "") {
  CliChild c(store, std::move(args));
  // A child writing much output while we write much input: write from
  // here, the pipe buffers the rest (tests keep one side small).
  c.write_stdin(input);
  c.close_stdin();
  return c.finish();
}

}  // namespace sluice::testutil
