#!/usr/bin/env bash
# zinf consolidate. A ZeRO-3 checkpoint of 2 ranks with both tiers on NVMe becomes one
# file that Hugging Face's GPT2LMHeadModel.from_pretrained loads (PyTorch and the
# safetensors package, offline), or a model directory (config.json, one file or shards
# with their index, sharded as save_pretrained shards) that from_pretrained loads, with
# GPT-2's names and shapes; with stage3_gather_16bit_weights_on_model_save every step
# directory holds such a directory of the bf16 model, whose fp32 values are
# the engine's full master weights (their digest is the run's weights_digest) and
# whose bf16 values are those rounded as PyTorch rounds; each tensor's checksum is
# zlib's CRC-32. Memory stays bounded: a model 270 times larger raises the peak RSS by
# a few MiB of buffers, far less than its largest tensor. Bad input
# fails clearly and leaves no output behind.
# timeout: 195 san=115 cuda-emu=140
set -u
Z=${ZINF_BUILD:-build}/zinf
PY=${ZINF_PY:-build/pyenv/bin/python}
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
tokens "$tmp/train.tokens"
backend=${ZINF_TEST_BACKEND:-host}
mkdir -p "$tmp/nvme"

cat > "$tmp/cfg.json" <<JSON
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "seed": 11, "steps": 4,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
 "bf16": {"enabled": true},
 "zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": true,
   "offload_optimizer": {"device": "nvme", "nvme_path": "$tmp/nvme"},
   "offload_param": {"device": "nvme", "nvme_path": "$tmp/nvme"}},
 "model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 256, "block_size": 32},
 "data": {"path": "$tmp/train.tokens", "format": "tokens-u16", "seq_len": 32},
 "checkpoint": {"dir": "$tmp/ck"},
 "device": {"backend": "$backend"}}
JSON

run 2 "$tmp/train"
digest=$(tail -1 "$tmp/train" | python3 -c 'import json, sys; print(json.load(sys.stdin)["weights_digest"])')
expect 1 "$Z" consolidate "$tmp/ck" "$tmp/hf/model.safetensors" # no such directory yet
grep -q "$tmp/hf/model.safetensors.tmp-[0-9]*: No such file or directory" "$tmp/err" || fail "no out dir: $(cat "$tmp/err")"
mkdir -p "$tmp/hf"
expect 0 "$Z" consolidate "$tmp/ck" "$tmp/hf/model.safetensors" --json
python3 - "$tmp/out" <<'PY' || fail "consolidate --json: $(cat "$tmp/out")"
import json, sys
o = json.loads(open(sys.argv[1]).read())
assert set(o) == {"tensors", "bytes", "peak_rss_bytes", "seconds"} and o["tensors"] == 2 * 12 + 4, o
PY
expect 0 "$Z" consolidate "$tmp/ck/global_step4" "$tmp/model.bf16.safetensors" --dtype bf16
grep -q "consolidated $tmp/ck/global_step4 (step 4, 2 ranks) into $tmp/model.bf16.safetensors: 28 tensors" "$tmp/out" ||
  fail "consolidate's line: $(cat "$tmp/out")"

HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1 "$PY" - "$tmp/hf" "$tmp/model.bf16.safetensors" "$digest" <<'PY' || fail "the consolidated file in PyTorch"
import json, os, sys
import torch
from safetensors.torch import load_file
from transformers import GPT2Config, GPT2LMHeadModel

hf, bf16_path, digest = sys.argv[1:]
cfg = GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=256, n_positions=32, bos_token_id=0, eos_token_id=0)
cfg.save_pretrained(hf)
tensors = load_file(os.path.join(hf, "model.safetensors"))
want = {k: v.shape for k, v in GPT2LMHeadModel(cfg).state_dict().items()}
# GPT-2's names and shapes; only the tied head is left out, as save_pretrained does.
assert set(want) - set(tensors) == {"lm_head.weight"}, set(want) - set(tensors)
assert set(tensors) <= set(want), set(tensors) - set(want)
for k, v in tensors.items():
    assert v.dtype == torch.float32 and v.shape == want[k], (k, v.dtype, v.shape, want[k])
model = GPT2LMHeadModel.from_pretrained(hf)
sd = model.state_dict()
for k, v in tensors.items():
    assert torch.equal(sd[k], v), k
assert torch.equal(sd["lm_head.weight"], tensors["transformer.wte.weight"])
# The values are the engine's: the run's weights_digest (FNV-1a over the fp32 bytes of
# every parameter in model order, which is the file's order).
with open(os.path.join(hf, "model.safetensors"), "rb") as f:
    header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
