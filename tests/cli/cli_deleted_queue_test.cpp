// A queue deleted by another client while a `sluice get` or `sluice put`
// waits on it, through the real binary against a real redis-server: the
// waiting command exits 3 (not found) on both Redis kinds, so a script's
// `until sluice get ...` tells a deletion from a close (exit 0 for get once
// drained, 5 for put). The pressure backend's waiting get exited 0 and its
// waiting put 5: `sluice delete` closes the queue first (pressure.lua,
// 'delete' finding a role held), and they took that close for a normal one.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "cli/cli_child.h"
#include "redis/reference_client.h"
#include "testutil/redis_server.h"
#include "testutil/temp_dir.h"
#include "testutil/wait_for.h"

#ifndef SLUICE_CLI
#error "SLUICE_CLI: the path of the sluice binary (tests/CMakeLists.txt)"
#endif

namespace sluice {
namespace {

using testutil::Child;
using testutil::Outcome;

class CliDeletedQueueTest : public ::testing::Test {
 protected:
  // No variable picks another store; the default directory store (unused)
  // lands in a temporary HOME.
  std::map<std::string, std::string> env() const { return testutil::no_store_env(home_); }
  Child start(std::vector<std::string> args) {
    args.insert(args.begin(), {SLUICE_CLI, "--redis", url_});
    return Child(std::move(args), env());
  }
  Outcome run(std::vector<std::string> args, const std::string& input = "") {
    Child c = start(std::move(args));
    c.write_stdin(input);
    c.close_stdin();
    return c.finish();
  }
  // `sluice create name [--stream] extra...`.
  void create(const std::string& name, bool stream, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"create", name};
    if (stream) args.emplace_back("--stream");
    args.insert(args.end(), extra.begin(), extra.end());
    const Outcome r = run(args);
    ASSERT_EQ(r.rc, 0) << r.err;
  }
  // Whether a command of ours waits on the server (a get for data, a put
  // for room: BLMOVE, XREADGROUP BLOCK or BLPOP).
  bool waiting() { return raw_.blocked_clients() == 1; }

  testutil::RedisServer server_;
  testutil::RawRedis raw_{server_.port()};
  std::string url_ = "redis://127.0.0.1:" + std::to_string(server_.port()) + "/0";
  std::string home_ = testutil::test_dir("cli_deleted_queue").string();
};

// The get waits for data (holding the consumer role, on a pressure queue);
// `sluice delete` removes the queue under it.
TEST_F(CliDeletedQueueTest, AWaitingGetExitsNotFoundWhenSluiceDeletesTheQueue) {
  for (const bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streams" : "pressure");
    const std::string name = stream ? "s" : "p";
    create(name, stream);
    Child get = start({"get", name});
    get.close_stdin();
    ASSERT_TRUE(testutil::eventually([&] { return waiting(); }));
    const Outcome d = run({"delete", name});
    ASSERT_EQ(d.rc, 0) << d.err;
    const Outcome g = get.finish();
    EXPECT_EQ(g.rc, 3) << g.err;
    EXPECT_NE(g.err.find("'" + name + "'"), std::string::npos) << g.err;
    EXPECT_NE(g.err.find("deleted"), std::string::npos) << g.err;
    EXPECT_EQ(g.out, "");
    EXPECT_EQ(run({"ls"}).out, "");
  }
}

// The same after it had messages: the get delivered them, then waited.
TEST_F(CliDeletedQueueTest, AGetThatHadMessagesExitsNotFoundWhenTheQueueIsDeletedUnderIt) {
  for (const bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streams" : "pressure");
    const std::string name = stream ? "s" : "p";
    create(name, stream);
    ASSERT_EQ(run({"put", name}, "a\nb\n").rc, 0);
    Child get = start({"get", name});
    get.close_stdin();
    EXPECT_EQ(get.read_lines(2), "a\nb\n");
    ASSERT_TRUE(testutil::eventually([&] { return waiting(); }));
    ASSERT_EQ(run({"delete", name}).rc, 0);
    const Outcome g = get.finish();
    EXPECT_EQ(g.rc, 3) << g.err;
  }
}

// A put waiting for room at the bound (holding the producer role, on a
// pressure queue): it exits 3 saying how many went in, not 5 (closed).
TEST_F(CliDeletedQueueTest, APutWaitingAtTheBoundExitsNotFoundWhenSluiceDeletesTheQueue) {
  for (const bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streams" : "pressure");
    const std::string name = stream ? "s" : "p";
    create(name, stream, {"--bound", "1"});
    Child put = start({"put", name});
    put.write_stdin("a\nb\n");
    put.close_stdin();
    ASSERT_TRUE(testutil::eventually([&] { return waiting(); }));
    const Outcome d = run({"delete", name});
    ASSERT_EQ(d.rc, 0) << d.err;
    const Outcome p = put.finish();
    EXPECT_EQ(p.rc, 3) << p.err;
    EXPECT_NE(p.err.find(": 1 message"), std::string::npos) << p.err;
    EXPECT_EQ(run({"ls"}).out, "");
  }
}

// A close is still a close: the waiting get ends 0, the put 5.
TEST_F(CliDeletedQueueTest, ACloseIsStillTheNormalEnd) {
  create("p", false, {"--bound", "1"});
  Child get = start({"get", "p"});
  get.close_stdin();
  ASSERT_TRUE(testutil::eventually([&] { return waiting(); }));
  ASSERT_EQ(run({"close", "p"}).rc, 0);
  const Outcome g = get.finish();
  EXPECT_EQ(g.rc, 0) << g.err;
  EXPECT_EQ(run({"put", "p"}, "x\n").rc, 5);
  // A delete after the close: nothing waits, nothing to tell.
  ASSERT_EQ(run({"delete", "p"}).rc, 0);
  EXPECT_EQ(run({"get", "p"}).rc, 3);
}

// The protocol's other clients delete with their Delete (DEL :bound first,
// then close, then wait for the roles) or by DEL of the keys: a waiting
// sluice get exits 3 there too.
TEST_F(CliDeletedQueueTest, AWaitingGetExitsNotFoundWhenAnotherClientDeletesTheQueue) {
  for (const bool reference : {true, false}) {
    SCOPED_TRACE(reference ? "the reference client's Delete" : "DEL of the 12 keys");
    create("p", false);
    Child get = start({"get", "p"});
    get.close_stdin();
    ASSERT_TRUE(testutil::eventually([&] { return waiting(); }));
    if (reference) {
      testutil::ReferenceClient(server_.port(), "p").del();
    } else {
      std::vector<std::string> del = {"DEL"};
      for (const char* k :
           {"", ":bound", ":producer", ":consumer", ":producer_free", ":consumer_free",
            ":stats:produced_messages", ":stats:produced_bytes", ":stats:consumed_messages",
            ":stats:consumed_bytes", ":not_full", ":closed"}) {
        del.push_back(std::string("__pressure__:p") + k);
      }
      raw_.cmd(del);
    }
    const Outcome g = get.finish();
    EXPECT_EQ(g.rc, 3) << g.err;
  }
}

}  // namespace
}  // namespace sluice
