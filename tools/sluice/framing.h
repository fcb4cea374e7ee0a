// How `sluice put` splits its input into messages and `sluice get` writes
// them out (docs/cli.md, "Framing"). Pure byte handling: no I/O, so it is
// unit-tested on its own (tests/cli/framing_test.cpp).
//
//   line:   each message ends with '\n' (a last one without it still counts)
//   nul:    each message ends with '\0' (likewise)
//   binary: netstrings, "<decimal length>:<bytes>," (https://cr.yp.to/proto/
//           netstrings.txt): any bytes, empty messages included. The length
//           has no leading zeros ("0:," is the empty message); the comma
//           catches a writer that got the length wrong.
//
// Thread safety: a FrameParser is used by one thread at a time.
// Ownership: the views next() returns point into the parser's buffer and
//   stay valid until the next feed().
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::cli {

enum class Framing : std::uint8_t { kLine, kNul, kBinary };

// "line", "nul", "binary" (or "netstring"); nullopt for anything else.
std::optional<Framing> parse_framing(std::string_view name);
std::string_view framing_name(Framing f);

// Appends one framed message to out.
void append_frame(Framing f, std::string_view message, std::string& out);

class FrameParser {
 public:
  enum class Step : std::uint8_t {
    kMessage,    // *message is the next message
    kNeedMore,   // no complete message buffered: feed() more (or end_of_input())
    kEnd,        // end of input, every message returned
    kTooLarge,   // the next message is over the limit (claimed_size() says how big, if known)
    kMalformed,  // binary: a bad frame (error() says what, at which input offset)
    kTruncated,  // binary: the input ended inside a frame (error() says where)
  };

  // `limit`: the largest message accepted, in bytes.
  FrameParser(Framing framing, std::size_t limit) : framing_(framing), limit_(limit) {}

  // Appends input bytes. Invalidates the views next() returned.
  void feed(std::string_view bytes);
  // No more input will come.
  void end_of_input() { eof_ = true; }
  // The next message, or why there is none. kTooLarge, kMalformed and
  // kTruncated are final: every later call returns the same.
  Step next(std::string_view* message);

  const std::string& error() const { return error_; }
  // kTooLarge: the message's size, or 0 where the separator has not come yet
  // (line and nul framing: it is at least limit + 1).
  std::uint64_t claimed_size() const { return claimed_; }
  // Bytes of input taken by the messages returned so far, framing included.
  std::uint64_t consumed() const { return base_ + pos_; }

 private:
  Step next_separated(std::string_view* message, char sep);
  Step next_netstring(std::string_view* message);
  Step fail(Step s, std::string error);

  Framing framing_;
  std::size_t limit_;
  std::string buf_;
  std::size_t pos_ = 0;      // start of the next message in buf_
  std::size_t scanned_ = 0;  // line/nul: buf_[pos_, scanned_) holds no separator
  std::uint64_t base_ = 0;   // input offset of buf_[0]
  bool eof_ = false;
  std::optional<Step> final_;
  std::string error_;
  std::uint64_t claimed_ = 0;
};

}  // namespace sluice::cli
