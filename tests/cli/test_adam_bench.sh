#!/usr/bin/env bash
# zinf adam-bench: the --json contract for each gradient and copy dtype and optimizer,
# the human table, and usage errors (exit 2). Speed is reported, never asserted.
# timeout: 10 san=10 cuda-emu=10
set -u
Z=${ZINF_BUILD:-build}/zinf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"

for args in "--grad-dtype fp32 --out-dtype bf16" "--grad-dtype bf16 --out-dtype none" \
  "--grad-dtype fp16 --out-dtype fp16 --optimizer adam" "--optimizer lion --out-dtype none" \
  "--optimizer adagrad --grad-dtype bf16"; do
  expect 0 "$Z" adam-bench --params 1e6 --threads 2 --steps 3 --json $args
  python3 - "$tmp/out" "$args" <<'PY' || fail "adam-bench --json $args: $(cat "$tmp/out")"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1, lines
o = json.loads(lines[0])
a = sys.argv[2].split()
opt = dict(zip(a[::2], a[1::2]))
assert o["params"] == 1000000 and o["threads"] == 2 and o["steps"] == 3, o
assert o["grad_dtype"] == opt.get("--grad-dtype", "fp32") and o["out_dtype"] == opt.get("--out-dtype", "bf16"), o
assert o["optimizer"] == opt.get("--optimizer", "adamw"), o
states = {"adamw": 3, "adam": 3, "adagrad": 2, "lion": 2}[o["optimizer"]]
size = {"fp32": 4, "bf16": 2, "fp16": 2, "none": 0}
assert o["bytes_per_param"] == 8 * states + size[o["grad_dtype"]] + size[o["out_dtype"]], o
assert o["params_per_s"] > 0 and o["roofline_params_per_s"] > 0, o
assert abs(o["ratio_to_roofline"] - o["params_per_s"] / o["roofline_params_per_s"]) < 1e-9, o
assert abs(o["params_per_s"] * o["seconds"] - o["params"]) < 1e-6 * o["params"], o
assert o["simd"] in ("scalar", "avx2", "avx512"), o
PY
done
# The SIMD level can be capped; the scalar path runs end to end.
ZINF_SIMD=scalar expect 0 "$Z" adam-bench --params 100K --steps 1 --json
grep -q '"simd":"scalar"' "$tmp/out" || fail "ZINF_SIMD=scalar not honoured: $(cat "$tmp/out")"
expect 0 "$Z" adam-bench --params 1M --steps 2
grep -q "ratio to roofline" "$tmp/out" || fail "human output: $(cat "$tmp/out")"
for bad in "--params 0" "--params lots" "--grad-dtype fp8" "--out-dtype fp32" "--optimizer sgd" "--threads 0" \
  "--steps x" "--frobnicate" "extra"; do
  expect 2 "$Z" adam-bench $bad
done
grep -q "unexpected argument" "$tmp/err" || fail "stray argument not named: $(cat "$tmp/err")"
"$Z" adam-bench --optimizer sgd 2>&1 | grep -q '"sgd" is not adamw, adam, adagrad or lion' || fail "bad optimizer not named"

finish test_adam_bench
