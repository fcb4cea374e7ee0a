// The Queue's Spill policy at its edges: push_all after close, a store error.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "sluice/queue.h"
#include "testutil/memory_spill_store.h"

namespace sluice {
namespace {

// "pushes after [close] return kClosed" (queue.h). push_all on a closed
// queue whose store holds items says kRejected and counts a rejection.
TEST(QueueSpillEdgesTest, PushAllAfterCloseIsClosedWhileTheStoreHoldsItems) {
  auto store = std::make_shared<testutil::MemorySpillStore<int>>(10);
  QueueOptions<int> o;
  o.capacity = 2;
  o.policy = OverflowPolicy::kSpill;
  o.spill_store = store;
  Queue<int> q(o);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(q.push(int{i}).ok());  // 2 in memory, 1 spilled
  q.close();
  std::vector<int> group{7};
  EXPECT_EQ(q.try_push_all(group).code(), StatusCode::kClosed);
  EXPECT_EQ(q.push_all(group).code(), StatusCode::kClosed);
  EXPECT_EQ(q.stats().rejected, 0u);
}

// A store whose take() fails (SpillStore allows any error: an I/O error of
// the disk-backed store). The queue must not report "closed and drained"
// while the store still holds an item.
class FailingTakeStore final : public SpillStore<int> {
 public:
  Status put(int& item) override {
    items_.push_back(item);
    return Status::Ok();
  }
  Status take(std::optional<int>&) override {
    return {StatusCode::kIOError, "read spill segment: Input/output error"};
  }
  std::uint64_t size() const override { return items_.size(); }

 private:
  std::vector<int> items_;
};

TEST(QueueSpillEdgesTest, AStoreErrorIsNotReportedAsClosedAndDrained) {
  auto store = std::make_shared<FailingTakeStore>();
  QueueOptions<int> o;
  o.capacity = 1;
  o.policy = OverflowPolicy::kSpill;
  o.spill_store = store;
  Queue<int> q(o);
  ASSERT_TRUE(q.push(0).ok());  // memory
  ASSERT_TRUE(q.push(1).ok());  // spilled
  q.close();
  auto first = q.try_pull();
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, 0);
  auto second = q.try_pull();
  // Item 1 is still in the store: kClosed says the queue is drained.
  EXPECT_NE(second.code(), StatusCode::kClosed)
      << "spill_depth=" << q.stats().spill_depth << " but pull says closed and drained";
  EXPECT_EQ(second.code(), StatusCode::kIOError);
}

}  // namespace
}  // namespace sluice
