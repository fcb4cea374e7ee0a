// A durable topic with two independent channels: at-least-once delivery
// that survives restarts. Run it twice: the second run shows the channels
// picking up where they acknowledged.
#include <cstdio>
#include <filesystem>
#include <string>

#include "sluice/log/channel.h"
#include "sluice/log/topic.h"

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  const std::string dir =
      argc > 1 ? argv[1] : (std::filesystem::temp_directory_path() / "sluice-log-example").string();
  sluice::TopicOptions options;
  options.durability = sluice::Durability::kGroupCommit;  // durable on return
  auto topic = sluice::Topic::open(dir, options);
  if (!topic.ok()) {
    std::fprintf(stderr, "open %s: %s\n", dir.c_str(), topic.status().to_string().c_str());
    return 1;
  }
  if (!(*topic)->recovery().clean()) std::printf("recovery found damage; see recovery()\n");

  for (int i = 0; i < 5; ++i) {
    auto seq = (*topic)->append("user " + std::to_string(i) + " signed up");
    if (!seq.ok()) {
      std::fprintf(stderr, "append: %s\n", seq.status().to_string().c_str());
      return 1;
    }
  }

  // "welcome" handles everything; "stats" fails on one message and stops:
  // that message will be delivered again next time.
  for (const char* name : {"welcome", "stats"}) {
    auto channel = (*topic)->channel(name);
    if (!channel.ok()) {
      std::fprintf(stderr, "channel: %s\n", channel.status().to_string().c_str());
      return 1;
    }
    int handled = 0;
    sluice::Status s = (*channel)->consume(
        [&](const sluice::LogMessage& m) {
          if (std::string(name) == "stats" && m.seq % 7 == 6) {
            return sluice::Status(sluice::StatusCode::kUnavailable, "stats db is down");
          }
          ++handled;
          return sluice::Status::Ok();
        },
        sluice::with_timeout(50ms));
    std::printf("%-8s handled %d; next unacknowledged seq %llu (%s)\n", name, handled,
                static_cast<unsigned long long>((*channel)->acked()), s.to_string().c_str());
  }
  return 0;
}
