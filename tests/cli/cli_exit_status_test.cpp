// The exit statuses of docs/cli.md's table ("Exit status") where commands
// had to be made to agree, through the real binary, on every backend that
// has the case.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "cli/cli_backends.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using testutil::Child;
using testutil::Outcome;

class CliExitStatusTest : public testutil::CliBackendTest {};

// A place past the end, one rule per backend for peek, seek and get. The
// embedded store's seqs are dense: one past the next seq was never given
// (a typo, or a seq of a queue since deleted and made again, whose seqs
// start over), so every command refuses it as bad input (exit 2, saying the
// next seq). peek took it as the end and printed nothing (exit 0), where
// seek and get refused it. A Streams id is a place in time: one past the
// newest is after all there is, for peek and seek alike.
TEST_P(CliExitStatusTest, APlacePastTheEndIsOneRuleForPeekSeekAndGet) {
  if (pressure()) GTEST_SKIP() << "a pressure queue has no places (exit 2 for any)";
  create("q");
  ASSERT_EQ(run({"put", "q"}, "m1\nm2\n").rc, 0);
  if (embedded()) {
    Outcome r = run({"peek", "q", "--from-seq", "2"});  // the next seq: the end, nothing there
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.out, "");
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"peek", "q", "--from-seq", "3"},
          std::vector<std::string>{"seek", "q", "--to-seq", "3"},
          std::vector<std::string>{"get", "q", "--channel", "new", "--from-seq", "3"}}) {
      r = run(args);
      EXPECT_EQ(r.rc, 2) << args[0] << ": " << r.err;
      EXPECT_EQ(r.out, "") << args[0];
      EXPECT_NE(r.err.find("past the end"), std::string::npos) << args[0] << ": " << r.err;
      EXPECT_NE(r.err.find("next seq"), std::string::npos) << args[0] << ": " << r.err;
    }
  } else {
    Outcome p = run({"peek", "q", "--format", "json"});
    ASSERT_EQ(p.rc, 0) << p.err;
    const auto last_id = p.out.rfind("\"id\":\"");
    ASSERT_NE(last_id, std::string::npos) << p.out;
    const std::string id = p.out.substr(last_id + 6, p.out.find('"', last_id + 6) - last_id - 6);
    const std::string past = std::to_string(std::stoull(id.substr(0, id.find('-'))) + 1) + "-0";
    Outcome r = run({"peek", "q", "--from-id", past});
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.out, "");
    r = run({"seek", "q", "--to-id", past});
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("\nunacknowledged=0\n"), std::string::npos) << r.out;
  }
  EXPECT_EQ(stat("q", "channels"), "default");  // get made no channel
}

// A --timeout that runs out while another process holds the role (the
// channel's reader role, or the writer role a seek back needs) is exit 6,
// as --no-wait is, naming the holder: the cause is the other process, and
// a script that takes get's 9 as "the queue was quiet" must not mistake a
// stuck consumer for an idle queue. 9 is for time that ran out with the
// role held (get: before --count or the end).
TEST_P(CliExitStatusTest, ATimeoutWaitingForARoleIsExit6AndNamesTheHolder) {
  if (!embedded()) GTEST_SKIP() << "Redis roles are not exclusive (docs/cli.md, \"Redis\")";
  create("q");
  ASSERT_EQ(run({"put", "q"}, "m1\n").rc, 0);
  ASSERT_EQ(run({"get", "q", "--count", "1"}).out, "m1\n");
  Outcome r = run({"get", "q", "--timeout", "100ms"});  // the role free, nothing to get
  EXPECT_EQ(r.rc, 9) << r.err;
  {
    Child get(cmd({"get", "q", "--metrics", "127.0.0.1:0"}));
    get.read_err_until("/metrics\n");  // printed once it holds the channel
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"seek", "q", "--to-start", "--timeout", "200ms"},
          std::vector<std::string>{"purge", "q", "--timeout", "200ms"},
          std::vector<std::string>{"get", "q", "--timeout", "200ms"}}) {
      r = run(args);
      EXPECT_EQ(r.rc, 6) << args[0] << ": " << r.err;
      EXPECT_NE(r.err.find("PID " + std::to_string(get.pid())), std::string::npos)
          << args[0] << ": " << r.err;
      EXPECT_NE(r.err.find("--timeout"), std::string::npos) << args[0] << ": " << r.err;
    }
  }
  // The writer role: a seek back needs it (retention and the bound follow
  // the slowest channel), and so does another put.
  Child put(cmd({"put", "q", "--metrics", "127.0.0.1:0"}));
  put.read_err_until("/metrics\n");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"seek", "q", "--to-start", "--timeout", "200ms"},
        std::vector<std::string>{"put", "q", "--timeout", "200ms"}}) {
    r = run(args);
    EXPECT_EQ(r.rc, 6) << args[0] << ": " << r.err;
    EXPECT_NE(r.err.find("PID " + std::to_string(put.pid())), std::string::npos)
        << args[0] << ": " << r.err;
  }
  put.close_stdin();
  EXPECT_EQ(put.finish().rc, 0);
  EXPECT_EQ(stat("q", "channel.default.lag"), "0");  // the seeks moved nothing
}

