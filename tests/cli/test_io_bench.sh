#!/usr/bin/env bash
# zinf io-bench: the JSON contract (one object per op), --validate, striping over two
# directories, usage errors (exit 2), IO errors (exit 1), and no test file left behind.
# timeout: 10 san=10 cuda-emu=10
set -u
Z=${ZINF_BUILD:-build}/zinf
tmp=$(mktemp -d /var/tmp/zinf-iobench-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/a" "$tmp/b"
. "$(dirname "$0")/lib.sh"

expect 0 "$Z" io-bench --path "$tmp/a" --path "$tmp/b" --size 8M --block-size 64K --queue-depth 4 \
  --threads 3 --loops 2 --validate --json
python3 - "$tmp/out" <<'PY' || fail "io-bench --json output: $(cat "$tmp/out")"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 2, lines
objs = [json.loads(l) for l in lines]
assert [o["op"] for o in objs] == ["write", "read"], objs
for o in objs:
    assert o["bytes"] == 8 << 20 and o["block_size"] == 65536 and o["queue_depth"] == 4, o
    assert o["threads"] == 3 and o["paths"] == 2 and o["direct"] is True and o["registered"] is True, o
    assert o["seconds"] > 0 and abs(o["bytes_per_s"] * o["seconds"] - o["bytes"]) < 1e-6 * o["bytes"], o
PY
expect 0 "$Z" io-bench --path "$tmp/a" --size 4M --read --loops 1 --json
[ "$(wc -l < "$tmp/out")" = 1 ] && grep -q '"op":"read"' "$tmp/out" || fail "--read alone: $(cat "$tmp/out")"
expect 0 "$Z" io-bench --path "$tmp/a" --size 4M --loops 1 --sqpoll --validate
grep -q '^write' "$tmp/out" && grep -q '^read' "$tmp/out" || fail "human table: $(cat "$tmp/out")"
[ -z "$(find "$tmp/a" "$tmp/b" -type f)" ] || fail "test files left behind: $(find "$tmp/a" "$tmp/b" -type f)"

expect 2 "$Z" io-bench --size 4M
grep -q -- "--path DIR (or --h2d / --d2h) is required" "$tmp/err" || fail "missing --path not explained"
expect 2 "$Z" io-bench --path "$tmp/a" --size 4Q
grep -q -- "--size" "$tmp/err" || fail "bad --size not named"
expect 2 "$Z" io-bench --path "$tmp/a" --block-size 5000
expect 2 "$Z" io-bench --path "$tmp/a" --queue-depth 0
paths=(); for i in $(seq 17); do paths+=(--path "$tmp/a"); done
expect 2 "$Z" io-bench "${paths[@]}" --size 4M
grep -q -- "at most 16" "$tmp/err" || fail "17 paths not refused clearly"
expect 1 "$Z" io-bench --path "$tmp/missing" --size 4M
grep -q "$tmp/missing" "$tmp/err" || fail "missing directory not named: $(cat "$tmp/err")"

# Interrupted mid-run: the test file goes with it.
"$Z" io-bench --path "$tmp/a" --size 512M --loops 50 > /dev/null 2>&1 &
pid=$!
seen=no
for _ in $(seq 100); do [ -n "$(find "$tmp/a" -type f)" ] && seen=yes && break; sleep 0.1; done
[ $seen = yes ] || fail "the long run never created its test file"
kill -INT $pid; wait $pid 2> /dev/null
[ -z "$(find "$tmp/a" -type f)" ] || fail "an interrupted run left $(find "$tmp/a" -type f)"

# The device link: one object per op and kind of host memory, on the suite's backend.
expect 0 "$Z" io-bench --h2d --d2h --size 8M --loops 2 --json
python3 - "$tmp/out" "${ZINF_TEST_BACKEND:-host}" <<'PY' || fail "io-bench --h2d --d2h --json: $(cat "$tmp/out")"
import json, sys
objs = [json.loads(l) for l in open(sys.argv[1]).read().splitlines()]
assert [(o["op"], o["pinned"]) for o in objs] == [("h2d", True), ("h2d", False), ("d2h", True), ("d2h", False)], objs
for o in objs:
    assert o["bytes"] == 8 << 20 and o["seconds"] > 0, o
    assert abs(o["bytes_per_s"] * o["seconds"] - o["bytes"]) < 1e-6 * o["bytes"], o
    assert o["backend"] == sys.argv[2] and o["memcpy"] == (sys.argv[2] == "host"), o
PY
expect 0 "$Z" io-bench --d2h --size 4M --loops 1
grep -q "host backend: a memcpy" "$tmp/out" || [ "${ZINF_TEST_BACKEND:-host}" = cuda ] || fail "d2h human: $(cat "$tmp/out")"
[ "$(grep -c '^d2h' "$tmp/out")" = 2 ] || fail "d2h human output has no pinned and pageable lines: $(cat "$tmp/out")"
expect 2 "$Z" io-bench --h2d --path "$tmp"
expect 2 "$Z" io-bench --d2h --read

finish test_io_bench
