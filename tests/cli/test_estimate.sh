#!/usr/bin/env bash
# zinf estimate: its figures are what zinf train measures, and its verdict what the
# engine does. For a tiny GPT on the host backend at stages 0-3, with the optimizer on
# the device, cpu and nvme, the parameters on cpu and nvme at stage 3, on 1 and 2 ranks
# (mpirun -np 2), the estimate's plan lines are the ones train prints before it
# allocates, word for word (the verdict's host memory aside: what is available moves);
# pinned_bytes and nvme_bytes of every step, nvme_read_bytes and nvme_write_bytes of
# every step after the first (the first has no trace and, at stage 3, no update of its
# own yet; a slice the update handed to the pool counts as read) and the final gathered_peak_bytes are the estimate's to the byte. The device
# peak and the pinned bytes are held exactly by the engine's own account: with
# device.memory_limit at the estimated peak and device.pinned_memory_limit at the
# estimated pinned bytes, training runs to the same weights digest; 256 device bytes
# (one allocation unit) or one pinned byte less, train refuses the plan before it
# allocates, and the example program, which makes the engine without asking the plan,
# runs out; with super_offload (on cpu by default, asked for on nvme), whose pinned held parameters
# take what the plan leaves, one pinned byte less trains the same within it. (Creation itself fails on any difference between what it takes and the
# plan.) Without a limit the measured peak only bounds the estimate from above: the
# engine frees a buffer once the stream has passed it, and waits for that only when the
# device is full, so how much freed memory is still held depends on timing. The
# traffic over PCIe has no counter in the engine and is not checked here. Also: the
# --params rows with their verdicts, --json, and usage errors (exit 2 naming the option).
# timeout: 230 san=350 cuda-emu=160
# backend: host: its runs name the host backend, its plans are the host's
set -u
Z=${ZINF_BUILD:-build}/zinf
EX=${ZINF_BUILD:-build}/examples/train_loop
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
tokens "$tmp/train.tokens"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mkdir -p "$tmp/nvme"

# ---- usage ----
expect 2 "$Z" estimate
grep -q -- '--params N or --config' "$tmp/err" || fail "no input: $(cat "$tmp/err")"
expect 2 "$Z" estimate --params 1B --config "$tmp/none.json"
grep -q -- '--params and --config' "$tmp/err" || fail "both: $(cat "$tmp/err")"
expect 2 "$Z" estimate --params -5
grep -q -- '--params: "-5"' "$tmp/err" || fail "negative count: $(cat "$tmp/err")"
expect 2 "$Z" estimate --params 1.5X
grep -q -- '--params' "$tmp/err" || fail "bad count: $(cat "$tmp/err")"
expect 2 "$Z" estimate --config "$tmp/none.json"
grep -q -- "--config: .*$tmp/none.json" "$tmp/err" || fail "unreadable config: $(cat "$tmp/err")"
echo '{"train_batch_size": 4}' > "$tmp/nomodel.json"
expect 2 "$Z" estimate --config "$tmp/nomodel.json"
grep -q -- '--config: .*no "model" section' "$tmp/err" || fail "no model: $(cat "$tmp/err")"
expect 2 "$Z" estimate --params 1B --gpus-per-node 0
grep -q -- '--gpus-per-node' "$tmp/err" || fail "0 GPUs: $(cat "$tmp/err")"
expect 2 "$Z" estimate --params 1B --nodes x
grep -q -- '--nodes' "$tmp/err" || fail "bad nodes: $(cat "$tmp/err")"
expect 2 "$Z" estimate --params 1B --set zero_optimization.stage=7
grep -q -- '--params: zero_optimization.stage: expected an integer from 0 to 3, got 7' "$tmp/err" ||
  fail "--params with a bad --set: $(cat "$tmp/err")"
expect 0 "$Z" estimate --params 124M --set device.memory_limit=24GB
grep -q '^Fits: a device of 24 GiB;' "$tmp/out" || fail "--params with --set device.memory_limit: $(head -3 "$tmp/out")"
grep -q 'reduce_bucket_size 50000000 (chosen for this device: the config leaves it out)' "$tmp/out" ||
  fail "the header's reduce_bucket_size is not the one the rows use: $(sed -n 2p "$tmp/out")"
expect 0 "$Z" estimate --help
grep -q 'zinf estimate (--params N | --config CONFIG.json)' "$tmp/out" || fail "--help: $(cat "$tmp/out")"

