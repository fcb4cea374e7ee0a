// Uses sluice::store: creates a queue in the store at argv[1], puts, gets, acks.
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/store.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  auto store = sluice::QueueStore::open(argv[1]);
  if (!store.ok() || !(*store)->create("jobs", 10).ok()) return 1;
  {
    auto w = (*store)->writer("jobs", {});
    const std::string_view batch[] = {"a", "b", "c"};
    if (!w.ok() || !(*w)->put(batch, {}).ok()) return 1;
  }
  auto r = (*store)->reader("jobs", sluice::kDefaultChannel, {});
  std::vector<std::string> got;
  while (r.ok() && got.size() < 3) {
    if (!(*r)->get(got, 3 - got.size(), {}).ok() || !(*r)->ack().ok()) return 1;
  }
  std::string all;
  for (const std::string& m : got) all += m;
  std::printf("store: got %s\n", all.c_str());
  return all == "abc" ? 0 : 1;
}
