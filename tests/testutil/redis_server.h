// RedisServer: a real redis-server on a free loopback port, started for one
// test and stopped with it (as hiredis's test.sh does). Also a tiny raw
// client (RawRedis) for inspecting keys the way another tool would.
#pragma once

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "sluice/redis/redis_options.h"

namespace sluice::testutil {

struct RawReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using RawReply = std::unique_ptr<redisReply, RawReplyDeleter>;

// One blocking connection; throws on connection errors (tests want to fail
// loudly when the server they started is not there).
class RawRedis {
 public:
  explicit RawRedis(int port, int timeout_ms = 10000) {
    timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    ctx_ = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (ctx_ == nullptr || ctx_->err != 0) {
      std::string why = ctx_ != nullptr ? ctx_->errstr : "out of memory";
      if (ctx_ != nullptr) redisFree(ctx_);
      throw std::runtime_error("cannot connect to redis on port " + std::to_string(port) + ": " +
                               why);
    }
    redisSetTimeout(ctx_, tv);
  }
  ~RawRedis() { redisFree(ctx_); }
  RawRedis(const RawRedis&) = delete;
  RawRedis& operator=(const RawRedis&) = delete;

  RawReply cmd(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    void* r = redisCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data());
    if (r == nullptr)
      throw std::runtime_error(std::string("redis command failed: ") + ctx_->errstr);
    return RawReply(static_cast<redisReply*>(r));
  }
  long long integer(const std::vector<std::string>& args) {
    auto r = cmd(args);
    if (r->type != REDIS_REPLY_INTEGER)
      throw std::runtime_error("expected an integer from " + args[0]);
    return r->integer;
  }
  // GET; "<nil>" for a missing key.
  std::string get(const std::string& key) {
    auto r = cmd({"GET", key});
    return r->type == REDIS_REPLY_STRING ? std::string(r->str, r->len) : std::string("<nil>");
  }
  std::vector<std::string> lrange(const std::string& key) {
    auto r = cmd({"LRANGE", key, "0", "-1"});
    std::vector<std::string> out;
    for (std::size_t i = 0; i < r->elements; ++i) {
      out.emplace_back(r->element[i]->str, r->element[i]->len);
    }
    return out;
  }
  // Clients blocked in a command on the server (e.g. a waiting get).
  long long blocked_clients() {
    auto r = cmd({"INFO", "clients"});
    const std::string info(r->str, r->len);
    return std::stoll(info.substr(info.find("blocked_clients:") + 16));
  }
  // Whether a client is blocked (flags b) in `command` (lower case, as
  // CLIENT LIST has it: "xreadgroup", "blpop").
  bool blocked_in(std::string_view command) {
    auto r = cmd({"CLIENT", "LIST"});
    const std::string list(r->str, r->len);
    const std::string want = "cmd=" + std::string(command) + " ";
    for (std::size_t at = 0; at < list.size();) {
      const std::size_t end = std::min(list.find('\n', at), list.size());
      const std::string_view line(list.data() + at, end - at);
      if (line.find(" flags=b ") != std::string_view::npos &&
          line.find(want) != std::string_view::npos) {
        return true;
      }
      at = end + 1;
    }
    return false;
  }
  // Every key under `pattern` with its type and value, one line each, sorted.
  std::vector<std::string> dump(const std::string& pattern, const std::string& strip) {
    auto keys = cmd({"KEYS", pattern});
    std::vector<std::string> out;
    for (std::size_t i = 0; i < keys->elements; ++i) {
      std::string k(keys->element[i]->str, keys->element[i]->len);
      auto type = cmd({"TYPE", k});
      std::string line = k.substr(strip.size()) + " " + type->str + " ";
      if (std::string(type->str) == "list") {
        for (const auto& v : lrange(k)) line += "[" + v + "]";
      } else {
        line += get(k);
      }
      out.push_back(line);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  redisContext* ctx_ = nullptr;
};

class RedisServer {
 public:
  // `persistent`: append-only file with fsync always, so a restart keeps data.
  // `config`: extra redis.conf lines, e.g. "requirepass pw" or
  // "user alice on >pw ~* &* +@all".
  explicit RedisServer(bool persistent = false, const std::vector<std::string>& config = {})
      : persistent_(persistent) {
    dir_ = std::filesystem::temp_directory_path() /
           ("sluice-redis-" + std::to_string(getpid()) + "-" +
            std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    std::filesystem::create_directories(dir_);
    {
      std::ofstream conf(dir_ / "extra.conf");
      for (const auto& line : config) conf << line << "\n";
    }
    // A cluster node also listens on port + 10000 (the cluster bus), which
    // must exist and be free: the kernel's ephemeral ports run past 55535.
    const bool cluster =
        std::find(config.begin(), config.end(), "cluster-enabled yes") != config.end();
    for (int attempt = 0; attempt < 5; ++attempt) {
      port_ = free_port();
      while (cluster && (port_ > 65535 - 10000 || !port_free(port_ + 10000))) port_ = free_port();
      if (start_once()) return;
    }
    throw std::runtime_error(
        "could not start redis-server (is it installed? apt-get install "
        "redis-server; see its log in " +
        (dir_ / "redis.log").string() + ")");
  }
  ~RedisServer() {
    stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  RedisOptions options() const {
    RedisOptions o;
    o.port = port_;
    return o;
  }

  // SIGTERM and wait (a persistent server flushes its file).
  void stop() { signal_and_wait(SIGTERM); }
  void kill() { signal_and_wait(SIGKILL); }
  // Start again on the same port.
  void restart() {
    stop();
    if (!start_once()) throw std::runtime_error("redis-server did not restart");
  }
  bool running() const { return pid_ > 0; }
  // Freeze and thaw the server process (a hung server).
  void pause() { ::kill(pid_, SIGSTOP); }
  void resume() { ::kill(pid_, SIGCONT); }

 private:
  // Whether `port` on loopback can be bound now.
  static bool port_free(int port) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd);
    return ok;
  }

  static int free_port() {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof addr;
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ::close(fd);
      throw std::runtime_error("no free port");
    }
    ::close(fd);
    return ntohs(addr.sin_port);
  }

  bool start_once() {
    // A config file must come first; command-line options then override it.
    std::vector<std::string> args = {"redis-server", (dir_ / "extra.conf").string(),
                                     "--port",       std::to_string(port_),
                                     "--bind",       "127.0.0.1",
                                     "--save",       "",
                                     "--dir",        dir_.string(),
                                     "--loglevel",   "warning",
                                     "--logfile",    (dir_ / "redis.log").string()};
    if (persistent_) {
      args.insert(args.end(), {"--appendonly", "yes", "--appendfsync", "always"});
    } else {
      args.insert(args.end(), {"--appendonly", "no"});
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    // The server dies with the test (a crashed test once left one running,
    // and ctest waited on the output pipe it had inherited), and it gets
    // /dev/null for its standard streams (it logs to its logfile).
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) return false;
    if (pid == 0) {  // only async-signal-safe calls until exec
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      const int null = ::open("/dev/null", O_RDWR);
      if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
      }
      execvp("redis-server", argv.data());
      _exit(127);
    }
    pid_ = pid;
    // Wait for it to answer (an external process's start-up, polled).
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < give_up) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {  // exited: port taken?
        pid_ = 0;
        return false;
      }
      try {
        RawRedis probe(port_, 200);
        auto r = probe.cmd({"PING"});
        if (r->type == REDIS_REPLY_STATUS) {
          // Ours, not another test's server that took the port meanwhile (ours
          // then exits: the next look sees it).
          auto info = probe.cmd({"INFO", "server"});
          const std::string mine = "process_id:" + std::to_string(pid_) + "\r";
          if (info->type == REDIS_REPLY_STRING &&
              std::string_view(info->str, info->len).find(mine) != std::string_view::npos) {
            return true;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          continue;
        }
        // Up, and asking for a password (requirepass, ACL). Not LOADING.
        if (r->type == REDIS_REPLY_ERROR && std::string_view(r->str).starts_with("NOAUTH")) {
          return true;
        }
      } catch (const std::exception&) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    signal_and_wait(SIGKILL);
    return false;
  }

  void signal_and_wait(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    int st = 0;
    waitpid(pid_, &st, 0);
    pid_ = 0;
  }

  bool persistent_;
  std::filesystem::path dir_;
  int port_ = 0;
  pid_t pid_ = 0;
};

}  // namespace sluice::testutil
