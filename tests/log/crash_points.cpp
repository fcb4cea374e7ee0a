#include "log/crash_points.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "log/format.h"
#include "log/position.h"
#include "log/topic_impl.h"
#include "sluice/log/channel.h"

namespace sluice::testutil {

namespace {

using SysTime = std::chrono::system_clock::time_point;

Context now_ctx() { return Context(std::stop_token{}, std::chrono::steady_clock::now()); }

std::string payload_for(std::uint64_t seq, int i) {
  std::string p = "s" + std::to_string(seq) + ":" + std::to_string(i) + ":";
  while (p.size() < 24 + static_cast<std::size_t>(i % 5) * 9) p += static_cast<char>('a' + i % 26);
  return p;
}

// Reads what is there now and acknowledges it. false: an error (the cut).
bool drain(Channel& c, Durability d, Told& told) {
  std::vector<LogMessage> batch;
  for (;;) {
    batch.clear();
    Status s = c.next_batch(batch, 16, now_ctx());
    if (s.code() == StatusCode::kDeadlineExceeded || s.code() == StatusCode::kClosed) return true;
    if (!s.ok()) return false;
    if (!c.ack(batch.back().seq).ok()) return false;
    if (d == Durability::kPerAppend || d == Durability::kGroupCommit) {
      std::lock_guard lk(told.mu);
      told.durable_acked[c.name()] = batch.back().seq + 1;
    }
  }
}

bool durable(Durability d) { return d == Durability::kPerAppend || d == Durability::kGroupCommit; }

Result<std::unique_ptr<Channel>> open_channel(Topic& t, const std::string& name, Told& told) {
  auto c = t.channel(name);
  if (c.ok()) {
    std::lock_guard lk(told.mu);
    told.durable_acked.try_emplace(name, (*c)->acked());  // its start is synced on creation
  }
  return c;
}

// Append times of what a topic delivers (all its retained records, in
// order): see check_image.
std::string check_times(Topic& t, const std::vector<LogMessage>& all) {
  std::ostringstream why;
  bool timed = false;
  bool untimed_before = false;  // a format 1 record is retained
  std::optional<SysTime> last;
  for (const auto& m : all) {
    if (!m.time) {
      if (timed) {
        why << "seq " << m.seq << " has no time after records with one; ";
        return why.str();
      }
      untimed_before = true;
      continue;
    }
    timed = true;
    if (last && *m.time < *last) {
      why << "seq " << m.seq << "'s time goes back; ";
      return why.str();
    }
    last = m.time;
  }
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (!all[i].time || (i > 0 && all[i - 1].time == all[i].time)) continue;
    auto found = t.seq_at_time(*all[i].time);  // the first record of that time
    if (!found.ok()) return why.str() + "seq_at_time: " + found.status().to_string() + "; ";
    if (untimed_before ? *found > all[i].seq : *found != all[i].seq) {
      why << "seq_at_time of seq " << all[i].seq << "'s time gives " << *found << "; ";
      return why.str();
    }
  }
  return why.str();
}

}  // namespace

std::uint64_t crash_points_every() {
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  constexpr int kEveryByDefault = 4;
#else
  constexpr int kEveryByDefault = 1;
#endif
  const char* v = std::getenv("SLUICE_CRASH_POINTS_EVERY");  // NOLINT(concurrency-mt-unsafe)
  return v != nullptr ? static_cast<std::uint64_t>(std::max(1, std::atoi(v))) : kEveryByDefault;
}

TopicOptions cut_topic_options(Durability d) {
  TopicOptions o;
  o.segment_bytes = 512;  // ~8 records: many rolls
  o.max_message_bytes = 128;
  o.durability = d;
  // The scripted workload must make the same calls every run: no timer.
  o.sync_interval = std::chrono::hours(1);
  return o;
}

