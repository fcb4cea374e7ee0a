#!/usr/bin/env bash
# scripts/dev's apt-get step as a user who is not root: through sudo, which
# resets the environment (Debian's default env_reset), yet apt-get must run
# non-interactively. Stubs of id, dpkg, sudo and apt-get in PATH stand in for
# the system's: every package is missing, and apt-get records its
# environment, then fails `install` so that scripts/dev stops there.
# Usage: dev_install_test.sh <work dir>
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
work=$1
rm -rf "$work"
mkdir -p "$work/bin"
stub() { printf '#!/usr/bin/env bash\n%s\n' "$2" >"$work/bin/$1" && chmod +x "$work/bin/$1"; }
# shellcheck disable=SC2016  # the stub's own $1 and $@
stub id 'if [ "${1:-}" = -u ]; then echo 1000; else exec /usr/bin/id "$@"; fi'
stub dpkg 'exit 1'  # dpkg -s: not installed
# sudo as Debian configures it: the command runs with a reset environment.
stub sudo "exec env -i PATH=\"$work/bin:/usr/bin:/bin\" SUDO_USER=someone \"\$@\""
stub apt-get "echo \"\${SUDO_USER:-no-sudo} \$1 DEBIAN_FRONTEND=\${DEBIAN_FRONTEND:-}\" >>\"$work/apt.log\"
[ \"\$1\" = update ] || exit 1"
fail() { echo "FAIL: $*" >&2; [ -f "$work/apt.log" ] && cat "$work/apt.log" >&2; exit 1; }

if PATH="$work/bin:$PATH" "$src/scripts/dev" charts >"$work/dev.log" 2>&1; then
  fail "scripts/dev went on after apt-get install failed"
fi
grep -q '^someone update' "$work/apt.log" || fail "apt-get update was not run through sudo"
grep -q '^someone install' "$work/apt.log" || fail "apt-get install was not run through sudo"
grep -q '^someone install .*DEBIAN_FRONTEND=noninteractive$' "$work/apt.log" ||
  fail "apt-get install under sudo is not non-interactive (DEBIAN_FRONTEND lost)"
echo ok
