// The Streams topics' script (src/redis/streams/stream.lua, embedded at build time
// with its SHA1), as StreamTopic and StreamChannel declare it to their
// connections.
#pragma once

#include "redis/transport/connection.h"

namespace sluice::redis {

const Script& stream_script();

}  // namespace sluice::redis
