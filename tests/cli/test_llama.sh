#!/usr/bin/env bash
# The Llama family trained end to end against PyTorch (tests/ref/llama_train_ref.py):
# 10 steps of fp32 AdamW with clipping on a tiny tied Llama (GQA, head_dim 16 with
# n_embd 64 and 4 heads) from the sharded directory save_pretrained wrote, on the same
# batches as transformers + torch.optim.AdamW. Stage 0 on 1 rank, and stage 3 with both
# tiers on NVMe on 1 and 2 ranks: every step's loss within a relative 1e-5 of torch's
# (sums in other orders) and the final weights within 1e-5 (a hundredth of one step's
# lr; see test_engine_torch). A run stopped at step 5 and resumed from its checkpoint
# ends bit-identical to the straight run. The checkpoint consolidates to a model
# directory that from_pretrained loads as LlamaForCausalLM, sharded as save_pretrained
# shards it, whose loss over the data is zinf eval's for the same directory.
# timeout: 45 san=45 cuda-emu=70
set -u
Z=${ZINF_BUILD:-build}/zinf
R=${ZINF_REF_DIR:-build/ref}
PY=${ZINF_PY:-build/pyenv/bin/python}
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
backend=${ZINF_TEST_BACKEND:-host}
mkdir -p "$tmp/nvme"
export HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1

cat > "$tmp/cfg.json" <<JSON
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4, "steps": 10, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
 "zero_optimization": {"stage": 0, "stage3_param_persistence_threshold": 0},
 "model": {"init_from": "$R/llama_train_init"},
 "data": {"path": "$R/llama_train.tokens", "format": "tokens-u16", "seq_len": 32, "sampling": "sequential"},
 "device": {"backend": "$backend"}}
JSON
nvme=(--set zero_optimization.stage=3
      --set zero_optimization.offload_optimizer='{"device": "nvme", "nvme_path": "'"$tmp/nvme"'"}'
      --set zero_optimization.offload_param='{"device": "nvme", "nvme_path": "'"$tmp/nvme"'"}')

# Losses against torch's, and the final weights (consolidated from the checkpoint).
against_torch() {
  local name=$1 out=$2
  expect 0 "$Z" consolidate "$tmp/$name.ck" "$tmp/$name.safetensors"
  "$PY" - "$out" "$R" "$tmp/$name.safetensors" "$name" <<'PY' || fail "$name against torch"
import json, struct, sys
from safetensors.numpy import load_file
out, ref, mine, name = sys.argv[1:]
with open(f"{ref}/llama_train.bin", "rb") as f:
    assert f.read(8) == b"ZINFLTR1"
    ver, steps, B, T = struct.unpack("<4I", f.read(16))
    want = struct.unpack(f"<{steps}d", f.read(8 * steps))
got = [json.loads(l)["loss"] for l in open(out)][:-1]
assert len(got) == steps, got
worst = max(abs(a - b) / b for a, b in zip(got, want))
assert worst <= 1e-5, (worst, got, want)
a, b = load_file(mine), load_file(f"{ref}/llama_train_final.safetensors")
assert set(a) == set(b), set(a) ^ set(b)
wd = max(float(abs(a[k] - b[k]).max()) for k in b)
assert wd <= 1e-5, wd
print(f"{name}: losses within {worst:.2g} (relative) of torch's, weights within {wd:.2g}")
PY
}

