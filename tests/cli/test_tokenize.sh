#!/usr/bin/env bash
# examples/tokenize_text.py, offline, with BPE tokenizers trained here by the `tokenizers`
# package (GPT-2's byte-level pattern, Llama 3's, and one that prefixes a space to every
# text): the llm.c header of each format (magic, version, count; the size is header +
# count ids), the ids Tokenizer.encode gives each document however it is cut into
# chunks (many cuts, the default, none where cutting would change them, standard input),
# decoding back to the text, BOS/EOS per file or per line, the default width. zinf check
# accepts each file with its data.format and the tokenizer's vocab_size, and zinf train
# runs 2 steps on the u16 and the u32 file to the same weights. Peak memory does not grow
# with the corpus. Errors: a missing tokenizer dir or input, usage (exit 2), an id past
# u16, input that is not UTF-8 (exit 1, nothing left behind).
# timeout: 95 san=95
# backend: host: the ids reach the model through the data loader, the same on every backend
set -u
Z=${ZINF_BUILD:-build}/zinf
PY=${ZINF_PY:-build/pyenv/bin/python}
T=examples/tokenize_text.py
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
export HF_HUB_OFFLINE=1

"$PY" -c 'import tokenizers' 2> /dev/null ||
  { echo "FAIL: $PY cannot import tokenizers (transformers brings it; see tests/ref/requirements.txt)"; exit 1; }

# ---- the texts and the tokenizers ----
# doc1: the first 200 KB of the README's corpus (make tests fetches it), else generated
# English-like text; doc2: line breaks of every kind, indentation, blank runs, non-ASCII
# and a literal special token, 40 times.
"$PY" - "$tmp" build/data/english.txt <<'PY' || fail "making the texts and tokenizers"
import json, os, random, sys
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
tmp, corpus = sys.argv[1:]
if os.path.exists(corpus):
    text = open(corpus, "rb").read(200_000).decode("utf-8", "ignore")
    text = text[: text.rindex("\n") + 1]
else:
    rng = random.Random(1)
    syll = "ba be ca de di fo ga he in jo ka le ma ne or pa qui re sa te un ve wo ya ze".split()
    words = ["".join(rng.choice(syll) for _ in range(rng.randint(1, 4))) for _ in range(3000)]
    lines = []
    while sum(map(len, lines)) < 200_000:
        line = " ".join(rng.choice(words) for _ in range(rng.randint(3, 14)))
        lines.append(line.capitalize() + rng.choice([".", ",", ";", "!", "?"]) + "\n" * rng.choice([1, 1, 1, 2]))
    text = "".join(lines)
edge = ("Caf\u00e9 cr\u00e8me, na\u00efve \u4e2d\u6587 \U0001F600 emoji.\n\n\n\n   indented after blanks\n"
        "trailing spaces   \n\ttab-indented\nwindows line\r\nnext\r\n\r\nold mac\rline\n"
        "it's 12345 <|endoftext|> literal\n(parenthesis)\n-dash\nend of a paragraph.\n\nNew one\n"
        "no final newline")
open(f"{tmp}/doc1.txt", "w", encoding="utf-8", newline="").write(text)
open(f"{tmp}/doc2.txt", "w", encoding="utf-8", newline="").write("".join(f"{i}: {edge}" for i in range(40)))

# GPT-2's pattern (ByteLevel's regex), vocabulary 1000 with <|endoftext|> as id 0.
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator([text], trainers.BpeTrainer(vocab_size=1000, special_tokens=["<|endoftext|>"],
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
os.makedirs(f"{tmp}/gpt2")
tok.save(f"{tmp}/gpt2/tokenizer.json")
# A space before every text: cut text encodes differently, so documents go whole.
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
os.makedirs(f"{tmp}/prefix")
tok.save(f"{tmp}/prefix/tokenizer.json")
# Llama 3's pattern, and its BOS/EOS named by tokenizer_config.json as transformers saves it.
l3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
      r"|\s*[\r\n]+|\s+(?!\S)|\s+")
tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(l3), "isolated"),
                                             pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
tok.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>"])
os.makedirs(f"{tmp}/llama3")
tok.save(f"{tmp}/llama3/tokenizer.json")
json.dump({"bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|end_of_text|>"}},
          open(f"{tmp}/llama3/tokenizer_config.json", "w"))
# Ids past 65535 without a large vocabulary: a word-level one with id 70000, no EOS.
big = Tokenizer(models.WordLevel({"[UNK]": 0, "small": 1, "big": 70000}, unk_token="[UNK]"))
big.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
os.makedirs(f"{tmp}/big")
big.save(f"{tmp}/big/tokenizer.json")
print(tok.get_vocab_size() - 2, tok.token_to_id("<|begin_of_text|>"), tok.token_to_id("<|end_of_text|>"),
      file=open(f"{tmp}/ids", "w"))
