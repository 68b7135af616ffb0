#!/usr/bin/env bash
# Memory-centric tiling (memory.tile_bound): an untied Llama's embedding (256 x 56:
# on one rank in tiles of 6144 elements, the last 2048; on two in tiles of 2048 per
# rank; both cut its rows) gathered, computed and reduced tile by tile gives the same
# losses and weights digest as gathered whole, bit for bit: stage 3 with the optimizer
# and the parameters on the device, cpu and nvme, on 1 and 2 ranks, fp32 and bf16, with
# qwZ, hpZ and MiCS, and with activation checkpoints in host memory. A checkpoint saved
# tiled resumes untiled to the straight run's bits (tiles cut slices, never the
# layout). The plan names the tiled module; the key is refused below stage 3.
# timeout: 600
set -u
Z=${ZINF_BUILD:-build}/zinf
R=${ZINF_REF_DIR:-build/ref}
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
backend=${ZINF_TEST_BACKEND:-host}
mkdir -p "$tmp/nvme"

cat > "$tmp/cfg.json" <<JSON
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "seed": 5, "steps": 5, "steps_per_print": 5,
 "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.95], "weight_decay": 0.1}},
 "zero_optimization": {"stage": 3, "reduce_bucket_size": 6000, "sub_group_size": 40000,
   "stage3_param_persistence_threshold": 0,
   "offload_optimizer": {"device": "none", "nvme_path": "$tmp/nvme"},
   "offload_param": {"device": "none", "nvme_path": "$tmp/nvme", "max_in_cpu": 0, "buffer_count": 3}},
 "model": {"arch": "llama", "n_layer": 2, "n_head": 4, "n_kv_head": 2, "n_embd": 56, "intermediate_size": 96, "vocab_size": 256,
   "block_size": 32, "tie_word_embeddings": false},
 "data": {"path": "$R/train.tokens", "format": "tokens-u16", "seq_len": 32},
 "device": {"backend": "$backend"}}
JSON

OO=zero_optimization.offload_optimizer OP=zero_optimization.offload_param ZO=zero_optimization
before=$fails
# dtype, optimizer tier, parameter tier, and more settings.
for c in "fp32 none none" "fp32 cpu cpu" "fp32 nvme nvme" "bf16 cpu nvme" "bf16 none none $ZO.zero_quantized_weights=true" \
  "fp32 nvme cpu $ZO.zero_hpz_partition_size=2" "fp32 cpu nvme $ZO.mics_shard_size=1" \
  "bf16 nvme nvme activation_checkpointing.cpu_checkpointing=true"; do
  read -r dt opt par extra <<< "$c"
  sets=(--set bf16.enabled=$([ $dt = bf16 ] && echo true || echo false) --set $OO.device=$opt --set $OP.device=$par)
  [ -n "$extra" ] && sets+=(--set "$extra")
  for np in 1 2; do
    case "$np $extra" in 1\ *hpz* | 1\ *mics*) continue ;; esac # groups of two ranks
    run $np "$tmp/whole" "${sets[@]}"
    run $np "$tmp/tiles" "${sets[@]}" --set memory.tile_bound=6144
    grep -q 'gathered and computed tile by tile (memory.tile_bound): embedding in [34] tiles' "$tmp/tiles.err" ||
      fail "$dt on $np ranks, $opt $par $extra: the plan names no tiles: $(grep -i tile "$tmp/tiles.err")"
    want=$(summary "$tmp/whole") got=$(summary "$tmp/tiles")
    [ "$got" = "$want" ] || fail "$dt on $np ranks, optimizer $opt, params $par $extra: in tiles $got; whole $want"
  done
done
[ $fails = $before ] && echo "tiles: bit-identical to the embedding gathered whole, every tier, 1 and 2 ranks, fp32 and bf16, qwZ, hpZ, MiCS, host checkpoints"

