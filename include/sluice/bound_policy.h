// BoundPolicy: what a bounded topic's append does once its producers are as
// far ahead of the slowest channel as the bound allows. Shared by the
// embedded log's Topic (TopicOptions::on_bound) and the Redis Streams topic
// (StreamTopicOptions::on_bound), so code moves between them unchanged.
#pragma once

#include <cstdint>

namespace sluice {

enum class BoundPolicy : std::uint8_t {
  kBlock,  // wait for the slowest channel to acknowledge (Context: cancel, deadline)
  kFail,   // return kRejected at once
};

}  // namespace sluice
