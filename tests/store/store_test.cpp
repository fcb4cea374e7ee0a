// The QueueStore interface (sluice/store.h), run against every backend: a
// backend is a factory, so the Redis one joins by adding a line to
// INSTANTIATE_TEST_SUITE_P below.
#include "sluice/store.h"

#include <gtest/gtest.h>

#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "testutil/temp_dir.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;

struct Backend {
  std::string name;
  // Opens an empty store for one test, named after it.
  std::function<Result<std::unique_ptr<QueueStore>>(const std::string& test)> open;
};

std::ostream& operator<<(std::ostream& os, const Backend& b) { return os << b.name; }

class StoreTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    auto s = GetParam().open("store");
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(*s);
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
  ASSERT_EQ(store_->create("b", 10), StatusCode::kOk);
  ASSERT_EQ(store_->create("a", 20), StatusCode::kOk);
  auto names = store_->list();
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_EQ(*names, (std::vector<std::string>{"a", "b"}));

  auto info = store_->stat("a");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->name, "a");
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

TEST_P(StoreTest, CreateOfAnExistingNameIsAlreadyExists) {
  ASSERT_EQ(store_->create("q", 10), StatusCode::kOk);
  Status s = store_->create("q", 5);
  EXPECT_EQ(s, StatusCode::kAlreadyExists) << s;
  EXPECT_NE(s.message().find("'q'"), std::string_view::npos) << s;
  auto info = store_->stat("q");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->bound, 10U);  // the first one stands
}

TEST_P(StoreTest, BadNamesAreInvalidArgument) {
  for (const std::string& bad : std::vector<std::string>{"", ".", "..", "a/b", "../x", "sp ace",
                                                         "tab\t", "é", std::string(201, 'x')}) {
    Status s = store_->create(bad, 10);
    EXPECT_EQ(s, StatusCode::kInvalidArgument) << "'" << bad << "': " << s;
    EXPECT_FALSE(s.message().empty());
    EXPECT_EQ(store_->stat(bad).code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(store_->writer(bad, {}).code(), StatusCode::kInvalidArgument) << bad;
  }
  for (const std::string& good :
       std::vector<std::string>{"a", "A.b-c_9", "..x", std::string(200, 'y')}) {
    EXPECT_EQ(store_->create(good, 1), StatusCode::kOk) << good;
  }
  ASSERT_EQ(store_->create("q", 1), StatusCode::kOk);
  EXPECT_EQ(store_->reader("q", "a/b", {}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->create("zero", 0), StatusCode::kInvalidArgument);
}

TEST_P(StoreTest, UnknownQueueIsNotFound) {
  EXPECT_EQ(store_->writer("nope", {}).code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->reader("nope", kDefaultChannel, {}).code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->stat("nope").code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->remove("nope"), StatusCode::kNotFound);
}

TEST_P(StoreTest, PutGetAckInOrder) {
  ASSERT_EQ(store_->create("q", 100), StatusCode::kOk);
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

TEST_P(StoreTest, UnacknowledgedMessagesAreDeliveredAgainAfterAReopen) {
  ASSERT_EQ(store_->create("q", 100), StatusCode::kOk);
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

TEST_P(StoreTest, EveryChannelGetsEveryMessage) {
  ASSERT_EQ(store_->create("q", 100), StatusCode::kOk);
  auto w = writer("q");
  ASSERT_EQ(put(*w, seq(0, 3)), StatusCode::kOk);
  auto a = reader("q");
  auto b = reader("q", "audit");
  EXPECT_EQ(get(*a, 3), seq(0, 3));
  EXPECT_EQ(get(*b, 3), seq(0, 3));
}

TEST_P(StoreTest, ASecondReaderOfAChannelFailsFastOrWaitsItsTurn) {
  ASSERT_EQ(store_->create("q", 100), StatusCode::kOk);
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
  ASSERT_EQ(store_->create("q", 3), StatusCode::kOk);
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
  ASSERT_EQ(store_->create("q", 4), StatusCode::kOk);
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

TEST_P(StoreTest, ASecondWriterFailsFastOrWaitsItsTurn) {
  ASSERT_EQ(store_->create("q", 100), StatusCode::kOk);
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
  ASSERT_EQ(store_->create("q", 100), StatusCode::kOk);
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
  ASSERT_EQ(store_->create("q", 100), StatusCode::kOk);
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
  ASSERT_EQ(store_->create("q", 100), StatusCode::kOk);
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
  EXPECT_EQ(store_->close("q", with_timeout(0s)), StatusCode::kInUse);
  auto closing =
      std::async(std::launch::async, [&] { return store_->close("q", with_timeout(30s)); });
  w.reset();
  EXPECT_EQ(closing.get(), StatusCode::kOk);
  EXPECT_EQ(waiting.get(), StatusCode::kClosed);
  EXPECT_EQ(store_->close("nope", {}), StatusCode::kNotFound);
}

TEST_P(StoreTest, DataSurvivesReopeningTheStore) {
  ASSERT_EQ(store_->create("q", 100), StatusCode::kOk);
  ASSERT_EQ(put(*writer("q"), seq(0, 3)), StatusCode::kOk);
  store_.reset();
  auto s = GetParam().open("reopen");  // same test: the same store
  ASSERT_TRUE(s.ok()) << s.status();
  store_ = std::move(*s);
  auto r = reader("q");
  EXPECT_EQ(get(*r, 3), seq(0, 3));
}

// Only the embedded backend exists so far.
std::string dir_for(const std::string&) { return testutil::test_dir("store").string(); }
std::string g_dir;

INSTANTIATE_TEST_SUITE_P(Backends, StoreTest,
                         ::testing::Values(Backend{
                             "embedded",
                             [](const std::string& why) -> Result<std::unique_ptr<QueueStore>> {
                               // A fresh directory per test; "reopen" keeps it.
                               if (why != "reopen") g_dir = dir_for(why);
                               return QueueStore::open(g_dir);
                             }}),
                         [](const ::testing::TestParamInfo<Backend>& p) { return p.param.name; });

TEST(StoreOpenTest, LocationsAreCheckedAndRedisIsNotBuiltYet) {
  auto r = QueueStore::open("redis://localhost:6379");
  EXPECT_EQ(r.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("not built yet"), std::string_view::npos) << r.status();
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

}  // namespace
}  // namespace sluice
