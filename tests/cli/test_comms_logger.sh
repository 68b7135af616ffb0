#!/usr/bin/env bash
# DeepSpeed's comms_logger on zinf train: 2 ranks (mpirun) at stage 3 on the host path,
# 4 steps, steps_per_print 2. Rank 0 logs DeepSpeed's summary table at steps 2 and 4 and
# at the end; what the two tables differ by (count x message size, per kind, message
# size, ranks and path: mpi on the host, nccl too on a GPU) is what the step lines of
# steps 3 and 4 say rank 0 received
# (comm_bytes_intra): at 2 ranks each kind's bytes received are its message size (an
# all-gather's or reduce-scatter's block from the one other rank, an all-reduce's two
# halves). verbose logs each collective, as many as the last table counts; prof_all
# false with prof_ops ["all_gather"] logs all-gathers only; on a simulated device the
# path is "sim"; one rank logs nothing; an unknown kind is refused naming the key.
# timeout: 60 san=120 cuda-emu=90 san-cuda-emu=240
set -u
Z=${ZINF_BUILD:-build}/zinf
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
backend=${ZINF_TEST_BACKEND:-host}
tokens "$tmp/train.tokens"
mkdir -p "$tmp/swap"
cat > "$tmp/cfg.json" <<EOF
{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4, "steps_per_print": 2, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
   "offload_optimizer": {"device": "cpu"}},
 "model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 256, "block_size": 32},
 "data": {"path": "$tmp/train.tokens", "format": "tokens-u16", "seq_len": 32},
 "device": {"backend": "$backend"}, "comms_logger": {"enabled": true}}
EOF

# The tables rank 0 logged, as {when: {(kind, size text, ranks, path): count}}.
tables() {
  python3 - "$1" <<'PY'
import json, re, sys
out, when, kind = {}, None, None
for line in open(sys.argv[1]):
    if not line.startswith("zinf[rank 0]: info: "):
        continue
    line = line[len("zinf[rank 0]: info: "):]
    m = re.search(r"comms_logger: the collectives of this rank so far \((.*)\):", line)
    if m:
        when = m.group(1); out[when] = {}; continue
    if when is None or line.startswith("Comm. Op"):
        continue
    f = line.split()
    if len(f) == 1 and not line.startswith(" "):
        kind = f[0]
    elif line.startswith(" ") and len(f) == 9:
        out[when]["%s|%s %s|%s|%s" % (kind, f[0], f[1], f[7], f[8])] = int(f[2])
    elif not line.startswith("comm op:"):
        when = None
print(json.dumps(out))
PY
}
run 2 "$tmp/two" --steps 4
t=$(tables "$tmp/two.err")
python3 - "$t" "$tmp/two" "$backend" <<'PY' || fail "the tables against the step lines"
import json, sys
t = json.loads(sys.argv[1])
# the host path's collectives go through MPI; on a GPU the buckets and gathers through NCCL
paths = {"mpi"} if sys.argv[3] == "host" else {"mpi", "nccl"}
steps = [json.loads(l) for l in open(sys.argv[2]) if '"step"' in l and '"final"' not in l]
assert list(t) == ["step 2", "step 4", "the run"], list(t)
assert all(t["the run"].get(k, 0) >= n for k, n in t["step 4"].items()), "counts fell"
assert {k.split("|")[0] for k in t["step 4"]} == {"all_reduce", "all_gather", "reduce_scatter"}, t["step 4"]
assert {k.split("|")[3] for k in t["step 4"]} == paths and all(k.split("|")[2] == "2" for k in t["step 4"]), t["step 4"]
def size(k):
    v, u = k.split("|")[1].split()
    return float(v) * 1024 ** ["B", "KB", "MB", "GB"].index(u)
logged = sum((n - t["step 2"].get(k, 0)) * size(k) for k, n in t["step 4"].items())
received = sum(s["comm_bytes_intra"] for s in steps[2:4])
# sizes are shown rounded to 2 decimals of their unit: within 0.5%
assert abs(logged - received) <= 0.005 * received, (logged, received)
PY

run 2 "$tmp/verbose" --steps 4 --set comms_logger.verbose=true
n=$(grep -c "comm op: .* | time (ms): .* | msg size: .* | algbw (Gbps): .* | busbw (Gbps): .* | ranks: 2 | path: [a-z]*$" "$tmp/verbose.err")
total=$(tables "$tmp/verbose.err" | python3 -c "import json, sys; print(sum(json.load(sys.stdin)['the run'].values()))")
[ "$n" = "$total" ] && [ "$n" -gt 0 ] || fail "verbose: $n lines, the table counts $total"

run 2 "$tmp/gathers" --steps 4 --set comms_logger.prof_all=false --set 'comms_logger.prof_ops=["all_gather"]'
[ "$(tables "$tmp/gathers.err" | python3 -c "import json, sys; print(sorted({k.split('|')[0] for k in json.load(sys.stdin)['the run']}))")" = "['all_gather']" ] ||
  fail "prof_ops all_gather: $(grep -A8 'the run' "$tmp/gathers.err")"

run 2 "$tmp/sim" --steps 2 --set device.backend=sim
grep -q "^zinf\[rank 0\]: info:  .* 2       sim$" "$tmp/sim.err" || fail "sim: no row on the sim path: $(grep -A8 'the run' "$tmp/sim.err")"

run 1 "$tmp/one" --steps 2
grep -q "none (one rank: nothing moves)" "$tmp/one.err" || fail "one rank: $(grep -A3 comms_logger "$tmp/one.err")"

expect 2 "$Z" train "$tmp/cfg.json" --steps 1 --set 'comms_logger.prof_ops=["allreduce"]'
grep -q 'comms_logger.prof_ops: .*expected an array of "all_reduce", "all_gather"' "$tmp/err" || fail "bad op: $(cat "$tmp/err")"
finish test_comms_logger
