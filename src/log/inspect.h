// What inspect_topic and repair_topic (sluice/log/inspect.h) share: one look
// at a topic directory, on any FileSystem. Private.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "log/file_system.h"
#include "log/recovery.h"
#include "sluice/log/inspect.h"

namespace sluice::log {

// Records in a segment file whose header cannot be trusted, found by a
// byte-by-byte search for valid records (as recovery's own search does).
struct Found {
  std::uint64_t count = 0;
  std::uint64_t first = 0;  // seqs of the first and last found
  std::uint64_t last = 0;
};

// What look() saw: the description, and the scan it came from.
struct Snapshot {
  TopicInspection out;
  Scan scan;
  RecoveryReport report;
  std::map<std::string, Found> found;  // segment files readers skip, by path
};

// Reads the topic in `dir` (positions first, then segments), changing
// nothing. kNotFound if `dir` is missing or holds no topic.
// `beside_writer`: a writer may be appending (verify, inspect; not repair,
// which holds the writer's lock). If one is (open in this process, or
// holding LOCK in another), a gap in the newest segment past what it had
// published is a write in progress, a note, not damage (as a reader's open
// takes it: drop_writes_in_progress). The probe (live_writer) never drops
// a lock this process holds on LOCK.
Result<Snapshot> look(FileSystem& fs, const std::string& dir, const TopicOptions& opt,
                      bool beside_writer = false);

// The same on any file system (the public ones use the real disk).
Result<TopicRepairReport> repair_topic(FileSystem& fs, const std::string& dir,
                                       const TopicRepairOptions& repair, const TopicOptions& opt);

// The last component of a path.
std::string base_name(const std::string& path);
// "seq 5" or "seqs 5..9", for [from, to).
std::string seqs(std::uint64_t from, std::uint64_t to);

}  // namespace sluice::log
