// Edges of the queue core: who gets a wake-up when several threads wait,
// evicting pushes racing pulls and close, and selectors parked on several
// queues. Threads are held at a chosen point by an item whose move blocks,
// or by a spill store whose read blocks, on a Gate; "parked for good" is
// read from /proc (testutil/threads.h), never guessed with a sleep.
#include <gtest/gtest.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <stop_token>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "sluice/queue.h"
#include "sluice/select.h"
#include "sluice/spill_store.h"
#include "testutil/memory_spill_store.h"
#include "testutil/threads.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testutil::eventually;
using testutil::parked_for_good;

// Holds one thread at a point: once armed, the (skip + 1)-th thread to reach
// hold_here() waits there until release().
class Gate {
 public:
  void arm(int skip = 0) {
    skip_.store(skip);
    state_.store(kArmed);
  }
  void hold_here() {
    if (state_.load() != kArmed) return;
    if (skip_.fetch_sub(1) > 0) return;
    int armed = kArmed;
    if (!state_.compare_exchange_strong(armed, kHeld)) return;
    state_.notify_all();
    state_.wait(kHeld);
  }
  void wait_held() {
    while (state_.load() == kArmed) state_.wait(kArmed);
  }
  void release() {
    state_.store(kReleased);
    state_.notify_all();
  }

 private:
  static constexpr int kIdle = 0, kArmed = 1, kHeld = 2, kReleased = 3;
  std::atomic<int> state_{kIdle};
  std::atomic<int> skip_{0};
};

// An item whose move constructor passes through `gate` (if any).
struct Item {
  int id = 0;
  Gate* gate = nullptr;
  explicit Item(int i, Gate* g = nullptr) : id(i), gate(g) {}
  Item(Item&& o) noexcept : id(o.id), gate(o.gate) {
    if (gate != nullptr) gate->hold_here();
  }
  Item& operator=(Item&& o) noexcept {
    id = o.id;
    gate = o.gate;
    return *this;
  }
};

// A spill store holding items it cannot read back yet: take() fails (as a
// disk store's failed read would), after passing through `gate`.
class UnreadableStore final : public SpillStore<Item> {
 public:
  explicit UnreadableStore(Gate* gate) : gate_(gate) {}
  Status put(Item&) override {
    ++size_;
    return Status::Ok();
  }
  Status take(std::optional<Item>&) override {
    gate_->hold_here();
    return {StatusCode::kUnavailable, "read failed"};
  }
  std::uint64_t size() const override { return size_; }

 private:
  Gate* gate_;
  std::uint64_t size_ = 0;
};

// A queue whose pulls reach its spill store (which fails them): a pull or
// a selector's look at it can be held inside the store's take().
std::unique_ptr<Queue<Item>> unreadable_queue(Gate* gate) {
  QueueOptions<Item> o;
  o.capacity = 1;
  o.policy = OverflowPolicy::kSpill;
  o.spill_store = std::make_shared<UnreadableStore>(gate);
  auto q = std::make_unique<Queue<Item>>(std::move(o));
  EXPECT_TRUE(q->push(Item(1)).ok());  // memory
  EXPECT_TRUE(q->push(Item(2)).ok());  // the store: pulls now look there
  EXPECT_TRUE(q->try_pull().ok());     // memory's item; the store's stays unreadable
  return q;
}

// A thread that records its id, for parked_for_good().
struct Tid {
  std::atomic<pid_t> tid{0};
  void set() { tid.store(gettid()); }
  bool parked() const { return tid.load() != 0 && parked_for_good(tid.load()); }
};

