#!/usr/bin/env bash
# timeout: 195 san=235 cuda-emu=60
# backend: host: tests/python trains on the host backend
# The Python package (python/): pip installs it from the tree into a folder of its own,
# with this build's libzinf.so and zinf program, and pytest runs tests/python/ against
# that installed copy in build/pyenv (torch, numpy, pytest).
# without-cuda: libzinf.so links without the CUDA libraries; loading it is where a missing symbol shows
set -u
cd "$(dirname "$0")/../.."
. tests/cli/lib.sh
B=${ZINF_BUILD:-build}
PY=build/pyenv/bin/python
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" python/build python/zinf.egg-info' EXIT
[ -x $PY ] && $PY -c "import pytest, torch" 2>/dev/null || { echo "build/pyenv lacks pytest or torch: run make tests"; exit 1; }

# A sanitized library needs the sanitizers' runtimes loaded ahead of Python.
if ldd "$B/libzinf.so" | grep -q libasan; then
  export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
  export ASAN_OPTIONS=detect_leaks=0
fi

expect 0 env -u LD_PRELOAD ZINF_BUILD="$B" $PY -m pip install -q --disable-pip-version-check --no-build-isolation \
  --no-deps --target "$tmp/site" ./python
[ -f "$tmp/site/zinf/_bin/libzinf.so" ] && [ -x "$tmp/site/zinf/_bin/zinf" ] || fail "pip left no zinf/_bin/ in the package"
cmp -s "$tmp/site/zinf/_bin/libzinf.so" "$B/libzinf.so" || fail "the installed libzinf.so is not $B's"

# From the tree's root, so the tests find examples/; the installed copy, not python/.
PYTHONPATH="$tmp/site" $PY -m pytest -q -p no:cacheprovider tests/python --basetemp "$tmp/pytest" ||
  fail "pytest tests/python"
PYTHONPATH="$tmp/site" $PY -c "import zinf._lib as l; assert l.LIB_PATH.startswith('$tmp/site'), l.LIB_PATH" ||
  fail "the installed package loaded a library from elsewhere"
finish test_python