// Commands that print through std::cout (ls, stat, seek, purge, the log
// commands) had their output flushed at exit, where a failed write went
// unnoticed: `sluice stat q >/dev/full` printed nothing and exited 0. A
// full disk under stdout is an I/O error (exit 7), as for get and peek.
TEST_P(CliExitStatusTest, StdoutOnAFullDiskIsExit7ForEveryCommandThatPrints) {
  if (::access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no /dev/full here";
  create("q");
  ASSERT_EQ(run({"put", "q"}, "m1\n").rc, 0);
  std::vector<std::vector<std::string>> cmds = {
      {"peek", "q"}, {"ls"}, {"ls", "-l"}, {"stat", "q"}, {"stat", "q", "--json"}, {"purge", "q"}};
  if (!pressure()) cmds.push_back({"seek", "q", "--to-start"});
  if (embedded()) cmds.push_back({"log", "verify", "q"});
  for (const std::vector<std::string>& args : cmds) {
    // sh -c 'exec "$0" "$@" >/dev/full' sluice --store S args...
    std::vector<std::string> argv = cmd(args);
    argv.insert(argv.begin(), {"/bin/sh", "-c", "exec \"$0\" \"$@\" >/dev/full"});
    Child c(argv);
    c.close_stdin();
    const Outcome r = c.finish();
    EXPECT_EQ(r.rc, 7) << args[0] << ": " << r.err;
    EXPECT_NE(r.err.find("stdout"), std::string::npos) << args[0] << ": " << r.err;
  }
}

// A closed stdout (>&-) is one that cannot be written: a command with
// something to print there exits 7, as get does (sluice holds fd 1 with
// /dev/null, so the store's files never take it, and printed into that,
// exiting 0). One with nothing to print does its work.
TEST_P(CliExitStatusTest, AClosedStdoutIsExit7ForACommandThatPrints) {
  create("q");
  ASSERT_EQ(run({"put", "q"}, "m1\n").rc, 0);
  std::vector<std::vector<std::string>> cmds = {
      {"peek", "q"}, {"ls"}, {"stat", "q"}, {"purge", "q"}, {"close", "q"}};
  if (embedded()) cmds.push_back({"log", "verify", "q"});
  for (const std::vector<std::string>& args : cmds) {
    std::vector<std::string> argv = cmd(args);
    argv.insert(argv.begin(), {"/bin/sh", "-c", "exec \"$0\" \"$@\" >&-"});
    Child c(argv);
    c.close_stdin();
    const Outcome r = c.finish();
    const bool prints = args[0] != "close";
    EXPECT_EQ(r.rc, prints ? 7 : 0) << args[0] << ": " << r.err;
    if (prints) {
      EXPECT_NE(r.err.find("stdout"), std::string::npos) << args[0] << ": " << r.err;
    }
  }
  EXPECT_EQ(stat("q", "closed"), "true");
  EXPECT_EQ(stat("q", "channel.default.purged"), "1");  // the purge was done
}

// An error writing stdout is exit 7 as one of the store's is, but its hint
// said to check the store's free space and permissions (--store): the
// wrong place to look.
TEST_P(CliExitStatusTest, AnErrorOfStdoutDoesNotSendItsUserToTheStore) {
  if (::access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no /dev/full here";
  create("q");
  ASSERT_EQ(run({"put", "q"}, "m1\n").rc, 0);
  for (const auto& [redirect, args] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {">/dev/full", {"peek", "q"}},
           {">/dev/full", {"get", "q", "--count", "1"}},
           {">&-", {"get", "q", "--count", "1"}}}) {
    std::vector<std::string> argv = cmd(args);
    argv.insert(argv.begin(), {"/bin/sh", "-c", "exec \"$0\" \"$@\" " + redirect});
    Child c(argv);
    c.close_stdin();
    const Outcome r = c.finish();
    EXPECT_EQ(r.rc, 7) << args[0] << redirect << ": " << r.err;
    EXPECT_NE(r.err.find("stdout"), std::string::npos) << args[0] << redirect << ": " << r.err;
    EXPECT_EQ(r.err.find("--store"), std::string::npos) << args[0] << redirect << ": " << r.err;
  }
  EXPECT_EQ(run({"get", "q", "--count", "1"}).out, "m1\n");  // given back each time
}

// A get whose stdout cannot be written (a full disk) says what it gave back
// and why: not written, stdout failed. It said "the reader of stdout had not
// taken the last 1 messages", as if a slow reader were the cause.
TEST_P(CliExitStatusTest, AGetIntoAFullDiskSaysItsMessagesWereNotWritten) {
  if (::access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no /dev/full here";
  create("q");
  ASSERT_EQ(run({"put", "q"}, "m1\nm2\n").rc, 0);
  std::vector<std::string> argv = cmd({"get", "q", "--count", "2"});
  argv.insert(argv.begin(), {"/bin/sh", "-c", "exec \"$0\" \"$@\" >/dev/full"});
  Child c(argv);
  c.close_stdin();
  const Outcome r = c.finish();
  EXPECT_EQ(r.rc, 7) << r.err;
  EXPECT_EQ(r.err.find("had not taken"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("not written: writing stdout failed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("2 given back"), std::string::npos) << r.err;
  EXPECT_EQ(run({"get", "q", "--count", "2"}).out, "m1\nm2\n");
}

// On Redis a put or get holds the protocol's role only while it waits for
// room or data, so one that waits behind it with --timeout waits for the
// same room or data: when the time runs out it is exit 9 (the queue was
// full, or empty, all that time), not 6.
TEST_P(CliExitStatusTest, OnRedisATimeoutBehindAWaitingPutOrGetIsExit9) {
  if (embedded()) GTEST_SKIP() << "ATimeoutWaitingForARoleIsExit6AndNamesTheHolder";
  create("full", "1");
  Child put(cmd({"put", "full"}));
  put.write_stdin("m1\nm2\n");
  put.close_stdin();
  create("empty");
  Child get(cmd({"get", "empty", "--count", "1"}));
  get.close_stdin();
#ifdef SLUICE_TEST_REDIS
  if (pressure()) {  // both wait, holding the producer's and the consumer's role
    testutil::RawRedis redis(server_->port());
    ASSERT_TRUE(testutil::eventually([&] {
      return redis.integer({"EXISTS", "__pressure__:full:producer_free",
                            "__pressure__:empty:consumer_free"}) == 0;
    }));
  }
#endif
  ASSERT_TRUE(testutil::eventually([&] { return stat("full", "produced") == "1"; }));
  Outcome r = run({"put", "full", "--timeout", "300ms"}, "m3\n");
  EXPECT_EQ(r.rc, 9) << r.err;
  r = run({"get", "empty", "--timeout", "300ms"});
  EXPECT_EQ(r.rc, 9) << r.err;
  ASSERT_EQ(run({"put", "empty"}, "e1\n").rc, 0);  // the waiting ones end
  EXPECT_EQ(get.finish().out, "e1\n");
  EXPECT_EQ(run({"get", "full", "--count", "2"}).out, "m1\nm2\n");
  EXPECT_EQ(put.finish().rc, 0);
}

// A store location that is malformed is a usage error (exit 2); one that
// is a file, not a directory, an I/O error (exit 7), as the man page says.
TEST_P(CliExitStatusTest, AStoreThatIsAFileIsExit7AndAMalformedOneExit2) {
  if (!embedded()) GTEST_SKIP() << "the embedded store's location";
  std::filesystem::create_directories(store_);
  const std::string file = store_ + "/file";
  ASSERT_TRUE(std::ofstream(file) << "not a store\n");
  for (const char* c : {"ls", "create", "stat"}) {
    std::vector<std::string> args = {SLUICE_CLI, "--store", file, c};
    if (std::string(c) != "ls") args.push_back("q");
    Child child(args);
    child.close_stdin();
    Outcome r = child.finish();
    EXPECT_EQ(r.rc, 7) << c << ": " << r.err;
    EXPECT_NE(r.err.find("Not a directory"), std::string::npos) << c << ": " << r.err;
    args[2] = "ftp://" + file;
    Child bad(args);
    bad.close_stdin();
    r = bad.finish();
    EXPECT_EQ(r.rc, 2) << c << ": " << r.err;
  }
}

// get --exec whose dead-letter queue is closed cannot move a failed
// message there: exit 5 (the queue is closed), and the message is not
// acknowledged (it comes again). The table said 5 for put only.
TEST_P(CliExitStatusTest, GetExecIntoAClosedDeadLetterQueueIsExit5) {
  create("q");
  create("q.dead");
  ASSERT_EQ(run({"close", "q.dead"}).rc, 0);
  ASSERT_EQ(run({"put", "q"}, "m1\n").rc, 0);
  const Outcome r = run({"get", "q", "--exec", "false", "--retries", "0", "--count", "1"});
  EXPECT_EQ(r.rc, 5) << r.err;
  EXPECT_NE(r.err.find("'q.dead' is closed"), std::string::npos) << r.err;
  EXPECT_EQ(run({"get", "q", "--count", "1"}).out, "m1\n");
}

// close --no-wait beside a put waiting for room: the embedded store's put
// holds the writer role, a pressure queue's put the protocol's producer
// role while it waits (a close needs it): exit 6, and the put goes on once
// there is room. A Streams topic's close needs no role: it closes, and the
// put exits 5. docs/cli.md said --no-wait never exits 6 on Redis.
TEST_P(CliExitStatusTest, CloseNoWaitBesideAPutWaitingForRoom) {
  create("q", "1");
  Child put(cmd({"put", "q"}));
  put.write_stdin("m1\nm2\n");
  put.close_stdin();
  ASSERT_TRUE(testutil::eventually([&] { return stat("q", "produced") == "1"; }));
#ifdef SLUICE_TEST_REDIS
  if (pressure()) {  // the put's wait for room has taken the producer role
    testutil::RawRedis redis(server_->port());
    ASSERT_TRUE(testutil::eventually([&] {
      return redis.integer({"EXISTS", "__pressure__:q:producer_free"}) == 0;
    }));
  }
#endif
  Outcome c = run({"close", "q", "--no-wait"});
  if (stream()) {
    EXPECT_EQ(c.rc, 0) << c.err;
    EXPECT_EQ(put.finish().rc, 5);
    return;
  }
  EXPECT_EQ(c.rc, 6) << c.err;
  EXPECT_EQ(stat("q", "closed"), "false");
  EXPECT_EQ(run({"get", "q", "--count", "1"}).out, "m1\n");  // room: the put ends
  const Outcome p = put.finish();
  EXPECT_EQ(p.rc, 0) << p.err;
}

INSTANTIATE_TEST_SUITE_P(Backends, CliExitStatusTest, SLUICE_CLI_BACKENDS, testutil::backend_name);

}  // namespace
}  // namespace sluice
