#!/usr/bin/env bash
# zinf against its GPU peers on a real CUDA device (tests/bench/gpu_peers.py): GPT-2 large
# (774 M, as Hugging Face transformers builds it), micro-batch 8 x 1024 random tokens, bf16,
# AdamW lr 1e-5, a few steps under PyTorch FSDP2 with CPUOffloadPolicy, torchao's
# CPUOffloadOptimizer, DeepSpeed ZeRO-3 with the optimizer on cpu, zinf at stage 3 with
# the optimizer on cpu (all of it, and with offload_optimizer.ratio 0.5 half its
# sub-groups on the device) and zinf at stage 0 (nothing offloaded), each in a process of
# its own. Prints tokens/s and the median step per trainer, zinf / peer, and the goals:
# zinf stage 3 (optimizer on cpu) within 1.15x of stage 0's step, with and without the
# ratio, and zinf at least 1.5x the fastest peer's tokens/s; no goal is asserted. A peer that cannot run (not installed,
# out of memory) prints its reason in its row; the bench fails only when zinf does.
# The peers need torch with CUDA, transformers, torchao and deepspeed importable by $PY
# (DeepSpeed builds its CPU Adam with ninja and a C++ compiler on first use); on a machine
# with no network carry them as wheels: pip install --no-index --find-links DIR torchao deepspeed.
# JSON lines go to $ZINF_BUILD/bench-gpu-peers.json, the trainers' logs to
# $ZINF_BUILD/bench-gpu-peers.log; arguments are passed to the driver (--peers
# zinf,zinf_ratio,zinf_stage0, --steps, --warmup, --clip 0 for no clipping, --set
# KEY=VALUE for zinf's rows). Record the figures in docs/performance.md with the date,
# the commit and the machine (the table's first line names them).
# With no CUDA device (make bench everywhere else) it says so and succeeds.
set -eu
B=${ZINF_BUILD:-build}
PY=${ZINF_PY:-build/pyenv/bin/python}
if ! gpus=$(nvidia-smi -L 2> /dev/null) || ! grep -q '^GPU' <<< "$gpus"; then
  echo "bench_gpu_peers: no CUDA device here: skipped (run it on a GPU machine; see docs/performance.md)"
  exit 0
fi
[ -x "$B/zinf" ] || { echo "bench_gpu_peers: $B/zinf is missing (make builds it)"; exit 1; }
if [ ! -x "$PY" ]; then echo "bench_gpu_peers: $PY is missing (make bench installs it)"; exit 1; fi

out=$("$PY" tests/bench/gpu_peers.py --zinf "$B" --out "$B/bench-gpu-peers.json" "$@" \
  2> "$B/bench-gpu-peers.log") || { echo "$out"; tail -20 "$B/bench-gpu-peers.log"; exit 1; }
grep -v '^{' <<< "$out"
