#!/usr/bin/env bash
# examples/train_loop, the program that embeds zinf through its public headers: on the
# same config and data it prints `zinf train`'s losses and weights digest bit for bit,
# at stage 0 on 1 rank, at stage 3 with the optimizer states and the parameters on NVMe
# (1 rank and mpirun -np 2), and bf16. Its checkpoint resumes in `zinf train` to the
# bits of an uninterrupted run, and the tensor it reads with zinf_engine_get_full is
# the one `zinf consolidate` writes from that checkpoint. Config errors exit 2 and
# runtime errors 1, each with the library's error text.
# timeout: 15 san=35 cuda-emu=45
set -u
Z=${ZINF_BUILD:-build}/zinf
E=${ZINF_BUILD:-build}/examples/train_loop
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
tokens "$tmp/train.tokens"
backend=${ZINF_TEST_BACKEND:-host}

# config NAME STAGE NVME BF16: $tmp/NAME.json, checkpoints to $tmp/NAME.ck; NVME true
# puts the optimizer states and (stage 3) the parameters in a swap store under $tmp.
config() {
  local off=
  [ "$3" = true ] && off=', "offload_optimizer": {"device": "nvme", "nvme_path": "'$tmp/swap'"},
   "offload_param": {"device": "nvme", "nvme_path": "'$tmp/swap'", "max_in_cpu": 0, "buffer_count": 3}'
  cat > "$tmp/$1.json" <<JSON
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "seed": 7, "steps": 6, "steps_per_print": 6,
 "gradient_clipping": 1.0, "bf16": {"enabled": $4},
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.95], "weight_decay": 0.1}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 3, "warmup_type": "linear", "warmup_max_lr": 3e-3}},
 "zero_optimization": {"stage": $2, "sub_group_size": 40000$off},
 "model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 256, "block_size": 32},
 "data": {"path": "$tmp/train.tokens", "format": "tokens-u16", "seq_len": 32},
 "checkpoint": {"dir": "$tmp/$1.ck", "keep": 1},
 "device": {"backend": "$backend"}}
JSON
}

# example NP NAME [STEPS]: run the example on NP ranks; stdout in $tmp/NAME.ex.
example() {
  local np=$1 name=$2; shift 2
  local cmd=("$E" "$tmp/$name.json" "$@")
  [ "$np" = 1 ] || cmd=(mpirun -np "$np" "${cmd[@]}")
  "${cmd[@]}" > "$tmp/$name.ex" 2> "$tmp/$name.ex.err" ||
    fail "example $name on $np ranks: exit $?: $(tail -c 400 "$tmp/$name.ex.err")"
}

# The example's losses and digest in summary's form (lib.sh): each loss as Python's
# repr of the double it printed with 17 digits.
ex_summary() {
  python3 - "$1" <<'PY'
import sys
words = [l.split() for l in open(sys.argv[1])]
losses = [repr(float(w[3])) for w in words if w[0] == "step"]
print(" ".join(losses), *[w[1] for w in words if w[0] == "weights_digest"])
PY
}

# The example's wte.weight line against the tensor `zinf consolidate` writes from the
# example's checkpoint (fp32), summed in the same order.
check_get_full() {
  local name=$1
  "$Z" consolidate "$tmp/$name.ck" "$tmp/$name.safetensors" --dtype fp32 > /dev/null 2> "$tmp/err" ||
    { fail "$name: consolidate: $(tail -c 400 "$tmp/err")"; return; }
  python3 - "$tmp/$name.safetensors" "$tmp/$name.ex" <<'PY' || fail "$name: get_full differs from the checkpoint"
import array, json, struct, sys
f = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", f[:8])[0]
head = json.loads(f[8:8 + n])
t = head.get("transformer.wte.weight") or head["wte.weight"]
a, b = t["data_offsets"]
vals = array.array("f", f[8 + n + a:8 + n + b])
s = 0.0
for v in vals:
    s += v
line = next(l.split() for l in open(sys.argv[2]) if l.startswith("wte.weight "))
got = (int(line[1]), float(line[4]), float(line[6]))
want = (len(vals), s, float("%.9g" % vals[0]))
print("get_full:", got, "checkpoint:", want)
assert got == want
PY
}

