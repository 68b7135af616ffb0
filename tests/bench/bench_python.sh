#!/usr/bin/env bash
# zinf's Python package (zinf.optim, zinf.aio) against DeepSpeedCPUAdam, torch's AdamW,
# DeepSpeed's aio handle and fio, in one process on the same buffers, threads and file
# (tests/bench/python_peers.py): prints its table of ratios zinf / peer, no goals
# asserted. Its JSON lines go to $ZINF_BUILD/bench-python.json, DeepSpeed's build output
# and warnings to $ZINF_BUILD/bench-python.log. ZINF_BENCH_PARAMS (default 100M) and
# ZINF_BENCH_IO_SIZE (1G) size it; ZINF_BENCH_DIR (default /var/tmp, as the others) holds the
# file and should sit on the offload drive. DeepSpeed builds its ops with ninja on first
# use, which takes minutes (its aio op needs libaio-dev).
set -eu
B=${ZINF_BUILD:-build}
PY=${ZINF_PY:-build/pyenv/bin/python}
if [ ! -x "$PY" ]; then echo "bench_python: $PY is missing (make bench installs it)"; exit 1; fi
command -v fio > /dev/null || { echo "bench_python: fio is not installed (make deps installs it)"; exit 1; }

out=$(PYTHONPATH=python ZINF_LIB="$B/libzinf.so" "$PY" tests/bench/python_peers.py \
  --params "${ZINF_BENCH_PARAMS:-100000000}" --io-size "${ZINF_BENCH_IO_SIZE:-1G}" \
  --dir "${ZINF_BENCH_DIR:-/var/tmp}" 2> "$B/bench-python.log") ||
  { echo "$out"; tail -20 "$B/bench-python.log"; exit 1; }
grep '^{' <<< "$out" > "$B/bench-python.json"
grep -v '^{' <<< "$out"