# A checkpoint saved in tiles resumes gathered whole, on the straight run's bits.
sets=(--set $OO.device=cpu --set $OP.device=nvme --set steps=4)
run 2 "$tmp/straight" "${sets[@]}"
run 2 "$tmp/first" "${sets[@]}" --set steps=2 --set memory.tile_bound=6144 --set checkpoint.dir="$tmp/ckpt"
run 2 "$tmp/resumed" "${sets[@]}" --set checkpoint.dir="$tmp/ckpt" --set checkpoint.load=latest
a=$(tail -n 1 "$tmp/straight" | python3 -c 'import json,sys; print(json.load(sys.stdin)["weights_digest"])')
b=$(tail -n 1 "$tmp/resumed" | python3 -c 'import json,sys; print(json.load(sys.stdin)["weights_digest"])')
[ "$a" = "$b" ] || fail "resumed untiled from a tiled checkpoint: digest $b; straight $a"

# The plan: two tiles of 6144 elements at most on the device instead of the 14336 gathered.
expect 0 "$Z" estimate --config "$tmp/cfg.json" --json --set memory.tile_bound=6144
cp "$tmp/out" "$tmp/tiled.json"
expect 0 "$Z" estimate --config "$tmp/cfg.json" --json
python3 - "$tmp/tiled.json" "$tmp/out" <<'PY' || fail "the plan's tiles (above)"
import json, sys
on, off = (json.loads(open(f).readlines()[-1]) for f in sys.argv[1:])
assert on["tiled"] == "embedding in 3 tiles of 24 KiB" and off["tiled"] == "", (on["tiled"], off["tiled"])
assert on["device_peak_bytes"] <= off["device_peak_bytes"], (on["device_peak_bytes"], off["device_peak_bytes"])
PY

# The head in tiles too: 512 x 48, so a tile holds whole rows (tiles and slices in
# multiples of lcm(2048, 48) = 6144 elements), with the output layer in one chunk and in
# chunks of 24 tokens (each chunk sweeps the head's tiles). The first loss is the plain
# head's bits; the input gradient sums over the vocabulary tile by tile, so the later
# steps agree within rounding.
sed -i 's/"n_embd": 56, "intermediate_size": 96, "vocab_size": 256,/"n_embd": 48, "intermediate_size": 96, "vocab_size": 512,/' "$tmp/cfg.json"
before=$fails
for c in "fp32 none none 64" "fp32 cpu nvme 24" "bf16 nvme cpu 24" "bf16 none none 64"; do
  read -r dt opt par chunk <<< "$c"
  sets=(--set bf16.enabled=$([ $dt = bf16 ] && echo true || echo false) --set $OO.device=$opt --set $OP.device=$par
        --set memory.head_chunk_tokens=$chunk)
  for np in 1 2; do
    run $np "$tmp/whole" "${sets[@]}"
    run $np "$tmp/tiles" "${sets[@]}" --set memory.tile_bound=8192
    grep -q "(memory.tile_bound): embedding in 3 tiles of .*, head in [24] tiles of " "$tmp/tiles.err" ||
      fail "$dt on $np ranks: the plan: $(grep -i 'tile by tile' "$tmp/tiles.err")"
    python3 - "$tmp/whole" "$tmp/tiles" $dt <<'PY' || fail "$dt on $np ranks, optimizer $opt, params $par, chunks of $chunk (above)"
import json, sys
whole, tiles = ([json.loads(l)["loss"] for l in open(f)][:-1] for f in sys.argv[1:3])
tol = 1e-6 if sys.argv[3] == "fp32" else 1e-3
assert whole[0] == tiles[0], ("first loss", whole[0], tiles[0])
assert all(abs(a - b) <= tol * abs(a) for a, b in zip(whole, tiles)), (whole, tiles)
PY
  done
done
[ $fails = $before ] && echo "tiles: the head in tiles, its first loss bit-identical, the later ones within rounding"

# Below stage 3 every module is whole on the device: refused, naming the key.
expect 2 "$Z" check "$tmp/cfg.json" --set memory.tile_bound=6144 --set $ZO.stage=2
grep -q 'memory.tile_bound: 6144 needs zero_optimization.stage 3' "$tmp/err" || fail "stage 2: $(cat "$tmp/err")"

finish test_tiles