PY
read -r V BOS EOS < "$tmp/ids" # gpt2/'s vocabulary (1000 from the README's corpus), llama3/'s BOS and EOS
printf 'small big\n' > "$tmp/sb.txt"
printf 'small small\n' > "$tmp/ss.txt"

# verify TOKDIR BIN u16|u32 [--bos ID] [--eos ID] [--line-docs] [--decode] FILE...: the
# header and size, and the ids are Tokenizer.encode of each document, BOS/EOS around
# it; --decode: decoding them gives the files' text back (byte-level BPE normalizes
# nothing, so exactly).
cat > "$tmp/verify.py" <<'PY'
import argparse, struct, sys
from array import array
from tokenizers import Tokenizer
p = argparse.ArgumentParser()
p.add_argument("tok"); p.add_argument("bin"); p.add_argument("fmt")
p.add_argument("--bos", type=int); p.add_argument("--eos", type=int)
p.add_argument("--line-docs", action="store_true"); p.add_argument("--decode", action="store_true")
p.add_argument("files", nargs="+")
a = p.parse_args()
tok = Tokenizer.from_file(a.tok + "/tokenizer.json")
data = open(a.bin, "rb").read()
header = struct.unpack("<256i", data[:1024])
magic, version, width, code = {"u16": (20240520, 1, 2, "H"), "u32": (20240801, 7, 4, "I")}[a.fmt]
assert header[:2] == (magic, version), f"magic, version {header[:2]}, want {(magic, version)}"
assert not any(header[3:]), "header words 3..255 are not 0"
count = header[2]
assert len(data) == 1024 + width * count, f"count {count} but {len(data)} bytes"
ids = array(code, data[1024:])
if sys.byteorder == "big":
    ids.byteswap()
ids = ids.tolist()
want, texts = [], []
for f in a.files:
    with open(f, encoding="utf-8", newline="") as fh:
        docs = [l.rstrip("\r\n") for l in fh] if a.line_docs else [fh.read()]
    for d in filter(None, docs):
        want += ([a.bos] if a.bos is not None else []) + tok.encode(d, add_special_tokens=False).ids
        want += [a.eos] if a.eos is not None else []
        texts.append(d)
if ids != want:
    k = next((k for k, (x, y) in enumerate(zip(ids, want)) if x != y), min(len(ids), len(want)))
    sys.exit(f"{a.bin}: {len(ids)} ids, want {len(want)}; first difference at {k}: "
             f"{ids[k:k + 8]} against {want[k:k + 8]}")
if a.decode:
    assert tok.decode(ids, skip_special_tokens=False) == "".join(texts), "decoding does not give the text back"
print(f"{a.bin}: {count} tokens as Tokenizer.encode gives them")
PY
verify() { "$PY" "$tmp/verify.py" "$@" > "$tmp/v.out" 2>&1 || fail "verify $*: $(tail -c 600 "$tmp/v.out")"; }

# ---- the files ----
# Many cuts (about every 2000 characters), in each format; u16 is the default here.
expect 0 "$PY" $T --tokenizer "$tmp/gpt2" --out "$tmp/gpt2.u16" --chunk-chars 2000 "$tmp/doc1.txt" "$tmp/doc2.txt"
grep -q "^wrote [0-9]* tokens to $tmp/gpt2.u16 (data.format \"tokens-u16\", llm.c's GPT-2 header); vocabulary $V tokens, largest id $((V - 1)): model.vocab_size at least $V$" "$tmp/out" ||
  fail "the closing line: $(cat "$tmp/out")"
