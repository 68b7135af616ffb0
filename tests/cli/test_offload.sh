#!/usr/bin/env bash
# The offload tiers: where the fp32 master weights and moments (and at stage 3 the
# 16-bit parameter slices) live must not change the numbers. For ZeRO stages 1-3 on 1
# and 2 ranks (mpirun -np 2), in fp32 (the output layer in chunks) and bf16 (at once),
# offload_optimizer cpu and nvme (and cpu with offload_optimizer.ratio 0.5), and at
# stage 3 offload_param cpu and nvme with every optimizer tier (and both on nvme with
# ratio 0.5), give the losses and weights digest of the same run with everything on
# the device, bit for bit, after 10 steps; the output layer in chunks trains within
# rounding of the plain run; so do nvme with each pipeline setting, several sub-groups per step, and the
# parameter pool at one buffer. The swap store's files are gone after the run; the
# plan says where everything lives; a missing nvme_path is made (its parent must
# exist), offloading at stage 0 is refused, and so is a plan past the pinned budget;
# --bind-cores-to-rank gives each of 2 ranks its own core. In the reduced matrix (ASan,
# the emulation: lib.sh) each dtype and stage trains on 1 or 2 ranks by turns, and the
# stage-3 parameter tiers by turns between the dtypes.
# timeout: 235 san=165 cuda-emu=260
set -u
Z=${ZINF_BUILD:-build}/zinf
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
tokens "$tmp/train.tokens"
backend=${ZINF_TEST_BACKEND:-host}
mkdir -p "$tmp/nvme"

# Sub-groups of at most 40000 elements: this model's partition is cut into several. With
# parameters on nvme, max_in_cpu keeps the first module (the embeddings) in host memory
# and every other slice goes through a pool of 3 buffers.
cat > "$tmp/cfg.json" <<JSON
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "seed": 5, "steps": 10, "steps_per_print": 10,
 "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.95], "weight_decay": 0.1}},
 "zero_optimization": {"stage": 1, "reduce_bucket_size": 60000, "sub_group_size": 40000,
   "offload_optimizer": {"device": "none", "nvme_path": "$tmp/nvme"},
   "offload_param": {"device": "none", "nvme_path": "$tmp/nvme", "max_in_cpu": 20000, "buffer_count": 3}},
 "model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 256, "block_size": 32},
 "data": {"path": "$tmp/train.tokens", "format": "tokens-u16", "seq_len": 32},
 "device": {"backend": "$backend"}}
JSON

OO=zero_optimization.offload_optimizer OP=zero_optimization.offload_param
before=$fails
i=0  # the reduced matrix (lib.sh) trains each dtype and stage on 1 or 2 ranks by turns
for dt in fp32 bf16; do
  dts=(--set bf16.enabled=$([ $dt = bf16 ] && echo true || echo false))
  # 2 x 32 tokens a micro-batch: chunks of 24, 24 and 16.
  [ $dt = fp32 ] && dts+=(--set memory.head_chunk_tokens=24)
  # Everything on the device gives these bits at every stage on 1 and 2 ranks (test_train).
  run 1 "$tmp/dev" "${dts[@]}"
  want=$(summary "$tmp/dev")
  for stage in 1 2 3; do
    i=$((i + 1))
    for np in $(ranks $i); do
      sets=("${dts[@]}" --set zero_optimization.stage=$stage)
      # A third word: offload_optimizer.ratio (half the sub-groups' states on the device).
      tiers=("cpu none" "nvme none" "cpu none 0.5")
      if [ $stage = 3 ]; then
        stage3=("none cpu" "cpu cpu" "nvme cpu" "none nvme" "cpu nvme" "nvme nvme" "nvme nvme 0.5")
        for k in "${!stage3[@]}"; do
          # The reduced matrix takes these by turns between the dtypes: fp32 the even ones.
          reduced && [ $((k % 2)) = $([ $dt = fp32 ] && echo 1 || echo 0) ] && continue
          tiers+=("${stage3[$k]}")
        done
      fi
      for t in "${tiers[@]}"; do
        read -r opt par ratio <<< "$t"
        run $np "$tmp/out" "${sets[@]}" --set $OO.device=$opt --set $OP.device=$par --set $OO.ratio=${ratio:-1}
        got=$(summary "$tmp/out")
        [ "$got" = "$want" ] ||
          fail "$dt stage $stage on $np ranks, optimizer on $opt${ratio:+ (ratio $ratio)}, parameters on $par: $got; on the device (stage 1, 1 rank): $want"
      done
    done
  done
