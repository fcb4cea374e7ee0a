#include "log/position.h"

#include <algorithm>

namespace sluice::log {

PositionRead decode_positions(std::string_view bytes) {
  PositionRead r;
  std::optional<PositionSlot> best;
  for (std::size_t at = 0; at + kPositionSlotSize <= bytes.size(); at += kPositionSlotSize) {
    auto slot = decode_position_slot(bytes.data() + at);
    if (slot && (!best || slot->generation > best->generation)) best = slot;
  }
  if (best) {
    r.state = PositionState::kValid;
    r.slot = *best;
  } else if (std::all_of(bytes.begin(), bytes.end(), [](char c) { return c == '\0'; })) {
    r.state = PositionState::kUnset;
  } else {
    r.state = PositionState::kDamaged;
  }
  return r;
}

Result<PositionRead> read_position(File& f) {
  char slots[2 * kPositionSlotSize] = {};
  auto got = f.pread(slots, sizeof slots, 0);
  if (!got.ok()) return got.status();
  return decode_positions(std::string_view(slots, *got));
}

Status write_position(File& f, std::uint64_t gen, std::uint64_t next_seq) {
  char slot[kPositionSlotSize];
  encode_position_slot(slot, {gen, next_seq});
  return f.pwrite(slot, sizeof slot, (gen % 2) * kPositionSlotSize);
}

}  // namespace sluice::log
