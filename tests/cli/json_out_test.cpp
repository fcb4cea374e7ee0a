// The command's JSON output (tools/sluice/json_out.cpp), without processes.
#include "json_out.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace sluice::cli {
namespace {

TEST(JsonOutTest, Base64FollowsRfc4648) {  // its test vectors, section 10
  EXPECT_EQ(base64(""), "");
  EXPECT_EQ(base64("f"), "Zg==");
  EXPECT_EQ(base64("fo"), "Zm8=");
  EXPECT_EQ(base64("foo"), "Zm9v");
  EXPECT_EQ(base64("foob"), "Zm9vYg==");
  EXPECT_EQ(base64("fooba"), "Zm9vYmE=");
  EXPECT_EQ(base64("foobar"), "Zm9vYmFy");
  EXPECT_EQ(base64(std::string("\xff\xfe\x00", 3)), "//4A");
}

TEST(JsonOutTest, Utf8IsWellFormedOrNot) {
  EXPECT_TRUE(valid_utf8(""));
  EXPECT_TRUE(valid_utf8("plain"));
  EXPECT_TRUE(valid_utf8("w\xc3\xb6rld"));          // ö
  EXPECT_TRUE(valid_utf8("\xe2\x82\xac"));          // €
  EXPECT_TRUE(valid_utf8("\xf0\x9f\x98\x80"));      // U+1F600
  EXPECT_TRUE(valid_utf8(std::string("a\0b", 3)));  // NUL is a character
  EXPECT_FALSE(valid_utf8("\xff"));                 // never in UTF-8
  EXPECT_FALSE(valid_utf8("\xc3"));                 // cut short
  EXPECT_FALSE(valid_utf8("\xc0\xaf"));             // overlong '/'
  EXPECT_FALSE(valid_utf8("\xe0\x80\xaf"));         // overlong
  EXPECT_FALSE(valid_utf8("\xed\xa0\x80"));         // a surrogate
  EXPECT_FALSE(valid_utf8("\xf4\x90\x80\x80"));     // past U+10FFFF
  EXPECT_FALSE(valid_utf8("\x80"));                 // a continuation alone
}

TEST(JsonOutTest, TimesAreRfc3339InUtc) {
  using namespace std::chrono;
  EXPECT_EQ(rfc3339(system_clock::time_point{}), "1970-01-01T00:00:00.000000Z");
  EXPECT_EQ(rfc3339(system_clock::time_point(milliseconds(1795652155839))),
            "2026-11-26T00:15:55.839000Z");
}

TEST(JsonOutTest, AMessageIsOneLineWithNullsForWhatTheBackendDoesNotKnow) {
  StoreMessage m;
  m.data = "a \"quoted\"\nline";
  m.seq = 7;
  std::string out;
  append_message_json(m, "default", out);
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back(), '\n');
  EXPECT_EQ(out.find('\n'), out.size() - 1) << "one line";
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["seq"], 7);
  EXPECT_TRUE(j["id"].is_null());
  EXPECT_TRUE(j["time"].is_null());
  EXPECT_TRUE(j["deliveries"].is_null());
  EXPECT_EQ(j["channel"], "default");
  EXPECT_EQ(j["data"], "a \"quoted\"\nline");
  EXPECT_FALSE(j.contains("encoding"));

  StoreMessage b;
  b.data = std::string("\xff\x00", 2);
  b.id = "1795652155839-3";
  b.time = std::chrono::system_clock::time_point(std::chrono::milliseconds(1795652155839));
  b.deliveries = 2;
  out.clear();
  append_message_json(b, "audit", out);
  const auto k = nlohmann::json::parse(out);
  EXPECT_TRUE(k["seq"].is_null());
  EXPECT_EQ(k["id"], "1795652155839-3");
  EXPECT_EQ(k["time"], "2026-11-26T00:15:55.839000Z");
  EXPECT_EQ(k["deliveries"], 2);
  EXPECT_EQ(k["data"], "/wA=");
  EXPECT_EQ(k["encoding"], "base64");
}

TEST(JsonOutTest, StatHasEveryKeyAndNullsForCountsTheBackendCannotGive) {
  QueueInfo info;
  info.name = "q";
  info.kind = "log";
  info.bound = 10;
  info.max_age = std::chrono::milliseconds(1500);
  info.channels = {"default"};
  info.channel_info = {{.name = "default", .lag = 2, .pending = 0, .dead_lettered = 0}};
  info.waiting = 3;
  const auto j = nlohmann::json::parse(stat_json(info));
  EXPECT_EQ(j["name"], "q");
  EXPECT_EQ(j["bound"], 10);
  EXPECT_EQ(j["waiting"], 3);
  EXPECT_TRUE(j["in_flight"].is_null());
  EXPECT_TRUE(j["produced_bytes"].is_null());
  EXPECT_EQ(j["max_age"], 1.5);
  EXPECT_EQ(j["channel_info"][0]["lag"], 2);
}

}  // namespace
}  // namespace sluice::cli
