// A fixture for tests of the sluice command that run on every backend: the
// embedded store, and (with SLUICE_TEST_REDIS) a pressure queue and a Redis
// Streams topic on a real redis-server the test starts for itself.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "cli/cli_child.h"
#include "testutil/temp_dir.h"
#ifdef SLUICE_TEST_REDIS
#include "testutil/redis_server.h"
#endif

namespace sluice::testutil {

struct CliBackend {
  std::string name;  // "embedded", "redis" (pressure queues), "redis_stream"
  bool redis = false;
  std::string create_flag;  // "--stream" for a Streams topic
};

inline std::ostream& operator<<(std::ostream& os, const CliBackend& b) { return os << b.name; }

class CliBackendTest : public ::testing::TestWithParam<CliBackend> {
 protected:
  void SetUp() override {
#ifdef SLUICE_TEST_REDIS
    if (GetParam().redis) {
      server_ = std::make_unique<RedisServer>();
      store_ = "redis://127.0.0.1:" + std::to_string(server_->port()) + "/0";
    }
#endif
  }
  bool embedded() const { return GetParam().name == "embedded"; }
  bool pressure() const { return GetParam().name == "redis"; }
  bool stream() const { return GetParam().name == "redis_stream"; }

  // sluice --store STORE args...
  std::vector<std::string> cmd(std::vector<std::string> args) const {
    args.insert(args.begin(), {SLUICE_CLI, "--store", store_});
    return args;
  }
  // The same with stdin `input`, to the end.
  Outcome run(std::vector<std::string> args, const std::string& input = "") {
    Child c(cmd(std::move(args)));
    c.write_stdin(input);
    c.close_stdin();
    return c.finish();
  }
  // A queue of the backend's kind.
  void create(const std::string& q, const std::string& bound = "1000") {
    std::vector<std::string> args = {"create", q, "--bound", bound};
    if (!GetParam().create_flag.empty()) args.push_back(GetParam().create_flag);
    Outcome r = run(args);
    ASSERT_EQ(r.rc, 0) << r.err;
  }
  // One `key=value` of `sluice stat q` ("" if absent).
  std::string stat(const std::string& q, const std::string& key) {
    Outcome r = run({"stat", q});
    EXPECT_EQ(r.rc, 0) << r.err;
    const auto at = r.out.find("\n" + key + "=");
    if (at == std::string::npos) return "";
    const auto from = at + key.size() + 2;
    return r.out.substr(from, r.out.find('\n', from) - from);
  }

#ifdef SLUICE_TEST_REDIS
  std::unique_ptr<RedisServer> server_;
#endif
  std::string store_ = test_dir("cli_backend").string();
};

inline std::string backend_name(const ::testing::TestParamInfo<CliBackend>& p) {
  return p.param.name;
}

#ifdef SLUICE_TEST_REDIS
#define SLUICE_CLI_BACKENDS                                                \
  ::testing::Values(::sluice::testutil::CliBackend{"embedded", false, ""}, \
                    ::sluice::testutil::CliBackend{"redis", true, ""},     \
                    ::sluice::testutil::CliBackend{"redis_stream", true, "--stream"})
#else
#define SLUICE_CLI_BACKENDS ::testing::Values(::sluice::testutil::CliBackend{"embedded", false, ""})
#endif

}  // namespace sluice::testutil