order = sorted(tensors, key=lambda k: header[k]["data_offsets"][0])
# Each tensor's checksum in the metadata is zlib's CRC-32 of its bytes.
import zlib
for k in order:
    assert header["__metadata__"]["crc32:" + k] == "%08x" % zlib.crc32(tensors[k].numpy().tobytes()), k
h = 0xCBF29CE484222325
for k in order:
    for b in tensors[k].numpy().tobytes():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
assert "%016x" % h == digest, ("%016x" % h, digest)
# bf16: the fp32 values rounded to nearest even, as PyTorch rounds.
b16 = load_file(bf16_path)
assert set(b16) == set(tensors)
for k, v in b16.items():
    assert v.dtype == torch.bfloat16 and torch.equal(v, tensors[k].to(torch.bfloat16)), k
print("ok")
PY

# A model directory, as save_pretrained writes one: config.json and model.safetensors,
# or past --max-shard-size shards and their index, sharded as save_pretrained itself
# shards the same model; from_pretrained loads each to the single file's tensors.
expect 0 "$Z" consolidate "$tmp/ck" "$tmp/dir"
expect 0 "$Z" consolidate "$tmp/ck" "$tmp/sharded" --max-shard-size 40KB --dtype bf16
expect 0 "$Z" consolidate "$tmp/ck" "$tmp/sharded32" --max-shard-size 40KB
HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1 "$PY" - "$tmp" <<'PY' || fail "the consolidated directories in transformers"
import json, os, sys
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

tmp = sys.argv[1]
want = load_file(os.path.join(tmp, "hf", "model.safetensors"))
assert sorted(os.listdir(f"{tmp}/dir")) == ["config.json", "model.safetensors"], os.listdir(f"{tmp}/dir")
cfg = json.load(open(f"{tmp}/dir/config.json"))
assert (cfg["model_type"], cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"]) == \
    ("gpt2", 2, 2, 64, 256, 32), cfg
m = AutoModelForCausalLM.from_pretrained(f"{tmp}/dir")
sd = m.state_dict()
assert type(m).__name__ == "GPT2LMHeadModel" and all(torch.equal(sd[k], v) for k, v in want.items())
assert torch.equal(sd["lm_head.weight"], want["transformer.wte.weight"])
# Sharded: the index names every tensor, and the shards are save_pretrained's own; in
# fp32 the embedding and three matrices of each block are past 40 KB, each a shard of
# its own as save_pretrained makes it.
def sharded(name, dtype):
    index = json.load(open(f"{tmp}/{name}/model.safetensors.index.json"))
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 2 and shards[0] == "model-00001-of-%05d.safetensors" % len(shards), shards
    assert sorted(os.listdir(f"{tmp}/{name}")) == sorted(["config.json", "model.safetensors.index.json"] + shards)
    size = torch.finfo(dtype).bits // 8
    assert index["metadata"]["total_size"] == sum(size * v.numel() for v in want.values()), index["metadata"]
    b = AutoModelForCausalLM.from_pretrained(f"{tmp}/{name}", dtype=dtype)
    sd = b.state_dict()
    assert all(torch.equal(sd[k], v.to(dtype)) for k, v in want.items())
    # save_pretrained groups tensors that share storage (as tensors loaded from one
    # file can): a model of its own, holding copies, is what it shards tensor by tensor.
    ref = AutoModelForCausalLM.from_config(b.config, dtype=dtype)
    ref.load_state_dict({k: v.clone() for k, v in sd.items()})
    ref.save_pretrained(f"{tmp}/theirs-{name}", max_shard_size="40KB")
    theirs = json.load(open(f"{tmp}/theirs-{name}/model.safetensors.index.json"))["weight_map"]
    assert theirs == index["weight_map"], {k: (theirs.get(k), v) for k, v in index["weight_map"].items() if theirs.get(k) != v}
    return len(shards)
shards = (sharded("sharded", torch.bfloat16), sharded("sharded32", torch.float32))
# stage3_gather_16bit_weights_on_model_save: each step directory holds the model in bf16
# (the engine's 16-bit copy, the master weights rounded) as a directory of its own.
step = f"{tmp}/ck/global_step4/hf"
assert sorted(os.listdir(step)) == ["config.json", "model.safetensors"], os.listdir(step)
assert json.load(open(f"{step}/config.json"))["dtype"] == "bfloat16"
saved = load_file(f"{step}/model.safetensors")
assert set(saved) == set(want) and all(torch.equal(saved[k], v.to(torch.bfloat16)) for k, v in want.items())
m = AutoModelForCausalLM.from_pretrained(step, dtype=torch.bfloat16)
assert all(torch.equal(m.state_dict()[k], saved[k]) for k in saved)
print(f"directories: one file, and %d (bf16) and %d (fp32) shards as save_pretrained makes them" % shards)
PY
expect 1 "$Z" consolidate "$tmp/ck" "$tmp/dir"
grep -q "$tmp/dir is not empty; give a new or empty directory" "$tmp/err" || fail "a full directory: $(cat "$tmp/err")"
expect 2 "$Z" consolidate "$tmp/ck" "$tmp/d2" --max-shard-size 0
grep -q -- '--max-shard-size: "0"' "$tmp/err" || fail "--max-shard-size 0: $(cat "$tmp/err")"
[ ! -e "$tmp/d2" ] || fail "a refused consolidation made $tmp/d2"

# Memory: a checkpoint of a model 270 times larger costs a few MiB of buffers more, far
# less than its largest tensor (wte, 103 MB).
sed -e 's/"n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 256/"n_layer": 2, "n_head": 8, "n_embd": 512, "vocab_size": 50257/' \
  -e 's/"steps": 4/"steps": 1/' -e "s|$tmp/ck|$tmp/big|" "$tmp/cfg.json" > "$tmp/big.json"
"$Z" train "$tmp/big.json" > "$tmp/big.log" 2>&1 || fail "the big model: $(tail -2 "$tmp/big.log")"
expect 0 "$Z" consolidate "$tmp/ck" "$tmp/small.safetensors" --json
small=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["peak_rss_bytes"])' "$tmp/out")
expect 0 "$Z" consolidate "$tmp/big" "$tmp/big.safetensors" --json
python3 - "$tmp/out" "$small" "$tmp/big/global_step1" <<'PY' || fail "consolidate's memory: $(cat "$tmp/out")"
import json, os, sys
o = json.loads(open(sys.argv[1]).read())
ckpt = sum(os.path.getsize(os.path.join(sys.argv[3], f)) for f in os.listdir(sys.argv[3]))
largest = 4 * 50257 * 512  # transformer.wte.weight in fp32
grown = o["peak_rss_bytes"] - int(sys.argv[2])
print(f"peak RSS {o['peak_rss_bytes']} bytes, {grown} more than for the small model; checkpoint {ckpt} bytes, "
      f"largest tensor {largest}")
