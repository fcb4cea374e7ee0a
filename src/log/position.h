// A channel's position file, channels/<name>.pos (docs/log_format.md,
// "Position file"): two CRC'd slots written alternately, so a torn write of
// one leaves the other. Private.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "log/file_system.h"
#include "log/format.h"

namespace sluice::log {

enum class PositionState : std::uint8_t {
  kValid,    // `slot` is the newest valid slot
  kUnset,    // empty or zeros only: never reached the disk; start from the oldest record
  kDamaged,  // bytes set, but no valid slot
};

struct PositionRead {
  PositionState state = PositionState::kUnset;
  PositionSlot slot;
};

PositionRead decode_positions(std::string_view bytes);
Result<PositionRead> read_position(File& f);

// Writes generation `gen` (its slot: gen % 2) pointing at next_seq.
Status write_position(File& f, std::uint64_t gen, std::uint64_t next_seq);

}  // namespace sluice::log
