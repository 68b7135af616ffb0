#!/usr/bin/env bash
# Memory-centric tiling (memory.tile_bound): an untied Llama's embedding (256 x 56:
# on one rank in tiles of 6144 elements, the last 2048; on two in tiles of 2048 per
# rank; both cut its rows) gathered, computed and reduced tile by tile gives the same
# losses and weights digest as gathered whole, bit for bit: stage 3 with the optimizer
# and the parameters on the device, cpu and nvme, on 1 and 2 ranks, fp32 and bf16, with
# qwZ, hpZ and MiCS, and with activation checkpoints in host memory. A checkpoint saved
# tiled resumes untiled to the straight run's bits (tiles cut slices, never the
# layout). The plan names the tiled module; the key is refused below stage 3. Then the
# head in tiles, untied and tied, and the MLP in tiles (below). The MLPs here are narrow
# enough (intermediate_size 16: 4096 elements padded) to stay whole under the bounds
# used for the embedding and the head.
# In the reduced matrix (ASan, the emulation: lib.sh) each case trains on 1 or 2 ranks
# by turns, ZeRO++ and MiCS on 2.
# timeout: 250 san=220 cuda-emu=310
set -u
Z=${ZINF_BUILD:-build}/zinf
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
tokens "$tmp/train.tokens"
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
 "model": {"arch": "llama", "n_layer": 2, "n_head": 4, "n_kv_head": 2, "n_embd": 56, "intermediate_size": 16, "vocab_size": 256,
   "block_size": 32, "tie_word_embeddings": false},
 "data": {"path": "$tmp/train.tokens", "format": "tokens-u16", "seq_len": 32},
 "device": {"backend": "$backend"}}
JSON

OO=zero_optimization.offload_optimizer OP=zero_optimization.offload_param ZO=zero_optimization
# A case's settings in sets: dtype, optimizer tier, parameter tier, and one more setting or none.
case_sets() {
  sets=(--set bf16.enabled=$([ "$1" = bf16 ] && echo true || echo false) --set $OO.device=$2 --set $OP.device=$3)
  [ -n "${4:-}" ] && sets+=(--set "$4")
}
# case_ranks I EXTRA: the world sizes the I-th case of a loop trains on (lib.sh's
# ranks): hpZ and MiCS here take groups of two, and in the reduced matrix qwZ, which
# changes nothing on one rank, trains on two as well.
case_ranks() {
  case "$2" in
    *hpz* | *mics*) echo 2 ;;
    *quantized*) if reduced; then echo 2; else ranks "$1"; fi ;;
    *) ranks "$1" ;;
  esac
}
before=$fails
# The embedding gathered whole gives one dtype's bits on a world size with the states
# anywhere, hpZ and host checkpoints (test_offload, test_zeropp, test_memory): one run
# serves those; qwZ and MiCS round otherwise and have runs of their own.
declare -A whole
i=0
for c in "fp32 none none" "fp32 cpu cpu" "fp32 nvme nvme" "bf16 cpu nvme" "bf16 none none $ZO.zero_quantized_weights=true" \
  "fp32 nvme cpu $ZO.zero_hpz_partition_size=2" "fp32 cpu nvme $ZO.mics_shard_size=1" \
  "bf16 nvme nvme activation_checkpointing.cpu_checkpointing=true"; do
  read -r dt opt par extra <<< "$c"
  i=$((i + 1))
  case_sets $dt $opt $par "$extra"
  for np in $(case_ranks $i "$extra"); do
    key=$dt.$np.$(case $extra in *quantized* | *mics*) echo "$extra" ;; *) echo plain ;; esac)
    if [ -z "${whole[$key]:-}" ]; then
      run $np "$tmp/whole" "${sets[@]}"
      whole[$key]=$(summary "$tmp/whole")
    fi
    run $np "$tmp/tiles" "${sets[@]}" --set memory.tile_bound=6144
    grep -q 'gathered and computed tile by tile (memory.tile_bound): embedding in [34] tiles' "$tmp/tiles.err" ||
      fail "$dt on $np ranks, $opt $par $extra: the plan names no tiles: $(grep -i tile "$tmp/tiles.err")"
    want=${whole[$key]} got=$(summary "$tmp/tiles")
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
assert on["device_peak_bytes"] < off["device_peak_bytes"], (on["device_peak_bytes"], off["device_peak_bytes"])
PY

