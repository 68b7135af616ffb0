#!/usr/bin/env bash
# zinf train, the core guarantee: the same model, data and seed trained for 10 steps
# with ZeRO stage 0, 1, 2 and 3, each on 1 rank and on 2 (mpirun -np 2), in fp32 and
# bf16, gives the single-rank stage-0 losses and weights digest bit for bit. The runs
# are built so that the reduction order is the same: the batch of 4 is 2 micro-batches
# of 2 accumulated on one rank, or one micro-batch of 2 per rank, and every gradient
# element is summed as micro-batch 0 + micro-batch 1 either way. Where the order
# differs (micro-batches of 1 on 2 ranks: ((g0 + g1) + (g2 + g3)) against one product
# over 2 sequences; stage 1 over 2 ranks and 2 micro-batches, which sums each rank's
# micro-batches first) fp32 losses agree within a relative 1e-5 after 10 steps: a few
# ulps per sum, carried through Adam; stage 1's tiers agree bit for bit. Buckets smaller than a module split it, with the same
# bits. Also: the --json and log contracts, config and data errors, and that a killed
# or stopped rank ends the job with an error within 60 s.
# timeout: 105 san=215 cuda-emu=270
set -u
Z=${ZINF_BUILD:-build}/zinf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
tokens "$tmp/train.tokens"
backend=${ZINF_TEST_BACKEND:-host}

cat > "$tmp/cfg.json" <<JSON
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "seed": 3, "steps": 10, "steps_per_print": 5,
 "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.95], "weight_decay": 0.1}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 4, "warmup_type": "linear", "warmup_max_lr": 3e-3}},
 "zero_optimization": {"stage": 0, "reduce_bucket_size": 60000, "overlap_comm": true,
   "stage3_param_persistence_threshold": 0, "stage3_prefetch_bucket_size": 30000},
 "model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 256, "block_size": 32},
 "data": {"path": "$tmp/train.tokens", "format": "tokens-u16", "seq_len": 32},
 "device": {"backend": "$backend"}}
JSON

# The reduced matrix (ASan, the emulation: lib.sh) trains each stage on 1 or 2 ranks by
# turns, the other in the other dtype (stage 0 on 2: on 1 it is the reference).
for dt in fp32 bf16; do
  sets=(--set bf16.enabled=$([ $dt = bf16 ] && echo true || echo false))
  run 1 "$tmp/ref.$dt" "${sets[@]}"
  want=$(summary "$tmp/ref.$dt")
  for stage in 0 1 2 3; do
    nps=$(ranks $((stage + $([ $dt = bf16 ] && echo 1 || echo 0))))
    [ $stage = 0 ] && nps=2
    for np in $nps; do
      run $np "$tmp/s$stage.$np.$dt" "${sets[@]}" --set zero_optimization.stage=$stage
      got=$(summary "$tmp/s$stage.$np.$dt")
      [ "$got" = "$want" ] || fail "$dt stage $stage on $np ranks: $got; stage 0 on 1 rank: $want"
    done
  done
done
echo "equivalence: stages 0-3 x $(reduced && echo "1 or 2 ranks by turns" || echo "1, 2 ranks") x fp32, bf16 bit-identical to stage 0 on 1 rank"

# cuDNN's attention (under the emulation, its emulated backend API) through the config:
# the runs repeat bit for bit across stages and ranks as zinf's own attention's do.
if [ -n "${ZINF_TEST_CUDA_EMU:-}" ]; then
  export CUDA_EMU_CUDNN=1
  run 1 "$tmp/cudnn.1" --set bf16.enabled=true --set device.attention=cudnn
  run 2 "$tmp/cudnn.3.2" --set bf16.enabled=true --set device.attention=cudnn --set zero_optimization.stage=3
  unset CUDA_EMU_CUDNN
  [ "$(summary "$tmp/cudnn.3.2")" = "$(summary "$tmp/cudnn.1")" ] ||
    fail "cuDNN's attention, stage 3 on 2 ranks: $(summary "$tmp/cudnn.3.2"); stage 0 on 1 rank: $(summary "$tmp/cudnn.1")"
  python3 - "$tmp/cudnn.1" "$tmp/ref.bf16" <<'PY' || fail "cuDNN's attention drifts from zinf's in bf16"
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p)][:-1] for p in sys.argv[1:])
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
print(f"cuDNN vs zinf attention, bf16 losses: worst relative difference {worst:.2e}")
sys.exit(0 if worst < 2e-2 else 1)
PY
fi

# Buckets of 1000 elements split every module: the same bits, and the plan's gradient
# buckets are 2 x 1000 fp32 (the 16 K-element embedding no longer sets their size).
run 2 "$tmp/split" --set zero_optimization.stage=3 --set zero_optimization.reduce_bucket_size=1000
[ "$(summary "$tmp/split")" = "$(summary "$tmp/ref.fp32")" ] ||
  fail "buckets of 1000 on 2 ranks at stage 3: $(summary "$tmp/split"); stage 0 on 1 rank: $(summary "$tmp/ref.fp32")"