# ---- stage 0, 1 rank, fp32: two micro-batches accumulated per step ----
config s0 0 false false
example 1 s0
check_get_full s0
cp "$tmp/s0.json" "$tmp/cfg.json"
run 1 "$tmp/s0.cli" --set checkpoint.dir="$tmp/cli.ck"
[ "$(ex_summary "$tmp/s0.ex")" = "$(summary "$tmp/s0.cli")" ] ||
  fail "stage 0: example $(ex_summary "$tmp/s0.ex"); zinf train $(summary "$tmp/s0.cli")"
[ "$(grep -c '^step ' "$tmp/s0.ex")" = 6 ] || fail "stage 0: $(grep -c '^step ' "$tmp/s0.ex") step lines, want 6"
# The example's checkpoint, resumed by zinf train for 2 more steps, ends where an
# uninterrupted 8-step run does.
run 1 "$tmp/s0.8" --steps 8 --set checkpoint.dir="$tmp/cli8.ck"
run 1 "$tmp/s0.resumed" --steps 8 --set checkpoint.load=latest
want=$(python3 -c 'import json, sys
l = [json.loads(x) for x in open(sys.argv[1])]
print(*[repr(s["loss"]) for s in l[6:-1]], l[-1]["weights_digest"])' "$tmp/s0.8")
[ "$(summary "$tmp/s0.resumed")" = "$want" ] ||
  fail "resumed from the example's checkpoint: $(summary "$tmp/s0.resumed"); uninterrupted: $want"
[ $fails = 0 ] && echo "stage 0: the example's losses and digest are zinf train's; its checkpoint resumes exactly"

# ---- stage 3, optimizer states and parameters on NVMe, bf16: 1 rank, then 2 ----
before=$fails
for np in 1 2; do
  config nv$np 3 true true
  example $np nv$np
  check_get_full nv$np
  cp "$tmp/nv$np.json" "$tmp/cfg.json"
  run $np "$tmp/nv$np.cli" --set checkpoint.dir="$tmp/cli.ck"
  [ "$(ex_summary "$tmp/nv$np.ex")" = "$(summary "$tmp/nv$np.cli")" ] ||
    fail "stage 3 nvme on $np ranks: example $(ex_summary "$tmp/nv$np.ex"); zinf train $(summary "$tmp/nv$np.cli")"
done
# One micro-batch per rank on 2 ranks sums as two accumulated on one: the same bits.
[ "$(ex_summary "$tmp/nv1.ex")" = "$(ex_summary "$tmp/nv2.ex")" ] ||
  fail "stage 3 nvme: 1 rank $(ex_summary "$tmp/nv1.ex"); 2 ranks $(ex_summary "$tmp/nv2.ex")"
# The run did go through the swap store.
python3 -c 'import json, sys; assert json.loads(open(sys.argv[1]).readline())["nvme_bytes"] > 0' "$tmp/nv2.cli" ||
  fail "stage 3 nvme: no bytes on nvme: $(head -c 400 "$tmp/nv2.cli")"
[ $fails = $before ] && echo "stage 3, both tiers on nvme, bf16: the example is zinf train on 1 and 2 ranks"

# ---- errors: the library's text and the exit code ----
expect 2 "$E"
expect 2 "$E" "$tmp/missing.json"
grep -q 'missing.json' "$tmp/err" || fail "a missing config: $(cat "$tmp/err")"
sed 's|"vocab_size": 256|"vocab_size": 64|' "$tmp/s0.json" > "$tmp/bad.json" # the data has ids past 64
expect 1 "$E" "$tmp/bad.json"
grep -q 'train_loop: .*train.tokens' "$tmp/err" || fail "ids past the vocabulary: $(cat "$tmp/err")"

finish test_example
