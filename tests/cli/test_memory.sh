#!/usr/bin/env bash
# Activation checkpoints in host memory (activation_checkpointing.cpu_checkpointing):
# the same losses and weights digest as the checkpoints on the device, bit for bit,
# for a GPT of 5 layers (so the backward brings 3 of its 6 checkpoints back from host
# memory through 3 device slots) at stages 0-3, with the optimizer on the device, cpu
# and nvme and at stage 3 the parameters on cpu and nvme, each on 1 and 2 ranks, in
# fp32 and in bf16 with the output layer in chunks, 2 micro-batches accumulated a step. The plan
# counts the checkpoints in pinned host memory and the device keeps three of them; a
# pinned budget they do not fit is refused before step 1, naming them; the model-parallel
# partition_activations stays refused, saying why.
# timeout: 115 san=110 cuda-emu=145
set -u
Z=${ZINF_BUILD:-build}/zinf
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
tokens "$tmp/train.tokens"
backend=${ZINF_TEST_BACKEND:-host}
mkdir -p "$tmp/nvme"

cat > "$tmp/cfg.json" <<JSON
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "seed": 7, "steps": 6, "steps_per_print": 6,
 "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.95], "weight_decay": 0.1}},
 "zero_optimization": {"stage": 0, "reduce_bucket_size": 60000, "sub_group_size": 40000,
   "offload_optimizer": {"device": "none", "nvme_path": "$tmp/nvme"},
   "offload_param": {"device": "none", "nvme_path": "$tmp/nvme", "max_in_cpu": 20000, "buffer_count": 3}},
 "activation_checkpointing": {"cpu_checkpointing": false},
 "model": {"n_layer": 5, "n_head": 2, "n_embd": 64, "vocab_size": 256, "block_size": 32},
 "data": {"path": "$tmp/train.tokens", "format": "tokens-u16", "seq_len": 32},
 "device": {"backend": "$backend"}}
JSON

AC=activation_checkpointing.cpu_checkpointing OO=zero_optimization.offload_optimizer OP=zero_optimization.offload_param
before=$fails
# Checkpoints on the device at stage 0 give each dtype's bits on a world size: every
# stage and tier gives them (test_train, test_offload), but stage 1 over 2 ranks, whose
# own are checked there.
declare -A want
for dt in fp32 bf16; do
  for np in 1 2; do
    run $np "$tmp/dev" --set bf16.enabled=$([ $dt = bf16 ] && echo true || echo false) \
      $([ $dt = bf16 ] && echo --set memory.head_chunk_tokens=24)
    want[$dt.$np]=$(summary "$tmp/dev")
  done
done
# dtype, stage, optimizer tier, parameter tier: every stage, every tier once, on 1 and 2
# ranks (the reduced matrix, ASan and the emulation: lib.sh, on 1 or 2 by turns).
i=0
for c in "fp32 0 none none" "fp32 1 cpu none" "fp32 2 nvme none" "fp32 3 none none" "fp32 3 nvme nvme" \
  "bf16 2 cpu none" "bf16 3 cpu cpu"; do
  read -r dt stage opt par <<< "$c"
  sets=(--set bf16.enabled=$([ $dt = bf16 ] && echo true || echo false) --set zero_optimization.stage=$stage
        --set $OO.device=$opt --set $OP.device=$par)
  [ $dt = bf16 ] && sets+=(--set memory.head_chunk_tokens=24)
  i=$((i + 1))
  for np in $(ranks $i); do
    ref=${want[$dt.$np]} by="stage 0"
    # Stage 1 on 2 ranks sums each rank's micro-batches first: its own bits.
    if [ "$stage$np" = 12 ]; then
      run $np "$tmp/dev" "${sets[@]}"
      ref=$(summary "$tmp/dev") by="stage 1"
    fi
    run $np "$tmp/host" "${sets[@]}" --set $AC=true
    got=$(summary "$tmp/host")
    [ "$got" = "$ref" ] ||
      fail "$dt stage $stage on $np ranks, optimizer $opt, params $par: checkpoints in host memory $got; on the device ($by) $ref"
  done
done
[ $fails = $before ] && echo "cpu_checkpointing: bit-identical to the checkpoints on the device, stages 0-3, every tier, 1 and 2 ranks, fp32 and bf16 (head in chunks)"

# The plan: 6 checkpoints of 2 x 32 x 64 fp32 (16 KiB each) in pinned host memory, and
# three device slots instead of six buffers: 48 KiB less on the device.
expect 0 "$Z" estimate --config "$tmp/cfg.json" --json --set $AC=true
cp "$tmp/out" "$tmp/on.json"
expect 0 "$Z" estimate --config "$tmp/cfg.json" --json
python3 - "$tmp/on.json" "$tmp/out" <<'PY' || fail "the plan's checkpoints (above)"
import json, sys
on, off = (json.loads(open(f).readlines()[-1]) for f in sys.argv[1:])
assert on["pinned_bytes"] - off["pinned_bytes"] == 6 * 16384, (on["pinned_bytes"], off["pinned_bytes"])
assert off["activation_bytes"] - on["activation_bytes"] == 3 * 16384, (on["activation_bytes"], off["activation_bytes"])
# Each plan also shows the other way, the same figures.
for p in (on, off):
    assert p["device_peak_ckpt_device_bytes"] - p["device_peak_ckpt_host_bytes"] == 3 * 16384, p
assert on["activation_host_bytes"] == 6 * 16384 and off["activation_host_bytes"] == 0, (on, off)
assert on["device_peak_ckpt_host_bytes"] == on["device_peak_bytes"] == off["device_peak_ckpt_host_bytes"], (on, off)
PY
expect 0 "$Z" estimate --config "$tmp/cfg.json" --set $AC=true
grep -q '^    activation checkpoints in pinned host memory (activation_checkpointing.cpu_checkpointing): .*; on the device: ' "$tmp/out" ||
  fail "estimate's features: $(grep -A3 'memory-centric' "$tmp/out")"
expect 0 "$Z" train "$tmp/cfg.json" --steps 1 --set $AC=true
grep -q 'activation checkpoints 96 KiB' "$tmp/out" || fail "train's plan: $(grep 'per rank, host' "$tmp/out")"

# A pinned budget the checkpoints do not fit: refused before anything is pinned, naming them.
expect 1 "$Z" train "$tmp/cfg.json" --steps 1 --set $AC=true --set device.pinned_memory_limit=64KiB
grep -q 'the plan does not fit: pinned host memory .*the activation checkpoints take 96 KiB (activation_checkpointing.cpu_checkpointing false' "$tmp/err" ||
  fail "over the pinned budget: $(tail -n 2 "$tmp/err")"

# The section's presence turns the recompute on, so the key always has it; the
# model-parallel keys stay refused, saying why.
expect 0 "$Z" check "$tmp/cfg.json" --set $AC=true
expect 2 "$Z" check "$tmp/cfg.json" --set activation_checkpointing.partition_activations=true
grep -q 'partition_activations.*model parallelism' "$tmp/err" || fail "partition_activations: $(cat "$tmp/err")"

finish test_memory
