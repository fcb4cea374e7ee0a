// Child process for stream_topic_test: a consumer of a channel killed in the
// middle of a batch. It reads `batch` messages, acknowledges the first `ack`
// of them, prints "acked <payload>" or "held <payload>" for each and then
// "ready", and waits to be SIGKILLed holding the rest unacknowledged; with
// keep_alive 1, it keeps them claimed while it waits
// (StreamTopicOptions::keep_alive).
// Usage: stream_consumer_child <port> <topic> <channel> <batch> <ack> [keep_alive]
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "sluice/redis/stream_topic.h"

int main(int argc, char** argv) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
  if (getppid() == 1) return 1;
  if (argc != 6 && argc != 7) {
    std::fprintf(stderr, "usage: %s <port> <topic> <channel> <batch> <ack> [keep_alive]\n",
                 argv[0]);
    return 2;
  }
  sluice::RedisOptions o;
  o.port = std::atoi(argv[1]);
  const auto batch = static_cast<std::size_t>(std::atoi(argv[4]));
  const auto ack = static_cast<std::size_t>(std::atoi(argv[5]));
  sluice::StreamTopicOptions options;
  options.keep_alive = argc == 7 && std::string(argv[6]) == "1";
  sluice::StreamChannel c(o, argv[2], argv[3], options);
  std::vector<sluice::StreamMessage> got;
  const sluice::Context ctx = sluice::with_timeout(std::chrono::seconds(20));
  while (got.size() < batch) {
    if (sluice::Status s = c.next_batch(got, batch - got.size(), ctx); !s.ok()) {
      std::fprintf(stderr, "child: %s\n", s.to_string().c_str());
      return 1;
    }
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (i < ack) {
      if (sluice::Status s = c.ack(got[i]); !s.ok()) {
        std::fprintf(stderr, "child: %s\n", s.to_string().c_str());
        return 1;
      }
    }
    std::printf("%s %s\n", i < ack ? "acked" : "held", got[i].payload.c_str());
  }
  std::printf("ready\n");
  std::fflush(stdout);
  for (;;) pause();
}
