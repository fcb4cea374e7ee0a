// The QueueStore interface (sluice/store.h), run against every backend: a
// backend is a factory. Built twice: store_test (embedded) and
// store_redis_test (SLUICE_TEST_REDIS: a real redis-server; label redis).
#include "sluice/store.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "testutil/temp_dir.h"
#ifdef SLUICE_TEST_REDIS
#include "testutil/redis_server.h"
#endif

namespace sluice {
namespace {

using namespace std::chrono_literals;

struct Backend {
  std::string name;
  // Opens an empty store for one test, named after it.
  std::function<Result<std::unique_ptr<QueueStore>>(const std::string& test)> open;
  // Writers and readers hold their role for their lifetime (embedded); on
  // Redis only while a call waits (the pressure protocol's roles).
  bool exclusive_roles = true;
  bool named_channels = true;            // embedded, and Redis Streams topics
  QueueKind kind = QueueKind::kDefault;  // what create() makes
};

constexpr const char* kNoExclusiveRoles =
    "Redis roles are the pressure protocol's, held only while a call waits: writers and readers "
    "of a Redis queue are not exclusive (docs/cli.md, \"Redis\")";

std::ostream& operator<<(std::ostream& os, const Backend& b) { return os << b.name; }

class StoreTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    auto s = GetParam().open("store");
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(*s);
  }

  Status create(std::string_view q, std::uint64_t bound) {
    return store_->create(q, bound, GetParam().kind);
  }
  std::unique_ptr<QueueWriter> writer(std::string_view q, const Context& ctx = {}) {
    auto w = store_->writer(q, ctx);
    EXPECT_TRUE(w.ok()) << w.status();
    return w.ok() ? std::move(*w) : nullptr;
  }
  std::unique_ptr<QueueReader> reader(std::string_view q, std::string_view ch = kDefaultChannel) {
    auto r = store_->reader(q, ch, {});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::move(*r) : nullptr;
  }
  static Status put(QueueWriter& w, const std::vector<std::string>& msgs,
                    std::size_t* done = nullptr, const Context& ctx = {}) {
    std::vector<std::string_view> views(msgs.begin(), msgs.end());
    return w.put(views, ctx, done);
  }
  // Exactly n messages (several gets if need be), with a deadline so a bug
  // fails instead of hanging.
  static std::vector<std::string> get(QueueReader& r, std::size_t n) {
    std::vector<std::string> out;
    const Context ctx = with_timeout(10s);
    while (out.size() < n) {
      Status s = r.get(out, n - out.size(), ctx);
      EXPECT_TRUE(s.ok()) << s;
      if (!s.ok()) break;
    }
    return out;
  }
  static std::vector<std::string> seq(int from, int to) {
    std::vector<std::string> v;
    for (int i = from; i < to; ++i) v.push_back("m" + std::to_string(i));
    return v;
  }

  std::unique_ptr<QueueStore> store_;
};

TEST_P(StoreTest, CreateListStatRemove) {
  ASSERT_EQ(create("b", 10), StatusCode::kOk);
  ASSERT_EQ(create("a", 20), StatusCode::kOk);
  auto names = store_->list();
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_EQ(*names, (std::vector<std::string>{"a", "b"}));

  auto info = store_->stat("a");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->name, "a");
  EXPECT_EQ(info->kind, GetParam().kind == QueueKind::kStream ? "stream"
                        : GetParam().name == "redis"          ? "pressure"
                                                              : "log");
  EXPECT_EQ(info->bound, 20U);
  EXPECT_FALSE(info->closed);
  EXPECT_EQ(info->length, 0U);
  EXPECT_EQ(info->produced, 0U);
  EXPECT_EQ(info->consumed, 0U);
  EXPECT_EQ(info->channels, (std::vector<std::string>{"default"}));

  ASSERT_EQ(store_->remove("a"), StatusCode::kOk);
  EXPECT_EQ(store_->stat("a").code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->remove("a"), StatusCode::kNotFound);
  names = store_->list();
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, (std::vector<std::string>{"b"}));
}

// QueueSpec::max_age: a reader that stopped acknowledging holds a put at
// the bound only until what it holds is older than the age; then it is
// deleted, counted for that channel no more, and the put goes in. A Redis
// pressure queue keeps every message until taken: refused, nothing made.
TEST_P(StoreTest, AMaxAgeDeletesWhatAStoppedReaderHoldsAndFreesTheBound) {
  const QueueSpec spec{.bound = 3, .kind = GetParam().kind, .max_age = 1s};
  if (GetParam().kind == QueueKind::kDefault && GetParam().name != "embedded") {
    Status s = store_->create("aged", spec);
    EXPECT_EQ(s, StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("--stream"), std::string_view::npos) << s;
    EXPECT_EQ(store_->stat("aged").code(), StatusCode::kNotFound);
    return;
  }
  ASSERT_EQ(store_->create("aged", spec), StatusCode::kOk);
  auto info = store_->stat("aged");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->max_age, 1s);
  auto w = writer("aged");
  ASSERT_NE(w, nullptr);
  ASSERT_EQ(put(*w, seq(0, 3)), StatusCode::kOk);
  auto r = reader("aged");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(get(*r, 3), seq(0, 3));  // and never acknowledged
  const auto t0 = std::chrono::system_clock::now();
  Status s = put(*w, seq(3, 4), nullptr, with_timeout(30s));
  ASSERT_EQ(s, StatusCode::kOk) << s;  // without the age: kDeadlineExceeded
  EXPECT_GE(std::chrono::system_clock::now() - t0, 1s);
  info = store_->stat("aged");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->produced, 4U);
  EXPECT_EQ(info->length, 1U);  // only m3 waits for the reader
  EXPECT_EQ(get(*r, 1), seq(3, 4));
}

TEST_P(StoreTest, CreateOfAnExistingNameIsAlreadyExists) {
  ASSERT_EQ(create("q", 10), StatusCode::kOk);
  Status s = create("q", 5);
  EXPECT_EQ(s, StatusCode::kAlreadyExists) << s;
  EXPECT_NE(s.message().find("'q'"), std::string_view::npos) << s;
  auto info = store_->stat("q");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->bound, 10U);  // the first one stands
}

