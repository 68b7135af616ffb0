#!/usr/bin/env bash
# The memory-centric features: the device's peak and the step's time with and without
# each. On the host backend, a Llama with a vocabulary wide against its width (6 layers
# of 256, vocab 32768, tied), micro-batch 4 x 512 tokens, stage 3 with both tiers on
# NVMe: the output layer with all 2048 tokens' logits at once (128 MiB in bf16) and in
# chunks of 256 (memory.head_chunk_tokens); median s/step over the steps after the
# first two, the peak as train measured it, and the two runs' final losses; then with
# activation checkpointing, the checkpoints on the device against in pinned host memory
# (activation_checkpointing.cpu_checkpointing; the digests must be identical, exit 1
# otherwise); then untied, the embedding and the head gathered whole against in tiles of
# 2 M elements (memory.tile_bound: 4 tiles each, a 16 MiB module in bf16), each run held
# to its own planned peak (device.memory_limit: the engine frees a buffer once its stream
# has passed it and waits for that only when the device is full, so without a limit its
# account grows past what it needs), and whether the whole modules fit the tiles' peak;
# then wide MLPs (intermediate 8192: 6.3 M elements each) at 4 x 128 tokens, the MLPs in
# tiles beside the embedding and the head against every module gathered whole, held the
# same way.
# Then Llama-3.1-8B and a Llama-3.2-3B at 4096 tokens, both tiers on NVMe,
# as zinf estimate plans them for a 24 GB device (the sim's rtx4090): the device peak
# with each feature and without. ZINF_BENCH_DIR (default /var/tmp) should sit on the
# drive offload uses.
set -eu
Z=${ZINF_BUILD:-build}/zinf
base=${ZINF_BENCH_DIR:-/var/tmp}
dir=$base/zinf-bench-memory-$$
[ -x "$Z" ] || { echo "bench_memory: $Z is missing (make builds it)"; exit 1; }
mkdir -p "$dir/nvme"
trap 'rm -rf "$dir"' EXIT
trap 'exit 130' INT TERM

python3 -c "import random, array, sys; r = random.Random(1); \
open(sys.argv[1], 'wb').write(array.array('H', (r.randrange(32768) for _ in range(262144))).tobytes())" "$dir/t.tokens"
steps=6 skip=2
cat > "$dir/l.json" <<JSON
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4, "seed": 1, "steps": $steps, "steps_per_print": 1,
 "gradient_clipping": 1.0, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-4}},
 "zero_optimization": {"stage": 3, "sub_group_size": 1e7,
   "offload_optimizer": {"device": "nvme", "nvme_path": "$dir/nvme"},
   "offload_param": {"device": "nvme", "nvme_path": "$dir/nvme", "max_in_cpu": 0}},
 "model": {"arch": "llama", "n_layer": 6, "n_head": 4, "n_kv_head": 2, "head_dim": 64, "n_embd": 256,
   "intermediate_size": 688, "vocab_size": 32768, "block_size": 512},
 "data": {"path": "$dir/t.tokens", "format": "tokens-u16", "seq_len": 512},
 "device": {"backend": "host"}}
JSON
run() { # name, sets...: one run, its --json lines in $dir/NAME.out
  local name=$1; shift
  "$Z" train "$dir/l.json" --json "$@" > "$dir/$name.out" 2> "$dir/$name.err" || {
    echo "bench_memory: the $name run failed; stderr ends:"; tail -n 15 "$dir/$name.err" | sed 's/^/  /'; exit 1; }
}
run once --set memory.head_chunk_tokens=2048
run chunks --set memory.head_chunk_tokens=256
run ckdev --set memory.head_chunk_tokens=256 --set activation_checkpointing='{}'
run ckhost --set memory.head_chunk_tokens=256 --set activation_checkpointing='{"cpu_checkpointing": true}'
untied=(--set memory.head_chunk_tokens=256 --set model.tie_word_embeddings=false)
tiles=(--set memory.tile_bound=2097152)
planned() { "$Z" estimate --config "$dir/l.json" --json "$@" | tail -n 1 | python3 -c 'import json, sys; print(json.load(sys.stdin)["device_peak_bytes"])'; }
whole_peak=$(planned "${untied[@]}") tiles_peak=$(planned "${untied[@]}" "${tiles[@]}")
run whole "${untied[@]}" --set device.memory_limit=$whole_peak
run tiles "${untied[@]}" "${tiles[@]}" --set device.memory_limit=$tiles_peak
echo $whole_peak > "$dir/whole.limit"; echo $tiles_peak > "$dir/tiles.limit"
"$Z" train "$dir/l.json" --steps 1 "${untied[@]}" --set device.memory_limit=$tiles_peak > "$dir/short.out" 2>&1 &&
  echo "whole at the tiles' peak: ran" > "$dir/short.txt" ||
  { echo -n "whole at the tiles' peak: "; grep -o 'the plan does not fit: the device.s peak [^:]*' "$dir/short.out"; } > "$dir/short.txt"