done
[ $fails = $before ] && echo "tiers: optimizer on cpu and nvme, all of it or half its sub-groups (and at stage 3 parameters on cpu and nvme) bit-identical to the device, stages 1-3 x $(reduced && echo "1 or 2 ranks by turns" || echo "1, 2 ranks") x fp32 (head in chunks), bf16"

# The head in chunks against at once (fp32, stage 3, 2 ranks, both tiers on nvme): the
# head weight's gradient is summed in another order, so each step's loss stays within
# rounding of the plain run's, 1e-6 of it over 10 steps.
sets=(--set zero_optimization.stage=3 --set $OO.device=nvme --set $OP.device=nvme)
run 2 "$tmp/once" "${sets[@]}"
run 2 "$tmp/chunks" "${sets[@]}" --set memory.head_chunk_tokens=24
python3 - "$tmp/once" "$tmp/chunks" <<'PY' || fail "the head in chunks strays from the plain run (above)"
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(f)][:-1] for f in sys.argv[1:])
worst = max(abs(x - y) / x for x, y in zip(a, b))
print("head in chunks of 24 against at once: %d steps, worst loss rel diff %.2e" % (len(a), worst))
sys.exit(0 if len(a) == 10 and worst <= 1e-6 else 1)
PY

# Every pipeline setting, one sub-group per module or all in one, one parameter
# buffer, every slice on disk: the same bits.
sets=(--set bf16.enabled=true --set zero_optimization.stage=3 --set $OO.device=nvme --set $OP.device=nvme)
run 1 "$tmp/dev" --set bf16.enabled=true --set zero_optimization.stage=3
want=$(summary "$tmp/dev")
for v in "$OO.pipeline_read=false" "$OO.pipeline_write=false" "zero_optimization.sub_group_size=1" \
  "zero_optimization.sub_group_size=1000000000" "$OP.buffer_count=1" "$OP.max_in_cpu=0"; do
  run 1 "$tmp/p" "${sets[@]}" --set "$v"
  [ "$(summary "$tmp/p")" = "$want" ] || fail "nvme with $v: $(summary "$tmp/p"); on the device: $want"
done
run 1 "$tmp/p" "${sets[@]}" --set $OO.pipeline_read=false --set $OO.pipeline_write=false
[ "$(summary "$tmp/p")" = "$want" ] || fail "nvme without pipelining: $(summary "$tmp/p"); on the device: $want"

# The swap store is this run's: nothing is left under nvme_path.
[ -z "$(ls -A "$tmp/nvme")" ] || fail "left in nvme_path: $(ls -R "$tmp/nvme" | head)"

# The plan says where the states live; the step lines count the NVMe bytes.
expect 0 "$Z" train "$tmp/cfg.json" --steps 1 --set zero_optimization.stage=3 --set $OP.device=cpu
grep -q 'parameters offloaded to cpu: .* (its slices, in pinned host memory' "$tmp/out" ||
  fail "plan: $(grep -A4 '^plan' "$tmp/out")"
expect 0 "$Z" train "$tmp/cfg.json" --steps 2 --set zero_optimization.stage=3 --set $OO.device=nvme \
  --set $OP.device=nvme --set $OP.buffer_size=1000
grep -q 'optimizer offloaded to nvme: .* on NVMe, .* sub-groups of up to' "$tmp/out" ||
  fail "plan: $(grep -A6 '^plan' "$tmp/out")"
grep -q "parameters offloaded to nvme: .*: 72 KiB of the first 1 module in pinned host memory (max_in_cpu), .* on NVMe read ahead through 3 buffers of 136 KiB" "$tmp/out" ||
  fail "plan: $(grep -A6 '^plan' "$tmp/out")"
