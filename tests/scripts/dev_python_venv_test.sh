#!/usr/bin/env bash
# `scripts/dev python VENV` with a relative VENV, run from another directory:
# the venv is that directory's VENV (as a shell user means it), not one in
# sluice's source tree. A stub venv there (bin/python, bin/pip) records what
# runs; dpkg is stubbed to say every package is installed. Should the stub be
# passed over, PIP_PROGRESS_BAR=bogus stops a real pip at once.
# Usage: dev_python_venv_test.sh <work dir>
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
work=$1
name=dev-python-venv-test-$$  # relative, and in neither tree beforehand
rm -rf "$work"
mkdir -p "$work/bin" "$work/cwd/$name/bin"
trap 'rm -rf "${src:?}/$name"' EXIT
printf '#!/usr/bin/env bash\nexit 0\n' >"$work/bin/dpkg"
for tool in python pip; do
  printf '#!/usr/bin/env bash\necho "%s $*" >>"%s/ran.log"\n' "$tool" "$work" >"$work/cwd/$name/bin/$tool"
done
chmod +x "$work/bin/dpkg" "$work/cwd/$name/bin/"*
fail() { echo "FAIL: $*" >&2; cat "$work/dev.log" >&2; exit 1; }

(cd "$work/cwd" && PATH="$work/bin:$PATH" PIP_PROGRESS_BAR=bogus "$src/scripts/dev" python "$name") \
  >"$work/dev.log" 2>&1 || fail "scripts/dev python $name failed"
[ ! -e "$src/$name" ] || fail "scripts/dev python $name made $src/$name (the source tree)"
grep -q '^pip install' "$work/ran.log" || fail "the venv's pip did not run"
grep -q "use it: $work/cwd/$name/bin/python" "$work/dev.log" || fail "it does not say where the venv is"
echo ok