// A selector woken by one of its queues looks at all of them and finds
// nothing. While it looks, a push to another of its queues picks it (it is
// still on that queue's wait list), and then its context ends. The
// selector delisted after its failed look and dropped that wake-up on the
// way out, so a plain puller parked behind it on that queue slept for good
// beside the item.
TEST(SelectorCoreEdgesTest, AWakeUpThatArrivesDuringAFailedLookIsPassedOnWhenTheWaitEnds) {
  Gate gate;
  Queue<Item> q(4);
  auto slow = unreadable_queue(&gate);
  Selector<Item> sel{&q, slow.get()};                // its first look: q, then slow
  auto stop = std::make_unique<std::stop_source>();  // on the heap: GCC 12 -O1
  Tid sel_tid;
  Status sel_status = StatusCode::kInternal;
  std::thread selector([&] {
    sel_tid.set();
    sel_status = sel.pull(Context(stop->get_token())).status();
  });
  ASSERT_TRUE(eventually([&] { return sel_tid.parked(); }));
  Tid puller_tid;
  std::atomic<bool> pulled{false};
  int pulled_id = -1;
  std::thread puller([&] {
    puller_tid.set();
    Result<Item> r = q.pull();
    if (r.ok()) pulled_id = r->id;
    pulled.store(true);
  });
  ASSERT_TRUE(eventually([&] { return puller_tid.parked(); }));  // behind the selector on q

  gate.arm();
  ASSERT_TRUE(slow->push(Item(3)).ok());  // spilled: wakes the selector; q is empty, then
  gate.wait_held();                       // it holds in slow's store
  ASSERT_TRUE(q.push(Item(42)).ok());     // the selector is first on q's list
  stop->request_stop();
  gate.release();
  selector.join();
  EXPECT_EQ(sel_status.code(), StatusCode::kCancelled);

  EXPECT_TRUE(eventually([&] { return pulled.load(); }, 2s))
      << "the puller sleeps while q holds an item";
  q.close();  // lets a stranded puller go (it then takes the item)
  puller.join();
  EXPECT_EQ(pulled_id, 42);
}

// A selector woken by one queue takes an item from another queue, whose
// own wake-up for that item went to a waiter ahead of it. While it takes
// the item, a push to that queue picks it: it is still on the list. The
// selector counted that wake-up as the one for the item it took and did
// not pass it on, so the puller behind it slept for good beside the item.
TEST(SelectorCoreEdgesTest, AWakeUpThatArrivesWhileTheSelectorTakesAnItemIsPassedOn) {
  Gate item_gate;
  Gate store_gate;
  Queue<Item> q(4);
  Queue<Item> other(4);
  auto slow = unreadable_queue(&store_gate);
  // The decoy: first on q's list; it looks at slow first and holds there.
  Selector<Item> decoy_sel{slow.get(), &q};
  Selector<Item> sel{&q, &other};  // its first look: q, then other
  auto decoy_stop = std::make_unique<std::stop_source>();
  Tid decoy_tid, sel_tid, puller_tid;
  Status decoy_status = StatusCode::kInternal;
  int sel_index = -1, sel_id = -1;
  std::thread decoy([&] {
    decoy_tid.set();
    decoy_status = decoy_sel.pull(Context(decoy_stop->get_token())).status();
  });
  ASSERT_TRUE(eventually([&] { return decoy_tid.parked(); }));
  std::thread selector([&] {
    sel_tid.set();
    Result<Selected<Item>> r = sel.pull();
    if (r.ok()) {
      sel_index = static_cast<int>(r->index);
      sel_id = r->value.id;
    }
  });
  ASSERT_TRUE(eventually([&] { return sel_tid.parked(); }));
  std::atomic<bool> pulled{false};
  int pulled_id = -1;
  std::thread puller([&] {
    puller_tid.set();
    Result<Item> r = q.pull();
    if (r.ok()) pulled_id = r->id;
    pulled.store(true);
  });
  ASSERT_TRUE(eventually([&] { return puller_tid.parked(); }));  // q's list: decoy, sel, puller

  store_gate.arm();
  ASSERT_TRUE(q.push(Item(1, &item_gate)).ok());  // wakes the decoy, which holds in slow
  store_gate.wait_held();
  // The selector, woken by `other`, takes item 1 from q: held in one of the
  // item's moves after the ring's pop and its wake-ups are done.
  item_gate.arm(/*skip=*/1);
  ASSERT_TRUE(other.push(Item(7)).ok());
  item_gate.wait_held();
  decoy_stop->request_stop();  // the decoy finds q empty and leaves
  store_gate.release();
  decoy.join();
  EXPECT_EQ(decoy_status.code(), StatusCode::kCancelled);

  ASSERT_TRUE(q.push(Item(2)).ok());  // picks the first on q's list
  item_gate.release();
  selector.join();
  EXPECT_EQ(sel_index, 0);
  EXPECT_EQ(sel_id, 1);

  EXPECT_TRUE(eventually([&] { return pulled.load(); }, 2s))
      << "the puller sleeps while q holds an item";
  q.close();
  puller.join();
  EXPECT_EQ(pulled_id, 2);
}

