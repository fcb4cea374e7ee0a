// peek / seek / purge at their edges on a Redis Streams topic, through the
// real binary and a real redis-server (the embedded store's edges:
// cli_look_edges_test.cpp).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/cli_backends.h"
#include "redis/stream_helpers.h"

namespace sluice {
namespace {

using testutil::Outcome;

class CliLookRedisEdgesTest : public testutil::CliBackendTest {};

// A channel a Streams topic does not have is exit 3, and the error names the
// channel; it does not blame a deleted channel or tell to create the queue,
// which exists (as the embedded store says it).
TEST_P(CliLookRedisEdgesTest, AMissingChannelsErrorNamesTheChannelNotTheQueue) {
  create("q");
  for (const char* c : {"peek", "seek", "purge"}) {
    std::vector<std::string> args = {c, "q", "--channel", "nope"};
    if (std::string(c) == "seek") args.push_back("--to-start");
    Outcome r = run(args);
    EXPECT_EQ(r.rc, 3) << r.err;
    EXPECT_EQ(r.err.find("sluice create"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("deleted?"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("has no channel 'nope'"), std::string::npos) << r.err;
  }
}

// peek shows a channel's pending messages, then those not delivered yet, in
// id order. Pending entries whose payloads are gone (deleted by another
// client: the script leaves them out) must not make a page skip the pending
// ones after them: with m1..m5 held by a competing reader and m1, m2 deleted,
// the first three are m3, m4, m5, not m3 and then m6, m7.
TEST_P(CliLookRedisEdgesTest, PeekDoesNotSkipPendingMessagesAfterDeletedOnes) {
  create("q");
  ASSERT_EQ(run({"put", "q"}, "m1\nm2\nm3\nm4\nm5\nm6\nm7\nm8\n").rc, 0);
  testutil::RawRedis raw(server_->port());
  const std::string key = testutil::stream_key("q");
  auto got =
      raw.cmd({"XREADGROUP", "GROUP", "default", "other", "COUNT", "5", "STREAMS", key, ">"});
  ASSERT_TRUE(got && got->type == REDIS_REPLY_ARRAY && got->elements == 1);
  const redisReply* entries = got->element[0]->element[1];
  ASSERT_EQ(entries->elements, 5u);
  for (std::size_t i = 0; i < 2; ++i) {
    ASSERT_EQ(raw.integer({"XDEL", key, entries->element[i]->element[0]->str}), 1);
  }
  Outcome p = run({"peek", "q", "--count", "3"});
  EXPECT_EQ(p.rc, 0) << p.err;
  EXPECT_EQ(p.out, "m3\nm4\nm5\n");
  // A page of deleted ones only: the next page goes on past them.
  p = run({"peek", "q", "--count", "2"});
  EXPECT_EQ(p.rc, 0) << p.err;
  EXPECT_EQ(p.out, "m3\nm4\n");
  p = run({"peek", "q"});
  EXPECT_EQ(p.rc, 0) << p.err;
  EXPECT_EQ(p.out, "m3\nm4\nm5\nm6\nm7\nm8\n");
}

// The JSON's time is the id's milliseconds. An id another client gave past
// what the clock can hold (after 2262) has no time the envelope can spell:
// null, not a date that wrapped around.
TEST_P(CliLookRedisEdgesTest, AnIdPastTheClocksRangeHasNoTimeRatherThanAWrongOne) {
  create("q");
  testutil::RawRedis raw(server_->port());
  const std::string key = testutil::stream_key("q");
  for (const char* id : {"99999999999999-0", "18446744073709551615-0"}) {
    auto r = raw.cmd({"XADD", key, id, "d", "m"});
    ASSERT_TRUE(r && r->type == REDIS_REPLY_STRING) << id;
  }
  Outcome p = run({"peek", "q", "--format", "json"});
  ASSERT_EQ(p.rc, 0) << p.err;
  std::size_t lines = 0;
  for (std::size_t at = 0; at < p.out.size(); ++lines) {
    const std::size_t end = p.out.find('\n', at);
    const auto j = nlohmann::json::parse(p.out.substr(at, end - at));
    EXPECT_TRUE(j["time"].is_null()) << j.dump();
    at = end + 1;
  }
  EXPECT_EQ(lines, 2u) << p.out;
}

INSTANTIATE_TEST_SUITE_P(Backends, CliLookRedisEdgesTest,
                         ::testing::Values(testutil::CliBackend{"redis_stream", true, "--stream"}),
                         testutil::backend_name);

// The same on a pressure queue.
class CliPressurePeekTest : public testutil::CliBackendTest {
 protected:
  // The bytes the server has sent to its clients, ever (INFO stats).
  long long sent_bytes() {
    testutil::RawRedis raw(server_->port());
    auto r = raw.cmd({"INFO", "stats"});
    const std::string info(r->str, r->len);
    const std::string key = "total_net_output_bytes:";
    return std::stoll(info.substr(info.find(key) + key.size()));
  }
};

// A long peek reads the waiting list a page at a time. Each page must be
// read from where the last one ended, not from the head again: asking for
// the first shown+page messages every time sends (and, in the script,
// copies) the whole list again per page, O(n^2) in a long queue, while the
// server serves nobody else.
TEST_P(CliPressurePeekTest, ALongPeekReadsEachMessageOnce) {
  create("q", "0");
  std::string input;
  const int n = 20000;  // over two of peek's pages of 8192
  for (int i = 0; i < n; ++i) {
    std::string m = "m" + std::to_string(i);
    input += m + std::string(100 - m.size(), '.') + "\n";
  }
  ASSERT_EQ(run({"put", "q"}, input).rc, 0);
  const long long before = sent_bytes();
  Outcome p = run({"peek", "q"});
  const long long sent = sent_bytes() - before;
  EXPECT_EQ(p.rc, 0) << p.err;
  EXPECT_EQ(p.out, input);
  EXPECT_LT(sent, static_cast<long long>(input.size()) * 3 / 2) << "for " << input.size();
  EXPECT_EQ(stat("q", "length"), std::to_string(n));  // nothing taken
}

INSTANTIATE_TEST_SUITE_P(Backends, CliPressurePeekTest,
                         ::testing::Values(testutil::CliBackend{"redis", true, ""}),
                         testutil::backend_name);

}  // namespace
}  // namespace sluice
