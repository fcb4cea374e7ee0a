// put (stdin -> queue) and get (queue -> stdout).
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iostream>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "cli.h"
#include "cmd_exec.h"
#include "detail/stop_fd.h"
#include "framing.h"
#include "framing_options.h"
#include "metrics_server.h"
#include "options.h"
#include "pipe_out.h"
#include "place_options.h"
#include "progress.h"
#include "reconnect.h"

namespace sluice::cli {
namespace {

struct IoArgs {
  std::string name;
  FramingArgs frames;  // put's input, get's output
  bool close = false;
  bool no_wait = false;
  std::uint64_t count = 0;  // get: 0 = no limit
  double timeout = -1;      // seconds; < 0 = none
  double reconnect = 60;    // seconds an unreachable Redis is retried; 0: not at all
  double linger = 2;        // get: seconds its end waits for the reader to empty the pipe
  std::string channel = std::string(kDefaultChannel);
  std::size_t batch = 65536;  // put
  std::size_t get_batch = 0;  // get; 0: 8192, with --exec max(32, 4 x parallel)
  std::string metrics;        // --metrics HOST:PORT; empty: none
  ExecArgs exec;              // get --exec
  PlaceArgs from;             // get --from-*: where a new channel starts
};

// poll(2)'s timeout for a wait bounded by ctx's deadline: -1 without one.
int poll_ms(const Context& ctx) {
  if (!ctx.deadline()) return -1;
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(*ctx.deadline() - Context::Clock::now());
  return static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 1 << 30));
}