grep -q 'device: .* activations, 7.8 KiB gradient buckets' "$tmp/split.err" ||
  fail "buckets of 1000: $(grep 'gradient buckets' "$tmp/split.err" | head -1)"

# A different reduction order: within a stated tolerance.
run 2 "$tmp/micro1" --set train_micro_batch_size_per_gpu=1 --set zero_optimization.stage=2
python3 - "$tmp/micro1" "$tmp/ref.fp32" <<'PY' || fail "micro-batches of 1 on 2 ranks drift from stage 0"
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])][:-1]
b = [json.loads(l)["loss"] for l in open(sys.argv[2])][:-1]
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
print(f"micro-batches of 1 on 2 ranks: losses within {worst:.3g} (relative) of stage 0")
assert worst < 1e-5, worst
PY

# Stage 1 over 2 ranks and 2 micro-batches each sums a rank's micro-batches before the
# ranks (stage 2 the ranks of each micro-batch first): within rounding of stage 2, and
# its tiers bit for bit alike. The gradients cross once per step: stage 2's traffic
# less one reduce-scatter of the slices.
S1=(--set train_batch_size=8 --set zero_optimization.stage=1)
run 2 "$tmp/s1.gas2" "${S1[@]}"
run 2 "$tmp/s1.gas2.cpu" "${S1[@]}" --set zero_optimization.offload_optimizer.device=cpu
run 2 "$tmp/s2.gas2" "${S1[@]}" --set zero_optimization.stage=2
[ "$(summary "$tmp/s1.gas2.cpu")" = "$(summary "$tmp/s1.gas2")" ] ||
  fail "stage 1, 2 micro-batches on 2 ranks: optimizer on cpu $(summary "$tmp/s1.gas2.cpu"); on the device $(summary "$tmp/s1.gas2")"
python3 - "$tmp/s1.gas2" "$tmp/s2.gas2" <<'PY' || fail "stage 1 over 2 micro-batches on 2 ranks against stage 2"
import json, sys
a, b = ([json.loads(l) for l in open(f)][:-1] for f in sys.argv[1:])
worst = max(abs(x["loss"] - y["loss"]) / abs(y["loss"]) for x, y in zip(a, b))
print(f"stage 1, 2 micro-batches on 2 ranks: losses within {worst:.3g} (relative) of stage 2")
assert 0 < worst < 1e-5, worst  # 0: the same order as stage 2's
# The slices' sums: the partition's fp32 elements, received once instead of twice.
slices = (b[1]["comm_bytes_intra"] - a[1]["comm_bytes_intra"]) / 4
assert slices > 0 and all(x["comm_bytes_intra"] + 4 * slices == y["comm_bytes_intra"] for x, y in zip(a[1:], b[1:])), (a, b)
PY

# The --json contract: every step line and the final one; the loss falls.
python3 - "$tmp/s3.2.bf16" <<'PY' || fail "--json lines: $(head -c 600 "$tmp/s3.2.bf16")"
import json, re, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert len(lines) == 11, len(lines)
for i, s in enumerate(lines[:-1]):
    for k in ("step", "loss", "lr", "grad_norm", "step_seconds", "tokens_per_s", "tflops", "loss_scale", "skipped",
              "device_bytes", "pinned_bytes", "nvme_bytes"):
        assert k in s, (k, s)
    assert s["step"] == i + 1 and s["skipped"] is False and s["loss_scale"] == 1, s
# WarmupLR, linear over 4 steps from 0 to 3e-3 (DeepSpeed's iteration count starts at -1).
want = [0, 0, 7.5e-4, 1.5e-3, 2.25e-3, 3e-3, 3e-3]
assert all(abs(s["lr"] - w) <= 1e-12 * w for s, w in zip(lines, want)), [s["lr"] for s in lines[:7]]
f = lines[-1]
assert f["final"] is True and f["steps"] == 10 and re.fullmatch(r"[0-9a-f]{16}", f["weights_digest"]), f
assert 0 < f["gathered_peak_bytes"] < f["device_peak_bytes"], f  # stage 3 gathered modules, never all at once
assert lines[9]["loss"] < lines[0]["loss"] - 0.5, (lines[0]["loss"], lines[9]["loss"])
PY

# Human output: the plan before step 1, a line every steps_per_print steps.
expect 0 "$Z" train "$tmp/cfg.json" --set zero_optimization.stage=3
grep -q '^plan: GPT n_layer 2 .*ZeRO stage 3 over 1 rank' "$tmp/out" || fail "no plan line: $(head -3 "$tmp/out")"
grep -q 'parameters on the device: .* (its slices' "$tmp/out" || fail "the plan does not say stage 3 keeps slices"
[ "$(grep -c '^step ' "$tmp/out")" = 2 ] || fail "want log lines at steps 5 and 10: $(cat "$tmp/out")"
grep -q '^step 10/10 | loss [0-9.]* | lr .* tok/s | .* TFLOPS | device ' "$tmp/out" || fail "log line: $(cat "$tmp/out")"

