// sluice: named, bounded, durable queues from the shell (docs/cli.md).
#include <fcntl.h>
#include <pthread.h>

#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <streambuf>
#include <thread>

#include "cli.h"

namespace sluice::cli {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// %XX for everything but unreserved characters (RFC 3986), for a URL's user
// and password.
std::string percent_encode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) != 0 || ch == '-' || ch == '.' || ch == '_' || ch == '~') {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace

std::string store_location(const Globals& g) {
  if (!g.store.empty()) return g.store;
  if (const char* v = env("SLUICE_STORE")) return v;
  if (const char* v = env("SLUICE_REDIS")) return v;
  const char* host = env("REDIS_SERVER");
  const char* port = env("REDIS_PORT");
  const char* db = env("REDIS_DB");
  if (host != nullptr || port != nullptr || db != nullptr) {
    // The pressure protocol's own settings, with its defaults.
    std::string url = "redis://";
    const char* user = env("REDIS_USERNAME");
    const char* pass = env("REDIS_PASSWORD");
    if (pass != nullptr) {
      url += percent_encode(user != nullptr ? user : "") + ":" + percent_encode(pass) + "@";
    }
    url += std::string(host != nullptr ? host : "127.0.0.1") + ":" +
           (port != nullptr ? port : "6379") + "/" + (db != nullptr ? db : "0");
    return url;
  }
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::string(xdg) + "/sluice";
  }
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : ".") + "/.local/share/sluice";
}

std::string store_label(const Globals& g) {
  std::string loc = store_location(g);
  // redis://[user]:password@host: hide the password.
  const auto scheme = loc.find("://");
  const auto at = loc.rfind('@');
  if (scheme != std::string::npos && at != std::string::npos && at > scheme) {
    const auto colon = loc.find(':', scheme + 3);
    const auto from = colon < at ? colon + 1 : scheme + 3;  // redis://PASSWORD@host too
    loc.replace(from, at - from, "***");
  }
  return loc;
}

std::unique_ptr<QueueStore> open_store(const Globals& g, std::string_view cmd, int* rc) {
  const std::string loc = store_location(g);
  StoreOptions options;
  if (const char* prefix = env("PRESSURE_PREFIX")) options.redis_prefix = prefix;
  if (g.no_sync) options.durability = StoreDurability::kNoSync;
  // Only create makes the embedded store's directory: a mistyped --store
  // given to ls or get leaves nothing behind.
  options.create_if_missing = cmd == "create";
  auto s = QueueStore::open(loc, options);
  if (!s.ok()) {
    *rc = fail(cmd, "store " + store_label(g), s.status());
    return nullptr;
  }
  return std::move(*s);
}

void note_damage_skipped(std::string_view queue, const QueueReader& reader, std::uint64_t& seen) {
  const std::uint64_t now = reader.skipped_damaged();
  if (now <= seen) return;
  const std::uint64_t n = now - seen;
  seen = now;
  std::cerr << "sluice get: " << queue_label(queue) << ": " << n << " damaged message"
            << (n == 1 ? "" : "s") << " skipped (lost; `sluice log verify " << queue
            << "` says where)\n";
}

namespace {

// Whether an I/O error's message is about the command's stdout (as get,
// peek and get --exec say it), not the store (a queue may be named stdout).
bool about_stdout(std::string_view msg) {
  for (const std::string_view m :
       {"write stdout", "poll stdout", "stdout is closed", "stdout was closed"}) {
    if (msg.find(m) != std::string_view::npos) return true;
  }
  return false;
}

// "sluice <cmd>: <what>: <message> (<hint>)"; the exit status for s.
int report(std::string_view cmd, std::string_view what, const Status& s, const std::string& hint) {
  const std::string msg =
      s.message().empty() ? std::string(status_code_name(s.code())) : std::string(s.message());
  // Store messages often name the queue already: say it once.
  const bool named = msg.find(std::string(what)) != std::string::npos;
  std::cerr << "sluice " << cmd << ": " << (named ? "" : std::string(what) + ": ") << msg
            << (hint.empty() ? "" : " (" + hint + ")") << "\n";
  return exit_code_for(s);
}

}  // namespace

int fail_role(std::string_view cmd, std::string_view what, const Status& s, bool no_wait) {
  if (s.code() != StatusCode::kInUse) return fail(cmd, what, s);
  // Without --no-wait, take_role waits until the context ends: a kInUse
  // then is a --timeout that ran out while another process held the role.
  return report(cmd, what, s,
                no_wait ? "another process has it; wait for it, or drop --no-wait to wait your turn"
                        : "another process held it until --timeout ran out; give a longer "
                          "--timeout, or stop that process");
}