// Reads stdin and puts one message per separator. Each read's complete
// messages go in one put (one sync), so a busy pipe is batched and an
// interactive one is not delayed.
int run_put(Globals& g, const IoArgs& a) {
  // Not an empty input (/dev/null holds fd 0): --close would end the
  // queue's readers for a producer whose input never came.
  if (g.stdin_closed) {
    return fail("put", queue_label(a.name),
                {StatusCode::kIOError, "stdin is closed: nothing to read the messages from"});
  }
  // Shared: a stat of the progress line or --metrics still in progress at
  // the end holds it (and finishes alone, StatSampler).
  std::shared_ptr<QueueStore> store = open_store(g, "put", &g.rc);
  if (!store) return g.rc;
  const std::stop_token stop = stop_on_signals();
  // --timeout: one deadline for the whole command (the role, the bound, stdin).
  const Context put_ctx =
      a.timeout >= 0 ? with_timeout(std::chrono::duration<double>(a.timeout), stop) : Context(stop);
  Reconnect reconnect("sluice put: " + queue_label(a.name),
                      std::chrono::duration<double>(a.reconnect));
  const auto take_the_role = [&] {
    return take_role(g.quiet, "put", a.no_wait, put_ctx,
                     [&](const Context& c) { return store->writer(a.name, c); });
  };
  auto w = reconnect.retry(put_ctx, take_the_role);
  // An outage that outlasted --timeout (or a signal) ends as they do.
  if (w.code() == StatusCode::kUnavailable && put_ctx.err() != StatusCode::kOk) {
    w = Status(put_ctx.err());
  }
  if (!w.ok()) return fail_role("put", queue_label(a.name), w.status(), a.no_wait);
  QueueWriter& writer = **w;
  // Thread-safe: the progress line's and the metrics' threads sample it.
  const auto stat = [store, name = a.name] { return store->stat(name); };
  Progress progress(Progress::wanted(g.quiet), "put " + a.name, stat,
                    [&writer] { return writer.blocked_seconds(); });
  CommandMetrics metrics;
  metrics.command = "put";
  metrics.queue = a.name;
  metrics.stat = stat;
  metrics.blocked = [&writer] { return writer.blocked_seconds(); };
  auto server = serve_metrics(a.metrics, "put", metrics, &g.rc);
  if (!a.metrics.empty() && !server) return g.rc;
  const std::size_t limit = (*w)->max_message_bytes();
  std::uint64_t sent = 0;
  std::size_t doubt = 0;  // after sent: enqueued or not, unknown (Redis, a broken connection)
  // Messages (numbered from 0) left in doubt by a failed put end before
  // doubt_end; those a later put sent again, before resent_end, are counted
  // in resent: they may be in the queue twice.
  std::uint64_t doubt_end = 0;
  std::uint64_t resent_end = 0;
  std::uint64_t resent = 0;
  std::uint64_t unsent_at = 0;  // input byte offset of the first message not known to be in
  const auto say_resent = [&] {
    if (resent == 0) return;
    std::cerr << "sluice put: " << queue_label(a.name) << ": " << resent
              << " messages were sent again after a connection broke with them in doubt: they "
                 "may be in the queue twice\n";
  };
  auto failed = [&](const Status& s) {
    progress.finish();
    say_resent();
    // Messages an earlier failure left in doubt stay so until a retry puts
    // them: one that failed before sending (a refused connection) says
    // nothing of them.
    const std::uint64_t unsure = std::max(sent + doubt, doubt_end) - sent;
    std::string what = std::to_string(sent) + " messages enqueued; ";
    if (unsure != 0) {
      what += std::to_string(unsure) +
              " more may or may not have been (sent or written, with no word that they "
              "arrived: the reason is below; `sluice stat " +
              a.name + "` shows the count); ";
    }
    std::cerr << "sluice put: " << queue_label(a.name) << ": " << what
              << "the rest of the input, from byte " << unsent_at << ", was not\n";
    return fail("put", queue_label(a.name), s);
  };
  const auto timed_out = [&] {
    char secs[32];
    std::snprintf(secs, sizeof secs, "%g", a.timeout);
    return failed(
        {StatusCode::kDeadlineExceeded, std::string("timed out after ") + secs + " s (--timeout)"});
  };

  // SIGINT/SIGTERM must also end a read of stdin that waits.
  const detail::StopFd stop_fd(stop);
  const int wake = stop_fd.fd();

  FrameParser parser(a.frames.framing(), limit);
  std::vector<std::string_view> batch;
  std::vector<std::uint64_t> input_end;  // input offset after each message of batch
  std::vector<char> chunk(1 << 16);
  // A deeper pipe lets the producer run ahead while a put syncs (best effort:
  // not a pipe, or over /proc/sys/fs/pipe-max-size, keeps the default).
  (void)::fcntl(STDIN_FILENO, F_SETPIPE_SZ, 1 << 20);
  for (bool eof = false; !eof;) {
    pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {wake, POLLIN, 0}};
    if (::poll(fds, wake >= 0 ? 2 : 1, stop_fd.poll_ms(poll_ms(put_ctx))) < 0 && errno != EINTR) {
      return failed({StatusCode::kIOError, std::string("poll stdin: ") + std::strerror(errno)});
    }
    if (stop.stop_requested()) return failed(StatusCode::kCancelled);
    if (put_ctx.expired()) return timed_out();
    if (fds[0].revents == 0) continue;
    // Everything stdin has now, up to 4 MiB, goes in one put (one sync):
    // while a put syncs, the producer refills the pipe, so a busy pipe is
    // batched as deep as the bound allows and an interactive one is not
    // delayed.
    std::size_t round = 0;
    for (;;) {
      const ssize_t n = ::read(STDIN_FILENO, chunk.data(), chunk.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        return failed({StatusCode::kIOError, std::string("read stdin: ") + std::strerror(errno)});
      }
      eof = n == 0;
      if (eof) {
        parser.end_of_input();
        break;
      }
      parser.feed(std::string_view(chunk.data(), static_cast<std::size_t>(n)));
      round += static_cast<std::size_t>(n);
      pollfd more{STDIN_FILENO, POLLIN, 0};
      if (round >= (4u << 20) || ::poll(&more, 1, 0) != 1 || (more.revents & POLLIN) == 0) break;
    }
    // This read's complete messages, then whatever stopped the parse.
    batch.clear();
    input_end.clear();
    std::string_view m;
    FrameParser::Step step;
    while ((step = parser.next(&m)) == FrameParser::Step::kMessage) {
      batch.push_back(m);
      input_end.push_back(parser.consumed());
    }
    for (std::size_t off = 0; off < batch.size();) {
      const std::size_t take = std::min(a.batch, batch.size() - off);
      std::size_t done = 0;
      Status s = (*w)->put(std::span(batch).subspan(off, take), put_ctx, &done);
      if (s.ok()) done = take;
      sent += done;
      doubt = s.ok() ? 0 : (*w)->in_doubt();
      // This put sent [.., sent + doubt): what of it an earlier put left in
      // doubt is sent again (a put that failed before sending, as a refused
      // connection does, sent nothing again). Then its own doubt.
      if (const std::uint64_t again = std::min(sent + doubt, doubt_end); again > resent_end) {
        resent += again - resent_end;
        resent_end = again;
      }
      if (doubt != 0 && sent + doubt > doubt_end) {
        if (sent >= doubt_end) resent_end = sent;  // a new stretch in doubt
        doubt_end = sent + doubt;
      }
      progress.add(done);
      std::uint64_t bytes = 0;
      for (std::size_t i = 0; i < done; ++i) bytes += batch[off + i].size();
      metrics.messages.fetch_add(done, std::memory_order_relaxed);
      metrics.bytes.fetch_add(bytes, std::memory_order_relaxed);
      off += done;
      if (off > 0) unsent_at = input_end[off - 1];
      if (s.code() == StatusCode::kDeadlineExceeded) return timed_out();
      // Sent again from the first not known to be in.
      if (!s.ok() && reconnect.again(s, put_ctx)) continue;
      if (!s.ok() && put_ctx.expired()) return timed_out();
      if (!s.ok() && stop.stop_requested()) return failed(StatusCode::kCancelled);
      if (!s.ok()) return failed(s);
      reconnect.ok();
    }
    switch (step) {
      case FrameParser::Step::kTooLarge:
        std::cerr << "sluice put: " << queue_label(a.name) << ": message " << (sent + 1)
                  << " is over the limit of " << limit << " bytes ("
                  << (parser.claimed_size() != 0 ? std::to_string(parser.claimed_size())
                                                 : "more than " + std::to_string(limit))
                  << ")\n";
        failed({StatusCode::kInvalidArgument, "message too large"});
        return kExitTooLarge;
      case FrameParser::Step::kMalformed:
      case FrameParser::Step::kTruncated:
        return failed(
            {StatusCode::kInvalidArgument,
             "bad " + std::string(framing_name(a.frames.framing())) + " input: " + parser.error()});
      default:  // kNeedMore, or kEnd with eof set
        break;
    }
  }
  say_resent();
  if (a.close) {
    if (Status s = reconnect.retry(put_ctx, [&] { return (*w)->close(); }); !s.ok()) {
      std::cerr << "sluice put: " << queue_label(a.name) << ": " << sent
                << " messages enqueued, but the queue was not closed\n";
      return fail("put", queue_label(a.name), s);
    }
  }
  return kExitOk;
}

