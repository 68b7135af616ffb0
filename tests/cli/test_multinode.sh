#!/usr/bin/env bash
# Two real hosts on one machine: two network namespaces joined by a bridge, each rank in
# a UTS namespace with its host's name, started by mpirun through a plm_rsh_agent that
# enters them, so inter-node traffic crosses TCP and "node" comes from host names. On 4
# ranks as 2 hosts of 2, ZeRO++ (qwZ + hpZ + qgZ) and MiCS's hierarchical gathers give
# the bits and the byte counts of the same runs with ZINF_RANKS_PER_NODE=2 on one host.
# Then one host's link is cut mid-run: every rank ends within ZINF_COMM_TIMEOUT, naming
# the collective it waited for (mpirun itself may wait on for the lost host: stopped).
# Needs root (ip netns, unshare); CI runs as root.
# timeout: 30 san=45 cuda-emu=35
# alone: a cut link must end every rank within a timed window
set -u
Z=${ZINF_BUILD:-build}/zinf
tmp=$(mktemp -d)
. "$(dirname "$0")/lib.sh"
tokens "$tmp/train.tokens"
backend=${ZINF_TEST_BACKEND:-host}
if [ "$(id -u)" != 0 ]; then
  echo "test_multinode: needs root for network namespaces (CI runs as root)"
  exit 77
fi

. "$(dirname "$0")/hosts.sh"
T=zt$$
cleanup() {
  for p in $(pgrep -f "^$Z train $tmp/cfg.json"); do kill -9 "$p" 2>/dev/null; done
  [ -n "${job:-}" ] && kill -9 "$job" 2>/dev/null
  hosts_down "$T"
  rm -rf "$tmp"
}
trap cleanup EXIT
hosts_up "$T" || { echo "FAIL: cannot make the two hosts"; exit 1; }

cat > "$tmp/cfg.json" <<JSON
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "seed": 3, "steps": 3, "steps_per_print": 1,
 "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
 "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0, "stage3_prefetch_bucket_size": 30000,
   "reduce_bucket_size": 20000, "stage3_max_reuse_distance": 0, "stage3_max_live_parameters": 30000},
 "model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 256, "block_size": 32},
 "data": {"path": "$tmp/train.tokens", "format": "tokens-u16", "seq_len": 32},
 "device": {"backend": "$backend"}}
JSON

# The losses, digest and per-step counts of a run's --json output, one line.
counted() {
  python3 - "$1" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
print(" ".join(repr(s["loss"]) for s in lines[:-1]), lines[-1]["weights_digest"],
      [(s["comm_bytes_intra"], s["comm_bytes_inter"]) for s in lines[1:-1]])
PY
}

Z=$PWD/$Z
for run in zeropp mics; do
  case $run in
    zeropp) sets=(--set zero_optimization.zero_quantized_weights=true --set zero_optimization.zero_quantized_gradients=true
                  --set zero_optimization.zero_hpz_partition_size=2) ;;
    mics) sets=(--set zero_optimization.mics_shard_size=4 --set zero_optimization.mics_hierarchical_params_gather=true) ;;
  esac
  timeout 120 mpirun "${MPI[@]}" -np 4 "$Z" train "$tmp/cfg.json" --json "${sets[@]}" > "$tmp/$run.hosts" \
    2> "$tmp/$run.hosts.err" || fail "$run on two hosts: exit $?: $(tail -c 600 "$tmp/$run.hosts.err")"
  ZINF_RANKS_PER_NODE=2 OMPI_MCA_rmaps_base_oversubscribe=1 mpirun -np 4 -x ZINF_RANKS_PER_NODE "$Z" train \
    "$tmp/cfg.json" --json "${sets[@]}" > "$tmp/$run.one" 2> "$tmp/$run.one.err" ||
    fail "$run on one host: $(tail -c 400 "$tmp/$run.one.err")"
  a=$(counted "$tmp/$run.hosts") b=$(counted "$tmp/$run.one")
  echo "$run on two hosts: $a"
  [ "$a" = "$b" ] || fail "$run: two hosts give $a; ZINF_RANKS_PER_NODE=2 gives $b"
  case $a in *", 0)"*) fail "$run: nothing crossed hosts: $a" ;; esac
done

# Cut host 2's link after the first step: each rank's own output (written on its host)
# names the wait, and every rank is gone within ZINF_COMM_TIMEOUT plus a margin. mpirun
# must not kill the ranks left when the first one fails: a rank whose wait began later
# would die before its own timeout could name it.
ZINF_COMM_TIMEOUT=5 mpirun "${MPI[@]}" --mca orte_abort_on_non_zero_status 0 -np 4 -x ZINF_COMM_TIMEOUT \
  --output-filename "$tmp/out" "$Z" train \
  "$tmp/cfg.json" --json --steps 1000000 > "$tmp/cut.out" 2> "$tmp/cut.err" &
job=$!
for _ in $(seq 600); do [ -s "$tmp/out/1/rank.0/stdout" ] && break; sleep 0.1; done
[ -s "$tmp/out/1/rank.0/stdout" ] || fail "the job never finished a step: $(tail -c 400 "$tmp/cut.err")"
hosts_link "$T" 2 down
start=$EPOCHREALTIME left=4
for _ in $(seq 150); do
  left=$(pgrep -fc "^$Z train $tmp/cfg.json")
  [ "$left" = 0 ] && break
  sleep 0.1
done
secs=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
echo "link cut: $left ranks left after $secs s"
[ "$left" = 0 ] || fail "$left ranks still running $secs s after the link went down"
for r in 0 1 2 3; do
  grep -q "error: comm mpi: rank $r waited 5 s for .* a rank has died or stopped" "$tmp/out/1/rank.$r/stderr" ||
    fail "rank $r after the cut: $(tail -c 300 "$tmp/out/1/rank.$r/stderr")"
done

finish test_multinode
