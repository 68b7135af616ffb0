#!/usr/bin/env bash
# Checkpoints. Exact resume: 6 steps, save, load, 4 more give the losses and weights
# digest of 10 uninterrupted steps bit for bit, for every ZeRO stage and offload tier
# on 1 and 2 ranks, in bf16, fp32 and fp16 (the loss scaler's state comes back too),
# and with half the sub-groups' states on the device (offload_optimizer.ratio 0.5),
# saved so and loaded with the whole optimizer on nvme.
# A different world size re-slices: saved by 2 ranks, loaded by 1 and by 3 and saved
# again, then loaded by 2, it still continues bit for bit. checkpoint.keep prunes.
# Corruption (a flipped byte, a truncated file, a deleted rank, another model, a
# broken meta.json) fails naming the file and the tensor. A process killed with
# SIGKILL at random moments of saving always leaves a loadable latest checkpoint, and a
# disk that fills during a save fails clearly and leaves the previous one whole.
# In the reduced matrix (ASan, the emulation: lib.sh) each stage and tier resumes on 1
# or 2 ranks by turns, and 8 saves are killed instead of 20.
# timeout: 420 san=420 cuda-emu=410
set -u
Z=${ZINF_BUILD:-build}/zinf
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
trap 'umount "$tmp/full" 2> /dev/null; rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
tokens "$tmp/train.tokens"
backend=${ZINF_TEST_BACKEND:-host}
mkdir -p "$tmp/nvme"

cat > "$tmp/cfg.json" <<JSON
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "seed": 7, "steps": 10, "steps_per_print": 10,
 "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.95], "weight_decay": 0.1}},
 "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 3, "total_num_steps": 10,
   "warmup_max_lr": 3e-3}},
 "bf16": {"enabled": true},
 "zero_optimization": {"stage": 0, "reduce_bucket_size": 60000, "sub_group_size": 40000,
   "offload_optimizer": {"device": "none", "nvme_path": "$tmp/nvme"},
   "offload_param": {"device": "none", "nvme_path": "$tmp/nvme", "max_in_cpu": 20000, "buffer_count": 3}},
 "model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 256, "block_size": 32},
 "data": {"path": "$tmp/train.tokens", "format": "tokens-u16", "seq_len": 32},
 "device": {"backend": "$backend"}}
JSON
OO=zero_optimization.offload_optimizer OP=zero_optimization.offload_param

# The losses from step k + 1 on and the digest of a run's --json output, one line.
after() {
  python3 - "$1" "$2" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
k = int(sys.argv[2])
print(" ".join(repr(s["loss"]) for s in lines[:-1] if s["step"] > k), lines[-1]["weights_digest"])
PY
}

# resume NAME NP STRAIGHT [--set ...]: 6 steps saved and 4 resumed give the last 4 steps
# of STRAIGHT, the output of the same 10 steps uninterrupted. One straight run serves
# every stage, tier and world size of a dtype: they all give its bits (test_train).
resume() {
  local name=$1 np=$2 straight=$3; shift 3
  rm -rf "$tmp/ck"
  run "$np" "$tmp/$name.a" --steps 6 --set checkpoint.dir="$tmp/ck" "$@"
  run "$np" "$tmp/$name.b" --set checkpoint.dir="$tmp/ck" --set checkpoint.load=latest "$@"
  local want got
  want=$(after "$straight" 6) got=$(after "$tmp/$name.b" 6)
  [ -n "$want" ] && [ "$got" = "$want" ] || fail "$name on $np ranks: resumed $got; straight $want"
  grep -q "resumed from $tmp/ck/global_step6 at step 6" "$tmp/$name.b.err" || fail "$name: no resume line"
}

before=$fails
run 1 "$tmp/bf16.full"
# each NAME [--set ...]: NAME resumed on 1 and 2 ranks; in the reduced matrix (ASan, the
# emulation: lib.sh) on one of them, by turns.
i=0
each() {
  local name=$1 np; shift
  i=$((i + 1))
  for np in $(ranks $i); do resume "$name" $np "$tmp/bf16.full" "$@"; done
}
for stage in 0 1 2; do
  each "s$stage" --set zero_optimization.stage=$stage
