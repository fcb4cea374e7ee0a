// Admission::acquire with a Context that has already ended, as Queue treats
// one: a stop requested before the call wins even when a place is free
// (kCancelled, nothing held); a deadline only bounds waiting, so a place that
// is free now is taken whatever the deadline says (docs/design.md, "Decisions").
#include <gtest/gtest.h>

#include <chrono>
#include <stop_token>

#include "sluice/admission.h"
#include "sluice/queue.h"
#include "sluice/run_pipeline.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;

TEST(AdmissionCancelEdgesTest, ACancelledContextGetsNoPermitEvenWithAPlaceFree) {
  Admission admit(2);
  std::stop_source stop;
  stop.request_stop();
  const Context cancelled(stop.get_token());

  Result<Permit> p = admit.acquire(cancelled);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.code(), StatusCode::kCancelled);
  const AdmissionStats s = admit.stats();
  EXPECT_EQ(s.in_flight, 0u);
  EXPECT_EQ(s.admitted, 0u);
  EXPECT_EQ(s.refused, 1u);

  // The same as Queue: a stop requested before the call, room or not.
  Queue<int> q(4);
  EXPECT_EQ(q.push(1, cancelled).code(), StatusCode::kCancelled);
}

TEST(AdmissionCancelEdgesTest, ACancelledContextWithAPassedDeadlineIsCancelled) {
  Admission admit(1);
  std::stop_source stop;
  stop.request_stop();
  Result<Permit> p = admit.acquire(Context(stop.get_token(), Context::Clock::now() - 1s));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.code(), StatusCode::kCancelled);  // cancellation wins (context.h)
  EXPECT_EQ(admit.stats().in_flight, 0u);
}

TEST(AdmissionCancelEdgesTest, APassedDeadlineStillTakesAFreePlaceAndOnlyBoundsWaiting) {
  Admission admit(1);
  const Context late = with_timeout(-1s);
  ASSERT_TRUE(late.expired());
  Result<Permit> p = admit.acquire(late);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_TRUE(p->held());
  // Queue does the same with room.
  Queue<int> q(1);
  EXPECT_TRUE(q.push(1, late).ok());
  // Full: the deadline ends the (zero-length) wait.
  Result<Permit> again = admit.acquire(late);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(q.push(2, late).code(), StatusCode::kDeadlineExceeded);
}

// run_pipeline with a context stopped before the run: no item is taken from
// the source and every place stays free.
TEST(AdmissionCancelEdgesTest, RunPipelineWithACancelledContextTakesNothing) {
  Admission admit(4);
  std::stop_source stop;
  stop.request_stop();
  int produced = 0;
  PipelineOptions opt;
  opt.width = 2;
  opt.admission = &admit;
  auto r = run_pipeline(
      [&]() -> std::optional<int> {
        if (produced == 100) return std::nullopt;
        return produced++;
      },
      [](int x, const Context&) -> Result<int> { return x; },
      [](Result<int>&&) { return Status::Ok(); }, opt, Context(stop.get_token()));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), StatusCode::kCancelled);
  EXPECT_EQ(produced, 0);
  EXPECT_EQ(admit.stats().in_flight, 0u);
  EXPECT_EQ(admit.stats().admitted, 0u);
}

}  // namespace
}  // namespace sluice