TEST_P(StoreTest, BadNamesAreInvalidArgument) {
  for (const std::string& bad : std::vector<std::string>{"", ".", "..", "a/b", "../x", "sp ace",
                                                         "tab\t", "é", std::string(201, 'x')}) {
    Status s = create(bad, 10);
    EXPECT_EQ(s, StatusCode::kInvalidArgument) << "'" << bad << "': " << s;
    EXPECT_FALSE(s.message().empty());
    EXPECT_EQ(store_->stat(bad).code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(store_->writer(bad, {}).code(), StatusCode::kInvalidArgument) << bad;
  }
  for (const std::string& good :
       std::vector<std::string>{"a", "A.b-c_9", "..x", std::string(200, 'y')}) {
    EXPECT_EQ(create(good, 1), StatusCode::kOk) << good;
  }
  ASSERT_EQ(create("q", 1), StatusCode::kOk);
  EXPECT_EQ(store_->reader("q", "a/b", {}).code(), StatusCode::kInvalidArgument);
  // Every backend refuses a channel name the embedded store cannot take
  // (Streams made such a channel before).
  auto dot = store_->reader("q", ".x", {});
  EXPECT_EQ(dot.code(), StatusCode::kInvalidArgument) << dot.status();
}

TEST_P(StoreTest, BoundZeroIsUnbounded) {
  ASSERT_EQ(create("q", 0), StatusCode::kOk);
  auto info = store_->stat("q");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->bound, 0U);
  auto w = writer("q");
  std::size_t done = 0;
  ASSERT_EQ(put(*w, seq(0, 3000), &done, with_timeout(10s)), StatusCode::kOk);
  EXPECT_EQ(done, 3000U);
  auto r = reader("q");
  EXPECT_EQ(get(*r, 3000), seq(0, 3000));
}

TEST_P(StoreTest, UnknownQueueIsNotFound) {
  EXPECT_EQ(store_->writer("nope", {}).code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->reader("nope", kDefaultChannel, {}).code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->stat("nope").code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->remove("nope"), StatusCode::kNotFound);
}

TEST_P(StoreTest, PutGetAckInOrder) {
  ASSERT_EQ(create("q", 100), StatusCode::kOk);
  auto w = writer("q");
  std::size_t done = 0;
  ASSERT_EQ(put(*w, seq(0, 10), &done), StatusCode::kOk);
  EXPECT_EQ(done, 10U);
  auto r = reader("q");
  EXPECT_EQ(get(*r, 4), seq(0, 4));
  ASSERT_EQ(r->ack(), StatusCode::kOk);
  EXPECT_EQ(get(*r, 6), seq(4, 10));
  ASSERT_EQ(r->ack(), StatusCode::kOk);
  auto info = store_->stat("q");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->produced, 10U);
  EXPECT_EQ(info->consumed, 10U);
  EXPECT_EQ(info->length, 0U);
  // Nothing more: get waits, and ends at the deadline.
  std::vector<std::string> out;
  EXPECT_EQ(r->get(out, 1, with_timeout(20ms)), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(out.empty());
}

// A peek shows what the channel held when it began and then ends: a
// producer that outruns it (puts between its pages) does not keep it going.
// It read until a page came back empty, so it might never end.
TEST_P(StoreTest, APeekEndsAtWhatTheChannelHeldWhenItBegan) {
  ASSERT_EQ(create("q", 0), StatusCode::kOk);
  auto w = writer("q");
  ASSERT_EQ(put(*w, seq(0, 3)), StatusCode::kOk);
  auto p = store_->peek("q", kDefaultChannel);
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<StoreMessage> page;
  ASSERT_EQ((*p)->next(page, 2), StatusCode::kOk);
  ASSERT_EQ(page.size(), 2U);
  ASSERT_EQ(put(*w, seq(3, 6)), StatusCode::kOk);  // between two pages
  std::vector<std::string> shown;
  for (const StoreMessage& m : page) shown.push_back(m.data);
  for (int pages = 0; pages < 10; ++pages) {
    page.clear();
    ASSERT_EQ((*p)->next(page, 2), StatusCode::kOk);
    if (page.empty()) break;
    for (const StoreMessage& m : page) shown.push_back(m.data);
  }
  EXPECT_EQ(shown, seq(0, 3));
  // A new peek sees them all.
  auto again = store_->peek("q", kDefaultChannel);
  ASSERT_TRUE(again.ok()) << again.status();
  page.clear();
  ASSERT_EQ((*again)->next(page, 10), StatusCode::kOk);
  EXPECT_EQ(page.size(), 6U);
}

// get_batch (one buffer, no string per message) hands out what get would:
// the same bytes, seq or id and time, and counts toward the same prefix.
TEST_P(StoreTest, GetBatchHandsOutWhatGetWouldAndCountsTowardTheSamePrefix) {
  ASSERT_EQ(create("q", 100), StatusCode::kOk);
  auto w = writer("q");
  std::vector<std::string> msgs = seq(0, 8);
  msgs[3] = "";                                              // empty messages are messages
  msgs[5] = std::string("a\0b\xff", 4);                      // any bytes
  msgs[6] = std::string(MessageBatch::kKeepBytes + 1, 'x');  // past what a batch keeps
  ASSERT_EQ(put(*w, msgs), StatusCode::kOk);
  auto r = reader("q");
  const Context ctx = with_timeout(10s);
  MessageBatch b;
  while (b.size() < 3) ASSERT_EQ(r->get_batch(b, 3 - b.size(), ctx), StatusCode::kOk);
  std::vector<StoreMessage> rest;
  while (rest.size() < 2) ASSERT_EQ(r->get(rest, 2 - rest.size(), ctx), StatusCode::kOk);
  const std::size_t before = b.size();
  while (b.size() < before + 3) {
    ASSERT_EQ(r->get_batch(b, before + 3 - b.size(), ctx), StatusCode::kOk);  // appends
  }
  ASSERT_EQ(b.size(), 6U);
  EXPECT_EQ(r->delivered(), 8U);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(b.data(i), msgs[i]) << i;
  for (std::size_t i = 3; i < 6; ++i) EXPECT_EQ(b.data(i), msgs[i + 2]) << i;
  EXPECT_EQ(rest[0].data, msgs[3]);
  EXPECT_EQ(rest[1].data, msgs[4]);
  for (std::size_t i = 0; i < b.size(); ++i) {
    const StoreMessage& m = i < 3 ? rest[0] : rest[1];  // one of the same backend
    EXPECT_EQ(b.entry(i).seq.has_value(), m.seq.has_value()) << i;
    EXPECT_EQ(b.id(i).empty(), m.id.empty()) << i;
    EXPECT_EQ(b.entry(i).time.has_value(), m.time.has_value()) << i;
  }
  if (b.entry(0).seq) {
    EXPECT_EQ(*b.entry(0).seq + 3, *rest[0].seq);
    EXPECT_EQ(*rest[1].seq + 1, *b.entry(3).seq);
  }
  ASSERT_EQ(r->ack_prefix(4), StatusCode::kOk);  // three from the batch, one from get
  ASSERT_EQ(r->release(), StatusCode::kOk);
  b.clear();
  EXPECT_EQ(b.size(), 0U);
  while (b.size() < 4) ASSERT_EQ(r->get_batch(b, 4 - b.size(), ctx), StatusCode::kOk);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(b.data(i), msgs[i + 4]) << i;
  EXPECT_EQ(r->get_batch(b, 0, ctx), StatusCode::kInvalidArgument);
}

