// The "host" part of the ids sluice's Redis clients go by (a pressure
// queue's role holders, a Streams topic's consumer names): the hostname,
// and, in a PID namespace other than the initial one, that namespace. Two
// containers with host networking (Kubernetes' hostNetwork pods) share a
// hostname but number their processes apart: by hostname and PID alone
// they could both be "node7_pid1", and each would take the other's role
// for its own, or judge it gone by a process table that is not its own.
#pragma once

#include <string>
#include <string_view>

namespace sluice::redis {

// "<hostname>" in the initial PID namespace (or where /proc cannot say),
// else "<hostname>~pidns<inode>". Made once per process (and thread).
const std::string& host_id();

// host_id() for the given hostname and /proc/self/ns/pid link text
// ("pid:[4026531836]"; empty: unknown). For tests.
std::string host_id_of(std::string_view hostname, std::string_view pid_ns_link);

}  // namespace sluice::redis
