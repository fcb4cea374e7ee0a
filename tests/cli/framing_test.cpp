// FrameParser and append_frame (tools/sluice/framing.h): the bytes `sluice
// put` accepts and `sluice get` writes, without processes.
#include "framing.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sluice::cli {
namespace {

using Step = FrameParser::Step;

struct Parsed {
  std::vector<std::string> messages;
  Step last = Step::kNeedMore;
  std::string error;
};

// Feeds `input` in pieces of `piece` bytes, then the end; collects messages
// until a final step.
Parsed parse(Framing f, const std::string& input, std::size_t limit, std::size_t piece = 1 << 20) {
  FrameParser p(f, limit);
  Parsed r;
  std::size_t off = 0;
  for (;;) {
    if (off < input.size()) {
      p.feed(std::string_view(input).substr(off, piece));
      off += std::min(piece, input.size() - off);
    } else {
      p.end_of_input();
    }
    std::string_view m;
    while ((r.last = p.next(&m)) == Step::kMessage) r.messages.emplace_back(m);
    if (r.last != Step::kNeedMore) break;
  }
  r.error = p.error();
  return r;
}

std::string frames(Framing f, const std::vector<std::string>& msgs) {
  std::string out;
  for (const std::string& m : msgs) append_frame(f, m, out);
  return out;
}

std::string every_byte() {
  std::string s;
  for (int b = 0; b < 256; ++b) s += static_cast<char>(b);
  return s;
}

TEST(FramingTest, NamesRoundTrip) {
  for (Framing f : {Framing::kLine, Framing::kNul, Framing::kBinary}) {
    EXPECT_EQ(parse_framing(framing_name(f)), f);
  }
  EXPECT_EQ(parse_framing("netstring"), Framing::kBinary);
  EXPECT_EQ(parse_framing("lines"), std::nullopt);
}

TEST(FramingTest, NetstringBytesAreExact) {
  std::string out;
  append_frame(Framing::kBinary, "hello", out);
  append_frame(Framing::kBinary, "", out);
  append_frame(Framing::kBinary, std::string("a\0\n,", 4), out);
  EXPECT_EQ(out, std::string("5:hello,0:,4:a\0\n,,", 18));
}

TEST(FramingTest, EveryByteAndEmptyMessagesRoundTripInEveryPieceSize) {
  const std::string all = every_byte();
  std::vector<std::string> binary = {all, "", "", std::string(1, '\0'), "x", ""};
  for (int b = 0; b < 256; ++b) binary.emplace_back(1, static_cast<char>(b));
  // line and nul framing carry every byte but their separator.
  std::string no_nl = all, no_nul = all;
  no_nl.erase(no_nl.find('\n'), 1);
  no_nul.erase(0, 1);
  const std::vector<std::string> lines = {no_nl, "", "y", ""};
  const std::vector<std::string> nuls = {no_nul, "", "z", ""};
  for (std::size_t piece : {1, 2, 3, 7, 64, 1 << 20}) {
    Parsed r = parse(Framing::kBinary, frames(Framing::kBinary, binary), 1000, piece);
    EXPECT_EQ(r.last, Step::kEnd) << r.error;
    EXPECT_EQ(r.messages, binary) << "piece " << piece;
    r = parse(Framing::kLine, frames(Framing::kLine, lines), 1000, piece);
    EXPECT_EQ(r.last, Step::kEnd);
    EXPECT_EQ(r.messages, lines) << "piece " << piece;
    r = parse(Framing::kNul, frames(Framing::kNul, nuls), 1000, piece);
    EXPECT_EQ(r.last, Step::kEnd);
    EXPECT_EQ(r.messages, nuls) << "piece " << piece;
  }
}

TEST(FramingTest, ALastSeparatedMessageWithoutItsSeparatorCounts) {
  Parsed r = parse(Framing::kLine, "a\n\nb", 10);
  EXPECT_EQ(r.messages, (std::vector<std::string>{"a", "", "b"}));
  r = parse(Framing::kNul, std::string("a\0b", 3), 10);
  EXPECT_EQ(r.messages, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(parse(Framing::kLine, "", 10).messages.size(), 0U);
  EXPECT_EQ(parse(Framing::kBinary, "", 10).last, Step::kEnd);
}

TEST(FramingTest, AMessageAtTheLimitPassesOneByteOverStops) {
  const std::string at(10, 'x'), over(11, 'x');
  for (Framing f : {Framing::kLine, Framing::kNul, Framing::kBinary}) {
    for (std::size_t piece : {1, 4, 1 << 20}) {
      Parsed r = parse(f, frames(f, {"a", at, "b"}), 10, piece);
      EXPECT_EQ(r.last, Step::kEnd) << framing_name(f);
      EXPECT_EQ(r.messages, (std::vector<std::string>{"a", at, "b"})) << framing_name(f);
      r = parse(f, frames(f, {"a", over, "b"}), 10, piece);
      EXPECT_EQ(r.last, Step::kTooLarge) << framing_name(f) << " piece " << piece;
      EXPECT_EQ(r.messages, (std::vector<std::string>{"a"})) << framing_name(f);
    }
  }
}

TEST(FramingTest, ANetstringOverTheLimitIsKnownFromItsHeader) {
  FrameParser p(Framing::kBinary, 100);
  p.feed("2:ab,123456789012345678901234567890:");  // no body follows, and none is needed
  std::string_view m;
  ASSERT_EQ(p.next(&m), Step::kMessage);
  EXPECT_EQ(p.next(&m), Step::kTooLarge);
  EXPECT_EQ(p.next(&m), Step::kTooLarge);  // final
  EXPECT_GT(p.claimed_size(), 100U);
  EXPECT_EQ(p.consumed(), 5U);
}

TEST(FramingTest, TruncatedNetstringsAreErrorsNotMessages) {
  for (const std::string& cut :
       {std::string("3:ab"), std::string("3:abc"), std::string("12"), std::string("3:")}) {
    Parsed r = parse(Framing::kBinary, "1:a," + cut, 100);
    EXPECT_EQ(r.last, Step::kTruncated) << cut;
    EXPECT_EQ(r.messages, (std::vector<std::string>{"a"})) << cut;
    EXPECT_NE(r.error.find("input byte 4"), std::string::npos) << r.error;
  }
}

TEST(FramingTest, MalformedNetstringsSayWhatAndWhere) {
  struct Case {
    std::string input, says;
  };
  for (const Case& c :
       {Case{"x:", "expected a decimal length, found 'x'"},
        Case{":a,", "expected a decimal length"}, Case{"1;a,", "expected ':', found ';'"},
        Case{"1:ab", "expected ',' after its 1 bytes, found 'b'"}, Case{"01:a,", "leading zero"},
        Case{"1:a\n", "found byte 0x0a"}}) {
    Parsed r = parse(Framing::kBinary, "0:," + c.input, 100);
    EXPECT_EQ(r.last, Step::kMalformed) << c.input;
    EXPECT_EQ(r.messages, (std::vector<std::string>{""})) << c.input;
    EXPECT_NE(r.error.find(c.says), std::string::npos) << r.error;
    EXPECT_NE(r.error.find("input byte 3"), std::string::npos) << r.error;
  }
}

TEST(FramingTest, ConsumedCountsInputBytesOfReturnedMessages) {
  FrameParser p(Framing::kLine, 100);
  p.feed("ab\ncd");
  std::string_view m;
  ASSERT_EQ(p.next(&m), Step::kMessage);
  EXPECT_EQ(p.consumed(), 3U);
  EXPECT_EQ(p.next(&m), Step::kNeedMore);
  p.feed("e\n");
  ASSERT_EQ(p.next(&m), Step::kMessage);
  EXPECT_EQ(m, "cde");
  EXPECT_EQ(p.consumed(), 7U);
}

}  // namespace
}  // namespace sluice::cli
