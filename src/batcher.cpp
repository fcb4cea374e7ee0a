#include "sluice/batcher.h"

namespace sluice {

std::string_view flush_reason_name(FlushReason reason) noexcept {
  switch (reason) {
    case FlushReason::kSize:
      return "size";
    case FlushReason::kBytes:
      return "bytes";
    case FlushReason::kTime:
      return "time";
    case FlushReason::kShutdown:
      return "shutdown";
    case FlushReason::kManual:
      return "manual";
  }
  return "unknown";
}

}  // namespace sluice
