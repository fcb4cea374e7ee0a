// Redis Streams topics: a give-back by id of what this handle gave back
// already. give_back() of everything leaves such messages be (the handle
// keeps a list of them); give_back(ids) did not: after a nack with a delay
// it lowered the count the nack counted and made the message claimable at
// once, and after the visibility timeout was lengthened it lowered the
// count of a message given back already a second time. Each test failed
// on the code before its fix. (Redis now tells given-back messages apart:
// they wait under <consumer>~nack or <consumer>~back until claimed.)
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "redis/stream_helpers.h"
#include "sluice/redis/stream_topic.h"
#include "testutil/redis_server.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;

class StreamGiveBackEdgesTest : public testutil::StreamServerTest {};

// nack(ids, delay) then give_back(ids) (a reader that nacks a failure, then
// gives back what it holds by id as it stops): the give-back found the
// entry idle for less than the timeout (the delay holds it back), lowered
// its count (the nack's failed delivery undone) and set it claimable at
// once (the delay gone).
TEST_F(StreamGiveBackEdgesTest, AGiveBackByIdAfterADelayedNackKeepsTheCountAndTheDelay) {
  StreamTopicOptions o;
  o.visibility_timeout = 10s;
  auto t = topic(o);
  auto a = joined("work", o);
  ASSERT_EQ(t.append("job").status(), StatusCode::kOk);
  auto m = a.next(with_timeout(5s));
  ASSERT_TRUE(m.ok()) << m.status();
  const std::vector<std::string> ids = {m->id};
  ASSERT_EQ(a.nack(ids, 5s), StatusCode::kOk);
  const std::vector<std::string> nacked = {m->id + " " + a.consumer() + "~nack 1"};
  ASSERT_EQ(pending_list("work"), nacked);  // the next claim raises it to 2

  ASSERT_EQ(a.give_back(ids), StatusCode::kOk);
  EXPECT_EQ(pending_list("work"), nacked) << "the give-back undid the nack's count";
  auto early = a.next(with_timeout(300ms));
  EXPECT_EQ(early.status().code(), StatusCode::kDeadlineExceeded)
      << "the nack's 5 s delay was dropped: " << (early.ok() ? early->id : "");
}

// give_back(ids) with a 1 s timeout, the timeout lengthened to 30 s, then
// give_back(ids) again (a retry): the entry, idle for about 1 s, no longer
// looked given back already (claimable) and its count was lowered again.
// Also once a read's claim scan has run meanwhile (the handle forgets a
// give-back once it is due and a complete scan has run: under the longer
// timeout it is due later).
TEST_F(StreamGiveBackEdgesTest, AGiveBackAfterTheTimeoutWasLengthenedDoesNotLowerTheCountAgain) {
  StreamTopicOptions o;
  o.visibility_timeout = 1s;
  auto t = topic(o);
  auto a = joined("work", o);
  ASSERT_EQ(t.append("job").status(), StatusCode::kOk);
  auto m = a.next(with_timeout(5s));
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(a.nack(*m), StatusCode::kOk);
  auto again = a.next(with_timeout(5s));
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->deliveries, 2U);
  const std::vector<std::string> ids = {m->id};
  const std::vector<std::string> given_back = {m->id + " " + a.consumer() + "~back 1"};

  ASSERT_EQ(a.give_back(ids), StatusCode::kOk);
  const auto given_at = std::chrono::steady_clock::now();
  ASSERT_EQ(pending_list("work"), given_back);
  ASSERT_EQ(a.set_visibility_timeout(30s), StatusCode::kOk);
  ASSERT_EQ(a.give_back(ids), StatusCode::kOk);
  EXPECT_EQ(pending_list("work"), given_back) << "a second give-back lowered the count again";

  // A read whose claim scan runs once the give-back is due by the handle's
  // rule for a 1 s timeout (a few ms after it; the wait is for that clock,
  // not for another thread): nothing is claimable under 30 s, nothing comes.
  std::this_thread::sleep_until(given_at + 20ms);
  auto none = a.next(with_timeout(100ms));
  ASSERT_EQ(none.status().code(), StatusCode::kDeadlineExceeded) << none.status();
  ASSERT_EQ(a.give_back(ids), StatusCode::kOk);
  EXPECT_EQ(pending_list("work"), given_back) << "a give-back after a read lowered the count again";
  ASSERT_EQ(a.give_back(), StatusCode::kOk);
  EXPECT_EQ(pending_list("work"), given_back) << "give_back() after a read lowered the count again";
}

}  // namespace
}  // namespace sluice
