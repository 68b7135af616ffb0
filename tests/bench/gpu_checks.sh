#!/usr/bin/env bash
# What a session lent a CUDA device runs first, in one command of at most 9.8 minutes
# (each step under its own time limit, so that one that hangs costs only its share):
#   1. the card, the driver and the commit (machine.txt);
#   2. the CUDA backend's kernel and model tests: test_gpu_ops (the tensor-core
#      attention, the padded head's cross-entropy, the GELU and residual epilogues, the
#      norms against double references), test_model_gpt2 and test_model_llama (against
#      transformers), test_gpu_device;
#   3. every op of GPT-2 124M, GPT-2 large and Llama-3.2-1B's shape (bf16, 8 x 1024)
#      timed beside the sim's model of it (zinf device-bench --shapes --json): the
#      fractions docs/performance.md's sim table takes; each again with cuDNN's
#      attention;
#   4. Llama-3.2-1B's training step, each op timed alone (zinf train --op-profile);
#   5. tests/bench/bench_gpu_compute.sh: zinf's tokens/s and model TFLOPS on the same
#      three models, with zinf's attention and with cuDNN's, and PyTorch's where torch
#      with CUDA is importable by $ZINF_PY (default: python3 on the PATH).
# cuDNN comes from the nvidia-cudnn wheel beside that torch, put on LD_LIBRARY_PATH, so
# that device.attention "cudnn" (the cuDNN test cases of test_gpu_ops, the cuDNN rows)
# runs; without it those say cuDNN did not load.
# With --variants first (before --offload, if both), then: every op of GPT-2 124M and
#   Llama-3.2-1B (cuDNN's attention) under this build and each CLI that
#   tests/bench/gpu_variants.sh built at other commits into $ZINF_BUILD/variants (packed by
#   gpu_pack.sh), twice each, in one run; gpu_variants.py's table in variants.txt. Step 5
#   then trains each model under each of those CLIs too (cuDNN's attention), a row each:
#   --trainers torch,zinf-cudnn leaves zinf's own attention out to make room for them.
# With --offload first, the offloaded step's measurements instead of 3-5 (the tests first):
#   tests/bench/bench_gpu_peers.sh: GPT-2 large at 8 x 1024 under FSDP2's
#   CPUOffloadPolicy (torch alone), torchao's CPUOffloadOptimizer and DeepSpeed ZeRO-3
#   with the optimizer on cpu (where $ZINF_PY imports them: carry them as wheels), zinf
#   at stage 3 with the optimizer on cpu (all of it, and offload_optimizer.ratio 0.5) and
#   at stage 0; zinf's rows with the planner's step for the same config, where the
#   update ran (under the backward, after it) and the CPU's Adam alone; then zinf's rows
#   again with no clipping (--clip 0).
# Carry $ZINF_BUILD/gpu-pack.tar.xz (tests/bench/gpu_pack.sh makes it: the programs, the
# fixtures and the shared libraries a bare GPU machine lacks); it is unpacked here when
# present. The logs gather under $ZINF_BUILD/gpu-checks; where $OUT is set (the machine
# hands back what is under it, a few files at most) it gets summary.txt and the logs as
# one gpu-checks.tar.gz. Record the figures in docs/performance.md with the date, the
# commit and the machine. With no CUDA device it says so and succeeds.
set -u
variants= offload=
[ "${1:-}" = --variants ] && variants=1 && shift
[ "${1:-}" = --offload ] && offload=1 && shift
B=${ZINF_BUILD:-build}
out=$B/gpu-checks
if ! gpus=$(nvidia-smi -L 2> /dev/null) || ! grep -q '^GPU' <<< "$gpus"; then
  echo "gpu_checks: no CUDA device here: skipped (run it on a GPU machine)"
  exit 0
fi
if [ -f "$B/gpu-pack.tar.xz" ]; then
  tar -xJf "$B/gpu-pack.tar.xz" -C "$B" || { echo "gpu_checks: $B/gpu-pack.tar.xz does not unpack"; exit 1; }
  export LD_LIBRARY_PATH=$PWD/$B/gpu-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