# The head in tiles too, its tiles whole rows of its weight (tiles and slices in
# multiples of lcm(2048, n_embd)): an untied Llama's head of 512 x 48 (6144-element
# units) beside its embedding, and GPT-2's head tied to wte (256 x 64, wpe behind it in
# the same module, whose gradient is reduced twice a micro-batch: after the head's
# backward and after the embedding's), with the output layer in one chunk and in chunks
# of 24 tokens (each chunk sweeps the head's tiles in the forward). Llama's first loss is
# the plain head's bits in bf16 (fp32 within 1e-7: OpenBLAS's fp32 kernels may sum a
# small block of columns in another order); the input gradient sums over the vocabulary
# tile by tile, so the later steps agree within rounding. GPT-2's MLPs (8 n_embd^2
# elements) come in tiles too, so its first loss is within rounding as well.
llama=$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c["model"].update(n_embd=48, vocab_size=512); print(json.dumps(c))' "$tmp/cfg.json")
gpt2=$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c["model"]={"n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 256, "block_size": 32}; print(json.dumps(c))' "$tmp/cfg.json")
before=$fails
i=0
for c in "llama fp32 none none 64" "llama fp32 cpu nvme 24" "llama bf16 nvme cpu 24" "llama bf16 none none 64" \
  "gpt2 fp32 cpu nvme 24" "gpt2 bf16 none none 64" "gpt2 bf16 nvme nvme 24"; do
  read -r model dt opt par chunk <<< "$c"
  i=$((i + 1))
  if [ $model = llama ]; then echo "$llama" > "$tmp/cfg.json"; else echo "$gpt2" > "$tmp/cfg.json"; fi
  plan=$([ $model = llama ] && echo 'embedding in 3 tiles of .*, head in [24] tiles of ' || echo 'embedding in 3 tiles of ')
  case_sets $dt $opt $par memory.head_chunk_tokens=$chunk
  for np in $(ranks $i); do
    run $np "$tmp/whole" "${sets[@]}"
    run $np "$tmp/tiles" "${sets[@]}" --set memory.tile_bound=8192
    grep -q "(memory.tile_bound): $plan" "$tmp/tiles.err" ||
      fail "$model $dt on $np ranks: the plan: $(grep -i 'tile by tile' "$tmp/tiles.err")"
    python3 - "$tmp/whole" "$tmp/tiles" $dt $model <<'PY' || fail "$model $dt on $np ranks, optimizer $opt, params $par, chunks of $chunk (above)"
import json, sys
whole, tiles = ([json.loads(l)["loss"] for l in open(f)][:-1] for f in sys.argv[1:3])
fp32 = sys.argv[3] == "fp32"
exact = not fp32 and sys.argv[4] == "llama"
assert whole[0] == tiles[0] if exact else abs(whole[0] - tiles[0]) <= (1e-7 if fp32 else 1e-3) * whole[0], \
    ("first loss", whole[0], tiles[0])
tol = 1e-6 if fp32 else 1e-3
assert all(abs(a - b) <= tol * abs(a) for a, b in zip(whole, tiles)), (whole, tiles)
PY
  done
done
[ $fails = $before ] && echo "tiles: the head in tiles, untied and tied, its first loss the plain head's, the later ones within rounding"

# A head in tiles pads its slices to whole rows (300 x 48 on two ranks: 24576 elements
# where gathered whole it is 16384); its checkpoint at step 2 loads untiled on one rank,
# and step 3 there gives the tiled run's loss within rounding (a slice read at the wrong
# padding would scramble the head).
python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c["model"].update(n_embd=48, vocab_size=300); print(json.dumps(c))' \
  <(echo "$llama") > "$tmp/cfg.json"
run 2 "$tmp/saved" --set $OO.device=cpu --set $OP.device=nvme --set steps=3 --set memory.tile_bound=8192 \
  --set checkpoint.dir="$tmp/ckpt2" --set checkpoint.interval=2
run 1 "$tmp/loaded" --set steps=3 --set checkpoint.dir="$tmp/ckpt2" --set checkpoint.load="$tmp/ckpt2/global_step2"
python3 - "$tmp/saved" "$tmp/loaded" <<'PY' || fail "a checkpoint of the head in tiles, loaded untiled on one rank (above)"
import json, sys
saved, loaded = ([json.loads(l) for l in open(f)][:-1] for f in sys.argv[1:])
a, b = saved[-1]["loss"], loaded[-1]["loss"]
assert saved[-1]["step"] == loaded[-1]["step"] == 3 and abs(a - b) <= 1e-5 * a, (saved[-1], loaded[-1])
PY

# The MLP in tiles: Llama's (48 wide, intermediate 96: [norm | gate | up | down | biases],
# 14208 elements) and GPT-2's (64 wide: [ln_2 weight and bias | c_fc
# (64, 256) | bias | c_proj (256, 64) | bias], 33216 elements), each rank's run of a
# tile any range of the flat buffer, cutting rows of both products. Forward and
# backward sweep the tiles twice each, with activation checkpoints (the recompute too)
# and in host memory; every tier, 1 and 2 ranks, fp32 and bf16, qwZ, hpZ and MiCS. The
# products' sums are cut at the runs' ends: within rounding of the MLP gathered whole.
llama=$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c["model"].update(intermediate_size=96, mlp_bias=True); print(json.dumps(c))' <(echo "$llama"))
before=$fails
i=0
for c in "llama fp32 none none" "llama fp32 cpu nvme activation_checkpointing={}" \
  "llama bf16 nvme cpu $ZO.zero_quantized_weights=true" "llama bf16 cpu nvme activation_checkpointing.cpu_checkpointing=true" \
  "gpt2 fp32 nvme nvme $ZO.zero_hpz_partition_size=2" "gpt2 bf16 cpu cpu $ZO.mics_shard_size=1" "gpt2 fp32 none none"; do
  read -r model dt opt par extra <<< "$c"
  i=$((i + 1))
  if [ $model = llama ]; then echo "$llama" > "$tmp/cfg.json"; else echo "$gpt2" > "$tmp/cfg.json"; fi
  case_sets $dt $opt $par "$extra"
  for np in $(case_ranks $i "$extra"); do
    run $np "$tmp/whole" "${sets[@]}"
    run $np "$tmp/tiles" "${sets[@]}" --set memory.tile_bound=4096
    mlp=$([ $model = llama ] && echo layers || echo h)
    grep -q "(memory.tile_bound): embedding in [0-9]* tiles of [0-9.]* KiB, $mlp.0.mlp to $mlp.1.mlp (2 modules) in [3-9] tiles" \
      "$tmp/tiles.err" || fail "$model $dt on $np ranks: the plan: $(grep -i 'tile by tile' "$tmp/tiles.err")"
    python3 - "$tmp/whole" "$tmp/tiles" $dt <<'PY' || fail "MLP in tiles: $model $dt on $np ranks, optimizer $opt, params $par $extra (above)"
import json, sys
whole, tiles = ([json.loads(l)["loss"] for l in open(f)][:-1] for f in sys.argv[1:3])
tol = 1e-6 if sys.argv[3] == "fp32" else 2e-3
assert all(abs(a - b) <= tol * abs(a) for a, b in zip(whole, tiles)), (whole, tiles)
PY
  done
done
[ $fails = $before ] && echo "tiles: the MLP in tiles within rounding of gathered whole, Llama's and GPT-2's, every tier, 1 and 2 ranks, qwZ, hpZ, MiCS, checkpoints"

# Below stage 3 every module is whole on the device: refused, naming the key.
expect 2 "$Z" check "$tmp/cfg.json" --set memory.tile_bound=6144 --set $ZO.stage=2
grep -q 'memory.tile_bound: 6144 needs zero_optimization.stage 3' "$tmp/err" || fail "stage 2: $(cat "$tmp/err")"

finish test_tiles