Status run_scripted_workload(FaultFileSystem& fs, Durability d, Told& told, int records_per_life,
                             bool from_format1) {
  const TopicOptions o = cut_topic_options(d);
  int i = 0;
  for (int life = from_format1 ? -1 : 0; life < 2; ++life) {  // a clean reopen half-way
    log::OpenHooks hooks;
    hooks.untimed = life < 0;  // as an older sluice wrote
    auto topic = log::open_topic(fs, kCutTopicDir, o, hooks);
    if (!topic.ok()) return topic.status();
    Topic& t = **topic;
    auto a = open_channel(t, "a", told);
    if (!a.ok()) return a.status();
    auto b = open_channel(t, "b", told);
    if (!b.ok()) return b.status();
    for (const int end = i + records_per_life; i < end; ++i) {
      const std::uint64_t seq = t.next_seq();
      std::vector<std::string> payloads;
      for (int r = 0; r < (i % 7 == 3 ? 3 : 1); ++r) payloads.push_back(payload_for(seq + r, i));
      for (std::size_t r = 0; r < payloads.size(); ++r) told.attempted[seq + r] = payloads[r];
      std::vector<std::string_view> views(payloads.begin(), payloads.end());
      auto got = t.append_batch(views);
      if (!got.ok()) return got.status();
      for (std::size_t r = 0; r < payloads.size(); ++r) told.returned[seq + r] = payloads[r];
      if (durable(d)) told.told_durable(seq + payloads.size());
      if (!drain(**a, d, told)) return {StatusCode::kIOError, "channel a"};
      if (i % 5 == 4 && !drain(**b, d, told)) return {StatusCode::kIOError, "channel b"};
      if (!durable(d) && i % 9 == 8) {
        const std::uint64_t next = t.next_seq();
        if (Status s = t.sync(); !s.ok()) return s;
        told.told_durable(next);
      }
      if (life == 1 && i == end - records_per_life / 2) {
        // Replay: a back to the oldest retained record, which only the
        // slower b held for it; then b's acks run retention, which must
        // keep what a needs again. From the call on, a's position on disk
        // may be the new one; from its return it is.
        const std::uint64_t to = t.first_seq();
        told.durable_acked["a"] = std::min(told.durable_acked["a"], to);
        auto moved = (*a)->seek(to);
        if (!moved.ok()) return moved.status();
        told.durable_acked["a"] = *moved;
        if (!drain(**b, d, told)) return {StatusCode::kIOError, "channel b"};
      }
      if (life == 1 && i == end - records_per_life / 4) {
        // Purge: b skips everything not acknowledged (durable on return).
        auto moved = (*b)->seek(t.next_seq());
        if (!moved.ok()) return moved.status();
        told.durable_acked["b"] = *moved;
      }
    }
    if (life == 1) {  // end of stream: durable in every mode
      told.close_attempted = true;
      const std::uint64_t next = t.next_seq();
      if (Status s = t.close(); !s.ok()) return s;
      told.closed = true;
      told.told_durable(next);
      if (!drain(**a, d, told)) return {StatusCode::kIOError, "channel a"};
    }
  }
  // The closed topic reopens closed (and calls nothing that writes).
  auto topic = log::open_topic(fs, kCutTopicDir, o);
  if (!topic.ok()) return topic.status();
  if (!(*topic)->closed()) return {StatusCode::kInternal, "reopened open after close()"};
  if ((*topic)->append("refused").code() != StatusCode::kClosed) {
    return {StatusCode::kInternal, "a closed topic took an append"};
  }
  return Status::Ok();
}

