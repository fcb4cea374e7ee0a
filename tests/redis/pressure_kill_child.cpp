// Child process for pressure_kill_test: a sluice producer or consumer that
// runs until it is killed. Usage: pressure_kill_child <port> producer|consumer|reliable
// <generation>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "sluice/redis/pressure_queue.h"

int main(int argc, char** argv) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
  if (getppid() == 1) return 1;
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s <port> producer|consumer|reliable <generation>\n", argv[0]);
    return 2;
  }
  sluice::RedisOptions o;
  o.port = std::atoi(argv[1]);
  sluice::PressureQueue q(o, "victim");
  const std::string role = argv[2];
  const std::string gen = argv[3];
  for (unsigned long seq = 0;; ++seq) {
    if (!q.exists().ok()) {  // server gone: do not spin
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    if (role == "producer") {
      // Alternate single and batch puts so kills land in both.
      if (seq % 2 == 0) {
        (void)q.put(gen + ":" + std::to_string(seq));
      } else {
        const std::string a = gen + ":" + std::to_string(seq);
        ++seq;
        const std::string b = gen + ":" + std::to_string(seq);
        std::string batch[] = {a, b};
        (void)q.put_many(batch);
      }
    } else if (role == "reliable") {
      if (seq == 0) (void)q.requeue_inflight("w");  // recover what a killed one held
      std::vector<std::string> out;
      if (q.get_many_reliable("w", out, seq % 3 + 1).ok()) (void)q.ack("w", out.size());
    } else {
      std::vector<std::string> out;
      (void)q.get_many(out, seq % 3 + 1);
    }
  }
}
