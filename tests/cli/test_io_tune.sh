#!/usr/bin/env bash
# zinf io-tune: a small grid measured, the best aio section printed last in a form the
# config loader accepts, and no test file left behind.
# timeout: 10 san=10 cuda-emu=10
set -u
Z=${ZINF_BUILD:-build}/zinf
tmp=$(mktemp -d /var/tmp/zinf-iotune-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/d"
. "$(dirname "$0")/lib.sh"

"$Z" io-tune --path "$tmp/d" --size 4M --block-sizes 64K,1M --queue-depths 2,8 --threads 1,2 --json \
  > "$tmp/out" 2> "$tmp/err" || fail "io-tune exited $?: $(cat "$tmp/err")"
python3 - "$tmp/out" "$tmp/cfg.json" <<'PY' || fail "io-tune output: $(cat "$tmp/out")"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]).read().splitlines()]
points = lines[:-1]
assert len(points) == 2 * 2 * 2 * 2, len(points)            # grid x (write, read)
assert {(p["block_size"], p["queue_depth"], p["threads"]) for p in points} == \
    {(b, q, t) for b in (65536, 1 << 20) for q in (2, 8) for t in (1, 2)}
best = lines[-1]["aio"]
# the chosen point is the one with the least write + read time
totals = {}
for p in points:
    k = (p["block_size"], p["queue_depth"], p["threads"])
    totals[k] = totals.get(k, 0) + p["seconds"]
assert (best["block_size"], best["queue_depth"], best["intra_op_parallelism"]) == min(totals, key=totals.get), best
cfg = {"train_batch_size": 1}
cfg.update(lines[-1])
json.dump(cfg, open(sys.argv[2], "w"))
PY
"$Z" check "$tmp/cfg.json" > /dev/null 2> "$tmp/err" || fail "zinf check refuses io-tune's section: $(cat "$tmp/err")"
[ -z "$(find "$tmp/d" -type f)" ] || fail "test files left behind: $(find "$tmp/d" -type f)"
"$Z" io-tune --path "$tmp/d" --block-sizes 5000 > /dev/null 2>&1; [ $? = 2 ] || fail "--block-sizes 5000 must be a usage error"
"$Z" io-tune --path "$tmp/d" --queue-depths 8,,x > /dev/null 2>&1; [ $? = 2 ] || fail "bad list must be a usage error"

finish test_io_tune
