// A bounded in-memory SpillStore for testing the queue's Spill policy logic.
// The disk-backed store arrives with the durable log.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <utility>

#include "sluice/spill_store.h"

namespace sluice::testutil {

template <class T>
class MemorySpillStore final : public SpillStore<T> {
 public:
  explicit MemorySpillStore(std::uint64_t budget) : budget_(budget) {}
  Status put(T& item) override {
    if (items_.size() >= budget_) return {StatusCode::kRejected, "spill budget spent"};
    items_.push_back(std::move(item));
    return Status::Ok();
  }
  Status take(std::optional<T>& out) override {
    if (items_.empty()) return StatusCode::kWouldBlock;
    out.emplace(std::move(items_.front()));
    items_.pop_front();
    return Status::Ok();
  }
  std::uint64_t size() const override { return items_.size(); }

 private:
  std::uint64_t budget_;
  std::deque<T> items_;
};

}  // namespace sluice::testutil