// While messages it wrote sit in the pipe, get waits for new ones in slices
// that double from the first to the last, acknowledging what the reader has
// taken at each: those messages hold room under the bound, so a producer
// waiting for it and a get waiting for that producer would otherwise wait
// for each other.
constexpr std::chrono::microseconds kFirstSlice{200};
constexpr std::chrono::microseconds kLastSlice{50'000};
// How long get lets a reader that keeps up catch up before it acknowledges.
constexpr std::chrono::microseconds kCatchUp{200};

// Writes messages to stdout (write(2) on fd 1: no stdio buffer in between)
// and acknowledges them once the reader has taken them: on a pipe, once the
// reader has read a message's last byte (PipeOut); elsewhere once written.
// What the reader did not take is given back at the end, so a reader that
// stops early, dies, or closes the pipe loses nothing it did not read.
int run_get(Globals& g, IoArgs a) {
  auto start = a.from.target("--from");
  if (!start.ok()) return fail("get", queue_label(a.name), start.status());
  a.exec.start = *start;
  if (!a.exec.command.empty()) {
    ExecArgs e = a.exec;
    e.name = a.name;
    e.channel = a.channel;
    e.count = a.count;
    e.timeout = a.timeout;
    e.no_wait = a.no_wait;
    e.batch = a.get_batch;
    e.metrics = a.metrics;
    e.reconnect = a.reconnect;
    return run_exec(g, e);
  }
  if (g.stdout_closed) {
    return fail("get", queue_label(a.name),
                {StatusCode::kIOError, "stdout is closed: nowhere to write the messages"});
  }
  // Shared: a stat of the progress line or --metrics still in progress at
  // the end holds it (and finishes alone, StatSampler).
  std::shared_ptr<QueueStore> store = open_store(g, "get", &g.rc);
  if (!store) return g.rc;
  if (a.exec.start && !g.quiet) note_kept_position(*store, a.name, a.channel);
  std::signal(SIGPIPE, SIG_IGN);  // a closed stdout is an EPIPE to handle, not a silent death
  const std::stop_token signals = stop_on_signals();
  // One stop for every wait: a signal, or the reader of stdout gone.
  std::stop_source stop;
  std::stop_callback on_signal(signals, [&stop] { stop.request_stop(); });
  Context ctx(stop.get_token());
  if (a.timeout >= 0)
    ctx = with_timeout(std::chrono::duration<double>(a.timeout), stop.get_token());
  const std::string label = queue_label(a.name);
  Reconnect reconnect("sluice get: " + label, std::chrono::duration<double>(a.reconnect));
  const auto take_the_role = [&] {
    return take_role(g.quiet, "get", a.no_wait, ctx, [&](const Context& c) {
      return store->reader(a.name, a.channel, c, reader_options(a.exec));
    });
  };
  auto r = reconnect.retry(ctx, take_the_role);
  // An outage that outlasted --timeout (or a signal) ends as they do.
  if (r.code() == StatusCode::kUnavailable && ctx.err() != StatusCode::kOk) r = Status(ctx.err());
  if (!r.ok()) return fail_role("get", label, r.status(), a.no_wait);
  QueueReader& reader = **r;
  const auto stat = [store, name = a.name] { return store->stat(name); };
  Progress progress(Progress::wanted(g.quiet), "get " + a.name, stat);
  CommandMetrics metrics;
  metrics.command = "get";
  metrics.queue = a.name;
  metrics.stat = stat;
  auto server = serve_metrics(a.metrics, "get", metrics, &g.rc);
  if (!a.metrics.empty() && !server) return g.rc;

  PipeOut out(STDOUT_FILENO);
  std::atomic<bool> gone{false};  // the reader of stdout closed it
  ReaderWatch watch(STDOUT_FILENO, out.is_pipe(), [&] {
    gone = true;
    stop.request_stop();
  });
  // The stop also wakes a write waiting for room in the pipe.
  const detail::StopFd stop_fd(stop.get_token());
  const int wake = stop_fd.fd();

  std::deque<std::size_t> sizes;  // payload bytes of messages written, not yet acknowledged
  // Acknowledges what the reader has taken (after a stop too: the ack
  // itself does not wait, only the retries of an outage do).
  const auto ack_taken = [&]() -> Status {
    const std::uint64_t before = reader.acked();
    const std::uint64_t n = std::min(out.taken(), reader.delivered());
    if (n <= before) return Status::Ok();
    if (Status s = reconnect.retry(ctx, [&] { return reader.ack_prefix(n); }); !s.ok()) return s;
    std::uint64_t bytes = 0;
    for (std::uint64_t i = before; i < n && !sizes.empty(); ++i) {
      bytes += sizes.front();
      sizes.pop_front();
    }
    progress.add(n - before);
    metrics.messages.fetch_add(n - before, std::memory_order_relaxed);
    metrics.bytes.fetch_add(bytes, std::memory_order_relaxed);
    return Status::Ok();
  };

  const std::size_t batch = a.get_batch != 0 ? a.get_batch : 8192;
  MessageBatch msgs;  // one buffer: no allocation per message
  std::string bytes;
  std::vector<std::size_t> ends;
  std::chrono::microseconds slice = kFirstSlice;
  std::uint64_t damage_seen = 0;  // damaged messages the reader passed over, said on stderr
  int rc = kExitOk;
  Status error;             // what ended the loop, when it is a failure to report
  bool out_failed = false;  // that failure was writing stdout
  while (a.count == 0 || out.written() < a.count) {
    // A reader that keeps up empties the pipe within microseconds of a
    // write: let it, so this ack covers the whole batch (with a small bound
    // the messages in the pipe would otherwise keep the producer waiting).
    for (const auto until = Context::Clock::now() + kCatchUp;
         out.in_pipe() > 0 && Context::Clock::now() < until;) {
      std::this_thread::yield();
    }
    if (Status s = ack_taken(); !s.ok()) {
      // An outage that outlasted --timeout (or a signal) ends as they do.
      if (s.code() == StatusCode::kDeadlineExceeded) {
        rc = kExitTimeout;
      } else if (s.code() == StatusCode::kCancelled) {
        rc = kExitInterrupted;
      } else {
        error = s;
      }
      break;
    }
    std::size_t want = batch;
    if (a.count != 0) {
      want = static_cast<std::size_t>(std::min<std::uint64_t>(want, a.count - out.written()));
    }
    // Not out.in_pipe(): the reader may have taken more since ack_taken()
    // looked, and those are not acknowledged yet either.
    const bool held = reader.delivered() > reader.acked();
    const Context wait = held ? ctx.with_deadline(Context::Clock::now() + slice) : ctx;
    msgs.clear();
    Status s = reconnect.get(reader, msgs, want, wait);
    note_damage_skipped(a.name, reader, damage_seen);
    if (held && s.code() == StatusCode::kDeadlineExceeded && !ctx.expired()) {
      slice = std::min(slice * 2, kLastSlice);
      continue;
    }
    slice = kFirstSlice;
    if (s.code() == StatusCode::kClosed) break;  // closed and drained: the normal end
    if (s.code() == StatusCode::kDeadlineExceeded) {
      rc = kExitTimeout;
      break;
    }
    if (s.code() == StatusCode::kCancelled) {
      rc = kExitInterrupted;
      break;
    }
    if (!s.ok()) {
      error = s;
      break;
    }
    bytes.clear();
    ends.clear();
    for (std::size_t i = 0; i < msgs.size(); ++i) {
      a.frames.append(msgs, i, a.channel, bytes);
      ends.push_back(bytes.size());
      sizes.push_back(msgs.entry(i).size);
    }
    if (Status ws = out.write(bytes, ends.data(), ends.size(), ctx, wake); !ws.ok()) {
      if (ws.code() == StatusCode::kDeadlineExceeded) {
        rc = kExitTimeout;
      } else if (ws.code() == StatusCode::kCancelled) {
        rc = kExitInterrupted;
      } else if (!out.reader_gone()) {
        error = ws;
        out_failed = true;
      }
      break;
    }
  }
  if (gone || out.reader_gone()) {
    rc = kExitIO;
  } else if (out.is_pipe() && out.in_pipe() > 0 && error.ok()) {
    // Our own end: give the reader a moment to take what is in the pipe.
    const auto until = Context::Clock::now() + std::chrono::duration_cast<Context::Clock::duration>(
                                                   std::chrono::duration<double>(a.linger));
    for (auto step = kFirstSlice; out.in_pipe() > 0 && Context::Clock::now() < until;
         step = std::min(step * 2, kLastSlice)) {
      if (Status s = ack_taken(); !s.ok()) break;  // reported below, by the last try
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Context::Clock::now());
      pollfd p{STDOUT_FILENO, 0, 0};  // POLLERR ends it early: the reader has gone
      const auto ms = std::min<std::int64_t>(
          left.count(), std::chrono::ceil<std::chrono::milliseconds>(step).count());
      if (::poll(&p, 1, static_cast<int>(ms)) == 1 && (p.revents & POLLERR) != 0) break;
    }
    if (out.reader_gone()) rc = kExitIO;
  }
  progress.finish();
  const std::uint64_t written = out.written();
  if (Status s = ack_taken(); !s.ok() && error.ok() && s.code() != StatusCode::kDeadlineExceeded &&
                              s.code() != StatusCode::kCancelled) {
    error = s;
  }
  // Counted before the give-back, which forgets what it gives back.
  const std::uint64_t delivered = reader.delivered();
  const std::uint64_t acked = reader.acked();
  const std::uint64_t held = delivered - acked;
  // Read by the reader: acknowledged, or taken from the pipe with an
  // acknowledgement that got no answer (a request already sent to a server
  // that stopped answering may still run). Once the reader has gone, what it
  // did not acknowledge went with the pipe.
  const std::uint64_t read =
      rc == kExitIO ? acked : std::max(acked, std::min(out.taken(), delivered));
  const std::uint64_t in_doubt = read - acked;
  Status given = Status::Ok();
  // Tried once after --timeout or a signal; through an outage otherwise.
  if (held != 0) given = reconnect.retry(ctx, [&] { return reader.release(); });
  if (rc == kExitIO) {
    std::cerr << "sluice get: " << label << ": the reader of stdout has gone; it took " << acked
              << " of the " << written << " messages written";
  } else if (held != 0) {
    std::cerr << "sluice get: " << label << ": ";
    if (in_doubt != 0) {
      std::cerr << "the reader of stdout took " << in_doubt
                << " messages whose acknowledgement got no answer (it may yet take effect)";
      if (held > in_doubt) std::cerr << ", and ";
    }
    if (held > in_doubt && out_failed) {
      std::cerr << "the last " << held - in_doubt << " messages not written: writing stdout failed";
    } else if (held > in_doubt) {
      std::cerr << "the reader of stdout had not taken the last " << held - in_doubt << " messages"
                << (out.is_pipe() && error.ok() ? " after --linger" : "");
    }
  }
  if (held != 0) {
    // Held: written and not read, and fetched but not yet written.
    const std::uint64_t unread = written - std::min(written, read);
    const std::uint64_t not_yet = delivered - std::min(delivered, written);
    const std::string parts = not_yet != 0 && unread != 0
                                  ? " (" + std::to_string(unread) + " written and not read, " +
                                        std::to_string(not_yet) + " not yet written)"
                                  : "";
    // Those whose acknowledgement may yet run come again only if it does not.
    const char* will =
        in_doubt != 0 ? "they may be delivered again" : "they will be delivered again";
    if (given.ok()) {
      std::cerr << "; " << held << " given back" << parts << ": " << will << "\n";
    } else {
      std::cerr << "; " << held << " not given back" << parts << " (" << given.message()
                << "): " << will << " once this reader is gone\n";
    }
  } else if (rc == kExitIO) {
    std::cerr << "\n";
  } else if (const Status& cut = reconnect.cut_short();
             !cut.ok() && (rc == kExitInterrupted || rc == kExitTimeout)) {
    // Nothing left to give back here; the store's own cleanup (a pressure
    // queue's reader role) did not wait for a Redis that does not answer.
    std::cerr << "sluice get: " << label << ": ended while Redis did not answer (" << cut.message()
              << "): what this reader held goes to the next reader once this process is gone\n";
  }
  if (!error.ok()) return fail("get", label, error);
  return rc;
}

