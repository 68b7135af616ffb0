#!/usr/bin/env bash
# ZeRO++ and MiCS against plain ZeRO-3: 4 ranks as 2 hosts of 2 (two network namespaces
# on this machine, tests/cli/hosts.sh; as root) whose inter-host links are shaped to
# ZINF_BENCH_LINK (default 200mbit each way, tc tbf), so that what crosses nodes costs
# what a slow network would; a small GPT (4 layers of 256, bf16) at stage 3, micro-batch
# 1 x 128 tokens, 2 micro-batches per rank. Per step (medians after the first two):
# bytes rank 0 received from the other host and from its own, and the step time, for
# plain ZeRO-3, qwZ, hpZ, qgZ, MiCS (shard groups of 2, one per host), and qwZ + hpZ +
# qgZ, with each one's cut in inter-node bytes and its speed-up over plain. Not root: the
# same on one host with ZINF_RANKS_PER_NODE=2 (bytes as counted; times without a link).
set -eu
Z=$PWD/${ZINF_BUILD:-build}/zinf
rate=${ZINF_BENCH_LINK:-200mbit}
[ -x "$Z" ] || { echo "bench_zeropp: $Z is missing (make builds it)"; exit 1; }
dir=$(mktemp -d)
T=zb$$
. "$(dirname "$0")/../cli/hosts.sh"
cleanup() { [ "$(id -u)" = 0 ] && hosts_down "$T"; rm -rf "$dir"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ "$(id -u)" = 0 ] && hosts_up "$T" && hosts_shape "$T" "$rate"; then
  where="2 hosts (network namespaces) linked at $rate each way"
  launch=(mpirun "${MPI[@]}" -np 4)
else
  where="1 host, ZINF_RANKS_PER_NODE=2 (not root: no shaped link, times are not a network's)"
  launch=(env ZINF_RANKS_PER_NODE=2 OMPI_MCA_rmaps_base_oversubscribe=1 mpirun -np 4 -x ZINF_RANKS_PER_NODE)
fi

python3 -c "import random, array, sys; r = random.Random(1); \
open(sys.argv[1], 'wb').write(array.array('H', (r.randrange(256) for _ in range(262144))).tobytes())" "$dir/t.tokens"
steps=8 skip=2
cat > "$dir/g.json" <<JSON
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "seed": 1, "steps": $steps, "steps_per_print": 1,
 "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.1}},
 "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": 0,
   "stage3_prefetch_bucket_size": 2e6, "stage3_max_live_parameters": 2e6},
 "model": {"n_layer": 4, "n_head": 4, "n_embd": 256, "vocab_size": 256, "block_size": 128},
 "data": {"path": "$dir/t.tokens", "format": "tokens-u16", "seq_len": 128},
 "device": {"backend": "host"}}
JSON
ZO=zero_optimization
runs=(plain qwz hpz qgz mics all)
sets_of() {
  case $1 in
    plain) ;;
    qwz) echo "--set $ZO.zero_quantized_weights=true" ;;
    hpz) echo "--set $ZO.zero_hpz_partition_size=2" ;;
    qgz) echo "--set $ZO.zero_quantized_gradients=true" ;;
    mics) echo "--set $ZO.mics_shard_size=2" ;;
    all) echo "--set $ZO.zero_quantized_weights=true --set $ZO.zero_hpz_partition_size=2 --set $ZO.zero_quantized_gradients=true" ;;
  esac
}
for r in "${runs[@]}"; do
  # shellcheck disable=SC2046
  "${launch[@]}" "$Z" train "$dir/g.json" --json $(sets_of "$r") > "$dir/$r.out" 2> "$dir/$r.err" || {
    echo "bench_zeropp: the $r run failed; stderr ends:"; tail -n 15 "$dir/$r.err" | sed 's/^/  /'; exit 1; }
done
PYTHONPATH="$(dirname "$0")" python3 - "$dir" "$skip" "$where" "${runs[@]}" <<'PY'
import sys
from steps import load, med
d, skip, where, runs = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
rows = {r: load(f"{d}/{r}.out")[0] for r in runs}
print(f"ZeRO++ and MiCS, GPT 4 x 256 (bf16) at stage 3 on 4 ranks as {where};")
print(f"per step and rank 0, medians of steps {skip + 1}-{len(rows['plain'])}")
print("%-16s %12s %11s %8s %8s %9s" % ("", "across (MB)", "in node (MB)", "s/step", "x bytes", "x speed"))
names = {"plain": "plain ZeRO-3", "qwz": "qwZ", "hpz": "hpZ", "qgz": "qgZ", "mics": "MiCS (2 per group)",
         "all": "qwZ+hpZ+qgZ"}
base_b, base_t = med(rows["plain"], "comm_bytes_inter", skip), med(rows["plain"], "step_seconds", skip)
for r in runs:
    b, i, t = (med(rows[r], k, skip) for k in ("comm_bytes_inter", "comm_bytes_intra", "step_seconds"))
    print("%-16s %12.2f %11.2f %8.3f %8.2f %9.2f" % (names[r], b / 1e6, i / 1e6, t, base_b / b, base_t / t))
PY