export ZINF_PY=${ZINF_PY:-$(command -v python3)}
cudnn=
if wheel=$("$ZINF_PY" -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2> /dev/null) &&
  [ -d "$wheel/lib" ]; then
  cudnn=$wheel/lib
  export LD_LIBRARY_PATH=$cudnn${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
rm -rf "$out"
mkdir -p "$out"
summary=$out/summary.txt
: > "$summary"

# step NAME LIMIT COMMAND...: runs it with its output in NAME.log, its status in the summary.
step() {
  local name=$1 limit=$2 t0=$SECONDS rc
  shift 2
  timeout -k 5 "$limit" "$@" > "$out/$name.log" 2>&1
  rc=$?
  local what=ok
  [ $rc = 0 ] || what="failed (exit $rc)"
  [ $rc = 124 ] && what="past its $limit s"
  echo "$name: $what, $((SECONDS - t0)) s" | tee -a "$summary"
}

{
  date -u +%Y-%m-%dT%H:%M:%SZ
  # The pack's commit: a copied tree's git metadata may be an older one's.
  cat "$B/gpu-pack-commit.txt" 2> /dev/null || git describe --always --dirty 2> /dev/null
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
  nproc
  echo "cuDNN: ${cudnn:-none beside the torch of $ZINF_PY}"
} > "$out/machine.txt"

# cuDNN's own warnings and errors in the test logs: why an engine refused a graph.
step tests 60 env BUILD="$B" BACKEND=cuda CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr \
  tests/run -j 2 test_gpu_ops test_model_gpt2 test_model_llama test_gpu_device
cp -r "$B/test-logs" "$out/test-logs" 2> /dev/null

# Each op under every build, the builds in turn, twice: the same card in the same minute.
variant_ops() {
  local configs builds=("this=$B/zinf") v m rep
  for v in "$B"/variants/zinf-*; do [ -x "$v" ] && builds+=("${v##*/zinf-}=$v"); done
  [ ${#builds[@]} -gt 1 ] || { echo "variants: none in $B/variants (tests/bench/gpu_variants.sh builds them)" | tee -a "$summary"; return; }
  configs=$(mktemp -d)
  python3 tests/bench/gpu_compute.py --write-configs "$configs" > /dev/null
  mkdir -p "$out/variants"
  for rep in 1 2; do
    for v in "${builds[@]}"; do
      for m in gpt2 llama-1b; do
        timeout -k 5 30 "${v#*=}" device-bench --config "$configs/$m.json" --shapes --json \
          --set device.attention=cudnn > "$out/variants/${v%%=*}-$m-$rep.json" 2> "$out/variants/${v%%=*}-$m-$rep.log" ||
          echo "variants: ${v%%=*} on $m failed (exit $?)" | tee -a "$summary"
      done
    done
  done
  rm -rf "$configs"
  python3 tests/bench/gpu_variants.py "$out/variants" > "$out/variants.txt" 2>&1
  echo "variants: ${#builds[@]} builds, each op twice: variants.txt" | tee -a "$summary"
  cat "$out/variants.txt"
}

# The kernels: each op beside the sim's model, Llama's step op by op, tokens/s against PyTorch.
kernels() {
  local configs
  configs=$(mktemp -d) # with their token files, too large to hand back
  python3 tests/bench/gpu_compute.py --write-configs "$configs" > /dev/null ||
    echo "configs: gpu_compute.py --write-configs failed" | tee -a "$summary"
  for m in gpt2 gpt2-large llama-1b; do
    step "device-bench-$m" 15 "$B/zinf" device-bench --config "$configs/$m.json" --shapes --json
    step "device-bench-$m-cudnn" 15 "$B/zinf" device-bench --config "$configs/$m.json" --shapes --json \
      --set device.attention=cudnn
  done
  # Where Llama's step goes beyond its pass (50 of 150 ms on an H100 with cuDNN's
  # attention, 2026-11-26): every op of 3 steps after the first, timed alone. Most of the
  # limit is the host's initialization of 1.2 B parameters.
  step op-profile-llama-1b 120 "$B/zinf" train "$configs/llama-1b.json" --steps 4 --op-profile \
    --set device.attention=cudnn
  # Arguments go to the bench: --trainers zinf leaves PyTorch out (its compiles take most
  # of the 310 s), --models gpt2 one model.
  step bench-gpu-compute 310 env ZINF_BUILD="$B" tests/bench/bench_gpu_compute.sh \
    ${variants:+--variants "$B/variants"} "$@"
  # The bench's own log beside its table's (the step's log has the name it had).
  cp "$B/bench-gpu-compute.json" "$out/" 2> /dev/null
  cp "$B/bench-gpu-compute.log" "$out/bench-gpu-compute-runs.log" 2> /dev/null
  rm -rf "$configs"
}

# The offloaded step against its peers: the trainers in turn (FSDP2 and DeepSpeed start from an fp32 model on the
# host); arguments go to the bench (--peers zinf,zinf_ratio,zinf_stage0 for zinf's rows alone).
# Every trainer clips at 1.0, as GPT-2 large's first steps all do (357 s on an H200 on
# 2026-11-27, DeepSpeed's build of its CPU Adam the longest part); then zinf's rows
# without clipping, where the update goes under the backward (133 s).
peers() {
  step bench-gpu-peers 380 env ZINF_BUILD="$B" ZINF_PY="$ZINF_PY" tests/bench/bench_gpu_peers.sh \
    --steps 5 --warmup 2 --timeout 140 "$@"
  cp "$B/bench-gpu-peers.json" "$out/" 2> /dev/null
  cp "$B/bench-gpu-peers.log" "$out/bench-gpu-peers-runs.log" 2> /dev/null
  step bench-gpu-peers-noclip 150 env ZINF_BUILD="$B" ZINF_PY="$ZINF_PY" tests/bench/bench_gpu_peers.sh \
    --peers zinf,zinf_ratio,zinf_stage0 --clip 0 --steps 5 --timeout 100
  cp "$B/bench-gpu-peers.json" "$out/bench-gpu-peers-noclip.json" 2> /dev/null
  cp "$B/bench-gpu-peers.log" "$out/bench-gpu-peers-noclip-runs.log" 2> /dev/null
}

[ -n "$variants" ] && variant_ops
if [ -n "$offload" ]; then peers "$@"; else kernels "$@"; fi
echo "gpu_checks: $(grep -c ': ok' "$summary") of $(wc -l < "$summary") steps ok; logs in $out"
if [ -n "${OUT:-}" ]; then
  cp "$summary" "$OUT/summary.txt"
  tar -czf "$OUT/gpu-checks.tar.gz" -C "$B" gpu-checks
fi
