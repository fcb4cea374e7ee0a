#include "log/notify.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <stop_token>

namespace sluice::log {

Status Notify::open(FileSystem& fs, const std::string& dir) {
  auto f = fs.open(dir + "/NOTIFY", OpenMode::kCreate);
  if (!f.ok()) return f.status();
  auto size = (*f)->size();
  if (!size.ok()) return size.status();
  if (*size < kNotifyFileSize) {
    if (Status s = (*f)->truncate(kNotifyFileSize); !s.ok()) return s;  // zeros; openers agree
  }
  char* p = (*f)->map(kNotifyFileSize);
  if (p == nullptr) return {StatusCode::kIOError, "map " + dir + "/NOTIFY failed"};
  file_ = std::move(*f);
  page_ = reinterpret_cast<NotifyPage*>(p);
  return Status::Ok();
}

void Notify::publish(std::uint64_t seq) {
  std::atomic_ref<std::uint64_t>(page_->visible_seq).store(seq, std::memory_order_release);
  wake_if_wanted(&page_->seq, &page_->want);
}

void Notify::acked() { wake_if_wanted(&page_->acked_seq, &page_->acked_want); }

void Notify::close() {
  std::atomic_ref<std::uint32_t>(page_->closed).store(1);  // seq_cst: before the wakes' exchange
  wake_if_wanted(&page_->seq, &page_->want);
  wake_if_wanted(&page_->acked_seq, &page_->acked_want);
}

void futex_wait_shared(std::uint32_t* word, std::uint32_t expected, const Context& ctx) {
  std::stop_callback on_stop(ctx.token(), [word] {
    std::atomic_ref<std::uint32_t>(*word).fetch_add(1);  // every sleeper wakes and looks again
    futex_wake_shared(word);
  });
  timespec at{};
  const timespec* deadline = nullptr;
  if (const auto& d = ctx.deadline()) {  // steady_clock is CLOCK_MONOTONIC
    const auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(d->time_since_epoch()).count();
    at.tv_sec = ns / 1000000000;
    at.tv_nsec = ns % 1000000000;
    deadline = &at;
  }
  if (ctx.stop_requested()) return;
  ::syscall(SYS_futex, word, FUTEX_WAIT_BITSET, expected, deadline, nullptr,
            FUTEX_BITSET_MATCH_ANY);
}

void futex_wake_shared(std::uint32_t* word) {
  ::syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

void wake_if_wanted(std::uint32_t* seq, std::uint32_t* want) {
  // A full barrier after what the sleeper looks for was published (Dekker
  // with the sleeper's store to `want` and its second look).
  if (std::atomic_ref<std::uint32_t>(*want).exchange(0) == 0) return;
  std::atomic_ref<std::uint32_t>(*seq).fetch_add(1);
  futex_wake_shared(seq);
}

}  // namespace sluice::log
