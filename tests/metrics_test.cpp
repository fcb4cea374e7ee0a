// Every component's stats in the Prometheus text format: well formed (read
// back by a strict parser) and equal to the snapshot it renders.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "sluice/admission.h"
#include "sluice/batcher.h"
#include "sluice/queue.h"
#include "sluice/run_pipeline.h"
#include "sluice/stage.h"
#include "testutil/prometheus.h"

namespace sluice {
namespace {

using testutil::parse_prometheus;

TEST(PrometheusTest, TheParserRefusesWhatIsMalformed) {
  EXPECT_NE(parse_prometheus("x 1\n").error, "") << "a sample before its TYPE";
  EXPECT_NE(parse_prometheus("# TYPE x_total counter\nx_total{a=\"1} 2\n").error, "");
  EXPECT_NE(parse_prometheus("# TYPE x counter\nx 1\n").error, "") << "a counter without _total";
  EXPECT_NE(parse_prometheus("# TYPE x gauge\nx one\n").error, "");
  EXPECT_NE(
      parse_prometheus("# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n").error,
      "")
      << "buckets not cumulative";
  EXPECT_EQ(parse_prometheus("# TYPE x gauge\nx{a=\"q\\\"\"} 1\n").error, "");
}

TEST(PrometheusTest, AQueueRendersItsStats) {
  QueueOptions<int> o;
  o.capacity = 4;
  o.policy = OverflowPolicy::kDropNewest;
  Queue<int> q(o);
  for (int i = 0; i < 6; ++i) (void)q.try_push(int{i});
  (void)q.pull();
  const QueueStats s = q.stats();
  const auto e = parse_prometheus(to_prometheus(s, "orders \"eu\""));
  ASSERT_EQ(e.error, "");
  const std::string n = "{name=\"orders \\\"eu\\\"\"}";
  EXPECT_EQ(e.at("sluice_queue_pushed_total" + n), 4);
  EXPECT_EQ(e.at("sluice_queue_pulled_total" + n), 1);
  EXPECT_EQ(e.at("sluice_queue_dropped_total" + n), 2);
  EXPECT_EQ(e.at("sluice_queue_depth" + n), 3);
  EXPECT_EQ(e.at("sluice_queue_capacity" + n), 4);
  EXPECT_EQ(e.types.at("sluice_queue_depth"), "gauge");
}

TEST(PrometheusTest, AStageRendersItsStats) {
  Queue<int> in(16);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(in.push(int{i}).ok());
  in.close();
  StageOptions<int> o;
  o.width = 2;
  auto stage = Stage<int, int>::create(
      in,
      [](int v, const Context&) -> Result<int> {
        if (v == 3) return Status(StatusCode::kInvalidArgument, "three");
        return v;
      },
      std::move(o));
  ASSERT_TRUE(stage.ok()) << stage.status();
  int out = 0;
  for (auto& r : (*stage)->output()) out += r.ok() ? 1 : 0;
  ASSERT_TRUE((*stage)->wait().ok());
  EXPECT_EQ(out, 9);
  const auto e = parse_prometheus(to_prometheus((*stage)->stats(), "resize"));
  ASSERT_EQ(e.error, "");
  EXPECT_EQ(e.at("sluice_stage_items_in_total{name=\"resize\"}"), 10);
  EXPECT_EQ(e.at("sluice_stage_items_out_total{name=\"resize\"}"), 10);
  EXPECT_EQ(e.at("sluice_stage_errors_total{name=\"resize\"}"), 1);
  EXPECT_EQ(e.at("sluice_stage_width{name=\"resize\"}"), 2);
}

TEST(PrometheusTest, APipelineRendersItsStats) {
  int i = 0;
  auto r = run_pipeline(
      [&]() -> std::optional<int> { return i < 100 ? std::optional(i++) : std::nullopt; },
      [](int v, const Context&) -> Result<int> { return v; },
      [](Result<int>&&) { return Status::Ok(); }, {.width = 2});
  ASSERT_TRUE(r.ok()) << r.status();
  const auto e = parse_prometheus(to_prometheus(*r, "p"));
  ASSERT_EQ(e.error, "");
  EXPECT_EQ(e.at("sluice_pipeline_items_total{name=\"p\"}"), 100);
  EXPECT_EQ(e.at("sluice_pipeline_sunk_total{name=\"p\"}"), 100);
}

TEST(PrometheusTest, AnAdmissionRendersItsStats) {
  auto adm = Admission::create(2);
  ASSERT_TRUE(adm.ok()) << adm.status();
  auto p1 = (*adm)->try_acquire();
  auto p2 = (*adm)->try_acquire();
  ASSERT_TRUE(p1.ok() && p2.ok());
  EXPECT_EQ((*adm)->try_acquire().status().code(), StatusCode::kWouldBlock);
  const auto e = parse_prometheus(to_prometheus((*adm)->stats(), "db"));
  ASSERT_EQ(e.error, "");
  EXPECT_EQ(e.at("sluice_admission_admitted_total{name=\"db\"}"), 2);
  EXPECT_EQ(e.at("sluice_admission_refused_total{name=\"db\"}"), 1);
  EXPECT_EQ(e.at("sluice_admission_in_flight{name=\"db\"}"), 2);
  EXPECT_EQ(e.at("sluice_admission_peak{name=\"db\"}"), 2);
  EXPECT_EQ(e.at("sluice_admission_bound{name=\"db\"}"), 2);
  EXPECT_EQ(e.types.at("sluice_admission_waited_seconds_total"), "counter");
}

TEST(PrometheusTest, TheBatcherTextIsWellFormed) {
  BatcherOptions<int> o;
  o.name = "orders";
  o.max_batch_size = 2;
  // Only the size trigger: with the default 10 ms, a descheduled adder
  // (CI saw it under load) let the time trigger send a batch of one.
  o.max_batch_delay = std::chrono::hours(1);
  o.sink = [](std::vector<int>&&, const Context&) { return Status::Ok(); };
  auto b = std::move(Batcher<int>::create(std::move(o))).value();
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(b->add(int{i}).ok());
  ASSERT_TRUE(b->shutdown().ok());
  const auto e = parse_prometheus(b->prometheus());
  ASSERT_EQ(e.error, "");
  EXPECT_EQ(e.at("batcher_enqueued_total{name=\"orders\"}"), 4);
  EXPECT_EQ(e.at("batcher_batch_size_items_count{name=\"orders\"}"), 2);
}

}  // namespace
}  // namespace sluice
