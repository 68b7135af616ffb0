#!/usr/bin/env bash
# zinf estimate --time against the simulated device it models: for a GPT of 45 M
# parameters on a simulated H100 with this machine's drive and CPU (--measure), the
# predicted device compute and PCIe time per step match the sim run's busy times within
# 5% (the same kernels, timed by a dry run), and the predicted step is within 25% of the
# sim run's median step with the optimizer offloaded to cpu, and within a factor of 2
# with the optimizer (and at stage 3 the parameters) on nvme, at stages 2 and 3, and at
# stage 3 on cpu with offload_optimizer.ratio 0.5 (the first sub-groups, the tied
# embedding among them, updated on the device) and with the step that clips (nothing
# updated under the backward); each row's error is printed. The cpu rows are the planner's schedule of the update against
# the engine's: with the tied embedding (57% of this model) the first sub-group the
# next forward reads and the last whose gradients are final, the forward waits for its
# update every step; a planner that overlaps the whole update with the forward
# predicted -35% to -45% here, and an engine that began a speculative update once the
# backward was over (at stage 2 every sub-group is final at once) ran -30% to -35%
# from the plan. On 2026-11-28 they landed from -21% to +27% on the 2-core machine,
# mostly -5% to -20%: the same run's median swung from 0.058 to 0.076 s between
# passes, and --measure's Adam with it. The nvme rows are held only
# loosely: this VM's drive swings by half between passes (-51% to +172% on consecutive
# passes), so they catch a model that drops a term or overlaps what the engine
# serializes. A row outside is measured twice more before it fails. Under
# AddressSanitizer (SAN=1) host code slows unevenly (the measured kernels and the
# engine's differ), so there the step is reported and not held; everything else is.
# The table marks the fastest row that fits; bad --time arguments are refused by name.
# timeout: 325 san=270 cuda-emu=175
# alone: host: it times this machine's drive and CPU (--measure) against sim runs (under ASan no step is held)
# backend: host: it trains on the sim device, the same in every build
set -u
Z=${ZINF_BUILD:-build}/zinf
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
tokens "$tmp/train.tokens"
mkdir -p "$tmp/nvme"
held=1
ldd "$Z" | grep -q libasan && held=0

cat > "$tmp/cfg.json" <<JSON
{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 16, "steps": 5,
 "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
 "zero_optimization": {"stage": 3, "sub_group_size": 1e7,
   "offload_optimizer": {"device": "nvme", "nvme_path": "$tmp/nvme"},
   "offload_param": {"device": "nvme", "nvme_path": "$tmp/nvme", "max_in_cpu": 0}},
 "model": {"n_layer": 6, "n_head": 8, "n_embd": 512, "vocab_size": 50257, "block_size": 1024},
 "data": {"path": "$tmp/train.tokens", "format": "tokens-u16", "seq_len": 1024},
 "device": {"backend": "sim"}}
JSON

