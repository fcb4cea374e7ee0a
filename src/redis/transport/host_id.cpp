#include "redis/transport/host_id.h"

#include <unistd.h>

#include <array>

namespace sluice::redis {

namespace {

// The initial PID namespace's inode (PROC_PID_INIT_INO, fixed by the kernel).
constexpr std::string_view kInitialPidNs = "pid:[4026531836]";

}  // namespace

std::string host_id_of(std::string_view hostname, std::string_view pid_ns_link) {
  std::string id(hostname.empty() ? std::string_view("unknown") : hostname);
  if (pid_ns_link.empty() || pid_ns_link == kInitialPidNs) return id;
  // "pid:[N]" -> "~pidnsN": no brackets or blanks, which names may not hold.
  const auto open = pid_ns_link.find('[');
  const auto close = pid_ns_link.rfind(']');
  if (open == std::string_view::npos || close == std::string_view::npos || close <= open + 1) {
    return id;
  }
  return id + "~pidns" + std::string(pid_ns_link.substr(open + 1, close - open - 1));
}

const std::string& host_id() {
  // Made again after a fork(): the child may be in another namespace (one
  // made by unshare(CLONE_NEWPID) holds the parent's children).
  thread_local pid_t made_in = -1;
  thread_local std::string id;
  if (const pid_t now = getpid(); now != made_in) {
    std::array<char, 256> host{};
    if (gethostname(host.data(), host.size() - 1) != 0) host[0] = '\0';
    std::array<char, 64> link{};
    const ssize_t n = readlink("/proc/self/ns/pid", link.data(), link.size() - 1);
    id = host_id_of(host.data(), n > 0 ? std::string_view(link.data(), static_cast<std::size_t>(n))
                                       : std::string_view());
    made_in = now;
  }
  return id;
}

}  // namespace sluice::redis