void add_reconnect_option(CLI::App* cmd, IoArgs& a) {
  as_duration(cmd->add_option("--reconnect", a.reconnect,
                              "Redis: while the server cannot be reached (a restart, a failover), "
                              "retry for up to DURATION before giving up; 0: give up at once")
                  ->capture_default_str());
}

void add_metrics_option(CLI::App* cmd, IoArgs& a) {
  cmd->add_option("--metrics", a.metrics,
                  "serve Prometheus text at http://HOST:PORT/metrics while running (HOST empty: "
                  "127.0.0.1; PORT 0: any free one, printed on stderr)");
}

}  // namespace

void add_io_commands(CLI::App& app, Globals& g) {
  auto a = std::make_shared<IoArgs>();

  auto* put = app.add_subcommand(
      "put", "put stdin into a queue, one message per line (newline stripped); waits at the bound");
  put->add_option("NAME", a->name, "queue name")->required();
  add_framing_options(put, a->frames, "separated in stdin", false);
  put->add_flag("--close", a->close, "close the queue after the end of the input");
  put->add_flag("--no-wait", a->no_wait, "fail at once if another writer holds the queue");
  put->add_option("--batch", a->batch, "most messages per put (one sync each)")
      ->capture_default_str()
      ->check(whole_number(1));
  as_duration(put->add_option("--timeout", a->timeout,
                              "stop after DURATION (30, 1.5, 500ms, 2m, 1h): exit 9, saying how "
                              "many messages were enqueued, unless the input ended first (exit "
                              "6 if another writer held the queue all that time)"));
  add_reconnect_option(put, *a);
  add_metrics_option(put, *a);
  put->callback([&g, a] { g.rc = run_put(g, *a); });

  auto* get = app.add_subcommand(
      "get",
      "write messages to stdout, one per line, until the queue is closed and drained; a message "
      "is acknowledged once the reader has taken it from the pipe (once written, if stdout is "
      "not a pipe; with --exec, once processed); the rest is given back at the end");
  get->add_option("NAME", a->name, "queue name")->required();
  add_framing_options(get, a->frames, "written to stdout", true);
  get->add_option("--count", a->count, "stop after N messages")->check(whole_number(1));
  as_duration(get->add_option("--timeout", a->timeout,
                              "stop after DURATION (30, 1.5, 500ms, 2m, 1h): exit 9 unless "
                              "--count or the end came first (exit 6 if another reader held "
                              "the channel all that time)"));
  add_reconnect_option(get, *a);
  add_place_options(get, a->from, "--from", "a new channel starts at");
  as_duration(get->add_option("--linger", a->linger,
                              "stdout a pipe: at the end (the queue drained, --count, --timeout, a "
                              "signal), how long to wait for the reader to take what is still in "
                              "the pipe; the rest is given back, to be delivered again")
                  ->capture_default_str());
  get->add_option("--channel", a->channel, "the channel to read (each channel gets every message)")
      ->capture_default_str();
  get->add_flag("--no-wait", a->no_wait, "fail at once if another reader holds the channel");
  get->add_option("--batch", a->get_batch,
                  "most messages per read and acknowledgement (default 8192; with --exec "
                  "max(32, 4 x --parallel))")
      ->check(whole_number(1));
  auto* exec = get->add_option(
      "--exec", a->exec.command,
      "run CMD (/bin/sh -c CMD) per message, the message on its stdin; acknowledge it once CMD "
      "exits 0; env SLUICE_QUEUE, SLUICE_CHANNEL, SLUICE_ATTEMPT; sluice exits 127 (126) if CMD "
      "is not found (not executable)");
  exec->excludes("--framing")->excludes("--null")->excludes("--binary")->excludes("--format");
  exec->check(CLI::Validator(
      [](const std::string& cmd) { return cmd.empty() ? std::string("empty command") : ""; },
      "CMD"));
  get->add_option("--retries", a->exec.retries,
                  "--exec: runs after a failed first one, then the message is dead-lettered")
      ->capture_default_str()
      ->check(whole_number(0, std::numeric_limits<unsigned>::max()))
      ->needs(exec);
  get->add_option("--parallel", a->exec.parallel,
                  "--exec: commands at once, 1 to 1024 (messages may then finish out of order)")
      ->capture_default_str()
      ->check(whole_number(1, 1024))
      ->needs(exec);
  get->add_option("--dead-letter", a->exec.dead_letter,
                  "--exec: queue for messages that failed every run (default NAME.dead; created "
                  "with NAME's bound if missing)")
      ->needs(exec);
  as_duration(get->add_option("--grace", a->exec.grace,
                              "--exec: after SIGINT/SIGTERM, how long (a DURATION, as --timeout) "
                              "running commands may take to finish before they are killed "
                              "(SIGKILL)")
                  ->capture_default_str())
      ->needs(exec);
  as_duration(get->add_option("--visibility", a->exec.visibility,
                              "Redis Streams topics: how long a reader that died holds its "
                              "messages before another reader of the channel takes them; set for "
                              "every reader of the channel (default 30 s, at least 1 s). A reader "
                              "that lives keeps what it holds, however long --exec or the pipe "
                              "takes"))
      // A live reader renews its claims every third of the timeout: below a
      // second, a scheduling pause of a few tens of ms let another reader
      // take a message it still held (5 ms lost one at once).
      ->check(CLI::Validator(
          [](const std::string& secs) {
            return std::stod(secs) >= 1 ? ""
                                        : "must be at least 1s (a live reader renews its claim "
                                          "every third of it)";
          },
          "", "AT LEAST 1S"));
  add_metrics_option(get, *a);
  get->callback([&g, a] { g.rc = run_get(g, *a); });
}

}  // namespace sluice::cli