// ---- Passing a wake-up on (Queue::after_pull) ----

// A spill queue whose pullers all parked because a push into memory was
// still mid-way (a pull waits for it: the store's items come after it).
// That push's one wake-up goes to one puller; the items spilled meanwhile
// had sent theirs when nobody waited. The pull that took the memory item
// passed a wake-up on only while memory held more, and a pull from the
// store passed none on: the other pullers slept for good beside the
// store's items.
TEST(QueueCoreEdgesTest, PullersWokenForAPushMidWayAreAllWokenForTheSpilledItems) {
  Gate gate;
  QueueOptions<Item> o;
  o.capacity = 2;
  o.policy = OverflowPolicy::kSpill;
  o.spill_store = std::make_shared<testutil::MemorySpillStore<Item>>(16);
  Queue<Item> q(std::move(o));
  ASSERT_TRUE(q.push(Item(0)).ok());  // memory, position 0
  gate.arm();
  std::thread mid_way([&] { EXPECT_TRUE(q.push(Item(1, &gate)).ok()); });  // position 1
  gate.wait_held();                   // claimed, not yet published
  ASSERT_TRUE(q.push(Item(2)).ok());  // memory is full: spilled
  ASSERT_TRUE(q.push(Item(3)).ok());  // spilled
  ASSERT_EQ(q.stats().spill_depth, 2u);
  Result<Item> first = q.try_pull();
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->id, 0);

  constexpr int kPullers = 3;
  std::vector<Tid> tids(kPullers);
  std::vector<int> got(kPullers, -1);
  std::atomic<int> done{0};
  std::vector<std::thread> pullers;
  for (int i = 0; i < kPullers; ++i) {
    pullers.emplace_back([&, i] {
      tids[static_cast<std::size_t>(i)].set();
      Result<Item> r = q.pull();  // waits for position 1, then the store
      if (r.ok()) got[static_cast<std::size_t>(i)] = r->id;
      done.fetch_add(1);
    });
  }
  ASSERT_TRUE(eventually([&] {
    for (const Tid& t : tids) {
      if (!t.parked()) return false;
    }
    return true;
  }));
  gate.release();  // position 1 published: one wake-up
  mid_way.join();
  EXPECT_TRUE(eventually([&] { return done.load() == kPullers; }, 2s))
      << done.load() << " of " << kPullers
      << " pullers returned; the others sleep beside spilled items (" << q.stats().spill_depth
      << " in the store)";
  q.close();  // lets stranded pullers go (they then take what is left)
  for (auto& t : pullers) t.join();
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<int>{1, 2, 3}));
}

// ---- Evicting pushes (Ring::try_push_evicting) racing pulls and close ----

// An item that counts its destructions as the owner of its id.
struct Counted {
  static constexpr std::uint64_t kNone = ~std::uint64_t{0};
  std::uint64_t id = kNone;
  std::vector<std::atomic<int>>* destroyed = nullptr;
  Counted(std::uint64_t i, std::vector<std::atomic<int>>* d) : id(i), destroyed(d) {}
  Counted(Counted&& o) noexcept : id(std::exchange(o.id, kNone)), destroyed(o.destroyed) {}
  Counted& operator=(Counted&& o) noexcept {
    if (this != &o) {
      release();
      id = std::exchange(o.id, kNone);
      destroyed = o.destroyed;
    }
    return *this;
  }
  ~Counted() { release(); }
  void release() noexcept {
    if (id != kNone) (*destroyed)[id].fetch_add(1, std::memory_order_relaxed);
    id = kNone;
  }
};

// Producers keep a small queue full (DropOldest, Sample) while consumers
// pull and a close lands at a random moment: every item is destroyed once
// (pulled, evicted, refused or drained), none is pulled twice, each
// consumer sees each producer's items in order, and the counters add up.
constexpr int kEvictProducers = 3;
constexpr int kEvictConsumers = 2;
constexpr std::uint64_t kEvictEach = 20000;