# The buffers: 1 MiB of reading, 8 MiB of staging for O_DIRECT writes.
assert ckpt > 400e6 and grown < 16 << 20, (grown, largest, ckpt)
PY
echo "memory: $(tail -1 "$tmp/out")"

# Bad input.
expect 2 "$Z" consolidate "$tmp/ck"
expect 2 "$Z" consolidate "$tmp/ck" "$tmp/x.safetensors" --dtype fp16
grep -q 'dtype: "fp16"; use fp32 or bf16' "$tmp/err" || fail "--dtype fp16: $(cat "$tmp/err")"
expect 1 "$Z" consolidate "$tmp/nvme" "$tmp/x.safetensors"
grep -q "neither a step directory (no meta.json) nor a checkpoint root (no latest file)" "$tmp/err" ||
  fail "not a checkpoint: $(cat "$tmp/err")"
cp -r "$tmp/ck/global_step4" "$tmp/bad"
printf 'x' | dd of="$tmp/bad/rank0.safetensors" bs=1 seek=5000 conv=notrunc 2> /dev/null
expect 1 "$Z" consolidate "$tmp/bad" "$tmp/x.safetensors"
grep -q 'rank0.safetensors: tensor "[^"]*": checksum' "$tmp/err" || fail "a corrupted rank file: $(cat "$tmp/err")"
[ -z "$(ls "$tmp" | grep '^x.safetensors')" ] || fail "a failed consolidation left $(ls "$tmp" | grep x.safe)"
expect 1 "$Z" consolidate "$tmp/bad" "$tmp/xdir"
grep -q 'rank0.safetensors: tensor "[^"]*": checksum' "$tmp/err" || fail "a corrupted rank file, into a directory: $(cat "$tmp/err")"
[ -z "$(ls "$tmp" | grep '^xdir')" ] || fail "a failed export left $(ls "$tmp" | grep xdir)"

# Progress (ZINF_PROGRESS=0: a line for every piece): the bytes written grow to the
# total, then one line says it is done.
ZINF_PROGRESS=0 expect 0 "$Z" consolidate "$tmp/ck" "$tmp/progress.safetensors"
python3 - "$tmp/err" <<'PY' || fail "progress lines: $(head -3 "$tmp/err"; tail -2 "$tmp/err")"
import re, sys
lines = [l for l in open(sys.argv[1]) if "export: tensor bytes written" in l]
done = [float(m.group(1)) for m in (re.search(r"written: ([0-9.]+) [KMG]iB of", l) for l in lines) if m]
assert len(done) > 3 and done == sorted(done), done
assert re.search(r"export: tensor bytes written: done, [0-9.]+ [KMG]iB in [0-9]+ s$", lines[-1]), lines[-1]
PY
finish test_consolidate