# ---- --params: GPT-2's shape at 124M, a row per stage and tier, the same as the config ----
expect 0 "$Z" estimate --params 124M
grep -q '^GPT n_layer 12 n_head 12 n_embd 768 vocab 50257 block 1024 (124439808 parameters), bf16' "$tmp/out" ||
  fail "124M is not gpt2: $(head -1 "$tmp/out")"
[ "$(grep -c '^[0-3] ' "$tmp/out")" = 16 ] || fail "want 16 rows: $(cat "$tmp/out")"
expect 0 "$Z" estimate --params 124M --json --gpus-per-node 4 --nodes 2
cp "$tmp/out" "$tmp/p.json"
echo '{"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}, "model": {"preset": "gpt2"}}' > "$tmp/gpt2.json"
expect 0 "$Z" estimate --config "$tmp/gpt2.json" --json --gpus-per-node 4 --nodes 2
head -n 16 "$tmp/out" | cmp -s - "$tmp/p.json" || fail "--params 124M and the gpt2 preset differ"
python3 - "$tmp/p.json" <<'PY' || fail "--params rows: $(head -c 600 "$tmp/p.json")"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
keys = ("stage optimizer params world_size model_numel partition_numel device_bytes device_peak_bytes "
        "gathered_peak_bytes pinned_bytes pageable_bytes nvme_bytes activation_bytes pcie_h2d_bytes pcie_d2h_bytes "
        "nvme_read_bytes nvme_write_bytes comm_bytes_intra comm_bytes_inter tiled fits params16_bytes master_bytes "
        "optim_states_bytes grads32_bytes optimizer_device_numel reduce_bucket_bytes accumulated_grads_bytes staging_bytes reduce_bucket_size").split()
assert len(rows) == 16, len(rows)
tiers = [(r["stage"], r["optimizer"], r["params"]) for r in rows]
want = [(0, "none", "none")] + [(s, o, "none") for s in (1, 2) for o in ("none", "cpu", "nvme")] + \
       [(3, o, p) for o in ("none", "cpu", "nvme") for p in ("none", "cpu", "nvme")]
assert tiers == want, tiers
for r in rows:
    assert list(r) == keys, list(r)
    assert all(isinstance(r[k], int) for k in keys if k not in ("optimizer", "params", "tiled", "fits")), r
    assert r["fits"] is None, r  # a GPU of a capacity not known
    assert r["world_size"] == 8 and r["model_numel"] == 124439808, r
    assert r["device_peak_bytes"] >= r["device_bytes"] > r["activation_bytes"] > 0, r
    # each row's model states: fp32 master, two moments and fp32 gradients of its partition
    assert r["master_bytes"] == r["grads32_bytes"] == 4 * r["partition_numel"] and \
        r["optim_states_bytes"] == 2 * r["master_bytes"], r
    # DeepSpeed's 5e8 where the device's capacity is not known; two fp32 buckets at most
    assert r["reduce_bucket_size"] == 500000000 and 0 < r["reduce_bucket_bytes"] <= 8 * r["reduce_bucket_size"], r
