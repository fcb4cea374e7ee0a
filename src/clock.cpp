#include "sluice/clock.h"

namespace sluice {

namespace {
class SteadyClock final : public Clock {
 public:
  time_point now() const override { return std::chrono::steady_clock::now(); }
  bool is_steady() const override { return true; }
};
}  // namespace

Clock& Clock::steady() {
  static SteadyClock clock;
  return clock;
}

}  // namespace sluice