ZINF_PROGRESS=0 run 1 "$tmp/s0" --set checkpoint.dir="$tmp/s0.ck"
# Reading init_from says how far it is (ZINF_PROGRESS=0: after every module).
python3 - "$tmp/s0.err" <<'PY' || fail "init_from progress: $(grep init_from "$tmp/s0.err" | head -3)"
import re, sys
got = [re.search(r"engine: modules read from model.init_from: (\d+) of (\d+) ", l) for l in open(sys.argv[1])]
got = [(int(m.group(1)), int(m.group(2))) for m in got if m]
n = got[0][1]
assert [k for k, _ in got] == list(range(1, n)) and {t for _, t in got} == {n}, got
assert any(f"model.init_from: done, {n} in" in l for l in open(sys.argv[1]))
PY
against_torch s0 "$tmp/s0"
run 1 "$tmp/n1" --set checkpoint.dir="$tmp/n1.ck" "${nvme[@]}"
against_torch n1 "$tmp/n1"
run 2 "$tmp/n2" --set checkpoint.dir="$tmp/n2.ck" --set train_micro_batch_size_per_gpu=2 "${nvme[@]}"
against_torch n2 "$tmp/n2"
grep -q '^plan: llama n_layer 2 n_head 4 kv 2 head_dim 16 n_embd 64 ffn 96 vocab 256 rope default tied' "$tmp/n2.err" ||
  fail "the plan line: $(grep '^plan' "$tmp/n2.err")"

# Stopped at step 5 and resumed: the straight run's bits.
run 2 "$tmp/r.a" --steps 5 --set checkpoint.dir="$tmp/r.ck" --set train_micro_batch_size_per_gpu=2 "${nvme[@]}"
run 2 "$tmp/r.b" --set checkpoint.dir="$tmp/r.ck" --set checkpoint.load=latest --set train_micro_batch_size_per_gpu=2 \
  "${nvme[@]}"
[ "$(tail -1 "$tmp/r.b" | python3 -c 'import json,sys; print(json.load(sys.stdin)["weights_digest"])')" = \
  "$(tail -1 "$tmp/n2" | python3 -c 'import json,sys; print(json.load(sys.stdin)["weights_digest"])')" ] ||
  fail "resumed at step 5: another digest than the straight run's"

# A model directory out: transformers loads it, sharded as save_pretrained shards it, and
# its loss is zinf eval's.
expect 0 "$Z" consolidate "$tmp/n2.ck" "$tmp/hf" --max-shard-size 100KB
expect 0 "$Z" eval --model "$tmp/hf" --data "$R/llama_train.tokens"
eval_loss=$(sed -n 's/.*loss \([0-9.]*\).*/\1/p' "$tmp/out" | head -1)
"$PY" - "$tmp/hf" "$R/llama_train.tokens" "$eval_loss" <<'PY' || fail "the consolidated directory in transformers"
import json, os, sys
import numpy as np, torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM
hf, data, zinf_loss = sys.argv[1], sys.argv[2], float(sys.argv[3])
idx = json.load(open(f"{hf}/model.safetensors.index.json"))
assert len(set(idx["weight_map"].values())) > 1 and "lm_head.weight" not in idx["weight_map"], idx
m = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32, attn_implementation="eager")
assert type(m).__name__ == "LlamaForCausalLM" and m.config.tie_word_embeddings and m.config.head_dim == 16
# Sharded as save_pretrained shards the same model (tensors in its state-dict order).
ref = AutoModelForCausalLM.from_config(m.config, dtype=torch.float32)
ref.load_state_dict({k: v.clone() for k, v in m.state_dict().items()})
ref.save_pretrained(hf + "-theirs", max_shard_size="100KB")
theirs = json.load(open(f"{hf}-theirs/model.safetensors.index.json"))["weight_map"]
assert theirs == idx["weight_map"], {k: (theirs.get(k), v) for k, v in idx["weight_map"].items() if theirs.get(k) != v}
tok = torch.from_numpy(np.fromfile(data, dtype="<u2").astype(np.int64))
T = m.config.max_position_embeddings
n = (len(tok) - 1) // T
x = torch.stack([tok[i * T:i * T + T] for i in range(n)])
y = torch.stack([tok[i * T + 1:i * T + T + 1] for i in range(n)])
with torch.no_grad():
    loss = F.cross_entropy(m(x).logits.reshape(-1, m.config.vocab_size), y.reshape(-1), reduction="none")
loss = float(loss.double().mean())
assert abs(loss - zinf_loss) <= 1e-5 * loss, (loss, zinf_loss)
print(f"from_pretrained: loss {loss:.6f}, zinf eval {zinf_loss:.6f}")
PY
finish test_llama
