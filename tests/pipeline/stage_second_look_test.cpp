// A second look at Stage (../shared/seeds/fan-out-stage.md): guarantees that
// earlier tests left unchecked, each with the case that broke it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "sluice/stage.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using testutil::eventually;

// True once thread `tid` has exited (its /proc entry is gone).
bool exited(pid_t tid) {
  struct stat st {};
  return stat(("/proc/self/task/" + std::to_string(tid)).c_str(), &st) != 0;
}

// First-success: the first success waits for room in a full output while
// another worker's item fails. That worker must not stop the stage under
// the waiting success: it was lost and wait() still said kOk ("kOk if a
// success was written").
TEST(StageSecondLook, FirstSuccessWaitingForRoomIsNotStoppedByAnotherWorker) {
  Queue<int> in(8);
  std::atomic<Stage<int, int>*> stage{nullptr};
  std::atomic<pid_t> failing_tid{0};
  StageOptions<int> o;
  o.width = 2;
  o.errors = ErrorMode::kFirstSuccess;
  o.output_capacity = 1;
  auto fn = [&](int&& x, const Context&) -> Result<int> {
    if (x == 1) return 1;  // the success
    failing_tid.store(gettid());
    // The failure: returns once the success waits for room in the output.
    EXPECT_TRUE(eventually([&] {
      Stage<int, int>* s = stage.load();
      return s != nullptr && s->stats().blocked_on_output_s > 0;
    }));
    return Status(StatusCode::kInternal, "replica down");
  };
  auto r = Stage<int, int>::create(in, fn, o);
  ASSERT_TRUE(r.ok()) << r.status();
  auto st = std::move(r).value();
  ASSERT_TRUE(st->output().push(Result<int>(0)).ok());  // fills the output
  stage.store(st.get());
  ASSERT_TRUE(in.push(1).ok());
  ASSERT_TRUE(in.push(2).ok());
  in.close();
  // Let the failing worker finish (the input is drained: it exits) before
  // making room.
  ASSERT_TRUE(eventually([&] { return failing_tid.load() != 0 && exited(failing_tid.load()); }));
  std::vector<int> got;
  for (auto& res : st->output()) {
    ASSERT_TRUE(res.ok()) << res.status();
    got.push_back(*res);
  }
  EXPECT_EQ(st->wait(), Status::Ok());
  EXPECT_EQ(got, (std::vector<int>{0, 1}));
}

// First-success: a cancel from outside while the success waits for room:
// it is never written, so wait() says kCancelled, not kOk.
TEST(StageSecondLook, FirstSuccessCancelledBeforeItsWriteReportsCancelled) {
  Queue<int> in(8);
  StageOptions<int> o;
  o.width = 1;
  o.errors = ErrorMode::kFirstSuccess;
  o.output_capacity = 1;
  auto r = Stage<int, int>::create(
      in, [](int&& x, const Context&) -> Result<int> { return x; }, o);
  ASSERT_TRUE(r.ok()) << r.status();
  auto st = std::move(r).value();
  ASSERT_TRUE(st->output().push(Result<int>(0)).ok());  // fills the output
  ASSERT_TRUE(in.push(1).ok());
  in.close();
  ASSERT_TRUE(eventually([&] { return st->stats().blocked_on_output_s > 0; }));
  st->cancel();
  EXPECT_EQ(st->wait().code(), StatusCode::kCancelled);
  std::vector<int> got;
  for (auto& res : st->output()) got.push_back(*res);
  EXPECT_EQ(got, (std::vector<int>{0}));
}

}  // namespace
}  // namespace sluice