done
for stage in 1 2; do
  each "s$stage.cpu" --set zero_optimization.stage=$stage --set $OO.device=cpu
  each "s$stage.nvme" --set zero_optimization.stage=$stage --set $OO.device=nvme
done
for tiers in none/none cpu/cpu nvme/none none/nvme nvme/nvme; do
  each "s3.${tiers/\//.}" --set zero_optimization.stage=3 --set $OO.device=${tiers%/*} --set $OP.device=${tiers#*/}
done
each "s3.cpu.ratio" --set zero_optimization.stage=3 --set $OO.device=cpu --set $OO.ratio=0.5
# Saved with half the sub-groups' states on the device, loaded with all of them on nvme.
rm -rf "$tmp/ck"
run 1 "$tmp/ratio.a" --steps 6 --set checkpoint.dir="$tmp/ck" --set zero_optimization.stage=3 --set $OO.device=cpu \
  --set $OO.ratio=0.5
run 1 "$tmp/ratio.b" --set checkpoint.dir="$tmp/ck" --set checkpoint.load=latest --set zero_optimization.stage=3 \
  --set $OO.device=nvme
[ "$(after "$tmp/ratio.b" 6)" = "$(after "$tmp/bf16.full" 6)" ] ||
  fail "ratio 0.5 -> 1: resumed $(after "$tmp/ratio.b" 6); straight $(after "$tmp/bf16.full" 6)"
fp32=(--set bf16.enabled=false --set zero_optimization.stage=3 --set $OP.device=nvme)
run 2 "$tmp/fp32.full" "${fp32[@]}"
resume fp32.s3 2 "$tmp/fp32.full" "${fp32[@]}"
fp16=(--set bf16.enabled=false --set fp16.enabled=true --set fp16.initial_scale_power=24 --set zero_optimization.stage=2)
run 1 "$tmp/fp16.full" "${fp16[@]}"
resume fp16.s2 1 "$tmp/fp16.full" "${fp16[@]}"
grep -q '"skipped":true' "$tmp/fp16.full" || fail "fp16: no step overflowed, so the scaler's state went untested"
[ $fails = $before ] &&
  echo "exact resume: stages 0-3 x every tier x $(reduced && echo "1 or 2 ranks by turns" || echo "1, 2 ranks"), bf16, fp32, fp16, offload_optimizer.ratio: bit-identical"

# Another world size: 2 ranks save at step 6; 1 (stage 3) and 3 (stage 1) ranks load it
# and save it again at once (no step); 2 ranks load that and finish. Every element
# took a new place in between, so this is bit-identical only if re-slicing is exact.
before=$fails
rm -rf "$tmp/ck"
set2=(--set zero_optimization.stage=2 --set $OO.device=nvme)
run 2 "$tmp/w.a" --steps 6 --set checkpoint.dir="$tmp/ck" "${set2[@]}"
for np in 1 3; do
  stage=$([ $np = 1 ] && echo 3 || echo 1)
  rm -rf "$tmp/ck$np"
  run $np "$tmp/w$np" --steps 6 --set checkpoint.dir="$tmp/ck$np" --set checkpoint.load="$tmp/ck/global_step6" \
    --set zero_optimization.stage=$stage --set train_micro_batch_size_per_gpu=$((np == 1 ? 4 : 1)) \
    --set train_batch_size=$((np == 1 ? 4 : 3))
  run 2 "$tmp/w$np.b" --set checkpoint.dir="$tmp/ck$np" --set checkpoint.load=latest "${set2[@]}"
  [ "$(after "$tmp/w$np.b" 6)" = "$(after "$tmp/bf16.full" 6)" ] ||
    fail "2 -> $np -> 2 ranks: $(after "$tmp/w$np.b" 6); straight $(after "$tmp/bf16.full" 6)"
  python3 - "$tmp/ck$np/global_step6/meta.json" $np <<'PY' || fail "2 -> $np ranks: meta.json"