[ -s "$tmp/err" ] && fail "a u16 run wrote to stderr: $(cat "$tmp/err")"
verify "$tmp/gpt2" "$tmp/gpt2.u16" u16 --decode "$tmp/doc1.txt" "$tmp/doc2.txt"
expect 0 "$PY" $T --tokenizer "$tmp/gpt2" --out "$tmp/gpt2.u32" --format u32 --chunk-chars 2000 "$tmp/doc1.txt" "$tmp/doc2.txt"
grep -q "(data.format \"tokens-u32\", llm.c's Llama 3 header)" "$tmp/out" || fail "u32's closing line: $(cat "$tmp/out")"
verify "$tmp/gpt2" "$tmp/gpt2.u32" u32 --decode "$tmp/doc1.txt" "$tmp/doc2.txt"
# The default chunk, a cut every few lines, and standard input.
expect 0 "$PY" $T --tokenizer "$tmp/gpt2" --out "$tmp/default.bin" "$tmp/doc1.txt" "$tmp/doc2.txt"
cmp -s "$tmp/default.bin" "$tmp/gpt2.u16" || fail "the default chunk size gives other tokens"
expect 0 "$PY" $T --tokenizer "$tmp/gpt2" --out "$tmp/tiny.bin" --chunk-chars 1 "$tmp/doc2.txt"
verify "$tmp/gpt2" "$tmp/tiny.bin" u16 --decode "$tmp/doc2.txt"
expect 0 "$PY" $T --tokenizer "$tmp/gpt2/tokenizer.json" --out "$tmp/stdin.bin" --chunk-chars 100 - < "$tmp/doc2.txt"
cmp -s "$tmp/stdin.bin" "$tmp/tiny.bin" || fail "standard input gives other tokens than the file"
# EOS after each file: <|endoftext|>, found by its name.
expect 0 "$PY" $T --tokenizer "$tmp/gpt2" --out "$tmp/eos.bin" --append-eos --chunk-chars 3000 "$tmp/doc1.txt" "$tmp/doc2.txt"
verify "$tmp/gpt2" "$tmp/eos.bin" u16 --eos 0 "$tmp/doc1.txt" "$tmp/doc2.txt"
# Llama 3's pattern, cut; then a document per line, BOS and EOS from tokenizer_config.json.
expect 0 "$PY" $T --tokenizer "$tmp/llama3" --out "$tmp/l3.bin" --format u32 --chunk-chars 500 "$tmp/doc1.txt" "$tmp/doc2.txt"
verify "$tmp/llama3" "$tmp/l3.bin" u32 --decode "$tmp/doc1.txt" "$tmp/doc2.txt"
expect 0 "$PY" $T --tokenizer "$tmp/llama3" --out "$tmp/lines.bin" --line-docs --prepend-bos --append-eos "$tmp/doc2.txt"
verify "$tmp/llama3" "$tmp/lines.bin" u16 --bos "$BOS" --eos "$EOS" --line-docs "$tmp/doc2.txt"
# A prefix space on every text: cutting would change the ids, so each document goes whole.
expect 0 "$PY" $T --tokenizer "$tmp/prefix" --out "$tmp/prefix.bin" --chunk-chars 500 "$tmp/doc1.txt" "$tmp/doc2.txt"
grep -q "each document is encoded whole" "$tmp/err" || fail "no note on whole documents: $(cat "$tmp/err")"
verify "$tmp/prefix" "$tmp/prefix.bin" u16 "$tmp/doc1.txt" "$tmp/doc2.txt"
# Ids past 65535: the default is u32; u16 refuses the id (and leaves nothing behind, an
# older file untouched), but takes text whose ids fit, with a warning.
expect 0 "$PY" $T --tokenizer "$tmp/big" --out "$tmp/big.bin" "$tmp/sb.txt"
verify "$tmp/big" "$tmp/big.bin" u32 "$tmp/sb.txt"
cp "$tmp/big.bin" "$tmp/big.keep"
expect 1 "$PY" $T --tokenizer "$tmp/big" --out "$tmp/big.bin" --format u16 "$tmp/sb.txt"
grep -q "sb.txt: token 1 of the output is id 70000 ('big'), which does not fit --format u16 (largest id 65535); use --format u32" "$tmp/err" ||
  fail "an id past u16: $(cat "$tmp/err")"
cmp -s "$tmp/big.bin" "$tmp/big.keep" || fail "a failed run changed the older output"
[ -z "$(ls "$tmp" | grep 'big.bin.tmp')" ] || fail "a failed run left $(ls "$tmp" | grep big.bin.tmp)"
expect 0 "$PY" $T --tokenizer "$tmp/big" --out "$tmp/ss.bin" --format u16 "$tmp/ss.txt"
grep -q "warning: the vocabulary's largest id, 70000, does not fit u16" "$tmp/err" || fail "no u16 warning: $(cat "$tmp/err")"
verify "$tmp/big" "$tmp/ss.bin" u16 "$tmp/ss.txt"

# ---- zinf check and train on them ----
config() { # $1 path, $2 data.format
  cat > "$tmp/cfg.json" <<JSON
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "seed": 5, "steps": 2,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
 "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "vocab_size": $V, "block_size": 32},
 "data": {"path": "$1", "format": "$2", "seq_len": 32},
 "device": {"backend": "host"}}
