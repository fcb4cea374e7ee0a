#include "sluice/status.h"

namespace sluice {

std::string_view status_code_name(StatusCode code) noexcept {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kClosed:
      return "closed";
    case StatusCode::kCancelled:
      return "cancelled";
    case StatusCode::kDeadlineExceeded:
      return "deadline_exceeded";
    case StatusCode::kWouldBlock:
      return "would_block";
    case StatusCode::kRejected:
      return "rejected";
    case StatusCode::kDropped:
      return "dropped";
    case StatusCode::kSampledOut:
      return "sampled_out";
    case StatusCode::kNotFound:
      return "not_found";
    case StatusCode::kAlreadyExists:
      return "already_exists";
    case StatusCode::kInUse:
      return "in_use";
    case StatusCode::kCorruption:
      return "corruption";
    case StatusCode::kIOError:
      return "io_error";
    case StatusCode::kUnavailable:
      return "unavailable";
    case StatusCode::kInvalidArgument:
      return "invalid_argument";
    case StatusCode::kInternal:
      return "internal";
  }
  return "unknown";
}

std::string Status::to_string() const {
  std::string s(status_code_name(code_));
  if (msg_ && !msg_->empty()) {
    s += ": ";
    s += *msg_;
  }
  return s;
}

std::ostream& operator<<(std::ostream& os, const Status& s) { return os << s.to_string(); }
std::ostream& operator<<(std::ostream& os, StatusCode c) { return os << status_code_name(c); }

}  // namespace sluice

#include "sluice/overflow_policy.h"

namespace sluice {

std::string_view overflow_policy_name(OverflowPolicy p) noexcept {
  switch (p) {
    case OverflowPolicy::kBlock:
      return "block";
    case OverflowPolicy::kDropNewest:
      return "drop_newest";
    case OverflowPolicy::kDropOldest:
      return "drop_oldest";
    case OverflowPolicy::kReject:
      return "reject";
    case OverflowPolicy::kSample:
      return "sample";
    case OverflowPolicy::kSpill:
      return "spill";
  }
  return "unknown";
}

}  // namespace sluice