row = {t: r for t, r in zip(tiers, rows)}
# Stage 0 keeps the whole padded model per rank; stages 1-3 an eighth of it.
assert row[0, "none", "none"]["partition_numel"] == 8 * row[1, "none", "none"]["partition_numel"] >= 124439808
# Each stage needs less on the device (stages 1 and 2 alike with one micro-batch a step:
# both reduce the gradients bucket by bucket into the partition's fp32 gradient; stage 1
# keeps a whole gradient only to sum several); offloading needs less still and moves
# bytes instead.
assert all(r["accumulated_grads_bytes"] == 0 for r in rows), rows
dev = lambda *t: row[t]["device_bytes"]
assert dev(0, "none", "none") > dev(1, "none", "none") == dev(2, "none", "none") > dev(3, "none", "none"), rows
assert dev(3, "none", "none") > dev(3, "cpu", "none") > dev(3, "cpu", "cpu"), rows
assert row[1, "none", "none"]["pcie_d2h_bytes"] == 0 and row[1, "cpu", "none"]["pcie_d2h_bytes"] > 0, rows
# nvme: three fp32 states of the partition on disk, read and written once a step.
n = row[2, "nvme", "none"]
assert n["nvme_read_bytes"] == n["nvme_write_bytes"] == 12 * n["partition_numel"] <= n["nvme_bytes"], n
print("--params 124M on 8 ranks: 16 rows, gpt2's shape, the gpt2 preset's figures")
PY
# Four micro-batches a step: stage 1 sums the whole fp32 gradient on the device and
# reduce-scatters it once, stage 2 every micro-batch (the ZeRO paper's P_os and P_os+g).
expect 0 "$Z" estimate --config "$tmp/gpt2.json" --json --gpus-per-node 4 --nodes 2 --set train_batch_size=32
python3 - "$tmp/out" <<'PY' || fail "stage 1 over 4 micro-batches: $(head -c 600 "$tmp/out")"
import json, sys
rows = {(r["stage"], r["optimizer"], r["params"]): r for r in map(json.loads, open(sys.argv[1])) if "stage" in r}
one, two = rows[1, "none", "none"], rows[2, "none", "none"]
padded = one["partition_numel"] * 8
assert one["accumulated_grads_bytes"] == 4 * padded and two["accumulated_grads_bytes"] == 0, (one, two)
assert one["device_bytes"] - two["device_bytes"] >= 4 * padded, (one, two)
# Per step the reduce-scatter brings rank 0 its fp32 slice from each of the 7 others
# once (4 times at stage 2); the new parameters' all-gather and the norms are alike.
grads = lambda r: r["comm_bytes_intra"] + r["comm_bytes_inter"]
assert grads(two) - grads(one) == 3 * 7 * 4 * one["partition_numel"], (grads(one), grads(two))
print("stage 1 over 4 micro-batches: %.0f MiB more on the device than stage 2, %.0f MiB less received per step"
      % ((one["device_bytes"] - two["device_bytes"]) / 2**20, (grads(two) - grads(one)) / 2**20))
PY
# The verdict: against a 2 GiB device and a 100 MiB pinned budget, a row fits when its
# device peak and its pinned bytes are within them (this machine's host memory holds
# every row), and the plan line gives the budgets it was judged against.
expect 0 "$Z" estimate --config "$tmp/gpt2.json" --json --gpus-per-node 4 --nodes 2 \
  --set device.memory_limit=2GiB --set device.pinned_memory_limit=100MiB
python3 - "$tmp/out" <<'PY' || fail "verdicts: $(head -c 600 "$tmp/out")"
import json, sys
*rows, plan = [json.loads(l) for l in open(sys.argv[1])]
G, M = 1 << 30, 1 << 20
assert plan["device_capacity_bytes"] == 2 * G and plan["pinned_budget_bytes"] == 100 * M, plan
assert all(r["pinned_bytes"] + r["pageable_bytes"] < plan["host_available_bytes"] for r in rows), plan
for r in rows:
    assert r["fits"] == (r["device_peak_bytes"] <= 2 * G and r["pinned_bytes"] <= 100 * M), r
verdicts = {r["fits"] for r in rows}
assert verdicts == {True, False}, verdicts
print("verdicts: %d of %d rows fit a 2 GiB device with 100 MiB pinned" % (sum(r["fits"] for r in rows), len(rows)))
PY

# ---- against zinf train ----
# A tiny GPT (tests/cli/test_offload.sh's): sub-groups of at most 40000 elements, and with
# parameters on nvme the embeddings in host memory (max_in_cpu) and the rest read
# through 3 buffers. The pinned budget is set so that the plan's text is the machine's
# own nowhere; micro-batches of 4 keep every engine past device.memory_limit's 1 MiB floor.
# The output layer runs in chunks of 48 of the 128 tokens, given: left to zinf, the
# chunk would follow device.memory_limit, which the checks below move.
cat > "$tmp/cfg.json" <<JSON
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4, "seed": 5, "steps": 3, "steps_per_print": 10,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
 "zero_optimization": {"stage": 0, "reduce_bucket_size": 60000, "sub_group_size": 40000,
   "offload_optimizer": {"device": "none", "nvme_path": "$tmp/nvme"},
   "offload_param": {"device": "none", "nvme_path": "$tmp/nvme", "max_in_cpu": 20000, "buffer_count": 3}},
 "model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 256, "block_size": 32},
 "data": {"path": "$tmp/train.tokens", "format": "tokens-u16", "seq_len": 32},
 "device": {"backend": "host", "pinned_memory_limit": "1G"}, "memory": {"head_chunk_tokens": 48}}