// Byte counts where the backend keeps them (pressure queues: the protocol's
// counters; docs/cli.md says why the others cannot), and a pressure queue's
// length split into waiting and held by readers; empty elsewhere.
TEST_P(StoreTest, StatHasByteCountsAndWaitingWhereTheBackendKeepsThem) {
  const bool pressure = GetParam().name == "redis";
  ASSERT_EQ(create("q", 100), StatusCode::kOk);
  auto w = writer("q");
  ASSERT_EQ(put(*w, {"a", "bb", "ccc", "dddd"}), StatusCode::kOk);
  auto r = reader("q");
  EXPECT_EQ(get(*r, 3), (std::vector<std::string>{"a", "bb", "ccc"}));
  ASSERT_EQ(r->ack_prefix(1), StatusCode::kOk);  // "bb" and "ccc" still held
  auto info = store_->stat("q");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->produced, 4U);
  EXPECT_EQ(info->consumed, 1U);
  EXPECT_EQ(info->length, 3U);
  if (pressure) {
    EXPECT_EQ(info->produced_bytes, std::optional<std::uint64_t>(10));
    EXPECT_EQ(info->consumed_bytes, std::optional<std::uint64_t>(1));
    EXPECT_EQ(info->waiting, std::optional<std::uint64_t>(1));
    EXPECT_EQ(info->in_flight, std::optional<std::uint64_t>(2));
  } else {
    // Streams topics count what was put, not what the slowest channel took;
    // the embedded store neither (docs/cli.md).
    if (GetParam().kind == QueueKind::kStream) {
      EXPECT_EQ(info->produced_bytes, std::optional<std::uint64_t>(10));
    } else {
      EXPECT_FALSE(info->produced_bytes.has_value());
    }
    EXPECT_FALSE(info->consumed_bytes.has_value());
    EXPECT_FALSE(info->waiting.has_value());
    EXPECT_FALSE(info->in_flight.has_value());
  }
}

TEST_P(StoreTest, UnacknowledgedMessagesAreDeliveredAgainAfterAReopen) {
  ASSERT_EQ(create("q", 100), StatusCode::kOk);
  auto w = writer("q");
  ASSERT_EQ(put(*w, seq(0, 6)), StatusCode::kOk);
  {
    auto r = reader("q");
    EXPECT_EQ(get(*r, 2), seq(0, 2));
    ASSERT_EQ(r->ack(), StatusCode::kOk);
    EXPECT_EQ(get(*r, 3), seq(2, 5));  // not acknowledged
  }
  auto info = store_->stat("q");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->consumed, 2U);
  EXPECT_EQ(info->length, 4U);
  auto r = reader("q");
  EXPECT_EQ(get(*r, 4), seq(2, 6));
}

// ack_prefix acknowledges the first n messages handed out, no more; it is
// idempotent; release() gives the rest back, in order, to this reader's
// next get (and, after it goes, to the next reader's).
TEST_P(StoreTest, APrefixIsAcknowledgedAndReleaseGivesTheRestBackInOrder) {
  ASSERT_EQ(create("q", 100), StatusCode::kOk);
  auto w = writer("q");
  ASSERT_EQ(put(*w, seq(0, 10)), StatusCode::kOk);
  {
    auto r = reader("q");
    EXPECT_EQ(get(*r, 6), seq(0, 6));
    EXPECT_EQ(r->delivered(), 6U);
    EXPECT_EQ(r->acked(), 0U);
    ASSERT_EQ(r->ack_prefix(2), StatusCode::kOk);
    ASSERT_EQ(r->ack_prefix(2), StatusCode::kOk);               // again: nothing more
    ASSERT_EQ(r->ack_prefix(1), StatusCode::kOk);               // behind the prefix: nothing
    EXPECT_EQ(r->ack_prefix(7), StatusCode::kInvalidArgument);  // only 6 delivered
    EXPECT_EQ(r->acked(), 2U);
    auto info = store_->stat("q");
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->consumed, 2U);
    EXPECT_EQ(info->length, 8U);

    ASSERT_EQ(r->release(), StatusCode::kOk);
    EXPECT_EQ(r->delivered(), 2U);
    EXPECT_EQ(get(*r, 8), seq(2, 10));  // what was given back comes first, in order
    EXPECT_EQ(r->delivered(), 10U);
    ASSERT_EQ(r->ack_prefix(5), StatusCode::kOk);  // m2, m3, m4
    ASSERT_EQ(r->release(), StatusCode::kOk);
  }
  auto info = store_->stat("q");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->consumed, 5U);
  EXPECT_EQ(info->length, 5U);
  auto r = reader("q");
  EXPECT_EQ(get(*r, 5), seq(5, 10));
  ASSERT_EQ(r->ack(), StatusCode::kOk);
  EXPECT_EQ(r->acked(), 5U);
  info = store_->stat("q");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->consumed, 10U);
  EXPECT_EQ(info->length, 0U);
}

