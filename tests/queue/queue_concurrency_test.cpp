// Multi-threaded properties: the cancellation race, per-producer FIFO, the
// capacity bound under load, exactly-once delivery with N x M threads.
// Typed: each runs against Queue<T> (several producers and consumers) and
// SpscQueue<T> (one of each).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <stop_token>
#include <thread>
#include <vector>

#include "queue/queue_families.h"
#include "sluice/queue.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using testing_families::kMaxSides;
using testing_families::QueueOf;

template <class Family>
class QueueConcurrencyTest : public ::testing::Test {};
TYPED_TEST_SUITE(QueueConcurrencyTest, testing_families::QueueFamilies,
                 testing_families::FamilyName);

// The seed's race rule: a push cancelled while a pull arrives either enqueued
// the item (kOk, moved from, delivered exactly once) or did not (item still
// with the caller, never delivered): never both.
template <class Family>
void cancellation_race(std::size_t capacity, int iterations) {
  int enqueued = 0, withdrawn = 0;
  // On a loaded machine one outcome can dominate: go on (up to 20x) until
  // both have been seen.
  for (int iter = 0;
       iter < iterations || ((enqueued == 0 || withdrawn == 0) && iter < 20 * iterations); ++iter) {
    QueueOf<Family, std::unique_ptr<int>> q(capacity);
    if (capacity > 0) {
      for (std::size_t i = 0; i < capacity; ++i)
        ASSERT_TRUE(q.push(std::make_unique<int>(-1)).ok());
    }
    std::stop_source stop;
    Status result;
    std::unique_ptr<int> item = std::make_unique<int>(iter);
    std::stop_source pusher_done;  // ends the puller's wait once the push has an outcome
    std::vector<int> delivered;
    {
      std::jthread pusher([&] {
        result = q.push(std::move(item), Context(stop.get_token()));
        pusher_done.request_stop();
      });
      std::jthread puller([&] {
        if (iter % 2 == 0) stop.request_stop();
        auto r = q.pull(Context(pusher_done.get_token()));
        if (r.ok()) delivered.push_back(**r);
        if (iter % 2 == 1) stop.request_stop();
      });
    }
    q.close();
    for (auto& v : q) delivered.push_back(*v);
    const auto copies = std::count(delivered.begin(), delivered.end(), iter);
    if (result.ok()) {
      ++enqueued;
      ASSERT_EQ(item, nullptr);
      ASSERT_EQ(copies, 1) << "iteration " << iter;
    } else {
      ++withdrawn;
      ASSERT_TRUE(result.code() == StatusCode::kCancelled) << result;
      ASSERT_NE(item, nullptr);
      ASSERT_EQ(*item, iter);
      ASSERT_EQ(copies, 0) << "iteration " << iter;
    }
    ASSERT_EQ(std::count(delivered.begin(), delivered.end(), -1), static_cast<long>(capacity));
  }
  // Both outcomes must actually occur, or the race was not exercised.
  EXPECT_GT(enqueued, 0);
  EXPECT_GT(withdrawn, 0);
}

TYPED_TEST(QueueConcurrencyTest, CancelledPushIsEnqueuedOrNotNeverBoth_Capacity1) {
  cancellation_race<TypeParam>(1, 2000);
}

TYPED_TEST(QueueConcurrencyTest, CancelledPushIsEnqueuedOrNotNeverBoth_Rendezvous) {
  cancellation_race<TypeParam>(0, 2000);
}

