// peek (look without taking), seek (move a channel) and purge (drop what a
// channel has not acknowledged): docs/cli.md, "Looking back".
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <iostream>
#include <optional>

#include "args.h"
#include "cli.h"
#include "framing_options.h"
#include "options.h"
#include "place_options.h"
#include "progress.h"

namespace sluice::cli {
namespace {

struct LookArgs {
  std::string name;
  std::string channel = std::string(kDefaultChannel);
  // peek
  std::uint64_t count = 0;  // 0: all there is now
  std::optional<std::uint64_t> from_seq;
  std::string from_id;
  FramingArgs frames;
  // seek
  PlaceArgs to;
  bool no_wait = false;
  double timeout = -1;
};

bool write_all(int fd, const std::string& bytes) {
  std::size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    off += static_cast<std::size_t>(n);
  }
  return true;
}

// Damaged messages the peek left out: said once, as get says them.
void note_damage_left_out(std::string_view queue, const QueuePeek& p) {
  const std::uint64_t n = p.skipped_damaged();
  if (n == 0) return;
  std::cerr << "sluice peek: " << queue_label(queue) << ": " << n << " damaged message"
            << (n == 1 ? "" : "s") << " skipped (not shown; `sluice log verify " << queue
            << "` says where)\n";
}

int run_peek(Globals& g, const LookArgs& a) {
  if (g.stdout_closed) {  // as get: fd 1 holds /dev/null, and what went there would be lost
    return fail("peek", queue_label(a.name),
                {StatusCode::kIOError, "stdout is closed: nowhere to write the messages"});
  }
  auto store = open_store(g, "peek", &g.rc);
  if (!store) return g.rc;
  std::signal(SIGPIPE, SIG_IGN);  // a reader that stops early ends the peek: nothing was taken
  PeekFrom from;
  from.seq = a.from_seq;
  from.after_id = a.from_id;
  auto p = store->peek(a.name, a.channel, from);
  if (!p.ok()) return fail("peek", queue_label(a.name), p.status());
  std::vector<StoreMessage> msgs;
  std::string bytes;
  for (std::uint64_t shown = 0; a.count == 0 || shown < a.count;) {
    std::size_t want = 8192;
    if (a.count != 0)
      want = static_cast<std::size_t>(std::min<std::uint64_t>(want, a.count - shown));
    msgs.clear();
    if (Status s = (*p)->next(msgs, want); !s.ok()) {
      note_damage_left_out(a.name, **p);
      return fail("peek", queue_label(a.name), s);
    }
    if (msgs.empty()) break;  // nothing more now
    bytes.clear();
    for (const StoreMessage& m : msgs) a.frames.append(m, a.channel, bytes);
    if (!write_all(STDOUT_FILENO, bytes)) {
      const int err = errno;
      note_damage_left_out(a.name, **p);
      if (err == EPIPE) return kExitOk;  // the reader has what it wanted
      return fail("peek", queue_label(a.name),
                  {StatusCode::kIOError, std::string("write stdout: ") + std::strerror(err)});
    }
    shown += msgs.size();
  }
  note_damage_left_out(a.name, **p);
  return kExitOk;
}

// The seek's or purge's wait for the roles: all of it with --timeout, none
// with --no-wait.
Context role_context(const LookArgs& a, const std::stop_token& stop) {
  if (a.timeout >= 0) return with_timeout(std::chrono::duration<double>(a.timeout), stop);
  return Context(stop);
}

int run_seek(Globals& g, const LookArgs& a) {
  auto place = a.to.target("--to", /*required=*/true);
  if (!place.ok()) return fail("seek", queue_label(a.name), place.status());
  const SeekTarget to = **place;
  auto store = open_store(g, "seek", &g.rc);
  if (!store) return g.rc;
  const Context ctx = role_context(a, stop_on_signals());
  auto r = take_role(g.quiet, "seek", a.no_wait, ctx,
                     [&](const Context& c) { return store->seek(a.name, a.channel, to, c); });
  if (!r.ok()) return fail_role("seek", queue_label(a.name), r.status(), a.no_wait);
  if (r->clamped) {
    std::cerr << "sluice seek: " << queue_label(a.name) << ": channel '" << a.channel
              << "': the messages before the oldest one retained are gone: stopped at "
              << r->position << "\n";
  }
  std::cout << "channel=" << a.channel << "\nposition=" << r->position
            << "\nunacknowledged_before=" << r->unacknowledged_before
            << "\nunacknowledged=" << r->unacknowledged << "\n";
  return kExitOk;
}

int run_purge(Globals& g, const LookArgs& a) {
  auto store = open_store(g, "purge", &g.rc);
  if (!store) return g.rc;
  const Context ctx = role_context(a, stop_on_signals());
  auto r = take_role(g.quiet, "purge", a.no_wait, ctx,
                     [&](const Context& c) { return store->purge(a.name, a.channel, c); });
  if (!r.ok()) return fail_role("purge", queue_label(a.name), r.status(), a.no_wait);
  std::cout << "channel=" << a.channel << "\npurged=" << *r << "\n";
  return kExitOk;
}

}  // namespace

void add_look_commands(CLI::App& app, Globals& g) {
  auto a = std::make_shared<LookArgs>();

  auto* peek = app.add_subcommand(
      "peek",
      "write a channel's messages from its first unacknowledged one, without taking them: no "
      "role, acknowledgement, position or bound changes");
  peek->add_option("NAME", a->name, "queue name")->required();
  peek->add_option("--channel", a->channel, "the channel to look at")->capture_default_str();
  peek->add_option("--count", a->count, "at most N messages (default: all there are now)")
      ->check(whole_number(1));
  auto* from_seq = peek->add_option("--from-seq", a->from_seq,
                                    "embedded store: from the message with this seq instead");
  from_seq->check(whole_number(0));
  peek->add_option("--from-id", a->from_id,
                   "Redis Streams topic: the messages after this id instead")
      ->excludes(from_seq);
  add_framing_options(peek, a->frames, "written to stdout (as get)", true);
  peek->callback([&g, a] { g.rc = run_peek(g, *a); });

  auto* seek = app.add_subcommand(
      "seek",
      "move a channel: back to replay (those messages are unacknowledged again and count toward "
      "the bound), or forward to skip; waits for the queue's put and the channel's get");
  seek->add_option("NAME", a->name, "queue name")->required();
  seek->add_option("--channel", a->channel, "the channel to move")->capture_default_str();
  add_place_options(seek, a->to, "--to", "deliver next");
  seek->add_flag("--no-wait", a->no_wait, "fail at once (exit 6) if a put or get holds a role");
  as_duration(seek->add_option("--timeout", a->timeout,
                               "wait at most DURATION for the roles (then exit 6)"));
  seek->callback([&g, a] { g.rc = run_seek(g, *a); });

  auto* purge = app.add_subcommand(
      "purge",
      "drop every message a channel has not acknowledged (a pressure queue: every waiting "
      "message), without deleting the queue; waits for the queue's put and the channel's get");
  purge->add_option("NAME", a->name, "queue name")->required();
  purge->add_option("--channel", a->channel, "the channel to purge")->capture_default_str();
  purge->add_flag("--no-wait", a->no_wait, "fail at once (exit 6) if a put or get holds a role");
  as_duration(purge->add_option("--timeout", a->timeout,
                                "wait at most DURATION for the roles (then exit 6)"));
  purge->callback([&g, a] { g.rc = run_purge(g, *a); });
}

}  // namespace sluice::cli