void evictions_racing_pulls_and_close(OverflowPolicy policy, std::size_t cap,
                                      std::uint64_t close_at) {
  constexpr int kProducers = kEvictProducers;
  constexpr int kConsumers = kEvictConsumers;
  constexpr std::uint64_t kEach = kEvictEach;
  constexpr std::uint64_t kIds = kProducers * kEach;
  std::vector<std::atomic<int>> destroyed(kIds);
  QueueOptions<Counted> o;
  o.capacity = cap;
  o.policy = policy;
  o.sample_every = 3;
  Queue<Counted> q(o);
  std::atomic<std::uint64_t> accepted{0}, sampled_out{0}, progress{0};
  std::vector<std::vector<std::uint64_t>> seen(kConsumers);
  {
    std::vector<std::jthread> threads;
    for (int c = 0; c < kConsumers; ++c) {
      threads.emplace_back([&, c] {
        auto& mine = seen[static_cast<std::size_t>(c)];
        for (;;) {
          Result<Counted> r = q.pull();
          if (!r.ok()) {
            EXPECT_EQ(r.code(), StatusCode::kClosed);
            return;
          }
          mine.push_back(r->id);
        }
      });
    }
    for (int p = 0; p < kProducers; ++p) {
      threads.emplace_back([&, p] {
        for (std::uint64_t i = 0; i < kEach; ++i) {
          if (progress.fetch_add(1, std::memory_order_relaxed) == close_at) q.close();
          if (i % 16 == 0) std::this_thread::yield();  // the consumers get turns on 2 cores
          const Status st = q.push(Counted(static_cast<std::uint64_t>(p) * kEach + i, &destroyed));
          if (st.ok()) {
            accepted.fetch_add(1, std::memory_order_relaxed);
          } else if (st.code() == StatusCode::kSampledOut) {
            sampled_out.fetch_add(1, std::memory_order_relaxed);
          } else {
            EXPECT_EQ(st.code(), StatusCode::kClosed);
          }
        }
      });
    }
  }
  std::uint64_t pulled = 0;
  std::vector<std::uint64_t> all;
  for (const auto& mine : seen) {
    pulled += mine.size();
    all.insert(all.end(), mine.begin(), mine.end());
    std::vector<std::uint64_t> last(kProducers, 0);
    std::vector<bool> any(kProducers, false);
    for (const std::uint64_t id : mine) {
      const std::size_t p = static_cast<std::size_t>(id / kEach);
      EXPECT_TRUE(!any[p] || id > last[p]) << "producer " << p << "'s items out of order";
      any[p] = true;
      last[p] = id;
    }
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "an item pulled twice";
  std::uint64_t wrong = 0;
  for (auto& d : destroyed) wrong += d.load() != 1;
  EXPECT_EQ(wrong, 0u) << "items destroyed other than once";
  const QueueStats s = q.stats();
  EXPECT_EQ(s.pushed, accepted.load());
  EXPECT_EQ(s.pulled, pulled);
  EXPECT_EQ(s.sampled_out, sampled_out.load());
  EXPECT_EQ(s.depth, 0u);
  EXPECT_EQ(s.pushed, s.pulled + s.evicted);
  EXPECT_LE(s.high_watermark, cap);
}

TEST(QueueCoreEdgesTest, EvictionsRacingPullsAndCloseLoseNothingAndCountExactly) {
  constexpr std::uint64_t kIds = kEvictProducers * kEvictEach;
  std::mt19937 rng(12345);
  for (const OverflowPolicy policy : {OverflowPolicy::kDropOldest, OverflowPolicy::kSample}) {
    for (const std::size_t cap : {std::size_t{1}, std::size_t{2}, std::size_t{7}}) {
      for (int round = 0; round < 4; ++round) {
        SCOPED_TRACE(std::string(overflow_policy_name(policy)) + " capacity " +
                     std::to_string(cap) + " round " + std::to_string(round));
        evictions_racing_pulls_and_close(policy, cap, kIds / 2 + rng() % (kIds / 2));
        if (HasFailure()) return;
      }
    }
  }
}

}  // namespace
}  // namespace sluice