JSON

# compare NP SETTING...: train 3 steps on NP ranks with the settings (key=value) and hold
# the estimate to what it measured.
compare() {
  local np=$1; shift
  local sets=() s
  for s in "$@"; do sets+=(--set "$s"); done
  local what="$np rank(s), $*" launch=()
  [ "$np" = 1 ] || launch=(mpirun -np "$np")
  "${launch[@]}" "$Z" train "$tmp/cfg.json" --json "${sets[@]}" > "$tmp/t.json" 2> "$tmp/t.err" ||
    { fail "$what: train: $(tail -c 400 "$tmp/t.err")"; return; }
  "$Z" estimate --config "$tmp/cfg.json" --gpus-per-node "$np" --json "${sets[@]}" > "$tmp/e.json" 2> "$tmp/e.err" &&
    "$Z" estimate --config "$tmp/cfg.json" --gpus-per-node "$np" "${sets[@]}" > "$tmp/e.txt" 2>> "$tmp/e.err" ||
    { fail "$what: estimate: $(cat "$tmp/e.err")"; return; }
  # Seven lines word for word; the verdict's host memory is what is available now.
  sed -n '/^plan:/,+6p' "$tmp/e.txt" > "$tmp/e.plan"
  sed -n '/^plan:/,+6p' "$tmp/t.err" > "$tmp/t.plan"
  cmp -s "$tmp/e.plan" "$tmp/t.plan" || fail "$what: plan lines differ: $(diff "$tmp/e.plan" "$tmp/t.plan")"
  grep -q '^  verdict: fits: device peak ' "$tmp/e.txt" && grep -q '^  verdict: fits: device peak ' "$tmp/t.err" ||
    fail "$what: no verdict: $(grep verdict "$tmp/e.txt" "$tmp/t.err")"
  python3 - "$tmp/t.json" "$tmp/e.json" <<'PY' || fail "$what: the step figures"
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1])]
est = json.loads(open(sys.argv[2]).readlines()[-1])
assert est["plan"] is True, est
bad = []
# The host memory the plan names adds up to its total: the optimizer tier's parts, then
# the tiers, the staging and the activation checkpoints.
cpu = est["optimizer"] == "cpu"
tier = est["optimizer"] != "none" and (est["grads32_bytes"] + (est["master_bytes"] + est["optim_states_bytes"] if cpu else 0)
        + est["optim_output_bytes"] + est["optim_swap_buffer_bytes"] + est["optim_speculation_bytes"])
if est["optimizer"] != "none" and tier != est["optimizer_host_bytes"]:
    bad.append(f"the optimizer tier's parts sum to {tier}, its host bytes are {est['optimizer_host_bytes']}")
for s in steps[:-1]:
    # A slice the update handed to the parameter pool is a read the step did not make.
    s["nvme_read_bytes"] += s["param_handoff_bytes"]
    for k in ("pinned_bytes", "nvme_bytes") + (("nvme_read_bytes", "nvme_write_bytes") if s["step"] > 1 else ()):
        if s[k] != est[k]: bad.append(f"step {s['step']} {k} {s[k]}, estimated {est[k]}")
    if s["device_peak_bytes"] < est["device_peak_bytes"]:
        bad.append(f"step {s['step']} device_peak_bytes {s['device_peak_bytes']} below the estimated least {est['device_peak_bytes']}")
f = steps[-1]
if f["gathered_peak_bytes"] != est["gathered_peak_bytes"]:
    bad.append(f"gathered_peak_bytes {f['gathered_peak_bytes']}, estimated {est['gathered_peak_bytes']}")
