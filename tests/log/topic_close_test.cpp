// Topic::close: the durable end-of-stream mark (docs/log_format.md,
// "Closed mark"), seen by appenders, channels here, read-only topics, and
// every reopen.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <string>
#include <vector>

#include "sluice/log/channel.h"
#include "sluice/log/topic.h"
#include "testutil/prometheus.h"
#include "testutil/temp_dir.h"
#include "testutil/wait_for.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class TopicCloseTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testutil::test_dir("log_close"); }
  void TearDown() override { fs::remove_all(dir_); }

  static TopicOptions small(Durability d = Durability::kNone) {
    TopicOptions o;
    o.segment_bytes = 4096;
    o.max_message_bytes = 1024;
    o.durability = d;
    return o;
  }
  std::unique_ptr<Topic> open(TopicOptions o = small()) {
    auto t = Topic::open(dir_.string(), o);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::move(*t) : nullptr;
  }
  Result<std::unique_ptr<Topic>> open_reader() {
    TopicOptions ro = small();
    ro.read_only = true;
    return Topic::open(dir_.string(), ro);
  }
  static std::string msg(std::uint64_t i) { return "message " + std::to_string(i); }
  // The words of the shared wake-up page (docs/log_format.md, "Wake-up page").
  struct Page {
    std::uint32_t* words = nullptr;
    explicit Page(const fs::path& notify) {
      const int fd = ::open(notify.c_str(), O_RDWR);
      if (fd < 0) return;
      void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      ::close(fd);
      if (p != MAP_FAILED) words = static_cast<std::uint32_t*>(p);
    }
    ~Page() {
      if (words != nullptr) munmap(words, 4096);
    }
    std::uint32_t word(int i) const { return std::atomic_ref(words[i]).load(); }
  };

  fs::path dir_;
};

// Empty (the mark flags the empty segment in place), a few records (a new
// mark segment), and many (after rolls), in every durability mode.
TEST_F(TopicCloseTest, AppendsAreRefusedAfterCloseAndAfterEveryReopen) {
  for (const Durability d : {Durability::kNone, Durability::kInterval, Durability::kPerAppend,
                             Durability::kGroupCommit}) {
    for (const int records : {0, 3, 200}) {
      SCOPED_TRACE("mode " + std::to_string(static_cast<int>(d)) + ", " +
                   std::to_string(records) + " records");
      fs::remove_all(dir_);
      {
        auto t = open(small(d));
        for (int i = 0; i < records; ++i) ASSERT_TRUE(t->append(msg(i)).ok());
        EXPECT_FALSE(t->closed());
        EXPECT_FALSE(t->stats().closed);
        ASSERT_TRUE(t->close().ok());
        EXPECT_TRUE(t->closed());
        EXPECT_TRUE(t->stats().closed);
        EXPECT_EQ(t->append("late").code(), StatusCode::kClosed);
        std::vector<std::string_view> two{"a", "b"};
        EXPECT_EQ(t->append_batch(two).code(), StatusCode::kClosed);
        EXPECT_EQ(t->next_seq(), static_cast<std::uint64_t>(records));
        EXPECT_TRUE(t->close().ok());  // idempotent
        EXPECT_TRUE(t->sync().ok());
      }
      for (int reopen = 0; reopen < 2; ++reopen) {  // a reopen changes nothing
        auto t = open(small(d));
        EXPECT_TRUE(t->closed());
        EXPECT_TRUE(t->recovery().closed);
        EXPECT_TRUE(t->recovery().clean());
        EXPECT_EQ(t->next_seq(), static_cast<std::uint64_t>(records));
        EXPECT_EQ(t->append("late").code(), StatusCode::kClosed);
        EXPECT_TRUE(t->close().ok());
        auto c = std::move(*t->channel("c" + std::to_string(reopen)));
        std::vector<LogMessage> got;
        Status s;
        while ((s = c->next_batch(got, 64, with_timeout(5s))).ok()) {
        }
        EXPECT_EQ(s.code(), StatusCode::kClosed) << s;
        ASSERT_EQ(got.size(), static_cast<std::size_t>(records));
        for (int i = 0; i < records; ++i) EXPECT_EQ(got[i].payload, msg(i));
      }
      auto v = verify_topic(dir_.string(), small(d));
      ASSERT_TRUE(v.ok());
      EXPECT_TRUE(v->closed);
      EXPECT_TRUE(v->clean());
    }
  }
}

