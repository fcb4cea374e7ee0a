#!/usr/bin/env bash
# Installs the current build into a fresh prefix (with a space in its path),
# then builds and runs small consumers against that tree, both ways (CMake
# package, pkg-config), and one that takes sluice's sources instead:
#   1. CMake package: find_package(sluice CONFIG REQUIRED COMPONENTS core)
#      (must not find or link ISA-L or hiredis), then find_package(sluice
#      CONFIG REQUIRED) with sluice::log, sluice::store, sluice::redis and
#      sluice::sluice; and COMPONENTS core first, then every component (the
#      second call's sluice::sluice holds them all);
#   2. FetchContent of sluice's sources (add_subdirectory), sluice::core;
#      and an install of those sources with neither the log nor Redis (no
#      headers of theirs or the store's), find_package(sluice) against it;
#   3. pkg-config: g++ -std=c++20 app.cpp $(pkg-config --cflags --libs sluice),
#      the flags read as a shell reads them (eval, as make's recipes do);
#   4. with the "tools" component: bin/sluice runs from the prefix, and the
#      man page share/man/man1/sluice.1 is there and renders;
#   5. with the "python" component: $PYTHON (default python3) imports sluice
#      from <prefix>/lib/python3/dist-packages, not from the build tree, and
#      puts and gets through it.
# Usage: run.sh <build dir> <work dir> <c++ compiler> <components, e.g. "core;log;redis;tools"> [skip reason]
set -euo pipefail
build=$1 work=$2 cxx=$3 comps=$4
if [ -n "${5:-}" ]; then
  echo "skipped: $5"
  exit 77
