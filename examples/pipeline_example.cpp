// A three-hop pipeline: a source of text lines -> parse (4 workers,
// continue-on-error) -> score (2 workers, strict input order) -> a sink that
// prints every result, value or error. Every hop is bounded: a slow sink
// slows the source. Ctrl-C style cancellation is one stop_source away.
#include <charconv>
#include <cstdio>
#include <stop_token>
#include <string>
#include <thread>

#include "sluice/stage.h"

using sluice::Context;
using sluice::Result;
using sluice::Status;
using sluice::StatusCode;

// `stop` ends every stage promptly when its source is triggered (Ctrl-C, a
// deadline, a parent pipeline failing).
int run(std::stop_token stop) {
  sluice::Queue<std::string> lines(16);

  sluice::StageOptions<std::string> parse_opts;
  parse_opts.name = "parse";
  parse_opts.width = 4;
  parse_opts.stop = stop;
  auto parse = sluice::Stage<std::string, long>::create(
      lines,
      [](std::string&& line, const Context&) -> Result<long> {
        long v = 0;
        auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), v);
        if (ec != std::errc() || end != line.data() + line.size()) {
          return Status(StatusCode::kInvalidArgument, "not a number: '" + line + "'");
        }
        return v;
      },
      parse_opts);
  if (!parse.ok()) {
    std::fprintf(stderr, "%s\n", parse.status().to_string().c_str());
    return 1;
  }

  sluice::StageOptions<Result<long>> score_opts;
  score_opts.name = "score";
  score_opts.width = 2;
  score_opts.ordering = sluice::Ordering::kStrict;  // results in input order
  score_opts.stop = stop;
  auto square = [](long&& v, const Context&) -> Result<long> { return v * v; };
  auto score = sluice::Stage<Result<long>, long>::create((*parse)->output(),
                                                         sluice::pass_errors(square), score_opts);
  if (!score.ok()) {
    std::fprintf(stderr, "%s\n", score.status().to_string().c_str());
    return 1;
  }

  std::jthread source([&lines, token = stop] {
    for (int i = 0; i < 20; ++i) {
      std::string line = i % 7 == 3 ? "oops" + std::to_string(i) : std::to_string(i);
      if (!lines.push(std::move(line), Context(token)).ok()) break;
    }
    lines.close();  // the producer closes its output
  });

  int values = 0, errors = 0;
  for (Result<long>& r : (*score)->output()) {
    if (r.ok()) {
      std::printf("%ld\n", *r);
      ++values;
    } else {
      std::printf("error: %s\n", r.status().to_string().c_str());
      ++errors;
    }
  }
  const Status s = (*score)->wait();
  std::printf("%d values, %d errors; pipeline: %s\n", values, errors, s.to_string().c_str());
  return s.ok() && values + errors == 20 ? 0 : 1;
}

int main() {
  // Static: GCC 12 warns (falsely) that a local stop_source "may be used
  // uninitialized" once its constructor is inlined into main().
  static std::stop_source stop;
  return run(stop.get_token());
}
