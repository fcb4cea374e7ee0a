// The Redis store's Streams topics: their writer and reader (competing
// consumers of one channel, kept claimed while they live; see redis_store.h
// and docs/cli.md, "Redis Streams topics").
#include <algorithm>
#include <charconv>
#include <chrono>
#include <optional>
#include <utility>

#include "sluice/redis/stream_topic.h"
#include "store/redis_store.h"

namespace sluice::store {
namespace {

class StreamWriter final : public QueueWriter {
 public:
  explicit StreamWriter(StreamTopic t) : t_(std::move(t)) {}

  Status put(std::span<const std::string_view> batch, const Context& ctx,
             std::size_t* done) override {
    const auto big = std::find_if(batch.begin(), batch.end(),
                                  [](std::string_view m) { return m.size() > kMaxMessageBytes; });
    std::size_t n = 0;
    Status s = t_.append_batch(batch.first(static_cast<std::size_t>(big - batch.begin())), ctx, &n);
    if (done != nullptr) *done = n;
    if (!s.ok() || big == batch.end()) return s;
    return {StatusCode::kInvalidArgument, too_large(big->size())};
  }
  std::size_t in_doubt() const override { return t_.in_doubt(); }
  Status close() override { return t_.close(); }
  std::size_t max_message_bytes() const override { return kMaxMessageBytes; }
  double blocked_seconds() const override {
    return std::chrono::duration<double>(t_.bound_wait()).count();
  }

 private:
  StreamTopic t_;
};

// A Streams id's time: its milliseconds part ("<ms>-<n>").
std::optional<std::chrono::system_clock::time_point> id_time(std::string_view id) {
  std::uint64_t ms = 0;
  const auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), ms);
  if (ec != std::errc() || end == id.data()) return std::nullopt;
  // An id another client gave past what the clock holds (year 2262): no time
  // to give, rather than one that wrapped around.
  using std::chrono::system_clock;
  constexpr auto kMost =
      std::chrono::duration_cast<std::chrono::milliseconds>(system_clock::duration::max()).count();
  if (ms > static_cast<std::uint64_t>(kMost)) return std::nullopt;
  return system_clock::time_point(std::chrono::duration_cast<system_clock::duration>(
      std::chrono::milliseconds(static_cast<std::int64_t>(ms))));
}

// A competing consumer of one channel. While it lives, its channel handle
// keeps what it holds claimed (StreamTopicOptions::keep_alive), however long
// the program takes. What it got and did not acknowledge is given back
// (without counting a delivery) when it goes, so the channel's next read
// gets it at once; if the process dies instead, another reader claims it
// after the channel's visibility timeout (30 s unless set).
class StreamReader final : public QueueReader {
 public:
  explicit StreamReader(StreamChannel c) : c_(std::move(c)) {}
  ~StreamReader() override {
    if (!held_.empty()) (void)c_.give_back(held_);  // best effort: else the timeout does it
  }
  StreamReader(const StreamReader&) = delete;
  StreamReader& operator=(const StreamReader&) = delete;

  using QueueReader::get;
  Status get(std::vector<StoreMessage>& out, std::size_t max, const Context& ctx) override {
    got_.clear();
    Status s = c_.next_batch(got_, std::max<std::size_t>(max, 1), ctx);
    for (StreamMessage& m : got_) {
      StoreMessage& o = out.emplace_back();
      o.data = std::move(m.payload);
      o.id = m.id;
      o.time = id_time(m.id);
      o.deliveries = m.deliveries;
      held_.push_back(std::move(m.id));
    }
    return s;
  }
  Status ack_prefix(std::uint64_t n) override {
    if (n > delivered()) return beyond(n, delivered());
    if (n <= acked_) return Status::Ok();
    const auto take = static_cast<std::ptrdiff_t>(n - acked_);
    // On failure the next call sends them again: acknowledging twice is harmless.
    // kInUse: the others were acknowledged, and those another reader holds
    // now (this one lost them: a seek, or no keep-alive round for a whole
    // timeout) are its to acknowledge; asking again would say the same.
    if (Status s = c_.ack(std::span(held_).first(static_cast<std::size_t>(take)));
        !s.ok() && s.code() != StatusCode::kInUse) {
      return s;
    }
    held_.erase(held_.begin(), held_.begin() + take);
    acked_ = n;
    return Status::Ok();
  }
  std::uint64_t delivered() const override { return acked_ + held_.size(); }
  std::uint64_t acked() const override { return acked_; }
  Status release() override {
    if (Status s = c_.give_back(held_); !s.ok()) return s;  // again after a failure: harmless
    held_.clear();
    return Status::Ok();
  }

 private:
  StreamChannel c_;
  std::vector<StreamMessage> got_;
  std::vector<std::string> held_;  // ids got and not acknowledged, oldest first
  std::uint64_t acked_ = 0;        // the acknowledged prefix's length
};

// A channel's unacknowledged messages, a page per call (StreamTopic::peek,
// one script each), continuing after the last id shown.
// Pages up to the newest id when the peek began: a producer that outruns
// the peek does not keep it going.
class StreamPeek final : public QueuePeek {
 public:
  StreamPeek(StreamTopic t, std::string channel, std::string after_id, std::string until_id)
      : t_(std::move(t)),
        channel_(std::move(channel)),
        after_(std::move(after_id)),
        until_(std::move(until_id)) {}
  Status next(std::vector<StoreMessage>& out, std::size_t max) override {
    auto page = t_.peek(channel_, after_, max, until_);
    if (!page.ok()) return page.status();
    for (StreamMessage& m : *page) {
      StoreMessage& o = out.emplace_back();
      o.data = std::move(m.payload);
      o.id = m.id;
      o.time = id_time(m.id);
      o.deliveries = m.deliveries;
      after_ = std::move(m.id);
    }
    return Status::Ok();
  }

 private:
  StreamTopic t_;
  std::string channel_;
  std::string after_;  // empty: from the channel's first unacknowledged message
  const std::string until_;
};

}  // namespace

Result<std::unique_ptr<QueuePeek>> stream_peek(StreamTopic t, std::string channel,
                                               std::string after_id) {
  auto until = t.newest_id();
  if (!until.ok()) return until.status();
  return std::unique_ptr<QueuePeek>(std::make_unique<StreamPeek>(
      std::move(t), std::move(channel), std::move(after_id), std::move(*until)));
}

std::unique_ptr<QueueWriter> stream_writer(StreamTopic t) {
  return std::make_unique<StreamWriter>(std::move(t));
}

std::unique_ptr<QueueReader> stream_reader(StreamChannel c) {
  return std::make_unique<StreamReader>(std::move(c));
}

}  // namespace sluice::store
