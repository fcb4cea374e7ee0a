// put and get framings through the real binary: binary payloads (every byte
// value), empty messages, the size limit exactly and one byte over, and
// input cut short.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cli/cli_child.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

using testutil::Outcome;

constexpr std::size_t kLimit = 16U << 20;  // docs/cli.md: "A message is at most 16 MiB"

struct Framing {
  std::string name;  // --framing NAME
  std::string frame(const std::string& m) const {
    if (name == "line") return m + "\n";
    if (name == "nul") return m + std::string(1, '\0');
    return std::to_string(m.size()) + ":" + m + ",";
  }
  std::string frames(const std::vector<std::string>& msgs) const {
    std::string s;
    for (const std::string& m : msgs) s += frame(m);
    return s;
  }
};

const Framing kLine{"line"}, kNul{"nul"}, kBinary{"binary"};

// 0..255, without `skip` (a separator) if given.
std::string every_byte(int skip = -1) {
  std::string s;
  for (int b = 0; b < 256; ++b) {
    if (b != skip) s += static_cast<char>(b);
  }
  return s;
}

class CliFramingTest : public ::testing::Test {
 protected:
  Outcome run(std::vector<std::string> args, const std::string& input = "") {
    return testutil::run_cli(store_, std::move(args), input);
  }
  void SetUp() override { ASSERT_EQ(run({"create", "q", "--bound", "100000"}).rc, 0); }
  // Puts msgs with framing f and gets them back the same way.
  void round_trip(const Framing& f, const std::vector<std::string>& msgs) {
    const std::string input = f.frames(msgs);
    Outcome r = run({"put", "q", "--framing", f.name}, input);
    ASSERT_EQ(r.rc, 0) << f.name << ": " << r.err;
    r = run({"get", "q", "--framing", f.name, "--count", std::to_string(msgs.size())});
    ASSERT_EQ(r.rc, 0) << f.name << ": " << r.err;
    // Byte for byte (and no 16 MiB diff in the log when not).
    EXPECT_TRUE(r.out == input)
        << f.name << ": " << r.out.size() << " bytes out, " << input.size()
        << " in; first difference at "
        << (std::mismatch(r.out.begin(), r.out.end(), input.begin(), input.end()).first -
            r.out.begin());
  }

  std::string store_ = testutil::test_dir("cli-framing").string();
};

TEST_F(CliFramingTest, BinaryCarriesEveryByteValueAndEmptyMessages) {
  std::vector<std::string> msgs = {every_byte(), "", ""};
  for (int b = 0; b < 256; ++b) msgs.emplace_back(1, static_cast<char>(b));
  msgs.emplace_back("");
  round_trip(kBinary, msgs);
  EXPECT_NE(run({"stat", "q"}).out.find("produced=260\n"), std::string::npos);
}

TEST_F(CliFramingTest, LineAndNulCarryEveryByteButTheirSeparator) {
  std::vector<std::string> lines = {every_byte('\n'), ""};
  std::vector<std::string> nuls = {every_byte(0), ""};
  for (int b = 1; b < 256; ++b) {
    if (b != '\n') lines.emplace_back(1, static_cast<char>(b));
    nuls.emplace_back(1, static_cast<char>(b));
  }
  round_trip(kLine, lines);
  round_trip(kNul, nuls);
}

TEST_F(CliFramingTest, AliasesAndMixedFramings) {
  // -b and -0 are --framing binary and nul; a queue holds bytes, not framing.
  ASSERT_EQ(run({"put", "q", "-b"}, "3:a\nb,0:,").rc, 0);
  Outcome r = run({"get", "q", "-0", "--count", "2"});
  EXPECT_EQ(r.out, std::string("a\nb\0\0", 5));
  ASSERT_EQ(run({"put", "q", "-0"}, std::string("x\0y", 3)).rc, 0);
  r = run({"get", "q", "--binary", "--count", "2"});
  EXPECT_EQ(r.out, "1:x,1:y,");
  ASSERT_EQ(run({"put", "q", "--framing", "netstring"}, "2:ok,").rc, 0);
  EXPECT_EQ(run({"get", "q", "--count", "1"}).out, "ok\n");
  // One framing at a time.
  EXPECT_EQ(run({"put", "q", "-0", "-b"}).rc, 2);
  EXPECT_EQ(run({"get", "q", "--framing", "line", "-b"}).rc, 2);
  EXPECT_EQ(run({"put", "q", "--framing", "json"}).rc, 2);
}

TEST_F(CliFramingTest, AMessageExactlyAtTheLimitPassesInEveryFraming) {
  std::string at(kLimit, 'x');
  for (std::size_t i = 0; i < at.size(); i += 4099) at[i] = static_cast<char>('A' + i % 26);
  at[at.size() / 2] = '\n';  // binary only below
  for (const Framing* f : {&kLine, &kNul, &kBinary}) {
    std::string m = at;
    if (f != &kBinary) m[m.size() / 2] = 'y';
    round_trip(*f, {"a", m, "b"});
  }
}

TEST_F(CliFramingTest, OneByteOverTheLimitExits8AndEnqueuesNothingAfterIt) {
  const std::string over(kLimit + 1, 'x');
  for (const Framing* f : {&kLine, &kNul, &kBinary}) {
    Outcome r = run({"put", "q", "--framing", f->name}, f->frames({"a", "b", over, "c", "d"}));
    EXPECT_EQ(r.rc, 8) << f->name << ": " << r.err;
    EXPECT_NE(r.err.find("message 3 is over the limit"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("2 messages enqueued"), std::string::npos) << r.err;
    r = run({"get", "q", "--framing", f->name, "--timeout", "0.1"});
    EXPECT_EQ(r.out, f->frames({"a", "b"})) << f->name;  // nothing after the large one
  }
}

TEST_F(CliFramingTest, TruncatedBinaryInputEnqueuesTheWholeFramesAndSaysHowMany) {
  for (const std::string& cut :
       {std::string("5:de"), std::string("5:defgh"), std::string("12"), std::string("5:")}) {
    Outcome r = run({"put", "q", "-b"}, "1:a,2:bc," + cut);
    EXPECT_EQ(r.rc, 2) << cut << ": " << r.err;
    EXPECT_NE(r.err.find("2 messages enqueued"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("input ends inside"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("input byte 9"), std::string::npos) << r.err;
    r = run({"get", "q", "-b", "--timeout", "0.1"});
    EXPECT_EQ(r.out, "1:a,2:bc,") << cut;
  }
}

TEST_F(CliFramingTest, MalformedBinaryInputIsAUsageErrorAfterTheGoodFrames) {
  Outcome r = run({"put", "q", "-b"}, "1:a,hello\n");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("1 messages enqueued"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("expected a decimal length, found 'h'"), std::string::npos) << r.err;
  EXPECT_EQ(run({"get", "q", "-b", "--timeout", "0.1"}).out, "1:a,");
}

}  // namespace
}  // namespace sluice
