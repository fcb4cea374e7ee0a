// Child process for topic_crash_test: appends and consumes until SIGKILLed,
// reporting on stdout each append that returned ("A <seq>") and each channel
// ack that returned ("C <channel> <seq>"). Payloads check themselves, so the
// parent can verify every byte it reads back.
// Usage: topic_crash_child <dir> <none|interval|append|group> <100|1k|mixed>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "log/crash_payload.h"
#include "sluice/log/channel.h"
#include "sluice/log/topic.h"

namespace {

void report(const std::string& line) {
  const std::string l = line + "\n";
  (void)!::write(1, l.data(), l.size());  // < PIPE_BUF: atomic among threads
}

}  // namespace

int main(int argc, char** argv) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (argc != 4) return 2;
  sluice::TopicOptions o = sluice::testutil::crash_topic_options(argv[2]);
  auto topic = sluice::Topic::open(argv[1], o);
  if (!topic.ok()) {
    std::fprintf(stderr, "child: %s\n", topic.status().to_string().c_str());
    return 1;
  }
  sluice::Topic& t = **topic;
  const std::string sizes = argv[3];
  const int appenders = o.durability == sluice::Durability::kGroupCommit ? 4 : 1;
  std::vector<std::thread> threads;
  for (int a = 0; a < appenders; ++a) {
    threads.emplace_back([&, a] {
      for (std::uint32_t n = 0;; ++n) {
        // Self-checking payload with an identity (crash_payload.h): with
        // several appenders the seq is known only once the append returns.
        const std::uint64_t tag =
            sluice::testutil::make_tag(static_cast<std::uint32_t>(getpid()), a, n);
        std::string p = sluice::testutil::make_payload(sizes, tag);
        auto s = t.append(p);
        if (!s.ok()) {
          std::fprintf(stderr, "append: %s\n", s.status().to_string().c_str());
          _exit(3);
        }
        report("A " + std::to_string(*s) + " " + std::to_string(tag));
      }
    });
  }
  for (const char* name : {"c1", "c2"}) {
    threads.emplace_back([&t, name] {
      auto ch = t.channel(name);
      if (!ch.ok()) _exit(4);
      std::vector<sluice::LogMessage> batch;
      for (;;) {
        batch.clear();
        if (!(*ch)->next_batch(batch, 64).ok()) _exit(5);
        for (const auto& m : batch) {
          if (!sluice::testutil::payload_ok(m.payload)) _exit(6);  // a torn record delivered
        }
        if (!(*ch)->ack(batch.back().seq).ok()) _exit(7);
        report(std::string("C ") + name + " " + std::to_string(batch.back().seq));
      }
    });
  }
  for (auto& th : threads) th.join();
}
