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
#include <iostream>
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
// request; its cleanup (giving back the role and what it holds, a Streams
// reader's keep-alive thread) must not wait for the hung server again. So
// about 5 s, plus a margin for a loaded machine; with messages left in the
// pipe it first lingers for the reader (--linger, 2 s). Before, each of up
// to four cleanup steps waited io_timeout again (10-35 s).
constexpr std::chrono::milliseconds kExitBound{7500};
constexpr std::chrono::milliseconds kLinger{2000};

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
  // what the get did then.
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
    // Seen once is enough: between its waits (slices of 50 ms) the get also
    // keeps what it holds alive, so a second look may miss it.
    bool waited = false;
    for (const auto until = Clock::now() + std::chrono::seconds(30);
         !(waited = blocked_in(server_, wait_cmd)) && Clock::now() < until;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // between polls
    }
    EXPECT_TRUE(waited) << "get never waited on the queue";

    server_.pause();
    const auto t0 = Clock::now();
    waiting.signal(SIGTERM);
    // Its stdout is read only once it has exited: what it wrote is never
    // taken, so nothing is acknowledged (a reader that took them while get
    // lingered had them, and their ack, sent to the stopped server, would
    // run when it resumes: no loss, and nothing for this test to find).
    Outcome o = waiting.finish_unread();
    const auto took = Clock::now() - t0;
    server_.resume();  // only now: the get had to end with Redis still stopped
    std::cout << "get exited " << std::chrono::duration<double>(took).count()
              << " s after SIGTERM\n";
    EXPECT_EQ(o.rc, 130) << o.err;
    EXPECT_LT(took, messages.empty() ? kExitBound : kExitBound + kLinger)
        << "the exit waited for the stopped Redis again and again: "
        << std::chrono::duration<double>(took).count() << " s\n"
        << o.err;
    // It does not announce retries it will not make.
    EXPECT_EQ(o.err.find("retrying"), std::string::npos) << o.err;
    return o;
  }

  testutil::RedisServer server_;
  const std::string url_ = redis_url(server_);
  const std::map<std::string, std::string> env_ =
      testutil::no_store_env(testutil::test_dir("cli-frozen-get").string());
};

TEST_P(CliFrozenRedisGetExitTest, SignalEndsAWaitingGetPromptlyAndLosesNothing) {
  const Outcome o = frozen_get("");
  // It says what it could not do.
  EXPECT_NE(o.err.find("what this reader held goes to the next reader once this process is gone"),
            std::string::npos)
      << o.err;

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
  EXPECT_EQ(next.rc, 0) << next.err << "\nthe stopped get said: " << o.err
                        << "\nstat: " << run({"stat", "q"}).out;
  EXPECT_EQ(next.out, "a\nb\nc\n") << next.err;
}

INSTANTIATE_TEST_SUITE_P(Kinds, CliFrozenRedisGetExitTest, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "Stream" : "Pressure"; });

}  // namespace
}  // namespace sluice
