#!/usr/bin/env bash
# zinf eval against PyTorch: the mean loss Hugging Face's GPT2LMHeadModel gives over
# the same token file's windows (tests/ref/gpt2_ref.py), with and without the
# `transformer.` prefix, in fp32 and bf16, and from Hugging Face model directories (one
# file, or shards and their index; as model.init_from alone too); the --json contract;
# errors that name the file, and usage errors (exit 2).
# timeout: 40 san=65 cuda-emu=55
set -u
Z=${ZINF_BUILD:-build}/zinf
R=${ZINF_REF_DIR:-build/ref}
PY=${ZINF_PY:-build/pyenv/bin/python}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"

# torch's eval loss and token count are the fixture's last 16 bytes.
read -r want_loss want_tokens < <(python3 -c "
import struct, sys
d = open(sys.argv[1], 'rb').read()
print(*struct.unpack('<dQ', d[-16:]))" "$R/gpt2.bin")
read -r L NH C V BS < <(python3 -c "
import struct, sys
print(*struct.unpack('<5I', open(sys.argv[1], 'rb').read()[12:32]))" "$R/gpt2.bin")
config() { # $1: extra top-level keys
  cat > "$tmp/cfg.json" <<JSON
{"train_batch_size": 2, $1
 "model": {"n_layer": $L, "n_head": $NH, "n_embd": $C, "vocab_size": $V, "block_size": $BS},
 "data": {"path": "$R/gpt2.tokens", "seq_len": 16}}
JSON
}

config ""
for file in gpt2.safetensors gpt2-noprefix.safetensors; do
  expect 0 "$Z" eval --model "$R/$file" --data "$R/gpt2.tokens" --config "$tmp/cfg.json" --json
  python3 - "$tmp/out" "$want_loss" "$want_tokens" <<'PY' || fail "eval $file: $(cat "$tmp/out") vs torch $want_loss"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1, lines
o = json.loads(lines[0])
assert set(o) == {"loss", "tokens"}, o
assert o["tokens"] == int(sys.argv[3]), o
assert abs(o["loss"] - float(sys.argv[2])) <= 1e-5 * float(sys.argv[2]), o
PY
done

# The same tokens behind an llm.c header (magic 20240520, version 1, count) give the
# same loss; a header that claims more tokens than the file holds is refused.
python3 - "$R/gpt2.tokens" "$tmp/llmc.bin" "$tmp/llmc-bad.bin" <<'PY'
import struct, sys
tok = open(sys.argv[1], "rb").read()
for path, count in ((sys.argv[2], len(tok) // 2), (sys.argv[3], len(tok) // 2 + 1)):
    open(path, "wb").write(struct.pack("<256i", 20240520, 1, count, *([0] * 253)) + tok)
PY
expect 0 "$Z" eval --model "$R/gpt2.safetensors" --data "$tmp/llmc.bin" --config "$tmp/cfg.json" --json
python3 -c "
import json, sys; o = json.loads(open(sys.argv[1]).read())
assert o['tokens'] == int(sys.argv[3]) and abs(o['loss'] - float(sys.argv[2])) <= 1e-5 * float(sys.argv[2]), o
" "$tmp/out" "$want_loss" "$want_tokens" || fail "llm.c token file: $(cat "$tmp/out")"
expect 1 "$Z" eval --model "$R/gpt2.safetensors" --data "$tmp/llmc-bad.bin" --config "$tmp/cfg.json"
grep -q "llm.c header (version 1) says" "$tmp/err" || fail "bad llm.c header: $(cat "$tmp/err")"

# bf16: within torch's bf16 error of the fp32 loss, far from it would mean a bug.
config '"bf16": {"enabled": true},'
expect 0 "$Z" eval --model "$R/gpt2.safetensors" --data "$R/gpt2.tokens" --config "$tmp/cfg.json"
grep -q "over $want_tokens tokens (5 windows of 16, bf16)" "$tmp/out" || fail "bf16 human output: $(cat "$tmp/out")"
python3 -c "
import sys; got = float(sys.argv[1].split()[1]); want = float(sys.argv[2])
assert abs(got - want) < 0.01 * want, (got, want)" "$(cat "$tmp/out")" "$want_loss" || fail "bf16 loss: $(cat "$tmp/out")"

# Without a config the shape comes from the file (head size 64: one head here), so the
# loss differs from torch's 4-head model but the run is whole: 32-token windows.
expect 0 "$Z" eval --model "$R/gpt2.safetensors" --data "$R/gpt2.tokens" --json
grep -q '"tokens":64' "$tmp/out" || fail "no-config eval: $(cat "$tmp/out")"

# Hugging Face model directories, as save_pretrained writes them from the same weights:
# one file, and shards with their index. Without --config the shape is config.json's,
# so the loss is torch's; as model.init_from the directory alone makes the model, and
# one training step from it gives the bits one step from the file gives.
config ""
HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1 "$PY" - "$R/gpt2.safetensors" "$tmp" \
  "$L" "$NH" "$C" "$V" "$BS" <<'PY' > /dev/null 2>&1 || fail "save_pretrained: $("$PY" -c 'import transformers' 2>&1 | tail -1)"
import json, sys
from safetensors.torch import load_file
from transformers import GPT2Config, GPT2LMHeadModel
path, tmp, L, NH, C, V, BS = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
m = GPT2LMHeadModel(GPT2Config(n_layer=L, n_head=NH, n_embd=C, vocab_size=V, n_positions=BS))
m.load_state_dict({k if k.startswith("transformer.") else "transformer." + k: v for k, v in load_file(path).items()},
                  strict=False)
m.tie_weights()
m.save_pretrained(f"{tmp}/hf1")
m.save_pretrained(f"{tmp}/hf3", max_shard_size="20KB")
# Broken copies: an index naming a missing shard; a model zinf does not compute.
index = json.load(open(f"{tmp}/hf3/model.safetensors.index.json"))
m.save_pretrained(f"{tmp}/noshard", max_shard_size="20KB")
import os; os.remove(f"{tmp}/noshard/" + sorted(set(index["weight_map"].values()))[-1])
m.save_pretrained(f"{tmp}/relu")
c = json.load(open(f"{tmp}/relu/config.json")); c["activation_function"] = "relu"
json.dump(c, open(f"{tmp}/relu/config.json", "w"))
PY
[ -f "$tmp/hf3/model.safetensors.index.json" ] || fail "no sharded directory"
for dir in hf1 hf3; do
  expect 0 "$Z" eval --model "$tmp/$dir" --data "$R/gpt2.tokens" --config "$tmp/cfg.json" --json
  python3 -c "
import json, sys; o = json.loads(open(sys.argv[1]).read())
assert abs(o['loss'] - float(sys.argv[2])) <= 1e-5 * float(sys.argv[2]), o
" "$tmp/out" "$want_loss" || fail "eval of the directory $dir: $(cat "$tmp/out") vs torch $want_loss"
done
# No config: the directory's shape (4 heads, where the file alone implies one) and
# block_size windows, as with a config that gives that shape.
expect 0 "$Z" eval --model "$tmp/hf3" --data "$R/gpt2.tokens" --json
cp "$tmp/out" "$tmp/dir.json"
sed 's/"seq_len": 16/"seq_len": '"$BS"'/' "$tmp/cfg.json" > "$tmp/cfg-bs.json"
expect 0 "$Z" eval --model "$R/gpt2.safetensors" --data "$R/gpt2.tokens" --config "$tmp/cfg-bs.json" --json
cmp -s "$tmp/out" "$tmp/dir.json" || fail "no-config eval of the directory: $(cat "$tmp/dir.json") vs $(cat "$tmp/out")"
cat > "$tmp/t.json" <<JSON
{"train_batch_size": 2, "steps": 1, "model": {"init_from": "$tmp/hf3"}, "data": {"path": "$R/gpt2.tokens", "seq_len": 16}}
JSON
expect 0 "$Z" train "$tmp/t.json" --json
digest_dir=$(tail -1 "$tmp/out" | python3 -c 'import json, sys; print(json.load(sys.stdin)["weights_digest"])')
cat > "$tmp/t.json" <<JSON
{"train_batch_size": 2, "steps": 1, "data": {"path": "$R/gpt2.tokens", "seq_len": 16},
 "model": {"init_from": "$R/gpt2.safetensors", "n_layer": $L, "n_head": $NH, "n_embd": $C, "vocab_size": $V, "block_size": $BS}}
JSON
expect 0 "$Z" train "$tmp/t.json" --json
[ "$(tail -1 "$tmp/out" | python3 -c 'import json, sys; print(json.load(sys.stdin)["weights_digest"])')" = "$digest_dir" ] ||
  fail "a step from the directory and from the file differ"
expect 1 "$Z" eval --model "$tmp/noshard" --data "$R/gpt2.tokens"
grep -q "model.safetensors.index.json names the shard $tmp/noshard/model-.*, which is missing" "$tmp/err" ||
  fail "missing shard: $(cat "$tmp/err")"
expect 1 "$Z" eval --model "$tmp/relu" --data "$R/gpt2.tokens"
grep -q "relu/config.json: activation_function \"relu\": zinf's GPT-2 computes gelu_new" "$tmp/err" ||
  fail "relu: $(cat "$tmp/err")"
cat > "$tmp/t.json" <<JSON
{"train_batch_size": 2, "model": {"init_from": "$tmp/hf3", "n_layer": 7}, "data": {"path": "$R/gpt2.tokens", "seq_len": 16}}
JSON
expect 2 "$Z" check "$tmp/t.json"
grep -q "model.init_from: model.n_layer 7 differs from $tmp/hf3/config.json's n_layer $L" "$tmp/err" ||
  fail "a shape that disagrees: $(cat "$tmp/err")"

# Errors: a missing or wrong file names it; a token beyond the vocabulary names where.
config ""
expect 1 "$Z" eval --model "$tmp/none.safetensors" --data "$R/gpt2.tokens" --config "$tmp/cfg.json"
grep -q "none.safetensors" "$tmp/err" || fail "missing model: $(cat "$tmp/err")"
expect 1 "$Z" eval --model "$R/gpt2.tokens" --data "$R/gpt2.tokens" --config "$tmp/cfg.json"
grep -q "gpt2.tokens" "$tmp/err" || fail "not a weights file: $(cat "$tmp/err")"
python3 -c "import sys; open(sys.argv[1], 'wb').write(b'\xff\xff' * 40)" "$tmp/big.tokens"
expect 1 "$Z" eval --model "$R/gpt2.safetensors" --data "$tmp/big.tokens" --config "$tmp/cfg.json"
grep -q "token 65535 at position 0 is not below vocab_size $V" "$tmp/err" || fail "bad token: $(cat "$tmp/err")"
printf 'abc' > "$tmp/odd.tokens"
expect 1 "$Z" eval --model "$R/gpt2.safetensors" --data "$tmp/odd.tokens" --config "$tmp/cfg.json"
grep -q "not a whole number of uint16 tokens" "$tmp/err" || fail "odd file: $(cat "$tmp/err")"
python3 -c "import sys; open(sys.argv[1], 'wb').write(b'\x01\x00' * 10)" "$tmp/short.tokens"
expect 2 "$Z" eval --model "$R/gpt2.safetensors" --data "$tmp/short.tokens" --config "$tmp/cfg.json"
grep -q "hold no window" "$tmp/err" || fail "short file: $(cat "$tmp/err")"
for bad in "" "--model x" "--data x" "--model a --data b extra" "--frobnicate"; do
  expect 2 "$Z" eval $bad
done
expect 0 "$Z" eval --help
finish test_eval