grep -q "buffer_size: raised from 1000 to 34816 elements, this rank's slice of h.0.mlp" "$tmp/err" || fail "buffer_size raised: $(cat "$tmp/err")"
grep -q "host: .* of which pinned .* of a .* budget.*NVMe: .* under $tmp/nvme\$" "$tmp/out" ||
  fail "plan's host line: $(grep -A6 '^plan' "$tmp/out")"
# With nothing offloaded a ratio has nothing to split: said, and the run goes on.
expect 0 "$Z" train "$tmp/cfg.json" --steps 1 --set zero_optimization.stage=3 --set $OO.ratio=0.5
grep -q 'zero_optimization.offload_optimizer.ratio is unused: zero_optimization.offload_optimizer.device is "none"' \
  "$tmp/err" || fail "a ratio with nothing offloaded: $(cat "$tmp/err")"
expect 0 "$Z" train "$tmp/cfg.json" --steps 1 --set zero_optimization.stage=3 --set $OO.device=cpu --set $OO.ratio=0.5
grep -q "offload_optimizer.ratio 0.5: the first [0-9]* sub-groups* ([0-9]* elements of the partition) keep" "$tmp/out" ||
  fail "plan with a ratio: $(grep -A6 '^plan' "$tmp/out")"
grep -q "offload_optimizer.ratio 0.5: the first [0-9]* of [0-9]* sub-groups" "$tmp/err" ||
  fail "no log line for the ratio: $(cat "$tmp/err")"
# One sub-group leaves the ratio nothing to split: said, with what to change.
expect 0 "$Z" train "$tmp/cfg.json" --steps 1 --set zero_optimization.stage=3 --set $OO.device=cpu --set $OO.ratio=0.5 \
  --set zero_optimization.sub_group_size=1000000000
grep -q "offload_optimizer.ratio 0.5 keeps none of the partition's 1 sub-group .* lower zero_optimization.sub_group_size" \
  "$tmp/err" || fail "one sub-group and a ratio: $(cat "$tmp/err")"
# CPU Adam takes DeepSpeed's cpuadam_cores_perc of the cores (all by default), one thread at least.
all=$(sed -n 's/^  CPU Adam: \([0-9]*\) threads* .*/\1/p' "$tmp/out")
[ -n "$all" ] || fail "plan: no CPU Adam threads: $(grep -A9 '^plan' "$tmp/out")"
expect 0 "$Z" train "$tmp/cfg.json" --steps 1 --set zero_optimization.stage=2 --set $OO.device=cpu \
  --set $OO.cpuadam_cores_perc=0.5
half=$((${all:-0} / 2))
[ "$half" -ge 1 ] || half=1
grep -q "^  CPU Adam: $half threads* (cpuadam_cores_perc 0.5 of this process's cores)\$" "$tmp/out" ||
  fail "cpuadam_cores_perc 0.5 of $all threads: $(grep 'CPU Adam' "$tmp/out")"
# The cores CPU Adam leaves take the NVMe workers (test_cpu_bind checks where they run).
if [ "${all:-0}" -ge 2 ]; then
  expect 0 "$Z" train "$tmp/cfg.json" --steps 1 --set zero_optimization.stage=2 --set $OO.device=nvme \
    --set $OO.cpuadam_cores_perc=0.5
  grep -q "NVMe workers on CPUs* [0-9,]*, beside CPU Adam's $half threads*\$" "$tmp/err" ||
    fail "NVMe workers beside CPU Adam: $(grep -i 'nvme workers' "$tmp/err")"
fi
# DeepSpeed's bind_cores_to_rank: two ranks on cores 0-1, one core each, one CPU Adam
# thread each; a bad core list is a usage error.
expect 0 mpirun -np 2 "$Z" train "$tmp/cfg.json" --steps 1 --set zero_optimization.stage=2 --set $OO.device=cpu \
  --bind-cores-to-rank --bind-core-list 0-1
