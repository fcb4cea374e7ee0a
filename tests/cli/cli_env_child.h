// Child: the sluice binary run as a child process (fork + exec, pipes for
// stdin/stdout/stderr), with an environment of the test's choosing. For the
// CLI tests that need a controlled environment (cli_redis_test).
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

extern char** environ;  // NOLINT

namespace sluice::testutil {

struct Outcome {
  int rc = -1;
  std::string out;
  std::string err;
};

class Child {
 public:
  // Runs argv[0] with argv; `env` is set over this process's environment
  // (an empty value unsets the variable).
  Child(std::vector<std::string> argv, const std::map<std::string, std::string>& env = {}) {
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

  void write_stdin(const std::string& data) {
    std::size_t off = 0;
    while (off < data.size()) {
      const ssize_t n = ::write(in_, data.data() + off, data.size() - off);
      ASSERT_GT(n, 0) << std::strerror(errno);
      off += static_cast<std::size_t>(n);
    }
  }
  void close_stdin() {
    close(in_);
    in_ = -1;
  }
  // Reads stdout until it holds `lines` newlines (or EOF); returns all read.
  std::string read_lines(std::size_t lines) {
    while (static_cast<std::size_t>(std::count(out.begin(), out.end(), '\n')) < lines) {
      if (!read_some(out_, out)) break;
    }
    return out;
  }
  // Reads stderr until it holds `needle` (or EOF); returns all read so far.
  std::string read_err_until(const std::string& needle) {
    while (err.find(needle) == std::string::npos) {
      if (!read_some(err_, err)) break;
    }
    return err;
  }
  void kill_now() { kill(pid_, SIGKILL); }
  // Reads stdout and stderr to EOF, then reaps the child.
  Outcome finish() {
    Outcome r;
    pollfd fds[2] = {{out_, POLLIN, 0}, {err_, POLLIN, 0}};
    bool open_out = true, open_err = true;
    while (open_out || open_err) {
      if (poll(fds, 2, 60000) <= 0) break;
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
  static bool read_some(int fd, std::string& to) {
    char buf[4096];
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

}  // namespace sluice::testutil
