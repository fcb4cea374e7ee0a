// Uses sluice::log: appends to a topic in argv[1] and reads it back.
#include <cstdio>

#include "sluice/log/channel.h"
#include "sluice/log/topic.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  auto topic = sluice::Topic::open(argv[1]);
  if (!topic.ok()) return 1;
  for (const char* m : {"a", "b", "c"}) {
    if (!(*topic)->append(m).ok()) return 1;
  }
  auto ch = (*topic)->channel("reader");
  if (!ch.ok()) return 1;
  std::string got;
  for (int i = 0; i < 3; ++i) {
    auto m = (*ch)->next();
    if (!m.ok() || !(*ch)->ack(m->seq).ok()) return 1;
    got += m->payload;
  }
  std::printf("log: read %s\n", got.c_str());
  return got == "abc" ? 0 : 1;
}
