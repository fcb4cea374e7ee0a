#include "framing.h"

#include <cstring>
#include <limits>

namespace sluice::cli {
namespace {

std::string byte_text(char c) {
  static const char* hex = "0123456789abcdef";
  const auto u = static_cast<unsigned char>(c);
  if (u >= 0x21 && u < 0x7f) return std::string("'") + c + "'";
  return std::string("byte 0x") + hex[u >> 4] + hex[u & 15];
}

}  // namespace

std::optional<Framing> parse_framing(std::string_view name) {
  if (name == "line") return Framing::kLine;
  if (name == "nul") return Framing::kNul;
  if (name == "binary" || name == "netstring") return Framing::kBinary;
  return std::nullopt;
}

std::string_view framing_name(Framing f) {
  switch (f) {
    case Framing::kLine:
      return "line";
    case Framing::kNul:
      return "nul";
    case Framing::kBinary:
      return "binary";
  }
  return "?";
}

void append_frame(Framing f, std::string_view message, std::string& out) {
  switch (f) {
    case Framing::kLine:
      out += message;
      out += '\n';
      break;
    case Framing::kNul:
      out += message;
      out += '\0';
      break;
    case Framing::kBinary:
      out += std::to_string(message.size());
      out += ':';
      out += message;
      out += ',';
      break;
  }
}

void FrameParser::feed(std::string_view bytes) {
  if (pos_ > 0) {  // drop what was returned: at most one partial message stays
    buf_.erase(0, pos_);
    base_ += pos_;
    scanned_ -= pos_;
    pos_ = 0;
  }
  buf_.append(bytes);
}

FrameParser::Step FrameParser::next(std::string_view* message) {
  if (final_) return *final_;
  switch (framing_) {
    case Framing::kLine:
      return next_separated(message, '\n');
    case Framing::kNul:
      return next_separated(message, '\0');
    case Framing::kBinary:
      return next_netstring(message);
  }
  return Step::kNeedMore;
}

FrameParser::Step FrameParser::fail(Step s, std::string error) {
  final_ = s;
  error_ = std::move(error);
  return s;
}

FrameParser::Step FrameParser::next_separated(std::string_view* message, char sep) {
  // Resume the search where the last one stopped: a long message arriving
  // in many reads is scanned once.
  const void* hit = std::memchr(buf_.data() + scanned_, sep, buf_.size() - scanned_);
  if (hit != nullptr) {
    const auto end = static_cast<std::size_t>(static_cast<const char*>(hit) - buf_.data());
    if (end - pos_ > limit_) {
      claimed_ = end - pos_;
      return fail(Step::kTooLarge, "message of " + std::to_string(claimed_) + " bytes");
    }
    *message = std::string_view(buf_).substr(pos_, end - pos_);
    pos_ = scanned_ = end + 1;
    return Step::kMessage;
  }
  scanned_ = buf_.size();
  // Over the limit before its separator came: say so now, without
  // buffering the rest of it.
  if (buf_.size() - pos_ > limit_) {
    claimed_ = 0;
    return fail(Step::kTooLarge, "message of more than " + std::to_string(limit_) + " bytes");
  }
  if (!eof_) return Step::kNeedMore;
  if (pos_ == buf_.size()) return Step::kEnd;
  *message = std::string_view(buf_).substr(pos_);  // the last one, without its separator
  pos_ = scanned_ = buf_.size();
  return Step::kMessage;
}

FrameParser::Step FrameParser::next_netstring(std::string_view* message) {
  if (pos_ == buf_.size()) return eof_ ? Step::kEnd : Step::kNeedMore;
  // For error messages only (built then: this is the hot path).
  auto frame = [at = base_ + pos_] { return "frame at input byte " + std::to_string(at); };
  std::size_t i = pos_;
  std::uint64_t len = 0;
  for (; i < buf_.size() && buf_[i] >= '0' && buf_[i] <= '9'; ++i) {
    if (i > pos_ && buf_[pos_] == '0') {
      return fail(Step::kMalformed, frame() + ": the length has a leading zero");
    }
    len = len * 10 + static_cast<std::uint64_t>(buf_[i] - '0');
    if (len > limit_) {  // known too large: no need to read (or buffer) the rest
      claimed_ = len;
      for (++i; i < buf_.size() && buf_[i] >= '0' && buf_[i] <= '9' &&
                claimed_ <= std::numeric_limits<std::uint64_t>::max() / 10 - 9;
           ++i) {
        claimed_ = claimed_ * 10 + static_cast<std::uint64_t>(buf_[i] - '0');
      }
      return fail(Step::kTooLarge, frame() + ": message of " + std::to_string(claimed_) + " bytes");
    }
  }
  if (i == buf_.size()) {
    if (!eof_) return Step::kNeedMore;
    return fail(Step::kTruncated, "the input ends inside the length of the " + frame());
  }
  if (i == pos_ || buf_[i] != ':') {
    return fail(Step::kMalformed, frame() + ": expected " +
                                      std::string(i == pos_ ? "a decimal length" : "':'") +
                                      ", found " + byte_text(buf_[i]));
  }
  const std::size_t body = i + 1;
  const auto n = static_cast<std::size_t>(len);
  if (buf_.size() - body < n + 1) {
    if (!eof_) return Step::kNeedMore;
    return fail(Step::kTruncated, "the input ends inside the " + frame() + " (" +
                                      std::to_string(buf_.size() - body) + " of " +
                                      std::to_string(n) + " bytes and the ',')");
  }
  if (buf_[body + n] != ',') {
    return fail(Step::kMalformed, frame() + ": expected ',' after its " + std::to_string(n) +
                                      " bytes, found " + byte_text(buf_[body + n]));
  }
  *message = std::string_view(buf_).substr(body, n);
  pos_ = body + n + 1;
  return Step::kMessage;
}

}  // namespace sluice::cli
