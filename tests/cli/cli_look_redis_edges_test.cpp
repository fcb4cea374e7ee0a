// peek / seek / purge at their edges on a Redis Streams topic, through the
// real binary and a real redis-server (the embedded store's edges:
// cli_look_edges_test.cpp).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/cli_backends.h"

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

INSTANTIATE_TEST_SUITE_P(Backends, CliLookRedisEdgesTest,
                         ::testing::Values(testutil::CliBackend{"redis_stream", true, "--stream"}),
                         testutil::backend_name);

}  // namespace
}  // namespace sluice
