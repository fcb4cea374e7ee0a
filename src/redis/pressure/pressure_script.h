// The pressure queues' script (src/redis/pressure/pressure.lua, embedded at build
// time with its SHA1), as PressureQueue declares it to its connections.
#pragma once

#include "redis/transport/connection.h"

namespace sluice::redis {

const Script& pressure_script();

}  // namespace sluice::redis