import json, sys
m = json.load(open(sys.argv[1]))
assert m["world_size"] == int(sys.argv[2]) and m["step"] == 6, m
PY
done
# The 1-rank load trains on too, close to the 2-rank run (another summation order).
run 1 "$tmp/w1.c" --set checkpoint.load="$tmp/ck1/global_step6" --set zero_optimization.stage=3 \
  --set train_micro_batch_size_per_gpu=4
python3 - "$tmp/w1.c" "$tmp/bf16.full" <<'PY' || fail "2 -> 1 ranks: the losses drift from the 2-rank run"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])][:-1]
b = [json.loads(l) for l in open(sys.argv[2])][6:-1]
assert len(a) == len(b) == 4, (len(a), len(b))
for x, y in zip(a, b):
    assert x["step"] == y["step"] and abs(x["loss"] - y["loss"]) <= 1e-2 * abs(y["loss"]), (x, y)
PY
[ $fails = $before ] && echo "world size: 2 -> 1 and 2 -> 3 -> 2 ranks re-sliced exactly"

# Another layout: a checkpoint whose modules place their parameters elsewhere, as a
# zinf that did not pad the head (vocab 300 here, padded to 384) wrote them, loads each
# parameter to its place here: saved by 1 rank, rewritten without the pad, loaded by 2
# ranks at stage 3 (re-sliced as well), it continues bit for bit.
before=$fails
rm -rf "$tmp/ck"
v300=(--set model.vocab_size=300)
run 1 "$tmp/v.full" "${v300[@]}"
run 1 "$tmp/v.a" --steps 6 --set checkpoint.dir="$tmp/ck" "${v300[@]}"
python3 - "$tmp/ck/global_step6" <<'PY' || fail "rewriting the checkpoint without the head's pad"
import json, struct, sys, zlib
d = sys.argv[1]
meta = json.load(open(f"{d}/meta.json"))
emb = meta["modules"][0]
wte, wpe = emb["params"]
rows, C = wte["shape"]
assert emb["name"] == "embedding" and wte["name"] == "wte.weight" and wpe["offset"] == 384 * C, emb
old_wpe = (rows * C + 63) // 64 * 64  # aligned to 64 elements, as every parameter
n_wpe = wpe["shape"][0] * C
f = open(f"{d}/rank0.safetensors", "rb")
n = struct.unpack("<Q", f.read(8))[0]
head = json.loads(f.read(n))
data = f.read()
out, tensors, at = {}, [], 0
for name, t in sorted(((k, v) for k, v in head.items() if k != "__metadata__"), key=lambda kv: kv[1]["data_offsets"][0]):
    b = data[t["data_offsets"][0]:t["data_offsets"][1]]
    if name.startswith("embedding."):
        es = len(b) // emb["numel"]
        b = b[:rows * C * es] + bytes((old_wpe - rows * C) * es) + b[wpe["offset"] * es:(wpe["offset"] + n_wpe) * es]
        t["shape"] = [len(b) // es]
        head["__metadata__"]["crc32:" + name] = "%08x" % zlib.crc32(b)
    t["data_offsets"] = [at, at + len(b)]
    at += len(b)
    tensors.append(b)
emb["numel"] = emb["slice"] = old_wpe + n_wpe
wpe["offset"] = old_wpe
h = json.dumps(head).encode()
h += b" " * (-len(h) % 8)
open(f"{d}/rank0.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"".join(tensors))
json.dump(meta, open(f"{d}/meta.json", "w"))
PY
run 2 "$tmp/v.b" --set checkpoint.load="$tmp/ck/global_step6" --set zero_optimization.stage=3 \
  --set $OP.device=nvme "${v300[@]}"
[ "$(after "$tmp/v.b" 6)" = "$(after "$tmp/v.full" 6)" ] ||
  fail "another layout: $(after "$tmp/v.b" 6); straight $(after "$tmp/v.full" 6)"
[ $fails = $before ] && echo "layout: a checkpoint without the head's pad loads each parameter to its place"

# keep: every 2 steps, the newest 2 stay; latest names the newest.
rm -rf "$tmp/ck"
run 1 "$tmp/keep" --set checkpoint.dir="$tmp/ck" --set checkpoint.interval=2 --set checkpoint.keep=2
[ "$(cd "$tmp/ck" && echo *)" = "global_step10 global_step8 latest" ] && [ "$(cat "$tmp/ck/latest")" = global_step10 ] ||
  fail "keep 2 of every 2 steps: $(cd "$tmp/ck" && echo * .*) latest $(cat "$tmp/ck/latest")"

# ---- corruption: each copy of a good checkpoint, spoiled one way, fails naming it ----
rm -rf "$tmp/ck"
run 2 "$tmp/c" --steps 4 --set checkpoint.dir="$tmp/ck" --set zero_optimization.stage=3
good=$tmp/ck/global_step4
spoil() { # NAME COMMAND...: a copy of the good step directory, spoiled by COMMAND (run inside it)
  rm -rf "$tmp/bad" && cp -r "$good" "$tmp/bad" && (cd "$tmp/bad" && eval "$2") || fail "spoiling: $1"
}
loads_bad() { # NAME PATTERN NP: loading the spoiled copy on NP ranks fails with a message matching PATTERN
  local out=$tmp/bad.$3.log
  if [ "$3" = 1 ]; then
    "$Z" train "$tmp/cfg.json" --set checkpoint.load="$tmp/bad" --set zero_optimization.stage=3 > "$out" 2>&1
  else
    mpirun -np "$3" "$Z" train "$tmp/cfg.json" --set checkpoint.load="$tmp/bad" --set zero_optimization.stage=3 \
      > "$out" 2>&1
  fi
  local rc=$?
  [ $rc = 1 ] || fail "$1: exit $rc, want 1"
  grep -Eq "$2" "$out" || fail "$1: $(grep -m1 error "$out"); want /$2/"
}
# The byte in the middle of rank 1's h.0.mlp.master.
python3 - "$good/rank1.safetensors" > "$tmp/at" <<'PY'
import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
a, b = h["h.0.mlp.master"]["data_offsets"]; print(8 + n + (a + b) // 2)
PY
spoil flip "python3 -c \"import sys; f = open('rank1.safetensors', 'r+b'); f.seek($(cat "$tmp/at")); b = f.read(1); f.seek(-1, 1); f.write(bytes([b[0] ^ 0x10]))\""
loads_bad "a flipped byte" 'rank1.safetensors: tensor "h.0.mlp.master": checksum [0-9a-f]{8}, the file.s header says' 2
loads_bad "a flipped byte, loaded by 1 rank" 'rank1.safetensors: tensor "h.0.mlp.master": checksum' 1
spoil truncate "truncate -s -1000 rank0.safetensors"
loads_bad "a truncated file" 'rank0.safetensors: tensor "[^"]+": bytes .* outside the .* data bytes \(truncated file\?\)' 2
spoil delete "rm rank1.safetensors"
loads_bad "a deleted rank" 'rank1.safetensors is missing \(the checkpoint was saved by 2 ranks\)' 1
spoil meta "echo '{\"format\": \"zinf-checkpoint\", \"version\": 1' > meta.json"
loads_bad "a broken meta.json" 'bad/meta.json: ' 2
# A module whose parameters differ from this model's (another size here), though the
# shape matches: refused naming the parameter, not read into the wrong places.
spoil param "python3 -c \"import json; m = json.load(open('meta.json')); m['modules'][1]['params'][0]['shape'] = [32]; json.dump(m, open('meta.json', 'w'))\""
loads_bad "a parameter of another size" "module h\.0\.attn's parameter 0 is h\.0\.ln_1\.weight of 32 elements, here h\.0\.ln_1\.weight of 64" 2
spoil none "true"
out=$tmp/model.log
"$Z" train "$tmp/cfg.json" --set checkpoint.load="$tmp/bad" --set model.n_embd=128 > "$out" 2>&1
[ $? = 1 ] && grep -q "saved from a GPT n_layer 2 n_head 2 n_embd 64 .* this run's model is a GPT n_layer 2 n_head 2 n_embd 128" "$out" ||
  fail "another model: $(grep -m1 error "$out")"
"$Z" train "$tmp/cfg.json" --set checkpoint.load="$tmp/bad" --steps 4 > "$out" 2>&1 || fail "the unspoiled copy does not load: $(tail -2 "$out")"

# ---- crash safety: SIGKILL at random moments, over and over ----
# A bigger model, so that a save (every step) takes a good part of the run's time.
rm -rf "$tmp/ck"
kill_sets=(--set model.n_layer=4 --set model.n_embd=256 --set zero_optimization.stage=3 --set $OO.device=nvme
  --set checkpoint.dir="$tmp/ck" --set checkpoint.interval=1 --set checkpoint.load=latest --set steps=1000000)
"$Z" train "$tmp/cfg.json" "${kill_sets[@]}" --steps 1 > "$tmp/k0" 2>&1 || fail "first save: $(tail -2 "$tmp/k0")"
tries=$(reduced && echo 8 || echo 20)
kills=0 last=1
for i in $(seq 1 $tries); do
  "$Z" train "$tmp/cfg.json" "${kill_sets[@]}" > "$tmp/k" 2>&1 &
  pid=$!
  sleep "$(python3 -c "import random; print(random.uniform(0.3, 2.5))")"
  kill -KILL $pid 2> /dev/null && kills=$((kills + 1))
  wait $pid 2> /dev/null
  step=$(sed 's/global_step//' "$tmp/ck/latest")
  [ "$step" -ge "$last" ] || fail "kill $i: latest went back from $last to $step"
  last=$step
  # Loading it (no step to take) reads and checks every tensor of it.
  "$Z" train "$tmp/cfg.json" "${kill_sets[@]}" --steps "$step" > "$tmp/kc" 2>&1 ||
    fail "kill $i: the latest checkpoint does not load: $(tail -2 "$tmp/kc")"
done
# The last one also loads and trains on.
"$Z" train "$tmp/cfg.json" "${kill_sets[@]}" --steps $((last + 1)) > "$tmp/k" 2>&1 || fail "after the kills: $(tail -2 "$tmp/k")"
[ $((4 * kills)) -ge $((3 * tries)) ] || fail "only $kills of $tries runs were killed while they ran"
ls -a "$tmp/ck" | grep -q '^\.tmp-' && fail "leftovers of killed saves stay: $(ls -a "$tmp/ck")"
echo "crash safety: $kills runs killed at random while saving every step (up to step $last); latest always loaded"

# ---- a disk that fills during a save ----
mkdir -p "$tmp/full"
if [ "$(id -u)" = 0 ]; then mount -t tmpfs -o size=2M tmpfs "$tmp/full"; else false; fi ||
  fail "cannot mount a 2 MiB tmpfs at $tmp/full (the test needs root)"
run 1 "$tmp/f1" --steps 2 --set checkpoint.dir="$tmp/full/ck"
before_bytes=$(cat "$tmp/full/ck/global_step2/"* | md5sum)
out=$tmp/f2.log
"$Z" train "$tmp/cfg.json" --steps 4 --set checkpoint.dir="$tmp/full/ck" --set checkpoint.load=latest > "$out" 2>&1
[ $? = 1 ] || fail "a full disk: exit $?, want 1"
grep -q "global_step4 was not saved: .*rank0.safetensors.*: write at offset [0-9]* ([0-9]* bytes): No space left on device; .*/latest still names global_step2, which is whole" "$out" ||
  fail "a full disk: $(grep -m1 error "$out")"
[ "$(cat "$tmp/full/ck/latest")" = global_step2 ] && [ "$(cat "$tmp/full/ck/global_step2/"* | md5sum)" = "$before_bytes" ] ||
  fail "a full disk: the previous checkpoint changed"
[ "$(ls -a "$tmp/full/ck")" = "$(printf '.\n..\nglobal_step2\nlatest')" ] || fail "a full disk left: $(ls -a "$tmp/full/ck")"
"$Z" train "$tmp/cfg.json" --steps 3 --set checkpoint.load="$tmp/full/ck" > "$out" 2>&1 || fail "a full disk: step 2 does not load"
umount "$tmp/full"

finish test_checkpoint
