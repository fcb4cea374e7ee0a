// `sluice stat --json` on an embedded store whose files hold what sluice
// never writes itself, through the real binary.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli_backends.h"

namespace sluice {
namespace {

using testutil::Outcome;

class CliStatJsonEdgesTest : public testutil::CliBackendTest {};

// A channel's position file whose name is not UTF-8 (put there by hand, or
// by a damaged file system) is listed as a channel; the JSON must still be
// JSON (its bytes replaced), not an abort in the middle of the output.
TEST_P(CliStatJsonEdgesTest, AChannelNameThatIsNotUtf8StillGivesJson) {
  create("q");
  const std::filesystem::path channels = store_ + "/queues/q/topic/channels";
  std::filesystem::copy_file(channels / "default.pos", channels / "\xff.pos");
  Outcome r = run({"stat", "q", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["channels"].size(), 2u) << r.out;
  EXPECT_EQ(j["name"], "q");
}

INSTANTIATE_TEST_SUITE_P(Backends, CliStatJsonEdgesTest,
                         ::testing::Values(testutil::CliBackend{"embedded", false, ""}),
                         testutil::backend_name);

}  // namespace
}  // namespace sluice
