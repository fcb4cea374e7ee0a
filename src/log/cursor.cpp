// LogCursor (sluice/log/cursor.h): a Reader with no position file, no lock
// and no registration with the topic, so nothing it does is seen by the
// writer, retention or the bound.
#include "sluice/log/cursor.h"

#include <algorithm>

#include "log/reader.h"
#include "log/topic_impl.h"
#include "sluice/log/topic.h"

namespace sluice {

struct LogCursor::Impl {
  explicit Impl(std::shared_ptr<Topic::Impl> t) : r(std::move(t)) {}
  log::Reader r;
  std::uint64_t start = 0;
  std::uint64_t capped_at_start = 0;  // from start on, gone before the seek found them
};

LogCursor::LogCursor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LogCursor::~LogCursor() = default;

std::uint64_t LogCursor::start() const { return impl_->start; }
std::uint64_t LogCursor::position() const { return impl_->r.next_seq(); }
std::uint64_t LogCursor::skipped() const {
  return impl_->r.corrupt() + impl_->r.gaps() + impl_->r.capped() + impl_->capped_at_start;
}

std::uint64_t LogCursor::skipped_corrupt() const { return impl_->r.corrupt(); }

Status LogCursor::next_batch(std::vector<LogMessage>& out, std::size_t max) {
  if (max == 0) return {StatusCode::kInvalidArgument, "next_batch: max must be at least 1"};
  log::Reader& r = impl_->r;
  const std::size_t base = out.size();
  std::size_t got = 0;
  // A read-only topic learns of the writer's records only by looking: once
  // when this cursor has caught up with what it knows.
  bool looked = !r.topic().reader;
  Status s;
  while (got < max) {
    if (out.size() == base + got) out.emplace_back();
    bool have = false;
    s = r.read_one(&out[base + got], have);
    if (!s.ok()) break;
    if (have) {
      ++got;
      continue;
    }
    if (looked) break;
    r.topic().refresh();
    looked = true;
  }
  out.resize(base + got);
  return got > 0 ? Status::Ok() : s;
}

Result<std::unique_ptr<LogCursor>> Topic::cursor(std::uint64_t from_seq) const {
  Impl& t = *impl_;
  if (t.reader) t.refresh();
  std::uint64_t start = 0;
  {
    log::MutexLock lk(t.mu);
    if (from_seq > t.next_seq) {
      return Status(StatusCode::kInvalidArgument, "cursor from seq " + std::to_string(from_seq) +
                                                      ", past the end of the topic (next seq " +
                                                      std::to_string(t.next_seq) + ")");
    }
    start = std::max(from_seq, t.first_seq);
  }
  auto c = std::make_unique<LogCursor::Impl>(impl_);
  c->start = start;
  c->r.seek(start);
  // A cap may have deleted records from `start` on since it was taken (the
  // lock was let go): the seek lands on the oldest record left, past them.
  c->capped_at_start = c->r.next_seq() - start;
  return std::unique_ptr<LogCursor>(new LogCursor(std::move(c)));
}

}  // namespace sluice
