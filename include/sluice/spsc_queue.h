// SpscQueue<T> is sluice::Queue<T> for exactly one producer thread and one
// consumer thread at a time: the same calls, statuses, policies (except the
// evicting ones), close/drain and cancellation, on a ring that needs no atomic
// read-modify-write and no fence while both sides are busy.
//
// Thread safety: at most one thread pushing (push, try_push, push_many,
//   push_all and their try_ forms) and one thread pulling (pull, pull_many,
//   range-for, ...) at a time; which thread may change, given a
//   happens-before between the old and the new one (e.g. a join). close(),
//   closed(), stats(), approx_size() and waiting_pullers() from any thread.
//   Two concurrent pushers or pullers are a data race (undefined behaviour).
// Blocking: as Queue: blocked calls spin briefly, then sleep on a futex. A
//   waiter that goes to sleep runs membarrier(2) once (detail/wait_list.h),
//   so the busy side never fences. close() may wait for a push attempt
//   already running (never for a waiting push) to finish. A blocking pull
//   that finds only a few items (under 512 bytes' worth) while the producer
//   is still adding more may wait for it to get that far ahead: at most
//   ~2.5 us, and only while items keep arriving (detail::SpscRing::slip).
//   Otherwise the two cores pass the same cache lines back and forth for
//   every item, and throughput falls 3x. try_pull never waits.
// Ordering: FIFO. A push happens-before the pull that returns its item.
// Cancellation: as Queue.
// Ownership: as Queue: an item is moved in only on kOk, and items are held
//   back to back in one array allocated at construction.
// Errors: as Queue. The constructor also throws std::invalid_argument for
//   kDropOldest and kSample (the producer would evict: a second consumer).
//   There are no Producer handles: the one producer calls close().
#pragma once

#include <cstddef>

#include "sluice/detail/ring.h"
#include "sluice/queue.h"

namespace sluice {

template <class T>
class SpscQueue : public Queue<T, detail::SpscRing<T>> {
 public:
  using Queue<T, detail::SpscRing<T>>::Queue;
};

}  // namespace sluice