Status run_concurrent_workload(FaultFileSystem& fs, Durability d, int records, Told& told,
                               bool reader_elsewhere) {
  TopicOptions o = cut_topic_options(d);
  o.sync_interval = std::chrono::milliseconds(1);  // the flusher races the others too
  auto topic = log::open_topic(fs, kCutTopicDir, o);
  if (!topic.ok()) return topic.status();
  Topic& t = **topic;
  std::unique_ptr<Topic> reader;
  if (reader_elsewhere) {
    TopicOptions ro = o;
    ro.read_only = true;
    auto r = log::open_topic(fs, kCutTopicDir, ro);
    if (!r.ok()) return r.status();
    reader = std::move(*r);
  }
  auto c = open_channel(reader ? *reader : t, "a", told);
  if (!c.ok()) return c.status();
  std::atomic<int> left{records};
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  const int appenders = d == Durability::kGroupCommit ? 3 : 1;
  for (int a = 0; a < appenders; ++a) {
    threads.emplace_back([&, a] {
      for (int n = 0; !failed && left.fetch_sub(1) > 0; ++n) {
        const std::string p = "w" + std::to_string(a) + ":" + std::to_string(n) + ":payload";
        {
          std::lock_guard lk(told.mu);
          told.attempted_payloads.insert(p);
        }
        auto got = t.append(p);
        if (!got.ok()) {
          failed = true;
          return;
        }
        std::lock_guard lk(told.mu);
        told.returned[*got] = p;
        if (durable(d)) told.told_durable(*got + 1);
        if (d == Durability::kNone && n % 10 == 9) {  // sync() from an appender
          const std::uint64_t next = t.next_seq();
          if (!t.sync().ok()) {
            failed = true;
            return;
          }
          told.told_durable(next);
        }
      }
    });
  }
  // The eager consumer: acknowledges each batch as soon as it sees it.
  // Once the appenders are done, the topic is closed; the consumer reads on
  // until kClosed (through the wake-up page, for a read-only topic).
  Channel& ch = **c;
  std::vector<LogMessage> batch;
  bool closing = false;
  auto give_up = std::chrono::steady_clock::time_point::max();
  while (!failed) {
    batch.clear();
    Status s = ch.next_batch(batch, 8,
                             Context(std::stop_token{}, std::chrono::steady_clock::now() +
                                                            std::chrono::milliseconds(2)));
    if (s.code() == StatusCode::kClosed) break;
    if (s.code() == StatusCode::kDeadlineExceeded) {
      if (left.load() <= 0 && !closing) {
        for (auto& th : threads) th.join();
        threads.clear();
        if (failed) break;
        closing = true;
        std::lock_guard lk(told.mu);
        told.close_attempted = true;
        const std::uint64_t next = t.next_seq();
        if (!t.close().ok()) {
          failed = true;
          break;
        }
        told.closed = true;
        told.told_durable(next);
        give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      } else if (std::chrono::steady_clock::now() > give_up) {
        return {StatusCode::kInternal, "the consumer never saw the close"};
      }
      continue;
    }
    if (!s.ok() || !ch.ack(batch.back().seq).ok()) {
      failed = true;
      break;
    }
    if (durable(d)) {
      std::lock_guard lk(told.mu);
      told.durable_acked["a"] = batch.back().seq + 1;
    }
  }
  for (auto& th : threads) th.join();
  return failed ? Status(StatusCode::kIOError, "power cut") : Status::Ok();
}

