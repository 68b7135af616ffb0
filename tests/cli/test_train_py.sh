#!/usr/bin/env bash
# examples/train.py, zinf.Engine's fine-tuning example: a Llama that transformers makes
# here (2 layers of 64, grouped-query attention, an untied head) with a BPE tokenizer
# the `tokenizers` package trains on a generated text, fine-tuned 3 steps on that text
# with the example's config (ZeRO stage 3, optimizer states and parameters on NVMe).
# One rank and two (mpirun) give the same weights; the directory it writes loads with
# transformers' from_pretrained, holds the tokenizer, and differs from the model it
# started from. Two engines one after the other in each of 2 ranks both train (the
# process stays in the job). A text too short for one window is refused naming the file.
# timeout: 175 san=200 cuda-emu=160
set -u
cd "$(dirname "$0")/../.."
. tests/cli/lib.sh
B=${ZINF_BUILD:-build}
PY=${ZINF_PY:-build/pyenv/bin/python}
backend=${ZINF_TEST_BACKEND:-host}
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
trap 'rm -rf "$tmp"' EXIT
export PYTHONPATH=python ZINF_LIB=$B/libzinf.so
# A sanitized library needs the sanitizers' runtimes loaded ahead of Python.
if ldd "$B/libzinf.so" | grep -q libasan; then
  export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
  export ASAN_OPTIONS=detect_leaks=0
fi

mkdir -p "$tmp/model" "$tmp/swap"
env -u LD_PRELOAD "$PY" - "$tmp" <<'PY' || { fail "making the model"; finish test_train_py; exit; }
import random, sys
import tokenizers as tk
import torch, transformers
out = sys.argv[1]
random.seed(1)
words = "the a zinf trains models far larger than its devices hold with states on disk and in memory".split()
text = "\n".join(" ".join(random.choice(words) for _ in range(12)) for _ in range(300))
open(f"{out}/text.txt", "w").write(text)
open(f"{out}/short.txt", "w").write("the zinf")
tok = tk.Tokenizer(tk.models.BPE())
tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = tk.decoders.ByteLevel()
tok.train_from_iterator([text], tk.trainers.BpeTrainer(vocab_size=320, initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet()))
tok.save(f"{out}/model/tokenizer.json")
torch.manual_seed(0)
cfg = transformers.LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128,
                               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                               max_position_embeddings=64, tie_word_embeddings=False)
transformers.LlamaForCausalLM(cfg).save_pretrained(f"{out}/model")
PY

sets=(--set device.backend="$backend" --set train_batch_size=4 --set train_micro_batch_size_per_gpu=2
  --set zero_optimization.offload_optimizer.nvme_path="$tmp/swap" --set zero_optimization.offload_param.nvme_path="$tmp/swap")
train() { # NP OUT: the example on NP ranks, writing to $tmp/OUT; its last line in $tmp/OUT.done
  local np=$1 out=$2 launch=()
  [ "$np" -gt 1 ] && launch=(mpirun -np "$np")
  expect 0 "${launch[@]}" "$PY" examples/train.py "$tmp/model" "$tmp/text.txt" --steps 3 --seq-len 32 \
    --out "$tmp/$out" "${sets[@]}"
  tail -n 1 "$tmp/out" > "$tmp/$out.done"
}
train 1 one
train 2 two
grep -q "^done: 3 steps, final loss [0-9.]*, weights [0-9a-f]\{16\}; the model: $tmp/one/global_step3/hf/$" "$tmp/one.done" ||
  fail "1 rank: $(cat "$tmp/one.done")"
[ "$(sed 's/; the model.*//' "$tmp/one.done")" = "$(sed 's/; the model.*//' "$tmp/two.done")" ] ||
  fail "1 and 2 ranks differ: $(cat "$tmp/one.done") / $(cat "$tmp/two.done")"
grep -q "step/s, loss=" "$tmp/err" || fail "no progress bar on stderr"

env -u LD_PRELOAD "$PY" - "$tmp" <<'PY' || fail "the fine-tuned directory"
import sys
import torch, transformers
out = sys.argv[1]
before = transformers.LlamaForCausalLM.from_pretrained(f"{out}/model")
after = transformers.LlamaForCausalLM.from_pretrained(f"{out}/one/global_step3/hf")
transformers.PreTrainedTokenizerFast(tokenizer_file=f"{out}/one/global_step3/hf/tokenizer.json")
b, a = before.state_dict(), after.state_dict()
assert b.keys() == a.keys(), b.keys() ^ a.keys()
moved = [k for k in b if not torch.equal(b[k].float(), a[k].float())]
assert moved, "nothing moved"
PY

# Two engines one after the other in each of 2 ranks (a notebook's second run): the
# process stays in the job, and the second engine's comms logger starts afresh.
cat > "$tmp/two.py" <<'PY' # a file: mpirun gives its standard input to rank 0 alone
import sys
import numpy as np
import zinf
tmp, backend = sys.argv[1:]
sets = {"device.backend": backend, "train_batch_size": 4, "train_micro_batch_size_per_gpu": 2,
        "model": '{"init_from": "%s/model"}' % tmp, "data": '{"seq_len": 16}', "checkpoint": "{}",
        "zero_optimization.offload_optimizer.nvme_path": tmp + "/swap",
        "zero_optimization.offload_param.nvme_path": tmp + "/swap", "comms_logger.enabled": True}
for run in range(2):
    with zinf.Engine("examples/llama-3.2-1b-nvme.json", set=sets) as e:
        assert e.world_size == 2
        e.train_batch(np.arange(2 * 17).reshape(2, 17) % 300)
        print(f"run {run}: rank {e.rank} step {e.global_steps}")
PY
expect 0 mpirun -np 2 "$PY" "$tmp/two.py" "$tmp" "$backend"
# (mpirun interleaves the ranks' output, lines too: count the sayings, not the lines)
[ "$(grep -o "run [01]: rank [01] step 1" "$tmp/out" | sort -u | wc -l)" = 4 ] ||
  fail "two engines in a row: $(cat "$tmp/out"; tail -5 "$tmp/err")"
expect 1 "$PY" examples/train.py "$tmp/model" "$tmp/short.txt" --seq-len 32 "${sets[@]}"
grep -q "short.txt: [0-9]* tokens hold no window of 32 + 1" "$tmp/err" || fail "short text: $(cat "$tmp/err")"
finish test_train_py
