// One memory cap for a whole pipeline: download (8 workers, slow) -> parse
// (2 workers) -> a slow sink. Each stage's queue holds up to 256 items, so
// without a cap the pipeline could hold over 500 pages; an Admission of 32
// keeps it to 32, whatever the stages do. Pages that fail to parse give
// their place back at once.
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "sluice/admission.h"
#include "sluice/stage.h"

using namespace std::chrono_literals;
using sluice::Admitted;
using sluice::Context;
using sluice::Result;

int main() {
  constexpr int kPages = 400;
  sluice::Admission admit(32);
  sluice::Queue<Admitted<int>> urls(256);

  sluice::StageOptions<Admitted<int>> dl;
  dl.width = 8;
  dl.output_capacity = 256;
  auto download = sluice::Stage<Admitted<int>, Admitted<std::string>>::create(
      urls, sluice::carry_permit([](int&& id, const Context&) -> Result<std::string> {
        std::this_thread::sleep_for(200us);  // the network
        return std::string(1024, static_cast<char>('a' + id % 26));
      }),
      dl);
  sluice::StageOptions<Result<Admitted<std::string>>> pa;
  pa.width = 2;
  pa.output_capacity = 256;
  auto parse = sluice::Stage<Result<Admitted<std::string>>, Admitted<std::size_t>>::create(
      (*download)->output(),
      sluice::carry_permit([](std::string&& page, const Context&) -> Result<std::size_t> {
        if (page[0] == 'z') return sluice::Status(sluice::StatusCode::kInvalidArgument, "bad page");
        return page.size();
      }),
      pa);
  if (!download.ok() || !parse.ok()) return 1;

  std::jthread source([&] {
    for (int i = 0; i < kPages; ++i) {
      auto place = admit.acquire();  // waits while 32 pages are anywhere in the pipeline
      if (!place.ok() || !urls.push(Admitted<int>{std::move(*place), i}).ok()) return;
    }
    urls.close();
  });
  int ok = 0;
  int bad = 0;
  for (auto& r : (*parse)->output()) {
    std::this_thread::sleep_for(100us);  // a slow database
    r.ok() ? ++ok : ++bad;
  }  // each result dropped here gives its place back
  source.join();
  const sluice::AdmissionStats s = admit.stats();
  std::printf(
      "pages: %d parsed, %d bad; most in flight at once: %llu of %llu; source waited %.3f s\n", ok,
      bad, static_cast<unsigned long long>(s.peak), static_cast<unsigned long long>(s.bound),
      s.waited_s);
  return ok + bad == kPages && s.peak <= s.bound && s.in_flight == 0 ? 0 : 1;
}
