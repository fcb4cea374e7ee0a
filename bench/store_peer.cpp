// store_peer: one side of bench/python_compare.py's C++ row, the same
// workload as the Python module's without Python: 100-byte messages through
// a QueueStore, producer and consumer in separate processes.
//
//   store_peer produce DIR NAME COUNT BATCH sync|nosync   puts COUNT messages
//       in put()s of BATCH, then closes the queue
//   store_peer consume DIR NAME COUNT BATCH ACK_EVERY sync|nosync   gets
//       (BATCH at most per get) until the queue ends, acknowledging after
//       at least ACK_EVERY messages (and at the end)
//
// Prints "start END" (steady-clock seconds, CLOCK_MONOTONIC, comparable
// with Python's time.monotonic()) once its store is open and once done.
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/store.h"

namespace {

double now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

int fail(const sluice::Status& s) {
  std::fprintf(stderr, "store_peer: %s\n", s.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace sluice;
  if (argc < 7) {
    std::fprintf(stderr,
                 "usage: store_peer produce|consume DIR NAME COUNT BATCH [ACK] sync|nosync\n");
    return 2;
  }
  const std::string_view role = argv[1];
  const std::size_t count = std::strtoull(argv[4], nullptr, 10);
  const std::size_t batch = std::strtoull(argv[5], nullptr, 10);
  StoreOptions o;
  o.durability = std::string_view(argv[argc - 1]) == "sync" ? StoreDurability::kSync
                                                            : StoreDurability::kNoSync;
  auto store = QueueStore::open(argv[2], o);
  if (!store.ok()) return fail(store.status());
  const double start = now();
  if (role == "produce") {
    auto w = (*store)->writer(argv[3], Context());
    if (!w.ok()) return fail(w.status());
    const std::string msg(100, 'x');
    std::vector<std::string_view> views(batch, msg);
    for (std::size_t i = 0; i < count; i += batch) {
      const std::size_t n = std::min(batch, count - i);
      if (Status s = (*w)->put(std::span(views).first(n), Context()); !s.ok()) return fail(s);
    }
    if (Status s = (*w)->close(); !s.ok()) return fail(s);
  } else {
    const std::size_t ack_every = std::strtoull(argv[6], nullptr, 10);
    auto r = (*store)->reader(argv[3], kDefaultChannel, Context());
    if (!r.ok()) return fail(r.status());
    MessageBatch got;  // the batched read the Python binding uses
    std::size_t n = 0;
    std::size_t unacked = 0;
    for (;;) {
      got.clear();
      Status s = (*r)->get_batch(got, batch, Context());
      if (s.code() == StatusCode::kClosed) break;
      if (!s.ok()) return fail(s);
      n += got.size();
      unacked += got.size();
      if (unacked >= ack_every) {
        if (Status a = (*r)->ack(); !a.ok()) return fail(a);
        unacked = 0;
      }
    }
    if (Status a = (*r)->ack(); !a.ok()) return fail(a);
    if (n != count) {
      std::fprintf(stderr, "store_peer: got %zu of %zu\n", n, count);
      return 1;
    }
  }
  std::printf("%.6f %.6f\n", start, now());
  return 0;
}
