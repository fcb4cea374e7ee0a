#!/usr/bin/env bash
# The main job of sluice, between processes (scripts/dev main runs it): a
# producer process puts N messages into a small bounded queue; a slow
# consumer process takes them one at a time. The producer is held at the
# bound until the consumer makes room (backpressure), and `sluice stat`,
# run from outside, samples the depth meanwhile. At the end: a summary, and
# checks (every message arrived once, in order; the depth never passed the
# bound; the producer did wait), so the ctest `cli.demo` keeps this true.
#
# Usage: scripts/demo.sh [--sluice PATH] [--messages N] [--bound B] [--work SECONDS]
#   --sluice    the sluice binary (default build/default/tools/sluice/sluice)
#   --messages  how many messages the producer puts (default 30)
#   --bound     the queue's bound (default 5)
#   --work      extra seconds the consumer spends per message (default 0.02)
# The store is a fresh temporary directory (not your default store), removed
# at the end. Exit status 0 if every check held, 1 if not, 2 for bad usage.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
sluice=$here/../build/default/tools/sluice/sluice
messages=30 bound=5 work=0.02
while [ $# -gt 0 ]; do
  case "$1" in
    --sluice) sluice=$2; shift 2 ;;
    --messages) messages=$2; shift 2 ;;
    --bound) bound=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    *) sed -n '10,15p' "$0" >&2; exit 2 ;;
  esac
done
[ -x "$sluice" ] || { echo "demo: no sluice binary at $sluice (build it: scripts/dev main)" >&2; exit 2; }

store=$(mktemp -d "${TMPDIR:-/tmp}/sluice-demo.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$store"
}
trap cleanup EXIT
export SLUICE_STORE=$store  # every sluice below uses the temporary store
now_us() { echo "${EPOCHREALTIME/./}"; }
secs() { awk -v us="$1" 'BEGIN { printf "%.2f", us / 1e6 }'; }

echo "store: $store (temporary)"
echo "\$ sluice create jobs --bound $bound"
"$sluice" create jobs --bound "$bound"

# What the producer costs with room to spare: the same put into a queue
# that never fills. The rest of its time below is time spent blocked.
"$sluice" create room --bound "$messages"
tb=$(now_us)
seq 1 "$messages" | sed 's/^/job /' | "$sluice" put room --batch 1
baseline_us=$(($(now_us) - tb))
"$sluice" delete room

# The producer: one `sluice put` fed by a generator; it waits at the bound.
# --batch 1 puts one message at a time, so it waits for one free place (a
# larger batch waits until the whole batch fits).
echo "producer: seq 1 $messages | sed 's/^/job /' | sluice put jobs --batch 1 --close"
t0=$(now_us)
(
  seq 1 "$messages" | sed 's/^/job /' | "$sluice" put jobs --batch 1 --close
  now_us >"$store/producer.done"
) &
pids+=($!)
producer=$!

# The consumer: takes one message at a time (each `get --count 1` is
# acknowledged once printed), then "works" on it. An empty answer means the
# queue is closed and drained.
echo "consumer: while m=\$(sluice get jobs --count 1); do work \"\$m\"; done"
(
  while :; do
    m=$("$sluice" get jobs --count 1)
    [ -n "$m" ] || break
    echo "$m" >>"$store/received"
    sleep "$work"
  done
  now_us >"$store/consumer.done"
) &
pids+=($!)
consumer=$!

# The observer: samples the depth with `sluice stat` until the consumer ends.
max_depth=0 samples=0 full=0 last_print=0 prev_full=0
while kill -0 "$consumer" 2>/dev/null; do
  st=$("$sluice" stat jobs 2>/dev/null) || break
  t=$(now_us)
  depth=$(sed -n 's/^length=//p' <<<"$st")
  produced=$(sed -n 's/^produced=//p' <<<"$st")
  consumed=$(sed -n 's/^consumed=//p' <<<"$st")
  [ -n "$depth" ] || continue
  samples=$((samples + 1))
  [ "$depth" -gt "$max_depth" ] && max_depth=$depth
  prev_full=0
  if [ "$depth" -ge "$bound" ] && [ ! -e "$store/producer.done" ]; then
    prev_full=1 full=$((full + 1))
  fi
  if [ $((t - last_print)) -ge 250000 ]; then
    bar=$(printf '%*s' "$depth" '' | tr ' ' '#')
    state="producer done"
    [ -e "$store/producer.done" ] || state="producer running"
    [ "$prev_full" -eq 1 ] && state="producer waiting at the bound"
    printf '  %5ss  depth %2d/%d %-*s  put %3d  acked %3d  %s\n' "$(secs $((t - t0)))" "$depth" \
      "$bound" "$bound" "$bar" "$produced" "$consumed" "$state"
    last_print=$t
  fi
done
wait "$producer" || { echo "demo: the producer failed" >&2; exit 1; }
wait "$consumer" || { echo "demo: the consumer failed" >&2; exit 1; }
pids=()
t_end=$(now_us)
t_prod=$(cat "$store/producer.done")
blocked_us=$((t_prod - t0 - baseline_us))
[ "$blocked_us" -ge 0 ] || blocked_us=0

echo "\$ sluice stat jobs"
"$sluice" stat jobs
received=$(wc -l <"$store/received" 2>/dev/null || echo 0)
cat <<EOF
summary:
  messages:          $received of $messages received, each once, in order
  total time:        $(secs $((t_end - t0))) s ($(awk -v n="$received" -v us=$((t_end - t0)) 'BEGIN { printf "%.0f", n / (us / 1e6) }') messages/s: the consumer's pace)
  producer:          $(secs $((t_prod - t0))) s to put everything, of which ~$(secs "$blocked_us") s blocked by
                     backpressure (the same put into a queue with room: $(secs "$baseline_us") s; \`sluice stat\`
                     saw the queue full in $full of $samples samples while the producer ran)
  max depth seen:    $max_depth (bound $bound), sampled $samples times with \`sluice stat\` from outside
EOF

ok=1
if ! diff <(seq 1 "$messages" | sed 's/^/job /') "$store/received" >/dev/null 2>&1; then
  echo "FAIL: the consumer did not receive job 1..$messages exactly once, in order" >&2
  ok=0
fi
if [ "$max_depth" -gt "$bound" ]; then
  echo "FAIL: the depth reached $max_depth, over the bound $bound" >&2
  ok=0
fi
if [ "$messages" -gt $((2 * bound)) ] && [ "$full" -eq 0 ]; then
  echo "FAIL: the producer was never seen waiting at the bound" >&2
  ok=0
fi
[ "$ok" -eq 1 ] && echo "ok: bound held, nothing lost, the producer waited for the consumer"
[ "$ok" -eq 1 ]
