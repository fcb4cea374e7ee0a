// StartFrom: where a channel that does not exist yet starts reading. Shared
// by the embedded log's Channel (ChannelOptions::start) and the Redis Streams
// topic (StreamTopicOptions::start), so code moves between them unchanged.
#pragma once

#include <cstdint>

namespace sluice {

enum class StartFrom : std::uint8_t {
  kBeginning,  // a new channel starts at the oldest retained record
  kTail,       // a new channel starts at the next record appended
};

}  // namespace sluice