wide=("${untied[@]}" --set model.intermediate_size=8192 --set data.seq_len=128)
wide_whole=$(planned "${wide[@]}") wide_tiles=$(planned "${wide[@]}" "${tiles[@]}")
run wwhole "${wide[@]}" --set device.memory_limit=$wide_whole
run wtiles "${wide[@]}" "${tiles[@]}" --set device.memory_limit=$wide_tiles
echo $wide_whole > "$dir/wwhole.limit"; echo $wide_tiles > "$dir/wtiles.limit"
plan() { # name, preset, sets...: the config's plan object of zinf estimate on a sim rtx4090
  local name=$1 preset=$2; shift 2
  "$Z" estimate --config "$dir/l.json" --json --set model="{\"preset\": \"$preset\"}" --set data.seq_len=4096 \
    --set train_micro_batch_size_per_gpu=1 --set train_batch_size=1 --set activation_checkpointing='{}' \
    --set data.format=tokens-u32 --set device.backend=sim --set device.sim.gpu=rtx4090 "$@" | tail -n 1 > "$dir/$name.plan" || {
    echo "bench_memory: estimate of $preset failed"; exit 1; }
}
plan 3b llama-3.2-3b
plan 8b llama-3.1-8b
PYTHONPATH="$(dirname "$0")" python3 - "$dir" "$skip" <<'PY'
import json, sys
from steps import load, med
d, skip = sys.argv[1], int(sys.argv[2])
MiB, GiB = 2**20, 2**30
print(f"output layer in chunks, host backend, llama 6 x 256 vocab 32768, 4 x 512 tokens; median of steps {skip + 1}-")
print("%-26s %8s %12s %10s" % ("head", "s/step", "device peak", "last loss"))
rows = {}
for name, what in (("once", "all 2048 tokens at once"), ("chunks", "chunks of 256 tokens")):
    st, fin = load(f"{d}/{name}.out")
    peak = max(s["device_peak_bytes"] for s in st)
    rows[name] = (med(st, "step_seconds", skip), peak)
    print("%-26s %8.3f %8.1f MiB %10.4f" % (what, rows[name][0], peak / MiB, st[-1]["loss"]))
print("chunks / at once: step %.3f, device peak %.3f" % (rows["chunks"][0] / rows["once"][0],
                                                         rows["chunks"][1] / rows["once"][1]))
print("with activation checkpointing (head in chunks of 256):")
print("%-26s %8s %12s %12s" % ("checkpoints", "s/step", "device peak", "pinned"))
digests = []
for name, what in (("ckdev", "on the device"), ("ckhost", "in pinned host memory")):
    st, fin = load(f"{d}/{name}.out")
    rows[name] = (med(st, "step_seconds", skip), max(s["device_peak_bytes"] for s in st))
    digests.append(fin["weights_digest"])
    print("%-26s %8.3f %8.1f MiB %8.1f MiB" % (what, rows[name][0], rows[name][1] / MiB, st[-1]["pinned_bytes"] / MiB))
print("host / device: step %.3f, device peak %.3f; weights digests %s" % (
    rows["ckhost"][0] / rows["ckdev"][0], rows["ckhost"][1] / rows["ckdev"][1],
    "identical" if digests[0] == digests[1] else "DIFFERENT: %s %s" % tuple(digests)))
def held(title, runs): # runs each held to its planned peak: whole, then in tiles
    print("%-26s %8s %12s %12s %10s" % (title, "s/step", "planned", "measured", "last loss"))
    for name, what in runs:
        st, fin = load(f"{d}/{name}.out")
        limit = int(open(f"{d}/{name}.limit").read())
        rows[name] = (med(st, "step_seconds", skip), limit)
        print("%-26s %8.3f %8.1f MiB %8.1f MiB %10.4f" % (what, rows[name][0], limit / MiB,
                                                       max(s["device_peak_bytes"] for s in st) / MiB, st[-1]["loss"]))
    (w, _), (t, _) = runs
    print("tiles / whole: step %.3f, planned device peak %.3f" % (rows[t][0] / rows[w][0], rows[t][1] / rows[w][1]))
print("untied, head in chunks of 256 tokens, each run held to its planned peak (device.memory_limit):")
held("embedding and head", (("whole", "gathered whole"), ("tiles", "in 4 tiles each")))
print(open(f"{d}/short.txt").read().strip())
print("and MLPs of 8192 (6 x 6.3 M elements), 4 x 128 tokens:")
held("embedding, head and MLPs", (("wwhole", "gathered whole"), ("wtiles", "in tiles of 2 M")))
print("planned on a 24 GB device (sim rtx4090), 1 x 4096 tokens, activation checkpointing, both tiers on nvme:")
for name, model in (("3b", "Llama-3.2-3B"), ("8b", "Llama-3.1-8B")):
    p = json.load(open(f"{d}/{name}.plan"))
    print("  %-13s output layer in chunks of %5d tokens: device peak %.2f GiB; all at once: %.2f GiB (capacity %.1f GiB)"
          % (model, p["head_chunk_tokens"], p["device_peak_head_chunked_bytes"] / GiB,
             p["device_peak_head_at_once_bytes"] / GiB, p["device_capacity_bytes"] / GiB))
    print("  %-13s checkpoints in host memory: device peak %.2f GiB; on the device: %.2f GiB"
          % ("", p["device_peak_ckpt_host_bytes"] / GiB, p["device_peak_ckpt_device_bytes"] / GiB))
    if "device_peak_tiled_bytes" in p: # stage 3: an eighth of the embedding as the bound
        print("  %-13s embedding, head and MLPs in tiles: device peak %.2f GiB; gathered whole: %.2f GiB"
              % ("", p["device_peak_tiled_bytes"] / GiB, p["device_peak_untiled_bytes"] / GiB))
sys.exit(0 if digests[0] == digests[1] else 1)
PY
