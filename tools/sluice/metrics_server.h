// --metrics ADDR: the Prometheus text of a running put or get, served over
// HTTP (GET /metrics) on a thread of its own: one poll() loop over every
// connection, each answered once and closed (once the client has closed its
// side, read to its end, or after 1 s more), with a cap on a request's head
// (8 KiB), on a connection's life (5 s) and on connections at once (16), so no
// client can hold the server, grow the command, or delay its end. Out of
// descriptors (accept4's EMFILE), it stops accepting for 100 ms at a time:
// what waits in the backlog is answered once descriptors are free.
//
// Thread safety: the counters are atomics, written by the command's threads
//   and read by the server's; the stat and blocked callbacks must be safe to
//   call from another thread (QueueStore::stat and
//   QueueWriter::blocked_seconds are).
// Blocking: a scrape never blocks the data path: it reads atomics, and the
//   queue's stat runs on a thread of its own (StatSampler). A /metrics
//   request asks that thread for a stat and waits for it 500 ms at most,
//   serving the other connections meanwhile; past that (say Redis does not
//   answer) it is answered with the queue as last known,
//   sluice_store_stat_ok 0 and sluice_store_stat_age_seconds saying how
//   old. The destructor stops the server at once (connections still open
//   are closed), without waiting for a stat in progress: that one ends
//   alone (see StatSampler).
// Ownership: the server keeps a reference to the CommandMetrics it renders,
//   which must outlive it; its stat is copied, and must own what it uses
//   (StatSampler).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "sluice/status.h"
#include "sluice/store.h"
#include "stat_sampler.h"

namespace sluice::cli {

// What a running put or get has done so far.
struct CommandMetrics {
  std::string command;  // "put" or "get"
  std::string queue;
  std::atomic<std::uint64_t> messages{0};  // put: enqueued; get: acknowledged
  std::atomic<std::uint64_t> bytes{0};     // their payload bytes
  // get --exec only (exec is true):
  bool exec = false;
  std::atomic<std::uint64_t> runs_ok{0};      // command runs that exited 0
  std::atomic<std::uint64_t> runs_failed{0};  // runs that failed (each retry counts)
  std::atomic<std::uint64_t> dead_lettered{0};
  // The queue now; null: not sampled. Owns what it uses: a stat in
  // progress at the server's end finishes alone (StatSampler).
  std::function<Result<QueueInfo>()> stat;
  std::function<double()> blocked;  // put: seconds waited at the bound

  // Prometheus text (0.0.4): sluice_cli_* for the command, sluice_store_*
  // for the queue (as `sample` shows it; none when stat is null); every
  // sample labelled command="...",queue="...".
  std::string render(const StatSample& sample) const;
  // The same with one stat taken now (waiting for it).
  std::string render() const;
};

class MetricsServer {
 public:
  // Listens on ADDR, "HOST:PORT" ("[::1]:PORT" for IPv6; an empty HOST is
  // 127.0.0.1; PORT 0 picks a free port). kInvalidArgument for a malformed
  // ADDR or one it cannot listen on (in use, not an address of this host).
  static Result<std::unique_ptr<MetricsServer>> start(std::string_view addr,
                                                      const CommandMetrics& metrics);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // "http://HOST:PORT/metrics", with the port actually bound.
  const std::string& url() const noexcept { return url_; }

 private:
  MetricsServer() = default;
  void serve(const CommandMetrics& metrics);

  int listen_fd_ = -1;
  int wake_fd_ = -1;                      // eventfd: the destructor's stop
  int stat_fd_ = -1;                      // eventfd: a stat finished
  std::unique_ptr<StatSampler> sampler_;  // null without metrics.stat
  std::thread thread_;
  std::string url_;
};

// For a command: starts a server when `addr` is not empty and says where on
// stderr ("sluice CMD: metrics on URL"). Null when `addr` is empty, or on
// failure (then printed, and *rc set).
std::unique_ptr<MetricsServer> serve_metrics(std::string_view addr, std::string_view cmd,
                                             const CommandMetrics& metrics, int* rc);

}  // namespace sluice::cli