TYPED_TEST(QueueConcurrencyTest, PerProducerFifoSeenByOneConsumer) {
  constexpr int kProducers = TypeParam::kSpsc ? 1 : 4, kEach = 50000;
  QueueOf<TypeParam, std::uint64_t> q(16);
  std::vector<std::jthread> producers;
  auto handles = testing_families::producers(q, kProducers);
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([p, h = std::move(handles[p])]() mutable {
      for (std::uint64_t i = 0; i < kEach; ++i) {
        if (i % 7 == 0) {
          std::vector<std::uint64_t> batch{(std::uint64_t(p) << 32) | i};
          ASSERT_EQ(h.push_many(batch).count, 1u);
        } else {
          ASSERT_TRUE(h.push((std::uint64_t(p) << 32) | i).ok());
        }
      }
    });
  }
  std::vector<std::int64_t> last(kProducers, -1);
  std::vector<std::uint64_t> batch;
  std::uint64_t total = 0;
  for (;;) {
    batch.clear();
    BulkResult r = q.pull_many(std::back_inserter(batch), 5);
    if (r.status == StatusCode::kClosed) break;
    for (std::uint64_t v : batch) {
      const auto p = static_cast<std::size_t>(v >> 32);
      const auto seq = static_cast<std::int64_t>(v & 0xffffffffu);
      ASSERT_EQ(seq, last[p] + 1) << "producer " << p;
      last[p] = seq;
      ++total;
    }
  }
  EXPECT_EQ(total, std::uint64_t{kProducers} * kEach);
}

// Counts live items that are inside the queue: an item is "in" between a
// successful push and the pull that returns it. A test-side count like this
// can only over-report (increments before the push, decrements after the pull).
TYPED_TEST(QueueConcurrencyTest, CapacityBoundHoldsUnderLoad) {
  constexpr std::size_t kCap = 8;
  constexpr int kProducers = kMaxSides<TypeParam>, kConsumers = kMaxSides<TypeParam>;
  constexpr int kEach = 30000;
  QueueOf<TypeParam, int> q(kCap);
  std::atomic<int> in_flight{0}, max_in_flight{0};
  std::vector<std::jthread> threads;
  auto handles = testing_families::producers(q, kProducers);
  for (int p = 0; p < kProducers; ++p) {
    threads.emplace_back([&, h = std::move(handles[p])]() mutable {
      for (int i = 0; i < kEach; ++i) {
        const int now = in_flight.fetch_add(1) + 1;
        int m = max_in_flight.load();
        while (now > m && !max_in_flight.compare_exchange_weak(m, now)) {
        }
        ASSERT_TRUE(h.push(int{i}).ok());
      }
    });
  }
  for (int c = 0; c < kConsumers; ++c) {
    threads.emplace_back([&] {
      for ([[maybe_unused]] int& v : q) in_flight.fetch_sub(1);
    });
  }
  threads.clear();
  const QueueStats s = q.stats();
  EXPECT_LE(s.high_watermark, kCap);
  EXPECT_GT(s.high_watermark, 0u);
  // Each producer may hold one counted item not yet accepted.
  EXPECT_LE(max_in_flight.load(), static_cast<int>(kCap) + kProducers + kConsumers);
  EXPECT_EQ(s.pushed, s.pulled);
}

TYPED_TEST(QueueConcurrencyTest, CloseRacingWithPushesLosesNothingAccepted) {
  for (int iter = 0; iter < 200; ++iter) {
    QueueOf<TypeParam, int> q(4);
    std::atomic<int> accepted{0};
    std::atomic<long long> accepted_sum{0};
    long long pulled_sum = 0;
    int pulled = 0;
    {
      std::vector<std::jthread> producers;
      for (int p = 0; p < std::min(2, kMaxSides<TypeParam>); ++p) {
        producers.emplace_back([&, p] {
          for (int i = 1; i < 200; ++i) {
            const int v = p * 1000 + i;
            if (q.push(int{v}).ok()) {
              accepted++;
              accepted_sum += v;
            } else {
              return;
            }
          }
        });
      }
      std::jthread consumer([&] {
        for (int& v : q) {
          pulled++;
          pulled_sum += v;
        }
      });
      std::jthread closer([&] {
        for (int i = 0; i < iter; ++i) std::this_thread::yield();
        q.close();
      });
    }
    ASSERT_EQ(pulled, accepted.load());
    ASSERT_EQ(pulled_sum, accepted_sum.load());
  }
}

}  // namespace
}  // namespace sluice
