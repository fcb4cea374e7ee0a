// Workloads run on a FaultFileSystem, what they were told, and the checks a
// topic reopened after a power cut must pass. Shared by the crash-point
// tests (every call of a scripted workload, and random cuts of concurrent
// ones).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "log/fault_file_system.h"
#include "sluice/log/topic.h"

namespace sluice::testutil {

constexpr const char* kCutTopicDir = "/fault/topic";

// What the workload was told before the power went.
struct Told {
  std::mutex mu;
  // Every record an append was asked to write, by its seq where the caller
  // knew it beforehand (one appender), else by payload.
  std::map<std::uint64_t, std::string> attempted;
  std::set<std::string> attempted_payloads;
  // Appends that returned, by seq.
  std::map<std::uint64_t, std::string> returned;
  // Every seq below this was reported durable (an append's return in the
  // durable modes, a sync() in the others).
  std::uint64_t durable_next = 0;
  // Channels whose creation returned, and the position each was told is
  // durable (its start, then acks in the durable modes).
  std::map<std::string, std::uint64_t> durable_acked;
  // Topic::close() was called, and returned Ok (the mark is durable).
  bool close_attempted = false;
  bool closed = false;
  // The highest next_seq any open saw: later opens never go below what was
  // durable then.
  void told_durable(std::uint64_t next) {
    if (next > durable_next) durable_next = next;
  }
};

// The stride of a cut-every-call test: every call (4 under a sanitizer, which
// is slower), or SLUICE_CRASH_POINTS_EVERY.
std::uint64_t crash_points_every();

TopicOptions cut_topic_options(Durability d);

// Appends across several segment rolls (single appends and batches), two
// channels consuming and acknowledging at different paces so retention
// removes segments, syncs in the modes that need them, and a close and
// reopen half-way, channel "a" moved back (Channel::seek) to the oldest
// retained record (which the slower "b" held) and "b" purged (moved to the
// end) in the second life, and a close() (end of stream) at the end, then a reopen of the
// closed topic. Single-threaded: the same calls in the same order each run.
// Stops at the first error (the power cut). `records_per_life` 0: no
// appends, so the close flags the empty first segment in place.
// `from_format1`: a first life writes segment format 1 (no append times),
// as a sluice before the append time did; the next open moves on to
// format 2.
Status run_scripted_workload(FaultFileSystem& fs, Durability d, Told& told,
                             int records_per_life = 30, bool from_format1 = false);

// Several appenders (kGroupCommit: 3; otherwise 1) and an eager consumer
// acknowledging every batch, plus sync() calls in kNone; once `records`
// were appended, close(), and the consumer reads on until kClosed. Stops
// when the power goes. `reader_elsewhere`: the
// consumer reads through a read_only Topic, as another process would.
Status run_concurrent_workload(FaultFileSystem& fs, Durability d, int records, Told& told,
                               bool reader_elsewhere = false);

// Reopens the topic on `image` and checks, returning "" or what is wrong:
// - it opens without error, and accepts and delivers an append;
// - every record reported durable is there (unless retention deleted it
//   after every channel durably passed it), whole, once, in seq order;
// - no record appears that was never written, or with other bytes;
// - the next seq is not below any reported durable, nor below any position
//   a channel file kept (no seq is ever given to two records);
// - each channel resumes at or after its last durable acknowledgement and
//   not past the topic's end, and lost nothing to retention;
// - in the durable modes, recovery found no corruption;
// - if close() returned Ok, the topic is closed; if it is closed, close()
//   was called; closed, it refuses appends, its channels end in kClosed, and
//   recovery found no damage (in any mode: everything was synced first);
// - append times: no record without one after a record with one (format 1
//   segments only come first), times never decrease, and a search by each
//   record's time (the sparse index recovery rebuilt) lands on the first
//   record of that time or, before format 1 records, not after it.
std::string check_image(FaultFileSystem& image, Durability d, const Told& told);

}  // namespace sluice::testutil