# compare STAGE OPTIMIZER PARAMS [RATIO [clips]]: predicted against the sim run; 0 when
# within tolerance. RATIO: offload_optimizer.ratio (default 1). clips: the plan's step
# that clips (gradient_clipping set) against a run that updates nothing under the
# backward, as a clipping step does (the sim computes no gradients, so never clips).
compare() {
  local sets=(--set zero_optimization.stage=$1 --set "zero_optimization.offload_optimizer.device=\"$2\""
              --set "zero_optimization.offload_param.device=\"$3\""
              --set zero_optimization.offload_optimizer.ratio=${4:-1}) plan=() run=()
  if [ "${5:-}" = clips ]; then
    plan=(--set gradient_clipping=1.0) run=(--set zero_optimization.offload_optimizer.super_offload=false)
  fi
  "$Z" estimate --config "$tmp/cfg.json" "${sets[@]}" "${plan[@]}" --time --measure --json > "$tmp/plan" \
    2> "$tmp/plan.err" || { echo "estimate: $(tail -c 300 "$tmp/plan.err")"; return 1; }
  "$Z" train "$tmp/cfg.json" "${sets[@]}" "${run[@]}" --json > "$tmp/run" 2> "$tmp/run.err" ||
    { echo "train: $(tail -c 300 "$tmp/run.err")"; return 1; }
  python3 - "$tmp/plan" "$tmp/run" "$1 $2 $3${4:+ ratio $4}${5:+ $5}" "$held" "${5:-}" <<'PY'
import json, sys
plan = [o for o in map(json.loads, open(sys.argv[1])) if o.get("plan")][0]
if sys.argv[5] == "clips":
    plan["step_seconds"] = plan["step_seconds_clipping"]
steps = [json.loads(l) for l in open(sys.argv[2])][:-1]
later = sorted(s["step_seconds"] for s in steps[1:])  # the first step has no update before it
median = later[len(later) // 2]
pb, sb = plan["busy_s"], steps[-1]["busy_s"]
for k in ("device_compute", "pcie_h2d", "pcie_d2h"):
    if abs(pb[k] - sb[k]) > 0.05 * sb[k] + 1e-5:
        print(f"{sys.argv[3]}: {k}: predicted {pb[k]:.6f} s, sim {sb[k]:.6f} s")
        sys.exit(1)
err = plan["step_seconds"] / median - 1
held = sys.argv[4] == "1"
print(f"{sys.argv[3]}: predicted {plan['step_seconds']:.3f} s ({plan['bound']}), sim median {median:.3f} s: {err:+.0%}"
      + ("" if held else " (not held: sanitizer build)"))
cpu = sys.argv[3].split()[1] == "cpu"
sys.exit(0 if not held or (abs(err) <= 0.25 if cpu else 0.5 <= 1 + err <= 2) else 2)
PY
}

rows=("3 nvme nvme" "3 nvme none" "3 cpu none" "3 cpu none 1 clips" "3 cpu none 0.5" "2 cpu none" "2 nvme none")
# The reduced matrix (ASan: lib.sh), where no step is held, takes each tier, stage and
# schedule once.
reduced && rows=("3 nvme nvme" "3 cpu none 1 clips" "3 cpu none 0.5" "2 nvme none")
for row in "${rows[@]}"; do
  out=$(compare $row) || out="$out; again: $(compare $row)" || out="$out; again: $(compare $row)" || fail "$out"
  echo "$out"
done

# The table: every row that fits gets a step time, the fastest is marked with its keys
# (no reduce_bucket_size: one rank with the optimizer on the device adds its gradients
# straight into the fp32 ones; the config's sub-groups kept), the keys of this config
# come after.
expect 0 "$Z" estimate --config "$tmp/cfg.json" --time --nvme-read 2 --nvme-write 2 --adam 1000
[ "$(grep -c '<- fastest' "$tmp/out")" = 1 ] || fail "no single fastest row: $(cat "$tmp/out")"
grep -q "^Fastest that fits: stage 0, optimizer none, params none" "$tmp/out" || fail "fastest: $(grep Fastest "$tmp/out")"
grep -q '^  set: "zero_optimization": {"stage": 0, "offload_optimizer": {"device": "none"}, "offload_param": {"device": "none"}, "sub_group_size": 10000000}$' "$tmp/out" ||
  fail "the fastest row's keys: $(grep -A3 Fastest "$tmp/out")"

# Over 2 ranks with 2 micro-batches a step (the schedule's buckets of one rank's block,
# its later micro-batches' additions): every row that fits has a finite step no shorter
# than its busiest resource.
expect 0 "$Z" estimate --config "$tmp/cfg.json" --gpus-per-node 2 --set train_batch_size=64 \
  --set gradient_accumulation_steps=2 --time --nvme-read 2 --nvme-write 2 --adam 1000 --json
python3 - "$tmp/out" <<'PY' || fail "2 ranks, 2 micro-batches: $(head -c 600 "$tmp/out")"
import json, math, sys
rows = [o for o in map(json.loads, open(sys.argv[1])) if "step_seconds" in o]
assert len(rows) >= 10, len(rows)
for o in rows:
    s = o["step_seconds"]
    assert math.isfinite(s) and s >= max(o["busy_s"].values()) > 0, o
PY

# Bad input.
expect 2 "$Z" estimate --config "$tmp/cfg.json" --time --gpu v100
grep -q -- '--gpu: "v100" is not a modeled GPU' "$tmp/err" || fail "--gpu v100: $(cat "$tmp/err")"
expect 2 "$Z" estimate --config "$tmp/cfg.json" --time --adam 1000
grep -q -- '--nvme-read and --nvme-write' "$tmp/err" || fail "nvme rows without rates: $(cat "$tmp/err")"
expect 2 "$Z" estimate --config "$tmp/cfg.json" --nvme-read 2
grep -q -- 'go with --time' "$tmp/err" || fail "--nvme-read without --time: $(cat "$tmp/err")"
expect 2 "$Z" estimate --config "$tmp/cfg.json" --time --nvme-read -1
grep -q -- '--nvme-read: "-1" is not a positive number' "$tmp/err" || fail "--nvme-read -1: $(cat "$tmp/err")"

finish test_plan_time
