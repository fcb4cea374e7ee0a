// `sluice get` waiting on an empty Redis queue (a pressure queue, a Streams
// topic) when the server stops answering (stopped with SIGSTOP, as a
// stalled server): SIGTERM must end it within about one Redis timeout, not
// after a string of cleanup calls that each wait for the timeout again, and
// nothing is lost: once the server answers again, a later get delivers a
// message put then (for a pressure queue, after recovering the role the
// stopped get could not give back).
#include <hiredis/hiredis.h>

#include <chrono>
#include <csignal>
#include <map>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cli/cli_child.h"
#include "testutil/redis_server.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

using testutil::Child;
using testutil::Outcome;
using Clock = std::chrono::steady_clock;

// How long get may take to exit after the signal. Its wait (BLMOVE or
// XREADGROUP) ends on the stop by CLIENT UNBLOCK, which on a stopped server
// waits out what is left of the Redis timeout (io_timeout, 5 s) of the wait's
// request; the cleanup after it (giving back the role and what it holds)
// shares that same timeout. So 5 s at most, plus a margin for a loaded
// machine; before, each of four cleanup steps waited the timeout again (25 s).
constexpr std::chrono::milliseconds kExitBound{7500};

std::string redis_url(const testutil::RedisServer& server) {
  return "redis://127.0.0.1:" + std::to_string(server.port()) + "/0";
}

// Whether a client of `server` is blocked in `cmd` (CLIENT LIST's cmd=).
bool blocked_in(const testutil::RedisServer& server, std::string_view cmd) {
  redisContext* c = redisConnect("127.0.0.1", server.port());
  if (c == nullptr) return false;
  bool found = false;
  if (c->err == 0) {
    auto* r = static_cast<redisReply*>(redisCommand(c, "CLIENT LIST"));
    if (r != nullptr && r->type == REDIS_REPLY_STRING) {
      const std::string list(r->str, r->len);
      const std::string want = "cmd=" + std::string(cmd);
      for (std::size_t at = 0, end; at < list.size(); at = end + 1) {
        end = list.find('\n', at);
        if (end == std::string::npos) end = list.size();
        const std::string line = list.substr(at, end - at);
        if (line.find(want) != std::string::npos && line.find("flags=b") != std::string::npos) {
          found = true;
        }
      }
    }
    if (r != nullptr) freeReplyObject(r);
  }
  redisFree(c);
  return found;
}

class CliFrozenRedisGetExitTest : public ::testing::TestWithParam<bool> {
 protected:
  bool stream() const { return GetParam(); }

  // `sluice --redis URL args...` with `input`, to the end.
  Outcome run(std::vector<std::string> args, const std::string& input = "") {
    args.insert(args.begin(), {SLUICE_CLI, "--redis", url_});
    Child c(std::move(args), env_);
    c.write_stdin(input);
    c.close_stdin();
    return c.finish();
  }

  // Creates queue q holding `messages`, starts a get on it, and once that
  // waits on the server, stops the server and sends SIGTERM to the get:
  // what the get did then. Its stdout is read only after the signal, so
  // what it wrote is not taken (and so not acknowledged) before.
  Outcome frozen_get(const std::string& messages) {
    std::vector<std::string> create = {"create", "q"};
    if (stream()) create.emplace_back("--stream");
    EXPECT_EQ(run(create).rc, 0);
    if (!messages.empty()) {
      EXPECT_EQ(run({"put", "q"}, messages).rc, 0);
    }
    // A short visibility timeout: what a stopped Streams reader could not
    // give back is another reader's a second later.
    std::vector<std::string> get = {SLUICE_CLI, "--redis", url_, "get", "q"};
    if (stream()) get.insert(get.end(), {"--visibility", "1"});
    Child waiting(get, env_);
    const std::string_view wait_cmd = stream() ? "xreadgroup" : "blmove";
    for (const auto until = Clock::now() + std::chrono::seconds(30);
         !blocked_in(server_, wait_cmd) && Clock::now() < until;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // between polls
    }
    EXPECT_TRUE(blocked_in(server_, wait_cmd)) << "get never waited on the queue";

    server_.pause();
    const auto t0 = Clock::now();
    waiting.signal(SIGTERM);
    Outcome o = waiting.finish();
    const auto took = Clock::now() - t0;
    server_.resume();  // only now: the get had to end with Redis still stopped
    EXPECT_EQ(o.rc, 130) << o.err;
    EXPECT_LT(took, kExitBound) << "the exit waited for the stopped Redis again and again: "
                                << std::chrono::duration<double>(took).count() << " s\n"
                                << o.err;
    return o;
  }

  testutil::RedisServer server_;
  const std::string url_ = redis_url(server_);
  const std::map<std::string, std::string> env_ =
      testutil::no_store_env(testutil::test_dir("cli-frozen-get").string());
};

TEST_P(CliFrozenRedisGetExitTest, SignalEndsAWaitingGetPromptlyAndLosesNothing) {
  frozen_get("");

  // Nothing is lost: a message put now reaches the next reader (a pressure
  // queue's role, which the stopped get still held, is recovered since its
  // process is gone).
  ASSERT_EQ(run({"put", "q"}, "after\n").rc, 0);
  const Outcome next = run({"get", "q", "--count", "1", "--timeout", "30"});
  EXPECT_EQ(next.rc, 0) << next.err;
  EXPECT_EQ(next.out, "after\n") << next.err;
}

// The get has written three messages its reader has not taken, and waits
// for more: it cannot give them back to the stopped server, says so, and
// the next get delivers them.
TEST_P(CliFrozenRedisGetExitTest, SignalEndsAGetHoldingUnreadMessagesPromptlyAndLosesNothing) {
  const Outcome o = frozen_get("a\nb\nc\n");
  EXPECT_EQ(o.out, "a\nb\nc\n") << o.err;
  EXPECT_NE(o.err.find("3 not given back"), std::string::npos) << o.err;

  const Outcome next = run({"get", "q", "--count", "3", "--timeout", "30"});
  EXPECT_EQ(next.rc, 0) << next.err;
  EXPECT_EQ(next.out, "a\nb\nc\n") << next.err;
}

INSTANTIATE_TEST_SUITE_P(Kinds, CliFrozenRedisGetExitTest, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "Stream" : "Pressure"; });

}  // namespace
}  // namespace sluice
