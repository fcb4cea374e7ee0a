#include "log/topic_core.h"

namespace sluice::log {

std::shared_ptr<Segment> TopicCore::segment_after(const Segment* s, std::uint64_t* first) const {
  MutexLock lk(mu);
  if (first != nullptr) *first = first_seq;
  for (const auto& seg : segs) {
    if (seg->base_seq > s->base_seq) return seg;
  }
  return nullptr;
}

std::shared_ptr<Segment> TopicCore::segment_for(std::uint64_t seq) const {
  MutexLock lk(mu);
  std::shared_ptr<Segment> best = segs.empty() ? nullptr : segs.front();
  for (const auto& s : segs) {
    if (s->base_seq <= seq) best = s;
  }
  return best;
}

void TopicCore::publish(Segment& seg, std::uint64_t end, std::uint64_t seq) {
  if (end > seg.end.load(std::memory_order_relaxed)) {
    seg.end.store(end, std::memory_order_release);
  }
  if (seq <= visible_seq) return;
  visible_seq = seq;
  if (waiters > 0) data_cv.notify_all();
  notify.publish(seq);
}

}  // namespace sluice::log