grep -q "bind_cores_to_rank: local rank 0 of 2 on cores 0, memory on NUMA node 0\$" "$tmp/err" ||
  fail "bind_cores_to_rank: $(grep bind "$tmp/err")"
grep -q "^  CPU Adam: 1 thread (cpuadam_cores_perc 1 of this process's cores)\$" "$tmp/out" ||
  fail "bind_cores_to_rank: $(grep 'CPU Adam' "$tmp/out")"
expect 2 "$Z" train "$tmp/cfg.json" --bind-cores-to-rank --bind-core-list 1,0
grep -q 'core list "1,0": the ranges must be in ascending order' "$tmp/err" || fail "bad core list: $(cat "$tmp/err")"
run 1 "$tmp/j" --steps 2 --set $OO.device=nvme --set zero_optimization.stage=3 --set $OP.device=nvme
python3 - "$tmp/j" <<'PY' || fail "step times: $(head -c 600 "$tmp/j")"
import json, sys
s = json.loads(open(sys.argv[1]).readlines()[1])
assert s["nvme_bytes"] >= 3 * 4 * 100000, s  # three fp32 states of the partition
# Each step reads and writes the three states of the partition, reads the 16-bit slices
# on disk at least once and writes them once; the link was busy for it.
assert s["nvme_read_bytes"] >= 3 * 4 * 100000 and s["nvme_write_bytes"] >= 3 * 4 * 100000, s
assert s["nvme_read_s"] > 0 and s["nvme_write_s"] > 0, s
assert s["optim_s"] >= s["optim_io_wait_s"] > 0, s
assert s["wait_params_s"] >= s["wait_params_nvme_s"] >= 0 and s["wait_optim_s"] >= 0, s
PY
grep -q '^step 2/2 .* | waited for params .* s (nvme .* s) | optimizer .* s under the backward (0 sub-groups, 0 redone), .* s under the forward (waiting on nvme .* s), the forward waited .* s for it | nvme read .* GB/s, write .* GB/s$' "$tmp/j.err" ||
  fail "step line: $(grep '^step' "$tmp/j.err")"

# A missing nvme_path is made, as DeepSpeed makes its swap folders, but only in an
# existing parent: a missing parent is refused naming the key and the path.
expect 0 "$Z" train "$tmp/cfg.json" --steps 1 --set zero_optimization.stage=3 --set $OO.device=nvme \
  --set "$OO.nvme_path=$tmp/made" --set $OP.device=nvme --set "$OP.nvme_path=$tmp/made"
[ -d "$tmp/made" ] && [ -z "$(ls -A "$tmp/made")" ] || fail "nvme_path made and left empty: $(ls -R "$tmp/made" 2>&1 | head)"
expect 2 "$Z" train "$tmp/cfg.json" --set $OO.device=nvme --set "$OO.nvme_path=$tmp/missing/deeper"
grep -q "nvme_path.*$tmp/missing/deeper.*neither it nor its parent" "$tmp/err" || fail "missing nvme_path: $(cat "$tmp/err")"
expect 2 "$Z" train "$tmp/cfg.json" --set $OO.device=cpu --set zero_optimization.stage=0
grep -q 'offload_optimizer.device: "cpu" needs zero_optimization.stage 1, 2 or 3' "$tmp/err" ||
  fail "stage 0 offload: $(cat "$tmp/err")"

# A plan past the pinned budget stops before anything is allocated, saying what to change.
expect 1 "$Z" train "$tmp/cfg.json" --set $OO.device=cpu --set device.pinned_memory_limit=256K
grep -q '^  verdict: does not fit: .*, pinned .* of 256 KiB budgeted (.* over)' "$tmp/out" ||
  fail "pinned verdict: $(grep -A7 '^plan' "$tmp/out")"
grep -q 'the plan does not fit: pinned host memory .* is past the pinned budget, 256 KiB: raise device.pinned_memory_limit' \
  "$tmp/err" || fail "pinned budget: $(cat "$tmp/err")"
grep -q 'lower train_micro_batch_size_per_gpu' "$tmp/err" && fail "device advice for a host budget"
grep -q '^step' "$tmp/out" && fail "trained past the pinned budget"

finish test_offload