TEST_P(StoreTest, EveryChannelGetsEveryMessage) {
  if (!GetParam().named_channels) {
    GTEST_SKIP() << "a Redis pressure queue has one channel, 'default' (named channels: "
                    "QueueKind::kStream)";
  }
  ASSERT_EQ(create("q", 100), StatusCode::kOk);
  auto w = writer("q");
  ASSERT_EQ(put(*w, seq(0, 3)), StatusCode::kOk);
  auto a = reader("q");
  auto b = reader("q", "audit");
  EXPECT_EQ(get(*a, 3), seq(0, 3));
  EXPECT_EQ(get(*b, 3), seq(0, 3));
}

// ReaderOptions::start places a new channel; one that exists keeps its
// position. A pressure queue has no positions: kInvalidArgument.
TEST_P(StoreTest, AStartPlacesANewChannelAndAnExistingOneKeepsItsPosition) {
  ASSERT_EQ(create("q", 100), StatusCode::kOk);
  auto w = writer("q");
  ASSERT_EQ(put(*w, seq(0, 2)), StatusCode::kOk);
  // The time of the next put is after t (Streams ids have whole ms).
  const auto t = std::chrono::system_clock::now() + 2ms;
  while (std::chrono::system_clock::now() <= t + 1ms) std::this_thread::sleep_for(1ms);
  ASSERT_EQ(put(*w, seq(2, 4)), StatusCode::kOk);
  ReaderOptions at_t;
  at_t.start = SeekTarget::at_time(t);
  if (!GetParam().named_channels) {
    auto r = store_->reader("q", kDefaultChannel, {}, at_t);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status();
    return;
  }
  {
    auto r = store_->reader("q", "late", {}, at_t);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(get(**r, 2), seq(2, 4));
    ASSERT_EQ((*r)->ack(), StatusCode::kOk);
  }
  ReaderOptions at_end;
  at_end.start = SeekTarget::end();
  auto tail = store_->reader("q", "tail", {}, at_end);
  ASSERT_TRUE(tail.ok()) << tail.status();
  ASSERT_EQ(put(*w, seq(4, 5)), StatusCode::kOk);
  EXPECT_EQ(get(**tail, 1), seq(4, 5));
  // "late" exists: a start is ignored, it goes on from its position.
  ReaderOptions from_start;
  from_start.start = SeekTarget::start();
  auto again = store_->reader("q", "late", {}, from_start);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(get(**again, 1), seq(4, 5));
  // A place the backend has no such thing as: kInvalidArgument.
  ReaderOptions other;
  other.start =
      GetParam().kind == QueueKind::kStream ? SeekTarget::at_seq(1) : SeekTarget::after_id("1-0");
  EXPECT_EQ(store_->reader("q", "other", {}, other).status().code(), StatusCode::kInvalidArgument);
}

TEST_P(StoreTest, ASecondReaderOfAChannelFailsFastOrWaitsItsTurn) {
  if (!GetParam().exclusive_roles) GTEST_SKIP() << kNoExclusiveRoles;
  ASSERT_EQ(create("q", 100), StatusCode::kOk);
  auto first = reader("q");
  auto fast = store_->reader("q", kDefaultChannel, with_timeout(0s));
  EXPECT_EQ(fast.code(), StatusCode::kInUse) << fast.status();
  auto waiting = std::async(
      std::launch::async, [&] { return store_->reader("q", kDefaultChannel, with_timeout(30s)); });
  first.reset();  // hands the role over
  auto second = waiting.get();
  EXPECT_TRUE(second.ok()) << second.status();
  // Another channel is not held by it.
  EXPECT_TRUE(store_->reader("q", "other", with_timeout(0s)).ok());
}

