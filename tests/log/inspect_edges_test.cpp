// inspect_topic and verify_topic at their edges: beside channels open in the
// same process (POSIX locks do not conflict within a process, and closing
// any descriptor of a file drops the process's lock on it).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "sluice/log/channel.h"
#include "sluice/log/inspect.h"
#include "sluice/log/topic.h"
#include "testutil/temp_dir.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

TopicOptions options() {
  TopicOptions o;
  o.segment_bytes = 1024;
  o.max_message_bytes = 512;
  o.durability = Durability::kNone;
  return o;
}

// Whether another process can open channel `name` of the topic (it cannot
// while a channel here holds the lock).
bool another_process_opens(const fs::path& dir, const std::string& name) {
  const pid_t child = fork();
  if (child == 0) {
    TopicOptions ro = options();
    ro.read_only = true;
    auto t = Topic::open(dir.string(), ro);
    if (!t.ok()) _exit(2);
    _exit((*t)->channel(name).ok() ? 1 : 0);
  }
  int st = 0;
  EXPECT_EQ(waitpid(child, &st, 0), child);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) != 2) << "status " << st;
  return WIFEXITED(st) && WEXITSTATUS(st) == 1;
}

// Inspecting a topic whose channel a read-only topic of this process has
// open reads the channel's position (both slots) and leaves it open alone:
// it used to open and close the position file, which dropped the channel's
// lock, so that another process could then open the same channel.
TEST(InspectEdgesTest, InspectingBesideAChannelOpenInThisProcessKeepsItsLock) {
  const fs::path dir = testutil::test_dir("inspect-channel-here");
  {
    auto t = Topic::open(dir.string(), options());
    ASSERT_TRUE(t.ok()) << t.status();
    for (int i = 0; i < 10; ++i) ASSERT_TRUE((*t)->append("m" + std::to_string(i)).ok());
    auto c = (*t)->channel("c");
    ASSERT_TRUE(c.ok()) << c.status();
  }
  TopicOptions ro = options();
  ro.read_only = true;
  {
    auto reader = Topic::open(dir.string(), ro);
    ASSERT_TRUE(reader.ok()) << reader.status();
    auto c = (*reader)->channel("c");
    ASSERT_TRUE(c.ok()) << c.status();
    for (int i = 0; i < 4; ++i) ASSERT_TRUE((*c)->next().ok());
    ASSERT_TRUE((*c)->ack(3).ok());
    ASSERT_FALSE(another_process_opens(dir, "c"));

    auto x = inspect_topic(dir.string(), options());
    ASSERT_TRUE(x.ok()) << x.status();
    ASSERT_EQ(x->channels.size(), 1U);
    EXPECT_EQ(x->channels[0].state, ChannelInspection::State::kValid);
    EXPECT_EQ(x->channels[0].next_seq, 4U);
    EXPECT_TRUE(x->channels[0].slots[0].valid && x->channels[0].slots[1].valid);
    EXPECT_FALSE(x->damaged());

    EXPECT_FALSE(another_process_opens(dir, "c")) << "inspect_topic dropped the channel's lock";
    ASSERT_TRUE((*c)->next().ok());
    ASSERT_TRUE((*c)->ack(4).ok());  // the channel works on
  }
  EXPECT_TRUE(another_process_opens(dir, "c"));  // closed: free again
  fs::remove_all(dir);
}

}  // namespace
}  // namespace sluice
