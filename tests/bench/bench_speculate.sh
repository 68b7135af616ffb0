#!/usr/bin/env bash
# What the update under the backward (super_offload) costs and saves when clipping
# fires never, sometimes and at every step. A GPT of about 17 M parameters on the host
# backend (real gradients, so real norms), stage 2, the optimizer on cpu in 2 M-element
# sub-groups, 12 steps; each regime trained with super_offload off and on. Per run the
# median s/step over the steps after the first two, the sub-groups updated under the
# backward and redone per step, the update's seconds under the backward and the
# forward's wait for the rest; then on/off. "Sometimes" clips at the median norm of the
# run that never clips, so about half its steps clip. The weights of the two runs of a
# regime must be identical (exit 1 if not): speculation never changes the result.
# On the host backend the device is one thread on these cores, and its compute is
# far longer than this model's update, so the seconds say little; the sub-groups
# updated under the backward and redone are what carries to a GPU machine.
set -eu
Z=${ZINF_BUILD:-build}/zinf
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
trap 'exit 130' INT TERM
[ -x "$Z" ] || { echo "bench_speculate: $Z is missing (make builds it)"; exit 1; }

python3 -c "import random, array, sys; r = random.Random(1); \
open(sys.argv[1], 'wb').write(array.array('H', (r.randrange(8192) for _ in range(1 << 18))).tobytes())" "$dir/t.tokens"
steps=12
cat > "$dir/c.json" <<JSON
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4, "seed": 1, "steps": $steps, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.1}},
 "zero_optimization": {"stage": 2, "sub_group_size": 2e6, "offload_optimizer": {"device": "cpu"}},
 "model": {"n_layer": 4, "n_head": 8, "n_embd": 512, "vocab_size": 8192, "block_size": 256},
 "data": {"path": "$dir/t.tokens", "format": "tokens-u16", "seq_len": 256},
 "device": {"backend": "host"}}
JSON

run() { # NAME CLIP SUPER_OFFLOAD
  "$Z" train "$dir/c.json" --json --set gradient_clipping="$2" \
    --set zero_optimization.offload_optimizer.super_offload="$3" > "$dir/$1" 2> "$dir/$1.err" || {
    echo "bench_speculate: the $1 run failed; stderr ends:"; tail -n 15 "$dir/$1.err" | sed 's/^/  /'; exit 1; }
}

echo "bench_speculate: host backend, GPT 4 x 512 (about 17 M parameters), stage 2, optimizer on cpu, $steps steps"
run never.off 0 false
clip=$(python3 -c "import json, statistics, sys; \
print('%.6g' % statistics.median(json.loads(l)['grad_norm'] for l in open(sys.argv[1]) if '\"final\"' not in l))" \
  "$dir/never.off")
printf '%-10s %-9s %8s %8s %10s %12s %11s %10s %7s\n' clipping super clipped s/step spec/step redone/step \
  "under bw s" "fw wait s" on/off
for regime in "never 0" "sometimes $clip" "always 1e-6"; do
  set -- $regime
  [ "$1" = never ] || run "$1.off" "$2" false
  run "$1.on" "$2" true
  PYTHONPATH="$here" python3 - "$dir/$1.off" "$dir/$1.on" "$1" "$2" <<'PY' || exit 1
import sys
import steps as st
runs = [st.load(p) for p in sys.argv[1:3]]
regime, clip = sys.argv[3], float(sys.argv[4])
off = st.med(runs[0][0], "step_seconds", 2)
for (rows, final), name in zip(runs, ("off", "on")):
    m = lambda k: st.med(rows, k, 2)  # noqa: E731
    per = lambda k: sum(r[k] for r in rows) / len(rows)  # noqa: E731
    clipped = sum(1 for r in rows if clip > 0 and r["grad_norm"] > clip)
    print("%-10s %-9s %5d/%-2d %8.3f %10.1f %12.1f %11.3f %10.3f %7s" % (
        regime if name == "off" else "", name, clipped, len(rows), m("step_seconds"), per("optim_speculated"),
        per("optim_rolled_back"), m("optim_backward_s"), m("wait_optim_s"),
        "" if name == "off" else "%.2f" % (m("step_seconds") / off)))
if runs[0][1]["weights_digest"] != runs[1][1]["weights_digest"]:
    print("bench_speculate: clipping %s: the weights differ with super_offload on (%s against %s)" % (
        regime, runs[1][1]["weights_digest"], runs[0][1]["weights_digest"]))
    sys.exit(1)
PY
done
echo "  sometimes clips at $clip, the median norm of the run that never clips; weights identical off and on in every regime"
