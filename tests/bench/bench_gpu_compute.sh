#!/usr/bin/env bash
# zinf's compute against PyTorch's on a real CUDA device (tests/bench/gpu_compute.py): GPT-2
# 124M, GPT-2 large (774 M) and the shape of Llama-3.2-1B, random init, micro-batch 8 x 1024
# random tokens, bf16, AdamW on the device, nothing partitioned or offloaded (stage 0). PyTorch
# trains the Hugging Face transformers model (sdpa attention) in bf16 under torch.compile with
# fused AdamW; zinf trains the same shape with `zinf train` at stage 0; each trainer in a
# process of its own. Prints the median step, tokens/s and model TFLOPS (6 x parameters +
# 12 x layers x width x 1024 FLOPs per token, as zinf counts them) per model and trainer,
# zinf / PyTorch, and the goals: GPT-2 124M at least 350 K tokens/s under zinf, zinf at least
# 35% of the H100's dense bf16 peak (989 TFLOPS) and at least 1.1x PyTorch's tokens/s on all
# three; no goal is asserted. A trainer that cannot run (not installed, out of memory) prints
# its reason in its row; the bench fails only when zinf does.
# PyTorch needs torch with CUDA (and a compiler for torch.compile's Triton kernels) and
# transformers importable by $PY; on a machine with no network carry them as wheels.
# JSON lines go to $ZINF_BUILD/bench-gpu-compute.json, the trainers' logs to
# $ZINF_BUILD/bench-gpu-compute.log; arguments are passed to the driver (--models gpt2,llama-1b,
# --trainers zinf, --steps, --warmup). Record the figures in docs/performance.md with the date,
# the commit and the machine (the table's first line names them).
# With no CUDA device (make bench everywhere else) it says so and succeeds.
set -eu
B=${ZINF_BUILD:-build}
PY=${ZINF_PY:-build/pyenv/bin/python}
if ! gpus=$(nvidia-smi -L 2> /dev/null) || ! grep -q '^GPU' <<< "$gpus"; then
  echo "bench_gpu_compute: no CUDA device here: skipped (run it on a GPU machine; see docs/performance.md)"
  exit 0
fi
[ -x "$B/zinf" ] || { echo "bench_gpu_compute: $B/zinf is missing (make builds it)"; exit 1; }
if [ ! -x "$PY" ]; then echo "bench_gpu_compute: $PY is missing (make bench installs it)"; exit 1; fi

out=$("$PY" tests/bench/gpu_compute.py --zinf "$B" --out "$B/bench-gpu-compute.json" "$@" \
  2> "$B/bench-gpu-compute.log") || { echo "$out"; tail -20 "$B/bench-gpu-compute.log"; exit 1; }
grep -v '^{' <<< "$out"
