// Power cuts at every file-system call of the embedded store's own work
// (issue 27): creating a queue, deleting one, the .purged count a purge
// writes, and puts, gets and acknowledgements through the store, on the
// simulated disk of tests/log/fault_file_system.h, with every way a cut
// treats unsynced bytes. After each cut the store is opened on what the disk
// kept and checked against what the script was told.
//
// SLUICE_CRASH_POINTS_EVERY=n checks every n-th call only (default: all; every
// 4th under sanitizers).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "log/crash_points.h"
#include "log/fault_file_system.h"
#include "sluice/store.h"
#include "store/dir_store.h"

namespace sluice::store {
namespace {

using testutil::CutMode;
using testutil::FaultFileSystem;

constexpr const char* kStoreDir = "/fault/store";

Context soon() { return Context().with_timeout(std::chrono::seconds(5)); }

std::unique_ptr<QueueStore> open_store(FaultFileSystem& fs) {
  auto s = DirStore::open(fs, kStoreDir, StoreOptions{});
  if (!s.ok()) {
    ADD_FAILURE() << "open store: " << s.status().to_string();
    return nullptr;
  }
  return std::move(*s);
}

// What a script was told before the power went.
struct Told {
  bool returned = false;    // the operation under test returned Ok
  std::uint64_t put = 0;    // messages m0.. whose put returned
  std::uint64_t tried = 0;  // messages m0.. a put was asked for
  std::uint64_t acked = 0;  // messages whose acknowledgement returned
};

std::string msg(std::uint64_t i) { return "m" + std::to_string(i); }

Status put_range(QueueWriter& w, std::uint64_t from, std::uint64_t to, Told* told) {
  std::vector<std::string> owned;
  for (std::uint64_t i = from; i < to; ++i) owned.push_back(msg(i));
  std::vector<std::string_view> batch(owned.begin(), owned.end());
  if (told != nullptr) told->tried = to;
  Status s = w.put(batch, soon());
  if (s.ok() && told != nullptr) told->put = to;
  return s;
}

// Everything the channel has not acknowledged, read with peek (no role).
Result<std::vector<StoreMessage>> unacked(QueueStore& store, std::string_view q) {
  auto p = store.peek(q, kDefaultChannel);
  if (!p.ok()) return p.status();
  std::vector<StoreMessage> out;
  for (;;) {
    const std::size_t before = out.size();
    if (Status s = (*p)->next(out, 100); !s.ok()) return s;
    if (out.size() == before) return out;
  }
}

// The queue works: a reader gets everything unacknowledged and acknowledges
// it, then a put, and the reader gets the new message. `expect_bound`:
// stat's bound.
std::string works(QueueStore& store, std::string_view q, std::uint64_t expect_bound) {
  auto info = store.stat(q);
  if (!info.ok()) return "stat: " + info.status().to_string();
  if (info->bound != expect_bound) return "bound " + std::to_string(info->bound);
  auto before = unacked(store, q);
  if (!before.ok()) return "peek: " + before.status().to_string();
  auto r = store.reader(q, kDefaultChannel, soon());
  if (!r.ok()) return "reader: " + r.status().to_string();
  std::vector<StoreMessage> got;
  while (got.size() < before->size()) {
    if (Status s = (*r)->get(got, 100, soon()); !s.ok()) return "get: " + s.to_string();
  }
  for (std::size_t i = 0; i < before->size(); ++i) {
    if (got[i].data != (*before)[i].data) return "get gave " + got[i].data;
  }
  if (Status s = (*r)->ack_prefix(got.size()); !s.ok()) return "ack: " + s.to_string();
  {
    auto w = store.writer(q, soon());
    if (!w.ok()) return "writer: " + w.status().to_string();
    std::string_view one = "after";
    if (Status s = (*w)->put(std::span<const std::string_view>(&one, 1), soon()); !s.ok()) {
      return "put: " + s.to_string();
    }
  }
  while (got.size() < before->size() + 1) {
    if (Status s = (*r)->get(got, 100, soon()); !s.ok()) return "get: " + s.to_string();
  }
  if (got.back().data != "after") return "the new message is " + got.back().data;
  if (Status s = (*r)->ack_prefix(got.size()); !s.ok()) return "ack: " + s.to_string();
  return "";
}

// The store's names: only whole queues, never a staging leftover.
std::string names_ok(QueueStore& store, const std::vector<std::string>& allowed,
                     std::vector<std::string>& names) {
  auto l = store.list();
  if (!l.ok()) return "list: " + l.status().to_string();
  names = *l;
  for (const std::string& n : names) {
    if (std::find(allowed.begin(), allowed.end(), n) == allowed.end()) return "list shows " + n;
  }
  return "";
}

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

using Setup = std::function<void(QueueStore&)>;
using Script = std::function<void(QueueStore&, Told&)>;
using Check = std::function<std::string(QueueStore&, const Told&)>;

// Runs `setup` with the power on, then cuts at every call `script` makes
// and checks each image the cut leaves.
void cut_every_call(const char* what, const Setup& setup, const Script& script,
                    const Check& check) {
  std::uint64_t total = 0;
  {
    FaultFileSystem fs;
    auto store = open_store(fs);
    ASSERT_NE(store, nullptr);
    setup(*store);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    const std::uint64_t before = fs.calls();
    Told told;
    script(*store, told);
    ASSERT_TRUE(told.returned) << what << ": the script fails without a cut";
    total = fs.calls() - before;
    store.reset();
    auto image = fs.after_cut(CutMode::kDropUnsynced, 0);
    auto again = open_store(*image);
    ASSERT_NE(again, nullptr);
    EXPECT_EQ(check(*again, told), "") << what << ": no cut at all";
  }
  ASSERT_GT(total, 3U) << what;
  int failures = 0;
  std::uint64_t checked = 0;
  for (std::uint64_t k = 1; k <= total + 1 && failures < 5; k += testutil::crash_points_every()) {
    FaultFileSystem fs;
    auto store = open_store(fs);
    ASSERT_NE(store, nullptr);
    setup(*store);
    fs.cut_at(fs.calls() + k);
    Told told;
    script(*store, told);  // fails from the cut on
    store.reset();
    for (CutMode mode : {CutMode::kDropUnsynced, CutMode::kZeroFill, CutMode::kTorn}) {
      auto image = fs.after_cut(mode, k);
      auto again = open_store(*image);
      ASSERT_NE(again, nullptr);
      const std::string why = check(*again, told);
      ++checked;
      if (!why.empty()) {
        ++failures;
        ADD_FAILURE() << what << ": power cut at call " << k << " of " << total << " ("
                      << testutil::to_string(mode) << "): " << why << "\nlast calls:\n"
                      << fs.recent_calls(12);
      }
    }
  }
  std::printf("%s: %llu calls, %llu cut images checked\n", what,
              static_cast<unsigned long long>(total), static_cast<unsigned long long>(checked));
}

void must(const Status& s) { ASSERT_TRUE(s.ok()) << s.to_string(); }

// A queue "other" with three messages, one acknowledged: what no cut of
// another queue's create or delete may touch.
void with_other(QueueStore& store) {
  must(store.create("other", 5));
  auto w = store.writer("other", soon());
  ASSERT_TRUE(w.ok());
  must(put_range(**w, 0, 3, nullptr));
  auto r = store.reader("other", kDefaultChannel, soon());
  ASSERT_TRUE(r.ok());
  std::vector<StoreMessage> got;
  must((*r)->get(got, 1, soon()));
  must((*r)->ack_prefix(1));
}

std::string other_whole(QueueStore& store) {
  auto left = unacked(store, "other");
  if (!left.ok()) return "other: " + left.status().to_string();
  if (left->size() != 2 || (*left)[0].data != "m1" || (*left)[1].data != "m2") {
    return "other lost messages (" + std::to_string(left->size()) + " left)";
  }
  return works(store, "other", 5);
}

TEST(StoreCrashTest, EveryCallOfACreate) {
  cut_every_call(
      "create", with_other,
      [](QueueStore& store, Told& told) {
        told.returned = store.create("q", QueueSpec{.bound = 3}).ok();
      },
      [](QueueStore& store, const Told& told) -> std::string {
        std::vector<std::string> names;
        if (auto why = names_ok(store, {"other", "q"}, names); !why.empty()) return why;
        if (!has(names, "other")) return "other is gone";
        if (auto why = other_whole(store); !why.empty()) return why;
        if (has(names, "q")) {
          if (Status s = store.create("q", 3); s.code() != StatusCode::kAlreadyExists) {
            return "create of the queue there says " + s.to_string();
          }
          auto left = unacked(store, "q");
          if (!left.ok() || !left->empty()) return "a new queue is not empty";
          return works(store, "q", 3);
        }
        if (told.returned) return "created, then gone";
        if (auto st = store.stat("q"); st.code() != StatusCode::kNotFound) {
          return "stat of no queue says " + st.status().to_string();
        }
        if (Status s = store.create("q", 3); !s.ok()) return "create again: " + s.to_string();
        if (auto why = names_ok(store, {"other", "q"}, names); !why.empty()) return why;
        return works(store, "q", 3);
      });
}

// "q": bound 10, m0..m4 put, m0 and m1 acknowledged.
void with_queue(QueueStore& store) {
  with_other(store);
  must(store.create("q", 10));
  auto w = store.writer("q", soon());
  ASSERT_TRUE(w.ok());
  must(put_range(**w, 0, 5, nullptr));
  auto r = store.reader("q", kDefaultChannel, soon());
  ASSERT_TRUE(r.ok());
  std::vector<StoreMessage> got;
  while (got.size() < 2) must((*r)->get(got, 2 - got.size(), soon()));
  must((*r)->ack_prefix(2));
}

TEST(StoreCrashTest, EveryCallOfADelete) {
  cut_every_call(
      "delete", with_queue,
      [](QueueStore& store, Told& told) { told.returned = store.remove("q").ok(); },
      [](QueueStore& store, const Told& told) -> std::string {
        std::vector<std::string> names;
        if (auto why = names_ok(store, {"other", "q"}, names); !why.empty()) return why;
        if (!has(names, "other")) return "other is gone";
        if (auto why = other_whole(store); !why.empty()) return why;
        if (has(names, "q")) {
          if (told.returned) return "deleted, then back";
          auto left = unacked(store, "q");
          if (!left.ok()) return "peek: " + left.status().to_string();
          if (left->size() != 3 || (*left)[0].data != "m2" || (*left)[2].data != "m4") {
            return "the queue is there but not whole (" + std::to_string(left->size()) +
                   " unacknowledged)";
          }
          return works(store, "q", 10);
        }
        if (auto st = store.stat("q"); st.code() != StatusCode::kNotFound) {
          return "stat of a deleted queue says " + st.status().to_string();
        }
        if (Status s = store.create("q", 4); !s.ok()) return "create again: " + s.to_string();
        auto left = unacked(store, "q");
        if (!left.ok() || !left->empty()) return "the new queue has old messages";
        return works(store, "q", 4);
      });
}

// "q" as with_queue, purged once (3 dropped), then m5..m7 put.
void with_purged_queue(QueueStore& store) {
  with_queue(store);
  auto n = store.purge("q", kDefaultChannel, soon());
  ASSERT_TRUE(n.ok());
  ASSERT_EQ(*n, 3U);
  auto w = store.writer("q", soon());
  ASSERT_TRUE(w.ok());
  must(put_range(**w, 5, 8, nullptr));
}

TEST(StoreCrashTest, EveryCallOfAPurge) {
  cut_every_call(
      "purge", with_purged_queue,
      [](QueueStore& store, Told& told) {
        told.returned = store.purge("q", kDefaultChannel, soon()).ok();
      },
      [](QueueStore& store, const Told& told) -> std::string {
        auto info = store.stat("q");
        if (!info.ok()) return "stat: " + info.status().to_string();
        if (info->channel_info.empty()) return "no channel";
        const ChannelInfo& ch = info->channel_info[0];
        if (ch.purged != 3 && ch.purged != 6) {
          return "purged count " + std::to_string(ch.purged) + " (3 or 6)";
        }
        if (ch.lag != 0 && ch.lag != 3) return "lag " + std::to_string(ch.lag);
        if (ch.purged == 6 && ch.lag != 0) return "counted, not purged";
        if (told.returned && (ch.purged != 6 || ch.lag != 0)) return "purge returned, undone";
        if (auto why = other_whole(store); !why.empty()) return why;
        return works(store, "q", 10);
      });
}

TEST(StoreCrashTest, EveryCallOfPutsGetsAndAcks) {
  cut_every_call(
      "put-get-ack",
      [](QueueStore& store) {
        with_other(store);
        must(store.create("q", 4));
      },
      [](QueueStore& store, Told& told) {
        auto w = store.writer("q", soon());
        if (!w.ok()) return;
        auto r = store.reader("q", kDefaultChannel, soon());
        if (!r.ok()) return;
        std::vector<StoreMessage> got;
        const auto get_to = [&](std::size_t n) {
          while (got.size() < n) {
            if (!(*r)->get(got, n - got.size(), soon()).ok()) return false;
          }
          return true;
        };
        const auto ack = [&](std::uint64_t n) {
          if (!(*r)->ack_prefix(n).ok()) return false;
          told.acked = n;
          return true;
        };
        // Never more than the bound (4) unacknowledged: no put waits.
        if (!put_range(**w, 0, 3, &told).ok() || !get_to(3) || !ack(2)) return;
        if (!put_range(**w, 3, 4, &told).ok() || !put_range(**w, 4, 6, &told).ok()) return;
        if (!get_to(6) || !ack(3) || !ack(6)) return;
        if (!put_range(**w, 6, 9, &told).ok() || !get_to(8) || !ack(8)) return;
        told.returned = true;
      },
      [](QueueStore& store, const Told& told) -> std::string {
        auto info = store.stat("q");
        if (!info.ok()) return "stat: " + info.status().to_string();
        if (info->produced < told.put) {
          return std::to_string(told.put) + " puts returned, " + std::to_string(info->produced) +
                 " messages there";
        }
        if (info->produced > told.tried) return "more messages than were put";
        auto left = unacked(store, "q");
        if (!left.ok()) return "peek: " + left.status().to_string();
        const std::uint64_t position = info->produced - left->size();
        if (position < told.acked) {
          return "acknowledged up to " + std::to_string(told.acked) + ", position " +
                 std::to_string(position);
        }
        for (std::size_t i = 0; i < left->size(); ++i) {
          if ((*left)[i].data != msg(position + i)) {
            return "message " + std::to_string(position + i) + " is '" + (*left)[i].data + "'";
          }
        }
        if (auto why = other_whole(store); !why.empty()) return why;
        return works(store, "q", 4);
      });
}

// The roles on the simulated disk hold as on the real one: a channel's
// reader role is an flock (a second reader in this process is refused), and
// a delete is refused while a reader or writer has the queue.
TEST(StoreOnTheSimulatedDiskTest, RolesExcludeAsOnTheRealDisk) {
  FaultFileSystem fs;
  auto store = open_store(fs);
  ASSERT_NE(store, nullptr);
  must(store->create("q", 2));
  {
    auto r = store->reader("q", kDefaultChannel, soon());
    ASSERT_TRUE(r.ok());
    auto again =
        store->reader("q", kDefaultChannel, Context().with_timeout(std::chrono::milliseconds(20)));
    EXPECT_EQ(again.code(), StatusCode::kInUse);
    EXPECT_EQ(store->remove("q").code(), StatusCode::kInUse);
    auto other = store->reader("q", "other", soon());
    EXPECT_TRUE(other.ok()) << "another channel has a role of its own";
  }
  {
    auto w = store->writer("q", soon());
    ASSERT_TRUE(w.ok());
    EXPECT_EQ(store->remove("q").code(), StatusCode::kInUse);
  }
  must(store->remove("q"));
  auto l = store->list();
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(l->empty());
  auto tmp = fs.list(std::string(kStoreDir) + "/tmp");
  ASSERT_TRUE(tmp.ok());
  EXPECT_TRUE(tmp->empty()) << "a delete leaves nothing under tmp/";
}

}  // namespace
}  // namespace sluice::store