assert not bad, "; ".join(bad)
open(sys.argv[2] + ".sh", "w").write(f"peak={est['device_peak_bytes']} pinned={est['pinned_bytes']} digest={f['weights_digest']}\n")
PY
  [ -f "$tmp/e.json.sh" ] || return
  local peak pinned digest
  . "$tmp/e.json.sh"
  rm -f "$tmp/e.json.sh"
  # Within the estimated device peak and pinned bytes, the same training.
  local at=(--set device.memory_limit=$peak --set device.pinned_memory_limit=$pinned)
  "${launch[@]}" "$Z" train "$tmp/cfg.json" --json "${sets[@]}" "${at[@]}" > "$tmp/l.out" 2> "$tmp/l.err" ||
    fail "$what: failed within the estimated peak of $peak device and $pinned pinned bytes: $(tail -n 2 "$tmp/l.err")"
  grep -q "\"weights_digest\":\"$digest\"" "$tmp/l.out" || fail "$what: another digest within $peak device bytes"
  # One allocation unit less device or one byte less pinned memory: train refuses the
  # plan before it allocates, and a program that makes the engine without asking the
  # plan (the example) runs out of it.
  local short
  local shorts=("device.memory_limit=$((peak - 256)) the device's peak")
  [ "$pinned" = 0 ] || shorts+=("device.pinned_memory_limit=$((pinned - 1)) pinned host memory")
  for short in "${shorts[@]}"; do
    local set=${short%% *} says=${short#* }
    # With super_offload its held parameters take the pinned bytes
    # the plan leaves: a byte less, the plan holds fewer, and trains the same within it.
    if [[ $set == device.pinned_memory_limit=* && ( " ${sets[*]} " == *"offload_optimizer.device=cpu "* ||
      " ${sets[*]} " == *"offload_optimizer.super_offload=true "* ) &&
      " ${sets[*]} " != *"offload_optimizer.pin_memory=false "* ]]; then
      "${launch[@]}" "$Z" train "$tmp/cfg.json" --json "${sets[@]}" "${at[@]}" --set "$set" > "$tmp/l.out" 2> "$tmp/l.err" ||
        { fail "$what: with $set the plan did not make room: $(tail -n 2 "$tmp/l.err")"; continue; }
      grep -q "\"weights_digest\":\"$digest\"" "$tmp/l.out" || fail "$what: another digest with $set"
      python3 -c "import json, sys; s = [json.loads(l) for l in open(sys.argv[1])]
assert all(x['pinned_bytes'] < $pinned for x in s if 'step' in x), s" \
        "$tmp/l.out" || fail "$what: more pinned bytes than $set"
      continue
    fi
    "${launch[@]}" "$Z" train "$tmp/cfg.json" --json "${sets[@]}" "${at[@]}" --set "$set" > "$tmp/l.out" 2> "$tmp/l.err" &&
      fail "$what: trained with $set"
    grep -q "the plan does not fit: $says" "$tmp/l.err" || fail "$what: train with $set: $(tail -n 2 "$tmp/l.err")"
    "$Z" check "$tmp/cfg.json" --world-size "$np" "${sets[@]}" "${at[@]}" --set "$set" > "$tmp/short.json" 2> "$tmp/l.err" ||
      { fail "$what: check with $set"; continue; }
    "${launch[@]}" "$EX" "$tmp/short.json" > "$tmp/l.out" 2> "$tmp/l.err" && fail "$what: the example ran with $set"
    grep -q 'does not fit\|pinned budget' "$tmp/l.err" || fail "$what: the example with $set: $(tail -n 2 "$tmp/l.err")"
  done
}

OO=zero_optimization.offload_optimizer OP=zero_optimization.offload_param
# The coordinator's choices: every module released after use unless used again within
# 20000 elements, gathered up to 30000 elements ahead, blocks recomputed in backward.
CO=(zero_optimization.stage3_param_persistence_threshold=0 zero_optimization.stage3_max_reuse_distance=20000
    zero_optimization.stage3_prefetch_bucket_size=30000)