TEST_P(StoreTest, TheBoundBlocksAWriterUntilAReaderAcknowledges) {
  ASSERT_EQ(create("q", 3), StatusCode::kOk);
  auto w = writer("q");
  ASSERT_EQ(put(*w, seq(0, 3)), StatusCode::kOk);
  // Full: a put waits, and gives up at its deadline with nothing enqueued.
  std::size_t done = 99;
  EXPECT_EQ(put(*w, seq(3, 4), &done, with_timeout(30ms)), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(done, 0U);

  auto blocked = std::async(std::launch::async, [&] {
    std::size_t n = 0;
    Status s = put(*w, seq(3, 5), &n, with_timeout(30s));
    return std::make_pair(std::move(s), n);
  });
  auto r = reader("q");
  EXPECT_EQ(get(*r, 2), seq(0, 2));
  ASSERT_EQ(r->ack(), StatusCode::kOk);  // room for two: the put completes
  auto [s, n] = blocked.get();
  EXPECT_EQ(s, StatusCode::kOk) << s;
  EXPECT_EQ(n, 2U);
  EXPECT_EQ(get(*r, 3), seq(2, 5));
}

TEST_P(StoreTest, APutLargerThanTheBoundGoesInPieces) {
  ASSERT_EQ(create("q", 4), StatusCode::kOk);
  auto w = writer("q");
  auto consumer = std::async(std::launch::async, [&] {
    auto r = store_->reader("q", kDefaultChannel, with_timeout(30s));
    std::vector<std::string> got;
    if (!r.ok()) return got;
    while (got.size() < 10) {
      if (!(*r)->get(got, 10, with_timeout(30s)).ok() || !(*r)->ack().ok()) break;
    }
    return got;
  });
  std::size_t done = 0;
  EXPECT_EQ(put(*w, seq(0, 10), &done, with_timeout(30s)), StatusCode::kOk);
  EXPECT_EQ(done, 10U);
  EXPECT_EQ(consumer.get(), seq(0, 10));
}

// Either way nothing is put into a queue nobody can reach: the embedded store
// refuses the delete, Redis deletes and the writer hears of it.
TEST_P(StoreTest, DeletingAQueueInUseNeverSwallowsLaterPuts) {
  ASSERT_EQ(create("q", 100), StatusCode::kOk);
  if (!GetParam().exclusive_roles) {
    auto w = writer("q");
    ASSERT_EQ(put(*w, {"gone"}), StatusCode::kOk);
    ASSERT_EQ(store_->remove("q"), StatusCode::kOk);
    std::size_t done = 99;
    EXPECT_EQ(put(*w, {"refused"}, &done), StatusCode::kNotFound);
    EXPECT_EQ(done, 0U);
    return;
  }
  {
    auto w = writer("q");
    ASSERT_EQ(put(*w, {"kept"}), StatusCode::kOk);
    Status s = store_->remove("q");
    EXPECT_EQ(s, StatusCode::kInUse) << s;
    EXPECT_NE(s.message().find("PID"), std::string_view::npos) << s;
    ASSERT_EQ(put(*w, {"still kept"}), StatusCode::kOk);  // the writer goes on
  }
  {
    auto r = reader("q");
    Status s = store_->remove("q");
    EXPECT_EQ(s, StatusCode::kInUse) << s;
    EXPECT_NE(s.message().find("PID"), std::string_view::npos) << s;
    EXPECT_EQ(get(*r, 2), (std::vector<std::string>{"kept", "still kept"}));
  }
  EXPECT_EQ(store_->remove("q"), StatusCode::kOk);  // unused now
  EXPECT_EQ(store_->stat("q").code(), StatusCode::kNotFound);
}

TEST_P(StoreTest, ASecondWriterFailsFastOrWaitsItsTurn) {
  if (!GetParam().exclusive_roles) GTEST_SKIP() << kNoExclusiveRoles;
  ASSERT_EQ(create("q", 100), StatusCode::kOk);
  auto first = writer("q");
  auto fast = store_->writer("q", with_timeout(0s));
  EXPECT_EQ(fast.code(), StatusCode::kInUse) << fast.status();
  EXPECT_NE(fast.status().message().find("'q'"), std::string_view::npos) << fast.status();

  std::stop_source stop;
  auto cancelled = std::async(
      std::launch::async, [&] { return store_->writer("q", Context(stop.get_token())).code(); });
  stop.request_stop();
  EXPECT_EQ(cancelled.get(), StatusCode::kCancelled);

  auto waiting =
      std::async(std::launch::async, [&] { return store_->writer("q", with_timeout(30s)); });
  ASSERT_EQ(put(*first, {"from first"}), StatusCode::kOk);
  first.reset();
  auto second = waiting.get();
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(put(**second, {"from second"}), StatusCode::kOk);
  auto r = reader("q");
  EXPECT_EQ(get(*r, 2), (std::vector<std::string>{"from first", "from second"}));
}

TEST_P(StoreTest, AMessageOverTheLimitStopsThePutAfterThoseBeforeIt) {
  ASSERT_EQ(create("q", 100), StatusCode::kOk);
  auto w = writer("q");
  const std::vector<std::string> msgs{"a", "b", std::string(w->max_message_bytes() + 1, 'x'), "c"};
  std::size_t done = 0;
  Status s = put(*w, msgs, &done);
  EXPECT_EQ(s, StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("too large"), std::string_view::npos) << s;
  EXPECT_EQ(done, 2U);
  auto info = store_->stat("q");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->produced, 2U);
}

TEST_P(StoreTest, CloseLetsReadersDrainThenEnds) {
  ASSERT_EQ(create("q", 100), StatusCode::kOk);
  {
    auto w = writer("q");
    ASSERT_EQ(put(*w, seq(0, 3)), StatusCode::kOk);
    ASSERT_EQ(w->close(), StatusCode::kOk);
    EXPECT_EQ(w->close(), StatusCode::kOk);  // idempotent
    EXPECT_EQ(put(*w, seq(3, 4)), StatusCode::kClosed);
  }
  auto info = store_->stat("q");
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->closed);
  EXPECT_EQ(info->produced, 3U);
  EXPECT_EQ(store_->writer("q", {}).code(), StatusCode::kClosed);
  EXPECT_EQ(store_->close("q", {}), StatusCode::kOk);

  auto r = reader("q");
  EXPECT_EQ(get(*r, 3), seq(0, 3));
  std::vector<std::string> out;
  EXPECT_EQ(r->get(out, 10, with_timeout(10s)), StatusCode::kClosed);  // no wait: ends
  EXPECT_TRUE(out.empty());
}

TEST_P(StoreTest, CloseFromElsewhereWakesAWaitingReaderAndWaitsForTheWriter) {
  ASSERT_EQ(create("q", 100), StatusCode::kOk);
  auto w = writer("q");
  ASSERT_EQ(put(*w, seq(0, 1)), StatusCode::kOk);
  auto r = reader("q");
  EXPECT_EQ(get(*r, 1), seq(0, 1));
  ASSERT_EQ(r->ack(), StatusCode::kOk);
  auto waiting = std::async(std::launch::async, [&] {
    std::vector<std::string> out;
    return r->get(out, 10, with_timeout(30s)).code();
  });
  // The writer role is held: a close waits its turn (fails fast here).
  // (Redis: the writer holds no role between calls; the close goes ahead.)
  if (GetParam().exclusive_roles) {
    EXPECT_EQ(store_->close("q", with_timeout(0s)), StatusCode::kInUse);
  }
  auto closing =
      std::async(std::launch::async, [&] { return store_->close("q", with_timeout(30s)); });
  w.reset();
  EXPECT_EQ(closing.get(), StatusCode::kOk);
  EXPECT_EQ(waiting.get(), StatusCode::kClosed);
  EXPECT_EQ(store_->close("nope", {}), StatusCode::kNotFound);
}

TEST_P(StoreTest, DataSurvivesReopeningTheStore) {
  ASSERT_EQ(create("q", 100), StatusCode::kOk);
  ASSERT_EQ(put(*writer("q"), seq(0, 3)), StatusCode::kOk);
  store_.reset();
  auto s = GetParam().open("reopen");  // same test: the same store
  ASSERT_TRUE(s.ok()) << s.status();
  store_ = std::move(*s);
  auto r = reader("q");
  EXPECT_EQ(get(*r, 3), seq(0, 3));
}

#ifndef SLUICE_TEST_REDIS
std::string g_dir;