# The README's main job starts (its corpus is made by `make tests` too).
expect 0 "$Z" train examples/gpt-bytes-zero3.json --steps 2 --set steps_per_print=1
grep -q '^step 2/2 | loss' "$tmp/out" || fail "the README's main job: $(tail -c 400 "$tmp/out") $(tail -c 400 "$tmp/err")"

# Errors: usage and config problems exit 2 naming the key or the file.
expect 2 "$Z" train "$tmp/cfg.json" --set steps=null
grep -q 'steps' "$tmp/err" || fail "no steps: $(cat "$tmp/err")"
expect 2 "$Z" train "$tmp/cfg.json" --set zero_optimization.stage=4
grep -q 'zero_optimization.stage' "$tmp/err" || fail "stage 4: $(cat "$tmp/err")"
expect 2 "$Z" train "$tmp/cfg.json" --steps 0
expect 2 "$Z" train
expect 2 "$Z" train "$tmp/cfg.json" --set data.path=/nonexistent/tokens
grep -q '/nonexistent/tokens' "$tmp/err" || fail "missing data: $(cat "$tmp/err")"
expect 2 "$Z" train "$tmp/cfg.json" --set data.seq_len=64
grep -q 'seq_len' "$tmp/err" || fail "seq_len beyond block_size: $(cat "$tmp/err")"

# What the engine refuses at start: exit 1 with what to change.
ZINF_COMM_TIMEOUT=abc expect 1 "$Z" train "$tmp/cfg.json"
grep -q 'ZINF_COMM_TIMEOUT: "abc"' "$tmp/err" || fail "bad timeout knob: $(cat "$tmp/err")"
expect 1 "$Z" train "$tmp/cfg.json" --set device.memory_limit=1M
grep -q 'does not fit.*lower train_micro_batch_size_per_gpu' "$tmp/err" || fail "out of memory: $(cat "$tmp/err")"
expect 2 "$Z" train "$tmp/cfg.json" --set device.attention=flash
grep -q 'device.attention' "$tmp/err" || fail "an unknown attention: $(cat "$tmp/err")"
# The host backend has its own attention; the emulated CUDA device has no cuDNN here.
expect 1 "$Z" train "$tmp/cfg.json" --set device.attention=cudnn
grep -q 'device.attention is "cudnn"' "$tmp/err" || fail "cudnn without cuDNN: $(cat "$tmp/err")"

# Under the CUDA emulation: a device whose blocks hold fewer threads than zinf's
# kernels ask for refuses their launches (cudaErrorInvalidConfiguration), and zinf
# says which launch failed and why instead of training on garbage.
if [ -n "${ZINF_TEST_CUDA_EMU:-}" ]; then
  CUDA_EMU_MAX_THREADS_PER_BLOCK=128 expect 1 "$Z" train "$tmp/cfg.json"
  grep -q 'cuda: [a-z_]*_kernel launch failed (gpu/cuda/[a-z]*\.cu:[0-9]*): invalid configuration argument' "$tmp/err" ||
    fail "a refused launch: $(tail -c 400 "$tmp/err")"
fi

# A rank that dies (SIGKILL) or stops (SIGSTOP, found by the collectives' timeout):
# the job ends non-zero with a message within 60 s.
for sig in KILL STOP; do
  # The previous run's output must not count as this one's first step: the job starts in
  # the background, and a rank stopped before it is in training stops the other inside
  # MPI_Init, which has no deadline.
  rm -f "$tmp/k.out"
  ZINF_COMM_TIMEOUT=5 mpirun -np 2 -x ZINF_COMM_TIMEOUT "$Z" train "$tmp/cfg.json" --json --steps 1000000 \
    > "$tmp/k.out" 2> "$tmp/k.err" &
  job=$!
  for _ in $(seq 600); do [ -s "$tmp/k.out" ] && break; sleep 0.1; done
  for p in $(pgrep -f "$Z train $tmp/cfg.json"); do
    if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1'; then kill -$sig "$p"; fi
  done
  start=$SECONDS
  ( sleep 60; kill -9 $job 2>/dev/null ) & guard=$!
  wait $job; rc=$?
  kill $guard 2>/dev/null
  took=$((SECONDS - start))
  [ $rc != 0 ] && [ $took -lt 60 ] || fail "SIG$sig on rank 1: exit $rc after $took s"
  [ -s "$tmp/k.err" ] || fail "SIG$sig on rank 1: no message"
  echo "SIG$sig on rank 1: exit $rc after $took s: $(grep -m1 -iE 'error|abort|signal|exited' "$tmp/k.err")"
  pkill -9 -f "$Z train $tmp/cfg.json" 2>/dev/null
done

finish test_train