before=$fails
compare 1 zero_optimization.stage=0
compare 1 zero_optimization.stage=2 bf16.enabled=true $OO.device=cpu $OO.pin_memory=false
compare 1 zero_optimization.stage=2 $OO.device=nvme
compare 1 zero_optimization.stage=3 $OO.device=nvme $OO.super_offload=true
compare 1 zero_optimization.stage=3 bf16.enabled=true "${CO[@]}" 'activation_checkpointing={}'
compare 1 zero_optimization.stage=3 $OO.device=nvme $OP.device=nvme
compare 1 zero_optimization.stage=3 bf16.enabled=true $OO.device=cpu 'activation_checkpointing={"cpu_checkpointing":true}'
compare 1 zero_optimization.stage=3 bf16.enabled=true $OP.device=nvme "${CO[@]}"
compare 1 zero_optimization.stage=3 bf16.enabled=true $OO.device=cpu $OP.device=cpu $OP.pin_memory=false
# An untied Llama's embedding and head (256 x 64 each) and its MLPs (64 x 128) in tiles of 4096 elements, their
# slices on disk.
TL=(model.arch=llama model.intermediate_size=128 model.tie_word_embeddings=false memory.tile_bound=4096)
compare 1 zero_optimization.stage=3 "${TL[@]}" $OP.device=nvme $OP.max_in_cpu=0 "${CO[@]}"
compare 2 zero_optimization.stage=3 bf16.enabled=true "${TL[@]}" $OO.device=cpu
# GPT-2's embedding with its tied head in tiles (reduced after the head's backward and after its own).
compare 2 zero_optimization.stage=3 memory.tile_bound=8192 $OP.device=cpu
# Files striped over two paths in units of aio.block_size; no read-ahead; every slice on disk.
mkdir -p "$tmp/nvme2"
compare 1 zero_optimization.stage=3 $OO.device=nvme $OP.device=nvme "$OO.nvme_path=[\"$tmp/nvme\",\"$tmp/nvme2\"]" \
  aio.block_size=65536 $OO.pipeline_read=false $OP.max_in_cpu=0
compare 2 zero_optimization.stage=1
compare 2 zero_optimization.stage=1 train_micro_batch_size_per_gpu=2 $OO.device=cpu
compare 2 zero_optimization.stage=2 bf16.enabled=true $OO.device=nvme
compare 2 zero_optimization.stage=3 $OO.device=nvme $OP.device=nvme "${CO[@]}"
[ $fails = $before ] && echo "train: plan lines, pinned, NVMe files and traffic, gathered peak and the device bytes as estimated"

# Left out, the chunk is zinf's: all 128 tokens at once while that plan leaves an eighth
# of the device free (6 MiB: a 4.1 MiB peak), else the most tokens, a multiple of 64,
# whose logits (1 KiB a token in fp32) fit 1/64 of the device: 64 of 4.5 MiB's 73728
# bytes. Train chooses the same, and the estimate shows the peak with the logits of all
# 128 tokens at once.
before=$fails
expect 0 "$Z" estimate --config "$tmp/cfg.json" --json --set memory.head_chunk_tokens=null --set device.memory_limit=6MiB
python3 -c 'import json, sys; p = json.loads(open(sys.argv[1]).readlines()[-1]); assert p["head_chunk_tokens"] == 128, p' \
  "$tmp/out" || fail "6 MiB: the head's chunk is not all 128 tokens (above)"
sets=(--set memory.head_chunk_tokens=null --set device.memory_limit=4608KiB)
expect 0 "$Z" estimate --config "$tmp/cfg.json" "${sets[@]}"
chosen='chosen for this machine (the config leaves them out): memory.head_chunk_tokens 64 (the logits of all 128 tokens at once would take 128 KiB, leaving less than an eighth of the device free)'
grep -qF "$chosen" "$tmp/out" || fail "estimate's choice: $(grep chosen "$tmp/out")"
grep -q '^    output layer in chunks of 64 tokens (memory.head_chunk_tokens): .*; all 128 at once: ' "$tmp/out" ||
  fail "estimate's features: $(grep -A2 'memory-centric' "$tmp/out")"
expect 0 "$Z" train "$tmp/cfg.json" --steps 1 "${sets[@]}"
grep -qF "$chosen" "$tmp/out" || fail "train's choice: $(grep chosen "$tmp/out")"
expect 0 "$Z" estimate --config "$tmp/cfg.json" --json "${sets[@]}"
python3 - "$tmp/out" <<'PY' || fail "estimate --json's head chunk (above)"
import json, sys
p = json.loads(open(sys.argv[1]).readlines()[-1])
assert p["head_chunk_tokens"] == 64, p["head_chunk_tokens"]
# 128 - 64 tokens' logits fewer, in 256-byte allocation units.
saved = p["device_peak_head_at_once_bytes"] - p["device_peak_head_chunked_bytes"]
assert saved == 64 * 1024, saved
PY
[ $fails = $before ] && echo "choice: the head's chunk from the plan and device.memory_limit, in estimate and train alike"

# With the optimizer on cpu, sub-groups of at most 1/16 of the partition where the
# config leaves sub_group_size out: GPT-2 large's 774 M elements on one rank take 3e7,
# on 8 ranks (97 M each) 1e7; a partition smaller than the pick is one sub-group
# either way and nothing is chosen; a given size is kept.
before=$fails
echo '{"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}, "model": {"preset": "gpt2-large"},
 "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": false}}}' > "$tmp/large.json"