INSTANTIATE_TEST_SUITE_P(Backends, StoreTest,
                         ::testing::Values(Backend{
                             "embedded",
                             [](const std::string& why) -> Result<std::unique_ptr<QueueStore>> {
                               // A fresh directory per test; "reopen" keeps it.
                               if (why != "reopen") g_dir = testutil::test_dir("store").string();
                               return QueueStore::open(g_dir);
                             }}),
                         [](const ::testing::TestParamInfo<Backend>& p) { return p.param.name; });

TEST(StoreOpenTest, LocationsAreChecked) {
#ifndef SLUICE_STORE_HAS_REDIS
  auto r = QueueStore::open("redis://localhost:6379");
  EXPECT_EQ(r.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("no Redis support"), std::string_view::npos) << r.status();
#endif
  EXPECT_EQ(QueueStore::open("ftp://x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(QueueStore::open("").code(), StatusCode::kInvalidArgument);
  const std::string dir = testutil::test_dir("store");
  auto f = QueueStore::open("file:" + dir);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ((*f)->create("q", 1), StatusCode::kOk);
  auto plain = QueueStore::open(dir);
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE((*plain)->stat("q").ok());
}

// Without create_if_missing, opening makes nothing: a missing directory, or
// one that is no store yet, is an empty store until the first create().
TEST(StoreOpenTest, WithoutCreateIfMissingOnlyCreateMakesTheStore) {
  const std::filesystem::path parent = testutil::test_dir("store");
  StoreOptions o;
  o.create_if_missing = false;
  for (const std::filesystem::path& dir : {parent / "missing", parent}) {
    SCOPED_TRACE(dir.string());
    auto st = QueueStore::open(dir.string(), o);
    ASSERT_TRUE(st.ok()) << st.status();
    auto names = (*st)->list();
    ASSERT_TRUE(names.ok()) << names.status();
    EXPECT_TRUE(names->empty());
    EXPECT_EQ((*st)->stat("q").code(), StatusCode::kNotFound);
    EXPECT_EQ((*st)->writer("q", with_timeout(std::chrono::seconds(1))).code(),
              StatusCode::kNotFound);
    EXPECT_EQ((*st)->remove("q").code(), StatusCode::kNotFound);
    EXPECT_FALSE(std::filesystem::exists(dir / "queues"));
    ASSERT_EQ((*st)->create("q", 1), StatusCode::kOk);
    EXPECT_EQ(*(*st)->list(), std::vector<std::string>{"q"});
    ASSERT_EQ((*st)->remove("q"), StatusCode::kOk);
  }
}

#else  // SLUICE_TEST_REDIS: the same suite on a real redis-server

// One server for the binary; each test gets its own key prefix, so it
// starts with an empty store ("reopen" keeps the prefix).
testutil::RedisServer& server() {
  static testutil::RedisServer s;
  return s;
}
std::string url() { return "redis://127.0.0.1:" + std::to_string(server().port()) + "/0"; }
std::string g_prefix;
int g_tests = 0;

Result<std::unique_ptr<QueueStore>> open_redis(const std::string& why) {
  if (why != "reopen") g_prefix = "store_test" + std::to_string(++g_tests);
  StoreOptions o;
  o.redis_prefix = g_prefix;
  o.redis_stream_prefix = g_prefix;
  return QueueStore::open(url(), o);
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreTest,
                         ::testing::Values(Backend{"redis", open_redis, false, false},
                                           Backend{"redis_stream", open_redis, false, true,
                                                   QueueKind::kStream}),
                         [](const ::testing::TestParamInfo<Backend>& p) { return p.param.name; });

// A Streams reader keeps what it holds claimed, renewing every third of the
// visibility timeout: under a second a scheduling pause let another reader
// take a message still held (at 5 ms, at once), so the store refuses it.
TEST(RedisStoreTest, AStreamsVisibilityTimeoutUnderASecondIsRefused) {
  auto store = open_redis("store");
  ASSERT_TRUE(store.ok()) << store.status();
  QueueStore& s = **store;
  (void)s.remove("vis");
  ASSERT_EQ(s.create("vis", 10, QueueKind::kStream), StatusCode::kOk);
  ReaderOptions o;
  o.visibility = std::chrono::milliseconds(500);
  auto r = s.reader("vis", kDefaultChannel, {}, o);
  EXPECT_EQ(r.code(), StatusCode::kInvalidArgument) << r.status();
  o.visibility = std::chrono::seconds(1);
  auto ok = s.reader("vis", kDefaultChannel, {}, o);
  EXPECT_TRUE(ok.ok()) << ok.status();
}

TEST(RedisStoreTest, NamedChannelsAreInvalidArgumentSayingWhy) {
  auto s = open_redis("channels");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ((*s)->create("q", 10), StatusCode::kOk);
  auto r = (*s)->reader("q", "audit", {});
  EXPECT_EQ(r.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("sluice create --stream"), std::string_view::npos)
      << r.status();
}

// A name is one queue, of one kind: both kinds are listed, and creating
// either kind under a name the other has is kAlreadyExists.
TEST(RedisStoreTest, PressureQueuesAndStreamsTopicsShareOneNamespace) {
  auto s = open_redis("kinds");
  ASSERT_TRUE(s.ok()) << s.status();
  QueueStore& store = **s;
  ASSERT_EQ(store.create("p", 10), StatusCode::kOk);
  ASSERT_EQ(store.create("t", 10, QueueKind::kStream), StatusCode::kOk);
  Status clash = store.create("p", 10, QueueKind::kStream);
  EXPECT_EQ(clash, StatusCode::kAlreadyExists) << clash;
  EXPECT_NE(clash.message().find("pressure queue"), std::string_view::npos) << clash;
  clash = store.create("t", 10);
  EXPECT_EQ(clash, StatusCode::kAlreadyExists) << clash;
  EXPECT_NE(clash.message().find("Streams topic"), std::string_view::npos) << clash;
  EXPECT_EQ(*store.list(), (std::vector<std::string>{"p", "t"}));
  EXPECT_EQ(store.stat("p")->kind, "pressure");
  EXPECT_EQ(store.stat("t")->kind, "stream");
  ASSERT_EQ(store.remove("t"), StatusCode::kOk);
  EXPECT_EQ(*store.list(), (std::vector<std::string>{"p"}));
}

// Readers of one channel of a Streams topic compete: each message goes to
// one of them; stat shows each channel's lag (not yet delivered) and
// pending (delivered, not acknowledged); what a reader got and did not
// acknowledge goes to the channel's next read when the reader goes.
TEST(RedisStoreTest, StreamsTopicReadersCompeteAndStatShowsLagAndPending) {
  auto s = open_redis("stream-share");
  ASSERT_TRUE(s.ok()) << s.status();
  QueueStore& store = **s;
  ASSERT_EQ(store.create("q", 100, QueueKind::kStream), StatusCode::kOk);
  auto w = store.writer("q", {});
  ASSERT_TRUE(w.ok()) << w.status();
  const std::vector<std::string_view> views{"a", "b", "c", "d", "e"};
  ASSERT_EQ((*w)->put(views, {}), StatusCode::kOk);
  auto audit = store.reader("q", "audit", {});  // a channel made now: sees all five
  auto r1 = store.reader("q", kDefaultChannel, {});
  auto r2 = store.reader("q", kDefaultChannel, {});
  ASSERT_TRUE(audit.ok() && r1.ok() && r2.ok());
  std::vector<std::string> got1;
  std::vector<std::string> got2;
  ASSERT_EQ((*r1)->get(got1, 2, with_timeout(10s)), StatusCode::kOk);
  ASSERT_EQ((*r2)->get(got2, 2, with_timeout(10s)), StatusCode::kOk);
  EXPECT_EQ(got1, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(got2, (std::vector<std::string>{"c", "d"}));
  ASSERT_EQ((*r2)->ack(), StatusCode::kOk);

  auto info = store.stat("q");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->channels, (std::vector<std::string>{"audit", "default"}));
  ASSERT_EQ(info->channel_info.size(), 2U);
  EXPECT_EQ(info->channel_info[0].name, "audit");
  EXPECT_EQ(info->channel_info[0].lag, 5U);
  EXPECT_EQ(info->channel_info[0].pending, 0U);
  EXPECT_EQ(info->channel_info[1].name, "default");
  EXPECT_EQ(info->channel_info[1].lag, 1U);      // "e"
  EXPECT_EQ(info->channel_info[1].pending, 2U);  // r1's "a", "b"
  EXPECT_EQ(info->length, 5U);                   // the slowest channel: audit
  EXPECT_EQ(info->consumed, 0U);

  r1->reset();  // gives "a" and "b" back
  auto r3 = store.reader("q", kDefaultChannel, {});
  ASSERT_TRUE(r3.ok());
  std::vector<std::string> got3;
  while (got3.size() < 3) {
    ASSERT_EQ((*r3)->get(got3, 3, with_timeout(10s)), StatusCode::kOk);
  }
  EXPECT_EQ(got3, (std::vector<std::string>{"a", "b", "e"}));
}

// A pressure-queue reader that ends with everything acknowledged leaves no
// in-flight list in the registry: stat and the next reader's recovery visit
// every registered list, so readers that came and went must not pile up.
TEST(RedisStoreTest, AReaderThatAcknowledgedEverythingLeavesNothingRegistered) {
  auto s = open_redis("registry");
  ASSERT_TRUE(s.ok()) << s.status();
  QueueStore& store = **s;
  ASSERT_EQ(store.create("q", 100), StatusCode::kOk);
  auto w = store.writer("q", {});
  ASSERT_TRUE(w.ok()) << w.status();
  const std::vector<std::string_view> views{"a", "b", "c"};
  ASSERT_EQ((*w)->put(views, {}), StatusCode::kOk);
  for (int i = 0; i < 3; ++i) {
    auto r = store.reader("q", kDefaultChannel, {});
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<std::string> got;
    ASSERT_EQ((*r)->get(got, 1, with_timeout(10s)), StatusCode::kOk);
    ASSERT_EQ((*r)->ack(), StatusCode::kOk);
  }
  redisContext* c = redisConnect("127.0.0.1", server().port());
  ASSERT_TRUE(c != nullptr && c->err == 0);
  const std::string key = g_prefix + ":q:inflight";
  auto* reply = static_cast<redisReply*>(redisCommand(c, "SCARD %s", key.c_str()));
  ASSERT_TRUE(reply != nullptr && reply->type == REDIS_REPLY_INTEGER);
  EXPECT_EQ(reply->integer, 0) << key;
  freeReplyObject(reply);
  redisFree(c);
}

// A message a reader gives back (release(), or the reader going) was never
// handed on: it does not count as a delivery, so giving it back more often
// than max_deliveries (5) brings it no closer to the dead-letter stream.
TEST(RedisStoreTest, AStreamsGiveBackDoesNotCountTowardTheDeadLetters) {
  auto s = open_redis("give-back");
  ASSERT_TRUE(s.ok()) << s.status();
  QueueStore& store = **s;
  ASSERT_EQ(store.create("q", 100, QueueKind::kStream), StatusCode::kOk);
  auto w = store.writer("q", {});
  ASSERT_TRUE(w.ok()) << w.status();
  const std::vector<std::string_view> views{"a", "b"};
  ASSERT_EQ((*w)->put(views, {}), StatusCode::kOk);
  for (int i = 0; i < 12; ++i) {
    auto r = store.reader("q", kDefaultChannel, {});
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<std::string> got;
    while (got.size() < 2) ASSERT_EQ((*r)->get(got, 2, with_timeout(10s)), StatusCode::kOk);
    ASSERT_EQ(got, (std::vector<std::string>{"a", "b"})) << "round " << i;
    if (i % 2 == 0) {
      ASSERT_EQ((*r)->release(), StatusCode::kOk);
    }  // else the reader's end gives them back
  }
  auto info = store.stat("q");
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_EQ(info->channel_info.size(), 1U);
  EXPECT_EQ(info->channel_info[0].dead_lettered, 0U);
  EXPECT_EQ(info->length, 2U);
}

TEST(RedisStoreTest, ReadersOfOneQueueShareItsMessages) {
  auto s = open_redis("share");
  ASSERT_TRUE(s.ok()) << s.status();
  QueueStore& store = **s;
  ASSERT_EQ(store.create("q", 100), StatusCode::kOk);
  auto w = store.writer("q", {});
  ASSERT_TRUE(w.ok());
  const std::vector<std::string> msgs{"a", "b", "c", "d"};
  const std::vector<std::string_view> views(msgs.begin(), msgs.end());
  ASSERT_EQ((*w)->put(views, {}), StatusCode::kOk);
  auto r1 = store.reader("q", kDefaultChannel, {});
  auto r2 = store.reader("q", kDefaultChannel, {});
  ASSERT_TRUE(r1.ok() && r2.ok());
  std::vector<std::string> got1;
  std::vector<std::string> got2;
  ASSERT_EQ((*r1)->get(got1, 2, with_timeout(10s)), StatusCode::kOk);
  ASSERT_EQ((*r2)->get(got2, 2, with_timeout(10s)), StatusCode::kOk);
  EXPECT_EQ(got1, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(got2, (std::vector<std::string>{"c", "d"}));
  // Each acknowledges its own: a new reader does not take r1's in-flight
  // messages while r1 lives.
  ASSERT_EQ((*r2)->ack(), StatusCode::kOk);
  auto r3 = store.reader("q", kDefaultChannel, {});
  ASSERT_TRUE(r3.ok());
  std::vector<std::string> got3;
  EXPECT_EQ((*r3)->get(got3, 4, with_timeout(20ms)), StatusCode::kDeadlineExceeded);
  ASSERT_EQ((*r1)->ack(), StatusCode::kOk);
  auto info = store.stat("q");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->consumed, 4U);
  EXPECT_EQ(info->length, 0U);
}

TEST(RedisStoreTest, InFlightMessagesCountInTheLengthUntilAcknowledged) {
  auto s = open_redis("inflight");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ((*s)->create("q", 10), StatusCode::kOk);
  auto w = (*s)->writer("q", {});
  ASSERT_TRUE(w.ok());
  const std::vector<std::string_view> views{"x", "y"};
  ASSERT_EQ((*w)->put(views, {}), StatusCode::kOk);
  auto r = (*s)->reader("q", kDefaultChannel, {});
  ASSERT_TRUE(r.ok());
  std::vector<std::string> got;
  ASSERT_EQ((*r)->get(got, 1, with_timeout(10s)), StatusCode::kOk);
  auto info = (*s)->stat("q");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->length, 2U);  // produced - consumed
  EXPECT_EQ(info->consumed, 0U);
}

TEST(RedisStoreTest, LocationsAreChecked) {
  auto tls = QueueStore::open("rediss://127.0.0.1:6379/0");
  EXPECT_EQ(tls.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(tls.status().message().find("TLS"), std::string_view::npos) << tls.status();
  EXPECT_EQ(QueueStore::open("redis://h:notaport/0").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(QueueStore::open("redis://:%zz@h:1/0").code(), StatusCode::kInvalidArgument);
}

TEST(RedisStoreTest, ADeadServerIsUnavailableNamingIt) {
  int port = 0;
  {
    testutil::RedisServer gone;
    port = gone.port();
  }  // stopped: nothing listens there now
  auto s = QueueStore::open("redis://127.0.0.1:" + std::to_string(port) + "/0");
  ASSERT_TRUE(s.ok()) << s.status();  // connects at the first call
  for (const Status& st : {(*s)->create("q", 1), (*s)->stat("q").status(), (*s)->list().status(),
                           (*s)->writer("q", {}).status()}) {
    EXPECT_EQ(st, StatusCode::kUnavailable) << st;
    EXPECT_NE(st.message().find("127.0.0.1:" + std::to_string(port)), std::string_view::npos) << st;
  }
}

TEST(RedisStoreTest, APercentEncodedPasswordIsDecoded) {
  testutil::RedisServer locked(false, {"requirepass p@ss:w/rd"});
  const std::string base = "@127.0.0.1:" + std::to_string(locked.port()) + "/0";
  auto good = QueueStore::open("redis://:p%40ss%3Aw%2Frd" + base);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ((*good)->create("q", 1), StatusCode::kOk);
  auto bad = QueueStore::open("redis://:wrong" + base);
  ASSERT_TRUE(bad.ok());
  Status st = (*bad)->stat("q").status();
  EXPECT_EQ(st, StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("authentication failed"), std::string_view::npos) << st;
}

// A connection that breaks between a get and its ack: the reader
// acknowledges exactly what it got, once, over a new connection. (Here the
// first ack fails before it reaches the server. The case where it ran and
// its reply was lost, when the reader must ask the in-flight list rather
// than acknowledge again, needs a reply that times out (io_timeout, 5 s by
// default, not settable through a URL) and has no test.)
TEST(RedisStoreTest, AReaderAcknowledgesWhatItGotOnceAcrossABrokenConnection) {
  testutil::RedisServer persistent(true);
  auto s = QueueStore::open("redis://127.0.0.1:" + std::to_string(persistent.port()) + "/0");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ((*s)->create("q", 100), StatusCode::kOk);
  {
    auto w = (*s)->writer("q", {});
    ASSERT_TRUE(w.ok());
    const std::vector<std::string_view> msgs{"m0", "m1", "m2", "m3", "m4", "m5"};
    ASSERT_EQ((*w)->put(msgs, {}), StatusCode::kOk);
  }
  auto r = (*s)->reader("q", kDefaultChannel, {});
  ASSERT_TRUE(r.ok());
  std::vector<std::string> got;
  ASSERT_EQ((*r)->get(got, 3, with_timeout(10s)), StatusCode::kOk);
  EXPECT_EQ(got, (std::vector<std::string>{"m0", "m1", "m2"}));
  persistent.restart();  // the reader's connection is now broken
  Status a = (*r)->ack();
  if (!a.ok()) {
    EXPECT_EQ(a, StatusCode::kUnavailable) << a;
    a = (*r)->ack();
  }
  ASSERT_EQ(a, StatusCode::kOk) << a;
  auto info = (*s)->stat("q");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->consumed, 3U);
  EXPECT_EQ(info->length, 3U);
  got.clear();
  ASSERT_EQ((*r)->get(got, 3, with_timeout(10s)), StatusCode::kOk);
  EXPECT_EQ(got, (std::vector<std::string>{"m3", "m4", "m5"}));
}

#endif  // SLUICE_TEST_REDIS

}  // namespace
}  // namespace sluice
