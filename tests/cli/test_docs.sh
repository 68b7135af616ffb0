#!/usr/bin/env bash
# docs/cli.md against the program: every subcommand `zinf --help` lists has a section
# "## zinf NAME" there; every option its `zinf NAME --help` names appears in that
# section; every environment knob `zinf --help` lists appears in the page; and every
# field of every --json output, collected by running each subcommand on a tiny case
# (nested fields as `cpu.model`, `paths[].fs_type`), appears as `field` in its
# subcommand's section. (docs/config.md against the config schema is test_docs_config.)
# timeout: 10 san=25 cuda-emu=45
set -u
Z=${ZINF_BUILD:-build}/zinf
DOC=${ZINF_DOCS_CLI:-docs/cli.md}
backend=${ZINF_TEST_BACKEND:-host}
tmp=$(mktemp -d /var/tmp/zinf-docs-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
mkdir -p "$tmp/nvme" "$tmp/io"
[ -f "$DOC" ] || { echo "FAIL: $DOC is missing"; exit 1; }

# The lines of DOC's section for subcommand $1: from "## zinf $1" to the next "## ".
section() { awk -v h="## zinf $1" '$0 == h { on = 1; next } /^## / { on = 0 } on' "$DOC"; }

# ---- subcommands, their options, the environment ----
expect 0 "$Z" --help
cp "$tmp/out" "$tmp/help"
cmds=$(awk '/^commands:/ { on = 1; next } /^$/ { on = 0 } on && NF { print $1 }' "$tmp/help")
[ -n "$cmds" ] || fail "zinf --help lists no commands"
for c in $cmds; do
  section "$c" > "$tmp/sec"
  if [ ! -s "$tmp/sec" ]; then
    fail "$DOC has no section \"## zinf $c\""
    continue
  fi
  expect 0 "$Z" "$c" --help
  for opt in $(grep -o -- '--[a-z][a-z0-9-]*' "$tmp/out" | sort -u); do
    grep -q -- "$opt\b" "$tmp/sec" || fail "$DOC: zinf $c: option $opt (from zinf $c --help) is not documented"
  done
done
for knob in $(awk '/^environment:/ { on = 1; next } on && NF { print $1 }' "$tmp/help"); do
  grep -q "\`$knob\`" "$DOC" || fail "$DOC: environment variable $knob (from zinf --help) is not documented"
done

# ---- every --json output's fields ----
# fields CMD FILE...: each --json line of the files, its keys flattened, must appear as
# `key` in the section of CMD.
fields() {
  local c=$1; shift
  section "$c" > "$tmp/sec"
  python3 - "$tmp/sec" "$c" "$@" <<'PY' || fail "$DOC: zinf $c --json fields (above)"
import json, re, sys
sec, cmd, files = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3:]
sec = re.sub(r"```.*?```", "", sec, flags=re.S)  # code blocks are not field names
documented = set(re.findall(r"`([^`]+)`", sec))
def keys(o, prefix=""):
    for k, v in o.items():
        yield prefix + k
        if isinstance(v, dict):
            yield from keys(v, prefix + k + ".")
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            for e in v:
                yield from keys(e, prefix + k + "[].")
found, lines = set(), 0
for f in files:
    for line in open(f):
        if line.strip():
            found |= set(keys(json.loads(line)))
            lines += 1
if lines == 0:
    print("zinf %s --json printed nothing" % cmd)
    sys.exit(1)
missing = sorted(found - documented)
for k in missing:
    print("zinf %s --json prints `%s`, which the section does not name" % (cmd, k))
sys.exit(1 if missing else 0)
PY
}

# A tiny GPT on text bytes, stage 3 with both tiers on NVMe, saving a checkpoint.
python3 -c "import random; r = random.Random(3); open('$tmp/text', 'w').write(''.join(r.choice('abcdefgh ') for _ in range(20000)))"
cat > "$tmp/cfg.json" <<JSON
{"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2, "steps": 2, "seed": 5, "bf16": {"enabled": true},
 "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "$tmp/nvme"},
   "offload_param": {"device": "nvme", "nvme_path": "$tmp/nvme", "max_in_cpu": 0}},
 "model": {"n_layer": 1, "n_head": 2, "n_embd": 64, "vocab_size": 256, "block_size": 32},
 "data": {"path": "$tmp/text", "format": "text-bytes", "seq_len": 32},
 "checkpoint": {"dir": "$tmp/ck"},
 "device": {"backend": "$backend"}}
JSON

expect 0 "$Z" info --path "$tmp/io" --json && fields info "$tmp/out"
expect 0 "$Z" io-bench --path "$tmp/io" --size 1M --loops 1 --json && fields io-bench "$tmp/out"
cp "$tmp/out" "$tmp/io.json"
expect 0 "$Z" io-bench --h2d --d2h --size 1M --loops 1 --json && fields io-bench "$tmp/io.json" "$tmp/out"
expect 0 "$Z" io-tune --path "$tmp/io" --size 1M --block-sizes 1M --queue-depths 4 --threads 1 --json &&
  fields io-tune "$tmp/out"
expect 0 "$Z" adam-bench --params 1M --threads 1 --steps 1 --json && fields adam-bench "$tmp/out"
expect 0 "$Z" estimate --params 124M --json && cp "$tmp/out" "$tmp/est.json"
expect 0 "$Z" estimate --config "$tmp/cfg.json" --json && fields estimate "$tmp/est.json" "$tmp/out"
expect 0 "$Z" device-bench --config "$tmp/cfg.json" --passes 1 --shapes --json && fields device-bench "$tmp/out"
expect 0 "$Z" train "$tmp/cfg.json" --json && fields train "$tmp/out"
expect 0 "$Z" consolidate "$tmp/ck" "$tmp/model.safetensors" --json && fields consolidate "$tmp/out"
expect 0 "$Z" eval --model "$tmp/model.safetensors" --data "$tmp/text" --config "$tmp/cfg.json" --json &&
  fields eval "$tmp/out"

finish test_docs