why="(with 1e9 the next forward would wait for the whole update, not just its first sub-group)"
expect 0 "$Z" estimate --config "$tmp/large.json"
grep -qF "sub_group_size 30000000 $why" "$tmp/out" || fail "cpu sub-groups on 1 rank: $(grep chosen "$tmp/out")"
expect 0 "$Z" estimate --config "$tmp/large.json" --gpus-per-node 8
grep -qF "sub_group_size 10000000 $why" "$tmp/out" || fail "cpu sub-groups on 8 ranks: $(grep chosen "$tmp/out")"
sed 's/"sub_group_size": 40000,//' "$tmp/cfg.json" > "$tmp/tiny.json"
expect 0 "$Z" estimate --config "$tmp/tiny.json" --set zero_optimization.stage=2 \
  --set zero_optimization.offload_optimizer.device=cpu
! grep -q "sub_group_size [0-9]* (with" "$tmp/out" || fail "a tiny partition's sub-groups chosen: $(grep chosen "$tmp/out")"
expect 0 "$Z" estimate --config "$tmp/large.json" --set zero_optimization.sub_group_size=1e9
! grep -q "sub_group_size [0-9]* (with" "$tmp/out" || fail "a given sub_group_size replaced: $(grep chosen "$tmp/out")"
[ $fails = $before ] && echo "choice: sub-groups for an optimizer on cpu, by the partition's size"

# offload_optimizer.ratio 0.5: of GPT-2 large's sub-groups on one rank the first half keep
# their states on the device; the plan says so; the device holds their 16 bytes per
# element more, and only the rest's new 16-bit parameters come up.
before=$fails
expect 0 "$Z" estimate --config "$tmp/large.json" --json
tail -n 1 "$tmp/out" > "$tmp/whole.json"
expect 0 "$Z" estimate --config "$tmp/large.json" --set zero_optimization.offload_optimizer.ratio=0.5
grep -q "offload_optimizer.ratio 0.5: the first 1[0-9] sub-groups ([0-9]* elements of the partition) keep" "$tmp/out" ||
  fail "ratio: no plan line: $(grep -i ratio "$tmp/out")"
expect 0 "$Z" estimate --config "$tmp/large.json" --set zero_optimization.offload_optimizer.ratio=0.5 --json
tail -n 1 "$tmp/out" > "$tmp/half.json"
python3 - "$tmp/whole.json" "$tmp/half.json" <<'PY' || fail "ratio: the plan's figures"
import json, sys
whole, half = (json.load(open(f)) for f in sys.argv[1:])
n, part = half["optimizer_device_numel"], half["partition_numel"]
assert whole["optimizer_device_numel"] == 0 and 0.3 * part < n < 0.7 * part, (n, part)
assert half["device_bytes"] - whole["device_bytes"] == 16 * n, (half["device_bytes"], whole["device_bytes"], n)
assert whole["pcie_h2d_bytes"] - half["pcie_h2d_bytes"] == 2 * n, (whole["pcie_h2d_bytes"], half["pcie_h2d_bytes"])
assert half["pcie_d2h_bytes"] < whole["pcie_d2h_bytes"], (half["pcie_d2h_bytes"], whole["pcie_d2h_bytes"])
assert half["pinned_bytes"] + half["pageable_bytes"] < whole["pinned_bytes"] + whole["pageable_bytes"]
PY
[ $fails = $before ] && echo "ratio: the first half of the sub-groups' states on the device, in the plan's figures"

# With --time, a config whose step the CPU's optimizer bounds is told the ratio that
# keeps the least of it on the device for a step within 10% of the fastest ratio's (with
# MiCS too); one with that ratio already, or with nothing offloaded, is told nothing.
before=$fails
timed=(--time --adam 4800 --nvme-read 6 --nvme-write 3)
expect 0 "$Z" estimate --config "$tmp/large.json" "${timed[@]}"
grep -q "the CPU's optimizer bounds the step ([0-9.]* s): offload_optimizer.ratio 0\.[1-9] keeps the first" "$tmp/out" ||
  fail "pace: no ratio named: $(tail -n 3 "$tmp/out")"