JSON
}
trained=0
for f in u16 u32; do
  config "$tmp/gpt2.$f" tokens-$f
  expect 0 "$Z" check "$tmp/cfg.json"
  grep -q "\"format\": \"tokens-$f\"" "$tmp/out" || fail "check $f: $(head -c 300 "$tmp/out")"
  run 1 "$tmp/train.$f"
  [ "$(grep -c '"step"' "$tmp/train.$f")" = 2 ] && trained=$((trained + 1)) || fail "train on $f: 2 steps?"
done
if [ $trained = 2 ]; then
  [ "$(summary "$tmp/train.u16")" = "$(summary "$tmp/train.u32")" ] ||
    fail "the u16 and u32 files train differently: $(summary "$tmp/train.u16") / $(summary "$tmp/train.u32")"
  echo "trained: $(summary "$tmp/train.u16")"
fi

# ---- memory ----
# 2 MB and 20 MB of text: the peak RSS differs by noise, not by the 18 MB of text or
# the ids (a list of 7 million would be some 250 MB).
for i in $(seq 10); do cat "$tmp/doc1.txt"; done > "$tmp/2mb.txt"
for i in $(seq 10); do cat "$tmp/2mb.txt"; done > "$tmp/20mb.txt"
"$PY" - "$PY" $T "$tmp" <<'PY' || fail "memory grows with the corpus"
import resource, subprocess, sys
py, t, tmp = sys.argv[1:]
def peak(name):
    subprocess.run([py, "-c", "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); "
                    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)",
                    py, t, "--tokenizer", f"{tmp}/gpt2", "--out", f"{tmp}/m.bin", f"{tmp}/{name}"],
                   check=True, stdout=open(f"{tmp}/m.out", "w"))
    return int(open(f"{tmp}/m.out").read().split()[-1]) * 1024
small, large = peak("2mb.txt"), peak("20mb.txt")
print(f"memory: peak RSS {small >> 20} MiB for 2 MB of text, {large >> 20} MiB for 20 MB")
assert large - small < 40 << 20, (small, large)
PY

# ---- errors ----
expect 2 "$PY" $T --tokenizer "$tmp/nope" --out "$tmp/x.bin" "$tmp/doc2.txt"
grep -q "^tokenize_text.py: --tokenizer $tmp/nope: no such directory$" "$tmp/err" || fail "missing tokenizer: $(cat "$tmp/err")"
mkdir "$tmp/empty"
expect 2 "$PY" $T --tokenizer "$tmp/empty" --out "$tmp/x.bin" "$tmp/doc2.txt"
grep -q "no tokenizer.json in it" "$tmp/err" || fail "no tokenizer.json: $(cat "$tmp/err")"
expect 2 "$PY" $T --tokenizer "$tmp/gpt2" --out "$tmp/x.bin" "$tmp/missing.txt"
grep -q "$tmp/missing.txt: no such file" "$tmp/err" || fail "missing input: $(cat "$tmp/err")"
expect 2 "$PY" $T --tokenizer "$tmp/gpt2" --out "$tmp/x.bin"
expect 2 "$PY" $T --out "$tmp/x.bin" "$tmp/doc2.txt"
expect 2 "$PY" $T --tokenizer "$tmp/gpt2" --out "$tmp/x.bin" --format u8 "$tmp/doc2.txt"
expect 2 "$PY" $T --tokenizer "$tmp/gpt2" --out "$tmp/x.bin" --eos-token '<|endoftext|>' "$tmp/doc2.txt"
expect 2 "$PY" $T --tokenizer "$tmp/gpt2" --out "$tmp/x.bin" --append-eos --eos-token '<nope>' "$tmp/doc2.txt"
grep -q "\-\-eos-token '<nope>': not a token of this tokenizer" "$tmp/err" || fail "unknown EOS: $(cat "$tmp/err")"
expect 2 "$PY" $T --tokenizer "$tmp/big" --out "$tmp/x.bin" --append-eos "$tmp/sb.txt"
grep -q "give it with --eos-token" "$tmp/err" || fail "no EOS: $(cat "$tmp/err")"
expect 2 "$PY" $T --tokenizer "$tmp/gpt2" --out "$tmp/nodir/x.bin" "$tmp/doc2.txt"
printf 'caf\xe9\n' > "$tmp/latin1.txt"
expect 1 "$PY" $T --tokenizer "$tmp/gpt2" --out "$tmp/x.bin" "$tmp/doc2.txt" "$tmp/latin1.txt"
grep -q "$tmp/latin1.txt: not UTF-8 text" "$tmp/err" || fail "not UTF-8: $(cat "$tmp/err")"
[ -z "$(ls "$tmp" | grep '^x.bin')" ] || fail "a failed run left $(ls "$tmp" | grep '^x.bin')"

finish test_tokenize