TEST_F(TopicCloseTest, AChannelDeliversEverythingBeforeItReturnsClosed) {
  auto t = open();
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(t->append(msg(i)).ok());
  auto one = std::move(*t->channel("one"));
  auto batch = std::move(*t->channel("batch"));
  auto loop = std::move(*t->channel("loop"));
  auto m = one->next();  // one delivered before the close
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(t->close().ok());
  // next: the rest first, then kClosed (not a wait for the deadline).
  for (std::uint64_t i = 1; i < 50; ++i) {
    m = one->next(with_timeout(5s));
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->seq, i);
  }
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(one->next(with_timeout(5s)).code(), StatusCode::kClosed);
  EXPECT_EQ(one->next(with_timeout(5s)).code(), StatusCode::kClosed);  // and stays so
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  // A nack brings back what was not acknowledged; then closed again.
  one->nack();
  m = one->next();
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->seq, 0U);
  // next_batch.
  std::vector<LogMessage> got;
  ASSERT_TRUE(batch->next_batch(got, 30).ok());
  ASSERT_TRUE(batch->next_batch(got, 30).ok());
  EXPECT_EQ(got.size(), 50U);
  EXPECT_EQ(batch->next_batch(got, 30, with_timeout(5s)).code(), StatusCode::kClosed);
  EXPECT_EQ(got.size(), 50U);
  // consume: handles everything, acknowledges it, returns kClosed.
  std::vector<std::uint64_t> handled;
  const Status s = loop->consume(
      [&](const LogMessage& lm) {
        handled.push_back(lm.seq);
        return Status::Ok();
      },
      with_timeout(5s), 8);
  EXPECT_EQ(s.code(), StatusCode::kClosed) << s;
  EXPECT_EQ(handled.size(), 50U);
  EXPECT_EQ(loop->acked(), 50U);
  // A new channel, from the tail or the beginning.
  auto tail = std::move(*t->channel("tail", {.start = StartFrom::kTail}));
  EXPECT_EQ(tail->next().code(), StatusCode::kClosed);
}

TEST_F(TopicCloseTest, CloseWakesAWaitingChannel) {
  for (const Durability d : {Durability::kNone, Durability::kGroupCommit}) {
    fs::remove_all(dir_);
    auto t = open(small(d));
    ASSERT_TRUE(t->append(msg(0)).ok());
    auto c = std::move(*t->channel("c"));
    ASSERT_TRUE(c->next().ok());
    auto waiting = std::async(std::launch::async, [&] { return c->next(with_timeout(20s)); });
    EXPECT_EQ(waiting.wait_for(50ms), std::future_status::timeout);  // asleep
    ASSERT_TRUE(t->close().ok());
    ASSERT_EQ(waiting.wait_for(10s), std::future_status::ready);
    EXPECT_EQ(waiting.get().code(), StatusCode::kClosed);
  }
}

