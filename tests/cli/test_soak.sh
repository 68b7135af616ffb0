#!/usr/bin/env bash
# Soak, small: tests/bench/bench_soak.sh on the README's main job shrunk to seconds
# (2 layers of 64, 16 sequences of 32 bytes a step in 2 micro-batches, still ZeRO stage 3
# with the optimizer states and the parameters in swap files on NVMe, in 6 sub-groups
# and with the parameters above 1000 elements offloaded), 200 steps with a checkpoint
# every 20: after the warm-up (40 steps) the heap in use, the step's pinned bytes, the
# swap files' size and allocated blocks and the checkpoint directory stay within 1%, its
# open files and threads do not change, and each checkpoint interval's lowest resident
# memory stays within 10% of the first's (the heap in use moves by 0.1% here, but this
# 24 MiB process's resident memory settled 5.4% higher on a CI machine whose cores other
# tests shared: the allocator's fragmentation, which the heap column leaves out). In an
# ASan build both are shown, not judged: ASan's quarantine and stack depot grow resident
# memory, glibc's heap counts nothing there, and LeakSanitizer checks the heap at exit.
# It trains on the README's corpus, build/data/english.txt, which `make tests` makes
# (make corpus); where that is missing, on a token file made here (lib.sh's tokens), so
# that it never needs the network.
# timeout: 50 san=70 cuda-emu=165 san-cuda-emu=520
set -u
export ZINF_BUILD=${ZINF_BUILD:-build}
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/../.." || exit 1
backend=${ZINF_TEST_BACKEND:-host}

shrink=(--set model.n_layer=2 --set model.n_head=2 --set model.n_embd=64 --set model.block_size=32
  --set data.seq_len=32 --set train_batch_size=16 --set train_micro_batch_size_per_gpu=8
  --set zero_optimization.stage3_param_persistence_threshold=1000 --set zero_optimization.sub_group_size=20000
  --set device.backend="$backend")
if [ ! -s build/data/english.txt ]; then
  echo "no build/data/english.txt (make corpus): training on a generated token file instead"
  tokens "$tmp/train.tokens" 20000
  shrink+=(--set data.path="$tmp/train.tokens" --set data.format=tokens-u16)
fi

rss=(--rss-tolerance 10)
grep -q __asan_init "$ZINF_BUILD/zinf" && rss=(--no-memory)
# 200 steps; 120 in the reduced matrix (ASan, the emulation: lib.sh), 4 intervals after
# the warm-up.
steps=$(reduced && echo 120 || echo 200)
ZINF_BENCH_DIR=$tmp expect 0 tests/bench/bench_soak.sh --steps $steps --interval 20 "${rss[@]}" --csv "$tmp/soak.csv" \
  -- "${shrink[@]}"
cat "$tmp/out"
grep -q "^bench_soak: everything flat$" "$tmp/out" || fail "bench_soak did not find everything flat"
# Every step but the checkpoints' and those around them was sampled.
n=$(($(wc -l < "$tmp/soak.csv") - 1))
[ "$n" -ge $((steps / 2)) ] || fail "only $n samples of $steps steps"
# Nothing of the run is left behind.
[ -z "$(ls -A "$tmp" | grep -v '^\(out\|err\|soak.csv\|train.tokens\)$')" ] || fail "left in $tmp: $(ls -A "$tmp")"
finish test_soak