std::string check_image(FaultFileSystem& image, Durability d, const Told& told) {
  std::ostringstream why;
  // The positions the disk kept, before the topic is opened: no seq below
  // one of them may be given to another record.
  std::map<std::string, std::uint64_t> kept;
  for (const auto& [name, acked] : told.durable_acked) {
    const std::string path = std::string(kCutTopicDir) + "/channels/" + name + ".pos";
    if (auto bytes = log::read_whole(image, path); bytes.ok()) {
      const log::PositionRead p = log::decode_positions(*bytes);
      if (p.state == log::PositionState::kValid) kept[name] = p.slot.next_seq;
    }
  }
  auto topic = log::open_topic(image, kCutTopicDir, cut_topic_options(d));
  if (!topic.ok()) return "reopen failed: " + topic.status().to_string();
  Topic& t = **topic;
  const std::uint64_t next = t.next_seq();
  const std::uint64_t first = t.first_seq();
  const bool closed = t.closed();
  if (told.closed && !closed) why << "close() returned Ok, and the topic reopened open; ";
  if (closed && !told.close_attempted) why << "closed, and close() was never called; ";
  // The mark is written after everything before it is synced (and the
  // removals retention made, by the directory sync): a closed log is whole
  // in every mode. (Missing seqs below a channel's position are otherwise
  // tolerated below: in kNone a power cut may take records channels passed.)
  if (closed && !t.recovery().corrupt.empty()) {
    why << "closed, and recovery found damage: " << t.recovery().corrupt.front().file << " "
        << t.recovery().corrupt.front().what << "; ";
  }
  if (next < told.durable_next) {
    why << "next seq " << next << " is below " << told.durable_next << ", reported durable; ";
  }
  for (const auto& [name, p] : kept) {
    if (next < p) why << "seqs go backwards: next " << next << ", channel " << name << " at " << p;
  }
  for (const auto& lost : t.recovery().truncated) {
    if (durable(d) && lost.what.find("channels had passed") != std::string::npos) {
      why << "a channel had acknowledged records a power cut took: " << lost.what << "; ";
    }
  }
  if (durable(d) && !t.recovery().corrupt.empty()) {
    why << "recovery found corruption: " << t.recovery().corrupt.front().file << " "
        << t.recovery().corrupt.front().what << "; ";
  }
  // In every mode a power cut leaves sealed segments whole, or (kNone: the
  // roll did not sync them) says their loss is an unsynced tail's: damage
  // there, or a gap between segments, is not a power cut's trace. (The
  // newest segment's unsynced records may tear: docs/design.md, "What is
  // next" (3).)
  if (auto names = image.list(kCutTopicDir); names.ok()) {
    std::string newest;
    for (const std::string& n : *names) {
      if (log::parse_segment_name(n))
        newest = std::max(newest, std::string(kCutTopicDir) + "/" + n);
    }
    for (const LogDamage& c : t.recovery().corrupt) {
      if (c.file != newest || c.offset < log::kSegmentHeaderSize) {
        why << "damage reported in a sealed segment or between segments: " << c.file << " @"
            << c.offset << " " << c.what << "; ";
      }
    }
  }
  // Channels resume where they durably were, and lost nothing to retention.
  std::uint64_t slowest = next;
  for (const auto& [name, acked] : told.durable_acked) {
    auto c = t.channel(name);
    if (!c.ok()) {
      why << "channel " << name << ": " << c.status().to_string() << "; ";
      continue;
    }
    const std::uint64_t at = (*c)->acked();
    slowest = std::min(slowest, at);
    if (at < acked) why << "channel " << name << " resumes at " << at << ", before " << acked;
    if (at > next) why << "channel " << name << " resumes at " << at << ", past the end " << next;
    if ((*c)->skipped_retention() != 0) why << "channel " << name << " lost records to retention";
    if (at < acked || at > next || (*c)->skipped_retention() != 0) why << "; ";
  }
  if (first > slowest) why << "first seq " << first << " is past channel position " << slowest;
  // Every record there: written, whole, once, in order.
  auto check = t.channel("check");
  if (!check.ok()) return why.str() + "check channel: " + check.status().to_string();
  std::set<std::uint64_t> present;
  std::set<std::string> payloads_seen;
  std::vector<LogMessage> delivered;
  std::vector<LogMessage> batch;
  std::uint64_t last = 0;
  bool any = false;
  for (;;) {
    batch.clear();
    Status s = (*check)->next_batch(batch, 256, now_ctx());
    if (s.code() == StatusCode::kDeadlineExceeded && !closed) break;
    if (s.code() == StatusCode::kClosed && closed) break;
    if (!s.ok()) return why.str() + "reading: " + s.to_string();
    delivered.insert(delivered.end(), batch.begin(), batch.end());
    for (const auto& m : batch) {
      if (any && m.seq <= last) why << "seq " << m.seq << " after " << last << "; ";
      any = true;
      last = m.seq;
      present.insert(m.seq);
      if (auto it = told.attempted.find(m.seq); it != told.attempted.end()) {
        if (it->second != m.payload) why << "seq " << m.seq << " holds other bytes; ";
      } else if (!told.attempted_payloads.contains(m.payload)) {
        why << "seq " << m.seq << " was never written; ";
      } else if (!payloads_seen.insert(m.payload).second) {
        why << "a record appears twice (seq " << m.seq << "); ";
      }
      if (auto it = told.returned.find(m.seq);
          it != told.returned.end() && it->second != m.payload) {
        why << "seq " << m.seq << " is not the record its append returned; ";
      }
    }
  }
  if (durable(d) && (*check)->skipped_corrupt() != 0) why << "records skipped as corrupt; ";
  why << check_times(t, delivered);
  for (std::uint64_t s = std::max(first, slowest); s < told.durable_next; ++s) {
    if (!present.contains(s)) {
      why << "seq " << s << " was reported durable and is gone; ";
      break;
    }
  }
  if (closed) {  // refuses appends; the channel stays at its end
    if (auto r = t.append("after the cut"); r.code() != StatusCode::kClosed) {
      why << "a closed topic's append returned " << r.status().to_string() << "; ";
    }
    if (t.next_seq() != next) why << "a closed topic's next seq moved; ";
    return why.str();
  }
  // It takes appends again, at its end.
  auto appended = t.append("after the cut");
  if (!appended.ok()) return why.str() + "append after reopen: " + appended.status().to_string();
  if (*appended != next) why << "the next append got seq " << *appended << ", not " << next;
  batch.clear();
  if (Status s = (*check)->next_batch(batch, 1, now_ctx());
      !s.ok() || batch.empty() || batch.front().payload != "after the cut") {
    why << "the append after reopen is not delivered (" << s.to_string() << ")";
  }
  return why.str();
}

}  // namespace sluice::testutil
