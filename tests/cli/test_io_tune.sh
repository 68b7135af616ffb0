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
# Text into a pipe: every setting's rows come as they are measured (the first while the
# run goes on), and with ZINF_PROGRESS=0 a line per setting counts them on stderr.
mkfifo "$tmp/pipe"
# (Four settings of 16 MiB: the last three take long enough that the first row arrives
# well before the end.)
ZINF_PROGRESS=0 "$Z" io-tune --path "$tmp/d" --size 16M --block-sizes 64K,128K,256K,1M --queue-depths 2 --threads 1 \
  > "$tmp/pipe" 2> "$tmp/tune.err" &
pid=$!
exec 3< "$tmp/pipe"
read -r -u 3 header && read -r -u 3 first || fail "io-tune wrote nothing into the pipe"
grep -q "settings measured: done" "$tmp/tune.err" && running=0 || running=1 # stderr is not buffered
cat <&3 > /dev/null
exec 3<&-
wait $pid || fail "io-tune into a pipe: exit $?"
[ "$running" = 1 ] || fail "the first row came only when io-tune ended (not flushed)"
grep -q "io-tune: settings measured: 1 of 4 (25%)" "$tmp/tune.err" && grep -q "io-tune: settings measured: done, 4 in" "$tmp/tune.err" ||
  fail "io-tune progress: $(cat "$tmp/tune.err")"
"$Z" io-tune --path "$tmp/d" --block-sizes 5000 > /dev/null 2>&1; [ $? = 2 ] || fail "--block-sizes 5000 must be a usage error"
"$Z" io-tune --path "$tmp/d" --queue-depths 8,,x > /dev/null 2>&1; [ $? = 2 ] || fail "bad list must be a usage error"

finish test_io_tune
