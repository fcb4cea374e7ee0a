// One error vocabulary for every sluice module.
//
// Status is a code plus an optional message. An OK status, and any status
// without a message, holds no heap memory, so the hot paths (queue push/pull)
// return it by value without allocating. Messages are for the slow paths
// (files, Redis, bad arguments) and are allocated only when given.
//
// Thread safety: a Status is a value; distinct objects may be used from
// distinct threads freely, one object needs external synchronization.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

namespace sluice {

enum class StatusCode : std::uint8_t {
  kOk = 0,
  kClosed,            // the queue/topic is closed (and, for pulls, drained)
  kCancelled,         // the caller's stop token was triggered
  kDeadlineExceeded,  // the caller's deadline passed first
  kWouldBlock,        // a try_ call found no room / no item right now
  kRejected,          // refused by the Reject policy (or a full overflow store)
  kDropped,           // refused by the DropNewest policy
  kSampledOut,        // refused by the Sample policy
  kNotFound,
  kAlreadyExists,
  kInUse,
  kCorruption,
  kIOError,
  kUnavailable,
  kInvalidArgument,
  kInternal,
};

// Stable lower-case name of a code, e.g. "deadline_exceeded".
std::string_view status_code_name(StatusCode code) noexcept;

class [[nodiscard]] Status {
 public:
  Status() noexcept = default;
  /* implicit */ Status(StatusCode code) noexcept : code_(code) {}  // NOLINT
  Status(StatusCode code, std::string_view message)
      : code_(code), msg_(std::make_unique<std::string>(message)) {}

  Status(const Status& o)
      : code_(o.code_), msg_(o.msg_ ? std::make_unique<std::string>(*o.msg_) : nullptr) {}
  Status& operator=(const Status& o) {
    if (this != &o) *this = Status(o);
    return *this;
  }
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  static Status Ok() noexcept {
    return {};
  }  // NOLINT(readability-identifier-naming): reads as a value

  bool ok() const noexcept { return code_ == StatusCode::kOk; }
  explicit operator bool() const noexcept { return ok(); }
  StatusCode code() const noexcept { return code_; }
  std::string_view message() const noexcept {
    return msg_ ? std::string_view(*msg_) : std::string_view();
  }

  // "ok", or "<code name>: <message>".
  std::string to_string() const;

  friend bool operator==(const Status& a, StatusCode c) noexcept { return a.code_ == c; }
  friend bool operator==(const Status& a, const Status& b) noexcept { return a.code_ == b.code_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::unique_ptr<std::string> msg_;
};

std::ostream& operator<<(std::ostream& os, const Status& s);
std::ostream& operator<<(std::ostream& os, StatusCode c);

namespace detail {
[[noreturn]] inline void result_value_of_error(const Status& status) noexcept {
  std::fprintf(stderr, "sluice::Result: value of a failed Result (%s)\n",
               status.to_string().c_str());
  std::abort();
}
}  // namespace detail

// Result<T> holds a T (status ok) or a non-ok Status. The C++20 stand-in for
// std::expected. Accessing the value of a failed Result is a programming
// error: in builds without NDEBUG it prints the status and aborts; with
// NDEBUG it is undefined behaviour. A Result made from an ok Status (no
// value) is not ok: it holds kInternal, so the mistake shows as an error.
template <class T>
class [[nodiscard]] Result {
 public:
  /* implicit */ Result(T value) : value_(std::move(value)) {}         // NOLINT
  /* implicit */ Result(Status status) : status_(std::move(status)) {  // NOLINT
    if (status_.ok()) status_ = ok_without_value();
  }
  /* implicit */ Result(StatusCode code) : status_(code) {  // NOLINT
    if (code == StatusCode::kOk) status_ = ok_without_value();
  }

  bool ok() const noexcept { return value_.has_value(); }
  explicit operator bool() const noexcept { return ok(); }
  const Status& status() const noexcept { return status_; }
  StatusCode code() const noexcept { return status_.code(); }

  T& value() & { return checked(); }
  const T& value() const& { return checked(); }
  T&& value() && { return std::move(checked()); }
  T& operator*() & { return checked(); }
  T&& operator*() && { return std::move(checked()); }
  T* operator->() { return &checked(); }
  const T* operator->() const { return &checked(); }

 private:
  T& checked() {
#ifndef NDEBUG
    if (!value_) detail::result_value_of_error(status_);
#endif
    return *value_;
  }
  const T& checked() const {
#ifndef NDEBUG
    if (!value_) detail::result_value_of_error(status_);
#endif
    return *value_;
  }
  static Status ok_without_value() {
    return {StatusCode::kInternal, "Result made from an ok status without a value"};
  }

  std::optional<T> value_;
  Status status_;
};

}  // namespace sluice