fi
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
has() { [[ ";$comps;" == *";$1;"* ]]; }
step() { echo "--- $* (${SECONDS}s)"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

rm -rf "$work"
mkdir -p "$work"
prefix="$work/install prefix"  # a space: the .pc files must escape it

step "cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log"

if has tools; then
  step "bin/sluice and share/man/man1/sluice.1"
  [ -x "$prefix/bin/sluice" ] || fail "bin/sluice not installed"
  "$prefix/bin/sluice" --help >/dev/null || fail "installed sluice --help failed"
  "$prefix/bin/sluice" --store "$work/tools-store" create q >/dev/null || fail "installed sluice create"
  [ "$("$prefix/bin/sluice" --store "$work/tools-store" ls)" = q ] || fail "installed sluice ls"
  man1=$prefix/share/man/man1/sluice.1
  [ -s "$man1" ] || fail "share/man/man1/sluice.1 not installed"
  grep -q '^\.TH SLUICE 1' "$man1" || fail "sluice.1 is not a man page"
  if command -v groff >/dev/null; then
    groff -man -Tutf8 -P-cbou "$man1" >"$work/man.txt" 2>"$work/man.err" || fail "groff failed on sluice.1"
    grep -q 'log inspect' "$work/man.txt" || fail "sluice.1 does not render"
    [ ! -s "$work/man.err" ] || { cat "$work/man.err"; fail "groff warns about sluice.1"; }
  fi
fi

if has python; then
  step "python3: import sluice from lib/python3/dist-packages"
  py=${PYTHON:-python3}
  site=$prefix/lib/python3/dist-packages
  [ -f "$site/sluice/__init__.py" ] || fail "lib/python3/dist-packages/sluice not installed"
  [ -f "$site/sluice/__init__.pyi" ] || fail "the type stubs are not installed"
  ls "$site"/sluice/_sluice*.so >/dev/null || fail "the extension module is not installed"
  (cd "$work" && env -u PYTHONPATH PYTHONPATH="$site" "$py" -c '
import sys, sluice
assert sluice.__file__.startswith(sys.argv[1]), sluice.__file__
s = sluice.Store(sys.argv[2])
s.create("q", bound=2)
with s.writer("q") as w:
    w.put(b"from python")
    w.close()
with s.reader("q") as r:
    assert [m.data for m in r] == [b"from python"]
    r.ack()
print("imported", sluice.__file__)
' "$site" "$work/py-store") || fail "the installed module does not work"
fi

step "CMake package, COMPONENTS core"
cmake -S "$here/consumer" -B "$work/core" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_PREFIX_PATH="$prefix" -DSLUICE_COMPONENTS=core >"$work/core.log"
cmake --build "$work/core" >>"$work/core.log" || { cat "$work/core.log"; fail "core build"; }
if ninja -C "$work/core" -t commands core_app | grep -E 'isal|hiredis'; then
  fail "core_app's build names ISA-L or hiredis"
fi
"$work/core/core_app"

step "CMake package, every component; sluice::sluice"
cmake -S "$here/consumer" -B "$work/all" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_PREFIX_PATH="$prefix" >"$work/all.log"
cmake --build "$work/all" >>"$work/all.log" || { cat "$work/all.log"; fail "build"; }
"$work/all/core_app"
if has log; then "$work/all/log_app" "$work/cmake-topic"; fi
if has store; then "$work/all/store_app" "$work/cmake-store"; fi
if has redis; then "$work/all/redis_app"; fi
if has log && has redis; then "$work/all/all_app"; fi

if has log && has redis; then
  step "CMake package, COMPONENTS core then every component; sluice::sluice"
  cmake -S "$here/consumer" -B "$work/twice" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" \
    -DCMAKE_PREFIX_PATH="$prefix" -DSLUICE_FIND_CORE_FIRST=ON >"$work/twice.log"
  cmake --build "$work/twice" --target all_app >>"$work/twice.log" || { cat "$work/twice.log"; fail "build"; }
  "$work/twice/all_app"
fi

step "FetchContent of the sources (add_subdirectory), sluice::core"
cmake -S "$here/consumer" -B "$work/fetch" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" \
  -DSLUICE_SOURCE_DIR="$src" >"$work/fetch.log"
cmake --build "$work/fetch" >>"$work/fetch.log" || { cat "$work/fetch.log"; fail "build"; }
"$work/fetch/core_app"

step "an install of sluice::core alone (SLUICE_WITH_LOG=OFF, SLUICE_WITH_REDIS=OFF)"
# Its headers are the queue's only: none of the log's, Redis's or the store's
# (whose libraries it has not).
cmake -S "$src" -B "$work/core-only" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DSLUICE_WITH_LOG=OFF \
  -DSLUICE_WITH_REDIS=OFF -DSLUICE_BUILD_TESTS=OFF -DSLUICE_BUILD_BENCH=OFF \
  -DSLUICE_BUILD_EXAMPLES=OFF >"$work/core-only.log"
cmake --build "$work/core-only" >>"$work/core-only.log" || { cat "$work/core-only.log"; fail "build"; }
cmake --install "$work/core-only" --prefix "$work/core-prefix" >>"$work/core-only.log"
for h in log redis store.h; do
  [ ! -e "$work/core-prefix/include/sluice/$h" ] || fail "a core-only install has include/sluice/$h"
done
cmake -S "$here/consumer" -B "$work/core-only-app" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_PREFIX_PATH="$work/core-prefix" >"$work/core-only-app.log"
cmake --build "$work/core-only-app" >>"$work/core-only-app.log" || { cat "$work/core-only-app.log"; fail "build"; }
"$work/core-only-app/core_app"

step "pkg-config"
pc=$(find "$prefix" -name sluice.pc)
[ -n "$pc" ] || fail "no sluice.pc installed"
export PKG_CONFIG_PATH LD_LIBRARY_PATH
PKG_CONFIG_PATH=$(dirname "$pc")
LD_LIBRARY_PATH=$(dirname "$PKG_CONFIG_PATH")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}  # shared builds
core_libs=$(pkg-config --libs sluice)
if [[ $core_libs == *isal* || $core_libs == *hiredis* ]]; then
  fail "pkg-config --libs sluice names ISA-L or hiredis: $core_libs"
fi
apps=("core_app sluice")
if has log; then apps+=("log_app sluice-log"); fi
if has store; then apps+=("store_app sluice-store"); fi
if has redis; then apps+=("redis_app sluice-redis"); fi
pids=()
for a in "${apps[@]}"; do
  read -r app pkg <<<"$a"
  # pkg-config escapes what must stay one word (the prefix's space) for the
  # shell that reads its output: eval, as make's recipes do.
  cmd=$(printf '%q ' "$cxx" -std=c++20 "$here/consumer/$app.cpp" -o "$work/pc_$app")
  eval "$cmd $(pkg-config --cflags --libs "$pkg")" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || fail "a pkg-config build failed"; done
"$work/pc_core_app"
if has log; then "$work/pc_log_app" "$work/pc-topic"; fi
if has store; then "$work/pc_store_app" "$work/pc-store"; fi
if has redis; then "$work/pc_redis_app"; fi

step "ok"
