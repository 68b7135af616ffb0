#!/usr/bin/env bash
# DeepSpeed's flops_profiler on zinf train: the engine times every op of step
# profile_step. With output_file the table goes there: a header with the step's seconds
# (those of its --json step line), its tokens and model FLOPs (the step line's TFLOPS
# times its seconds), then per op and shape (detailed) the count, device and model ms;
# each op's count is what `--op-profile` counts per step over the later steps. Without
# output_file, rank 0 logs it; on 2 ranks too. An output_file that cannot be written
# stops the run naming it; --op-profile beside it is a usage error.
# timeout: 40 san=90 cuda-emu=60 san-cuda-emu=200
set -u
Z=${ZINF_BUILD:-build}/zinf
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
backend=${ZINF_TEST_BACKEND:-host}
tokens "$tmp/train.tokens"
cat > "$tmp/cfg.json" <<EOF
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
 "model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 256, "block_size": 32},
 "data": {"path": "$tmp/train.tokens", "format": "tokens-u16", "seq_len": 32},
 "device": {"backend": "$backend"},
 "flops_profiler": {"enabled": true, "profile_step": 2, "output_file": "$tmp/profile.txt"}}
EOF

run 1 "$tmp/one" --steps 3
python3 - "$tmp/profile.txt" "$tmp/one" <<'PY' || fail "the profile file: $(head -5 "$tmp/profile.txt")"
import json, re, sys
lines = open(sys.argv[1]).read().splitlines()
steps = [json.loads(l) for l in open(sys.argv[2]) if '"step"' in l and '"final"' not in l]
m = re.match(r"flops_profiler: step 2 on .* beside a modeled .*: ([0-9.]+) s, ([0-9]+) tokens, ([0-9.e+]+) model FLOPs, "
             r"([0-9.]+) TFLOPS", lines[0])
assert m, lines[0]
secs, tokens, flops = float(m.group(1)), int(m.group(2)), float(m.group(3))
s2 = steps[1]
assert abs(secs - s2["step_seconds"]) < 0.0006, (secs, s2["step_seconds"])
assert tokens == 8 * 32, tokens
assert abs(flops - s2["tflops"] * 1e12 * s2["step_seconds"]) <= 1e-3 * flops, (flops, s2)
assert lines[1].split()[:3] == ["op", "dtype", "shape"], lines[1]
rows = [l.split() for l in lines[2:-1]]
assert rows and lines[-1].startswith("ops (each timed)"), lines[-1]
counts = {}
for r in rows:  # op dtype m n k batch count device model ratio
    assert len(r) == 10, r
    counts[(r[0], r[1])] = counts.get((r[0], r[1]), 0) + int(r[6])
assert counts[("gemm", "bf16")] > 0, counts
open(sys.argv[1] + ".counts", "w").write(json.dumps(sorted((k[0], k[1], v) for k, v in counts.items())))
PY
# --op-profile's counts per step (steps 2-4) against the profile's of step 2
run 1 "$tmp/op" --steps 4 --op-profile --set flops_profiler.enabled=false
python3 - "$tmp/op.err" "$tmp/profile.txt.counts" <<'PY' || fail "counts against --op-profile"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
at = next(i for i, l in enumerate(lines) if l.startswith("op profile: per step"))
got = []
for l in lines[at + 2:]:
    f = l.split()
    if l.startswith("ops (each timed)") or len(f) != 6:
        break
    got.append((f[0], f[1], int(float(f[2]))))
assert sorted(got) == [tuple(x) for x in json.load(open(sys.argv[2]))], (sorted(got), open(sys.argv[2]).read())
PY

# The optimizer on the device: the embedding's update waits for the lookup, which gets
# the new weights of the rows it reads computed ahead (wte's and wpe's: two optim_rows a
# step), the other five modules' updates issued with the step. So with one micro-batch a
# step (held gradients), with two (fp32 gradients) and at stage 0 on 2 ranks (fp32
# gradients all-reduced); at stage 1 on 2 ranks each rank holds half of the table's rows,
# and all six updates go with the step.
for c in "1 8 0" "1 4 0" "2 4 0" "2 4 1"; do
  read -r np mb stage <<< "$c"
  run $np "$tmp/ahead$np$mb$stage" --steps 4 --op-profile --set flops_profiler.enabled=false \
    --set zero_optimization.stage=$stage --set zero_optimization.offload_optimizer.device=none \
    --set train_micro_batch_size_per_gpu=$mb
  f=$tmp/ahead$np$mb$stage.err
  rows=$(awk '$1 == "optim_rows" {print $3}' "$f") all=$(awk '$1 == "optim" {print $3}' "$f")
  want=$([ $stage = 0 ] && echo "2 6" || echo " 6")
  [ "$rows $all" = "$want" ] || fail "$np rank(s), micro-batch $mb, stage $stage: $rows optim_rows and $all optim a step, want $want"
done

run 2 "$tmp/two" --steps 2 --set flops_profiler.output_file=null --set flops_profiler.detailed=false
grep -q "^zinf\[rank 0\]: info: flops_profiler: step 2 on " "$tmp/two.err" || fail "2 ranks: no profile logged"
grep -q "^zinf\[rank 0\]: info: gemm  *bf16  " "$tmp/two.err" || fail "2 ranks: no gemm row: $(grep -A3 flops_profiler "$tmp/two.err")"
[ "$(grep -c "flops_profiler: step" "$tmp/two.err")" = 1 ] || fail "2 ranks: more than rank 0 logged"

expect 2 "$Z" train "$tmp/cfg.json" --steps 2 --op-profile
grep -q -- "--op-profile and flops_profiler.enabled both profile the device's ops; use one" "$tmp/err" ||
  fail "--op-profile with flops_profiler: $(cat "$tmp/err")"
expect 1 "$Z" train "$tmp/cfg.json" --steps 2 --set flops_profiler.output_file="$tmp/no/such/dir/p.txt"
grep -q "flops_profiler: output_file $tmp/no/such/dir/p.txt" "$tmp/err" || fail "unwritable file: $(cat "$tmp/err")"
finish test_flops_profiler