TEST_F(TopicCloseTest, ABlockedAppenderReturnsClosed) {
  TopicOptions o = small();
  o.max_unconsumed = 3;
  auto t = open(o);
  auto c = std::move(*t->channel("c"));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(t->append(msg(i)).ok());
  auto blocked = std::async(std::launch::async, [&] { return t->append("x", with_timeout(20s)); });
  Page page(dir_ / "NOTIFY");
  ASSERT_NE(page.words, nullptr);
  EXPECT_TRUE(testutil::eventually([&] { return page.word(3) == 1; }));  // acked_want: asleep
  EXPECT_EQ(blocked.wait_for(10ms), std::future_status::timeout);
  ASSERT_TRUE(t->close().ok());
  ASSERT_EQ(blocked.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(blocked.get().code(), StatusCode::kClosed);
  EXPECT_EQ(t->next_seq(), 3U);
  // The channel still gets the three.
  std::vector<LogMessage> got;
  while (c->next_batch(got, 10, with_timeout(5s)).ok()) {
  }
  EXPECT_EQ(got.size(), 3U);
}

// A read-only topic (as in another process) opened before the close: its
// channel, asleep on the wake-up page, is woken and returns kClosed once it
// delivered every record; one opened after the close sees the mark on disk.
TEST_F(TopicCloseTest, AReadOnlyTopicSeesTheClose) {
  for (const int records : {0, 5, 300}) {
    SCOPED_TRACE(std::to_string(records) + " records");
    fs::remove_all(dir_);
    auto t = open();
    auto r = open_reader();
    ASSERT_TRUE(r.ok()) << r.status();
    auto c = std::move(*(*r)->channel("remote"));
    for (int i = 0; i < records; ++i) ASSERT_TRUE(t->append(msg(i)).ok());
    std::vector<LogMessage> got;
    if (records > 0) {
      while (got.size() < static_cast<std::size_t>(records) - 1) {
        ASSERT_TRUE(c->next_batch(got, 1, with_timeout(5s)).ok());
      }
    }
    auto waiting = std::async(std::launch::async, [&] {
      std::vector<LogMessage> rest;
      Status s;
      while ((s = c->next_batch(rest, 10, with_timeout(20s))).ok()) {
      }
      return std::make_pair(s, rest.size());
    });
    Page page(dir_ / "NOTIFY");
    ASSERT_NE(page.words, nullptr);
    EXPECT_TRUE(testutil::eventually([&] { return page.word(1) == 1; }));  // want: asleep
    EXPECT_FALSE((*r)->closed());
    EXPECT_EQ((*r)->close().code(), StatusCode::kInvalidArgument);
    ASSERT_TRUE(t->close().ok());
    EXPECT_EQ(page.word(6), 1U);  // `closed`, after visible_seq
    ASSERT_EQ(waiting.wait_for(10s), std::future_status::ready);
    const auto [s, rest] = waiting.get();
    EXPECT_EQ(s.code(), StatusCode::kClosed) << s;
    EXPECT_EQ(got.size() + rest, static_cast<std::size_t>(records));
    EXPECT_TRUE((*r)->closed());
    EXPECT_TRUE((*r)->stats().closed);
    // Opened after the close: from the segment header.
    auto late = open_reader();
    ASSERT_TRUE(late.ok());
    EXPECT_TRUE((*late)->closed());
    auto lc = std::move(*(*late)->channel("late"));
    std::vector<LogMessage> all;
    Status ls;
    while ((ls = lc->next_batch(all, 64, with_timeout(5s))).ok()) {
    }
    EXPECT_EQ(ls.code(), StatusCode::kClosed);
    EXPECT_EQ(all.size(), static_cast<std::size_t>(records));
  }
}

// The NOTIFY page recreated (zeroed) after the close: a reader finds the
// mark in the segment header.
TEST_F(TopicCloseTest, AReaderFindsTheMarkWithoutTheWakeUpPage) {
  {
    auto t = open();
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(t->append(msg(i)).ok());
    ASSERT_TRUE(t->close().ok());
  }
  fs::remove(dir_ / "NOTIFY");
  auto r = open_reader();
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE((*r)->closed());
  auto c = std::move(*(*r)->channel("c"));
  std::vector<LogMessage> got;
  Status s;
  while ((s = c->next_batch(got, 7, with_timeout(5s))).ok()) {
  }
  EXPECT_EQ(s.code(), StatusCode::kClosed);
  EXPECT_EQ(got.size(), 20U);
}

// In another process, asleep in next() on the shared futex.
TEST_F(TopicCloseTest, AReaderInAnotherProcessAsleepInNextIsWokenByClose) {
  auto t = open();
  ASSERT_TRUE(t->append(msg(0)).ok());
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  if (child == 0) {
    auto r = open_reader();
    if (!r.ok()) _exit(10);
    auto c = (*r)->channel("remote");
    if (!c.ok()) _exit(11);
    (void)!write(ready[1], "r", 1);
    for (std::uint64_t i = 0; i < 3; ++i) {
      auto m = (*c)->next(with_timeout(20s));
      if (!m.ok() || m->seq != i) _exit(12);
    }
    auto m = (*c)->next(with_timeout(20s));
    _exit(m.code() == StatusCode::kClosed ? 0 : 13);
  }
  ::close(ready[1]);
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  ASSERT_TRUE(t->append(msg(1)).ok());
  ASSERT_TRUE(t->append(msg(2)).ok());
  Page page(dir_ / "NOTIFY");
  EXPECT_TRUE(testutil::eventually([&] { return page.word(1) == 1; }));  // asleep, or about to
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(t->close().ok());
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);  // woken, not timed out
  ::close(ready[0]);
}

TEST_F(TopicCloseTest, StatsShowTheCloseInPrometheusText) {
  auto t = open();
  auto before = testutil::parse_prometheus(to_prometheus(t->stats(), "q"));
  EXPECT_EQ(before.at("sluice_topic_closed{name=\"q\"}"), 0);
  ASSERT_TRUE(t->close().ok());
  auto after = testutil::parse_prometheus(to_prometheus(t->stats(), "q"));
  ASSERT_EQ(after.error, "");
  EXPECT_EQ(after.at("sluice_topic_closed{name=\"q\"}"), 1);
}

}  // namespace
}  // namespace sluice