expect 0 "$Z" estimate --config "$tmp/large.json" "${timed[@]}" --json
python3 - "$tmp/out" <<'PY' || fail "pace: the plan's figures: $(tail -n 1 "$tmp/out" | head -c 400)"
import json, sys
p = json.loads(open(sys.argv[1]).readlines()[-1])
assert p["bound"] == "cpu optimizer" and 0 < p["pace_ratio"] < 1, p
assert p["pace_ratio_step_seconds"] < 0.95 * p["step_seconds"] and p["pace_ratio_device_peak_bytes"] > p["device_peak_bytes"], p
PY
ratio=$(python3 -c "import json, sys; print(json.loads(open(sys.argv[1]).readlines()[-1])['pace_ratio'])" "$tmp/out")
expect 0 "$Z" estimate --config "$tmp/large.json" "${timed[@]}" --set zero_optimization.offload_optimizer.ratio=$ratio
! grep -q "offload_optimizer.ratio [0-9.]* keeps the first" "$tmp/out" || fail "pace: named again at its own ratio"
expect 0 "$Z" estimate --config "$tmp/large.json" "${timed[@]}" --set zero_optimization.offload_optimizer.device=none
! grep -q "CPU's optimizer bounds" "$tmp/out" || fail "pace: named with nothing offloaded"
# MiCS (shard groups of 2 over 2 nodes of 2) takes a ratio too.
expect 0 "$Z" estimate --config "$tmp/large.json" "${timed[@]}" --gpus-per-node 2 --nodes 2 \
  --set zero_optimization.mics_shard_size=2
grep -q "the CPU's optimizer bounds the step ([0-9.]* s): offload_optimizer.ratio 0\.[1-9] keeps the first" "$tmp/out" ||
  fail "pace: no ratio named with MiCS: $(tail -n 3 "$tmp/out")"
[ $fails = $before ] && echo "pace: the ratio whose step is within 10% of the fastest ratio's, named where the CPU bounds the step"

# --measure times the optimizer's threads over at least 16M elements (four times the
# last-level caches), and says so; a rate --adam gives is printed as given.
expect 0 "$Z" estimate --params 124M --time --measure --nvme-read 1 --nvme-write 1
n=$(grep -o 'elements/s (over [0-9]* M elements)' "$tmp/out" | grep -o '[0-9][0-9]*')
[ -n "$n" ] && [ "$n" -ge 16 ] && [ "$n" -le 256 ] || fail "--measure: the elements: $(grep Rates "$tmp/out")"
expect 0 "$Z" estimate --params 124M --time --measure --adam 2000 --nvme-read 1 --nvme-write 1
grep -q 'optimizer threads: Adam 2000 M elements/s (given)$' "$tmp/out" || fail "--adam: $(grep Rates "$tmp/out")"

# A step that clips updates nothing under the backward: with gradient_clipping the plan
# gives that step too, longer than the one that does not clip; without, nothing.
before=$fails
expect 0 "$Z" estimate --config "$tmp/large.json" "${timed[@]}" --set gradient_clipping=1.0
grep -q "a step that clips (gradient_clipping 1, .*) updates nothing under the backward: [0-9.]* s, against" "$tmp/out" ||
  fail "clipping: no line: $(tail -n 3 "$tmp/out")"
expect 0 "$Z" estimate --config "$tmp/large.json" "${timed[@]}" --set gradient_clipping=1.0 --json
python3 - "$tmp/out" <<'PY' || fail "clipping: the plan's figures: $(tail -n 1 "$tmp/out" | head -c 400)"
import json, sys
p = json.loads(open(sys.argv[1]).readlines()[-1])
assert p["step_seconds_clipping"] > 1.05 * p["step_seconds"], p
PY
expect 0 "$Z" estimate --config "$tmp/large.json" "${timed[@]}" --json
python3 - "$tmp/out" <<'PY' || fail "clipping: a step without clipping: $(tail -n 1 "$tmp/out" | head -c 400)"
import json, sys
p = json.loads(open(sys.argv[1]).readlines()[-1])
assert p["step_seconds_clipping"] == p["step_seconds"], p
PY
! grep -q "a step that clips" "$tmp/out" || fail "clipping: named without gradient_clipping"
[ $fails = $before ] && echo "clipping: the step that clips, longer, named where gradient_clipping is set"

finish test_estimate