int fail(std::string_view cmd, std::string_view what, const Status& s) {
  std::string hint;
  switch (s.code()) {
    case StatusCode::kNotFound:
      // A missing channel of a queue that exists says what to do itself.
      if (s.message().find("has no channel") == std::string_view::npos) {
        hint = "list queues with `sluice ls`, create one with `sluice create NAME`";
      }
      break;
    case StatusCode::kAlreadyExists:
      hint = "pick another name, or `sluice delete NAME` first";
      break;
    case StatusCode::kInUse:
      if (cmd == "delete") {
        hint =
            "stop the process that uses it (or `sluice close NAME` and let it finish), then "
            "delete";
      } else if (cmd == "repair") {
        hint = "stop it, then repair";  // repair never waits: it has no --no-wait
      } else {
        hint = "another process has it; wait for it, or drop --no-wait to wait your turn";
      }
      break;
    case StatusCode::kIOError:
      if (s.message().find(std::strerror(EMFILE)) != std::string_view::npos) {
        hint = "this process is out of file descriptors: raise its limit (ulimit -n)";
      } else if (about_stdout(s.message())) {
        // get's and peek's own output: the store is not where to look.
        hint = "check where stdout goes: open, with free space, its reader still there";
      } else {
        hint = "check free space and permissions of the store (--store, SLUICE_STORE)";
      }
      break;
    case StatusCode::kClosed:
      hint = "the queue takes no more messages; create a new one";
      break;
    case StatusCode::kInvalidArgument:
      if (s.message().find("authentication failed") != std::string_view::npos) {
        hint = "give the password as redis://[USER]:PASSWORD@HOST:PORT, or in REDIS_PASSWORD";
      } else {
        hint = "see `sluice " + std::string(cmd) + " --help`";
      }
      break;
    case StatusCode::kUnavailable:
      hint =
          "store unreachable: check the address given by --redis, SLUICE_REDIS or "
          "REDIS_SERVER/REDIS_PORT";
      break;
    case StatusCode::kCorruption:
      hint = "see `sluice log verify`; `sluice repair NAME` moves the damage aside";
      break;
    default:
      break;
  }
  return report(cmd, what, s, hint);
}

std::stop_token stop_on_signals() {
  static std::stop_source source;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // inherited by threads started later
  std::thread([set] {
    int sig = 0;
    sigwait(&set, &sig);
    source.request_stop();
  }).detach();  // lives until exit: the process ends with main
  return source.get_token();
}

// A stream buffer that takes nothing and notes that something was offered.
class CountingNull final : public std::streambuf {
 public:
  bool wrote() const { return wrote_; }

 protected:
  int_type overflow(int_type c) override {
    wrote_ = wrote_ || !traits_type::eq_int_type(c, traits_type::eof());
    return traits_type::eof();
  }
  std::streamsize xsputn(const char* /*s*/, std::streamsize n) override {
    wrote_ = wrote_ || n > 0;
    return 0;
  }

 private:
  bool wrote_ = false;
};

}  // namespace sluice::cli

int main(int argc, char** argv) {
  using namespace sluice::cli;
  CLI::App app{"sluice: named, bounded, durable queues between processes (docs/cli.md)", "sluice"};
  app.require_subcommand(1);
  app.fallthrough();  // --store may come after the subcommand too
  Globals g;
  // A standard descriptor that is not open would be the store's next file:
  // get would write messages into a lock file (and acknowledge them), errors
  // would go into the topic's LOCK. Hold each with /dev/null; get refuses a
  // closed stdout, put a closed stdin.
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
      if (fd == 0) g.stdin_closed = true;
      if (fd == 1) g.stdout_closed = true;
      const int null_fd = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
      if (null_fd >= 0 && null_fd != fd) {
        ::dup2(null_fd, fd);
        ::close(null_fd);
      }
    }
  }
  // ... and what a command prints through std::cout then is noted, not
  // written into /dev/null as if it had been delivered (never freed:
  // std::cout is flushed after main returns).
  CountingNull* closed_out = nullptr;
  if (g.stdout_closed) {
    closed_out = new CountingNull;
    std::cout.rdbuf(closed_out);
  }
  auto* store = app.add_option("--store", g.store,
                               "store directory (or file:PATH, or redis://HOST:PORT/DB); default "
                               "$SLUICE_STORE, $SLUICE_REDIS, Redis at $REDIS_SERVER:$REDIS_PORT/"
                               "$REDIS_DB if set, else ${XDG_DATA_HOME:-~/.local/share}/sluice");
  app.add_option("--redis", g.store,
                 "Redis store: redis://[[USER]:PASSWORD@]HOST[:PORT][/DB] (the same as --store "
                 "URL; keys under $PRESSURE_PREFIX, default __pressure__)")
      ->excludes(store);
  app.add_flag("-q,--quiet", g.quiet,
               "no progress line on stderr (put and get draw one only when stderr is a terminal)");
  app.add_flag("--no-sync", g.no_sync,
               "embedded store: puts and acknowledgements return once the OS has them, without "
               "fdatasync (survives a crash of sluice, not of the machine); Redis ignores it");
  app.footer(
      "Exit status: 0 ok, 1 other error, 2 usage, 3 unknown queue, 4 queue exists, 5 queue "
      "closed,\n"
      "6 role held elsewhere, 7 I/O error, 8 message too large, 9 timed out, 10 store "
      "unreachable,\n11 damage found (log verify), 126/127 get --exec: command cannot run / "
      "not found, 130 interrupted.");
  add_queue_commands(app, g);
  add_io_commands(app, g);
  add_look_commands(app, g);
  add_log_commands(app, g);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }
  // What went through std::cout (ls, stat, seek, purge, the log commands)
  // may still be in stdio's buffer, whose flush at exit fails silently: a
  // full disk under stdout, or a closed one, is an I/O error, not success.
  std::string why;
  errno = 0;
  if (std::fflush(stdout) != 0 || std::ferror(stdout) != 0) {
    why = errno != 0 ? std::strerror(errno) : "failed";
  } else if (closed_out != nullptr && closed_out->wrote()) {
    why = "stdout is closed";
  }
  if (!why.empty()) {
    std::string cmd;
    for (const CLI::App* a = &app; !a->get_subcommands().empty();) {
      a = a->get_subcommands().front();
      cmd += (cmd.empty() ? "" : " ") + a->get_name();
    }
    std::cerr << "sluice " << cmd << ": write stdout: " << why << " (its output is incomplete)\n";
    if (g.rc == kExitOk) return kExitIO;
  }
  return g.rc;
}
