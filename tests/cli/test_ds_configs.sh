#!/usr/bin/env bash
# Real DeepSpeed configs from public training scripts (tests/cli/ds_configs/, sources
# and "auto" replacements in SOURCES.md), pasted unchanged: `zinf check FIXTURE
# --world-size W` accepts each, W being the ranks DeepSpeed is launched on for it (so
# the batch keys agree), prints JSON that normalizes to itself, and warns of nothing.
# Every fixture has a W here and an entry in SOURCES.md.
# timeout: 20 san=30
# backend: host: zinf check reads a config the same in every build, and trains nothing
set -u
Z=${ZINF_BUILD:-build}/zinf
dir=$(dirname "$0")/ds_configs
tmp=$(mktemp -d /tmp/zinf-dscfg-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"

# fixture (without .json) and the world size it runs at
worlds="
axolotl_zero1 8
axolotl_zero3_bf16 8
dschat_step1_sft 8
dsexamples_llama_13b_zero3_offload 8
dsexamples_megatron_gpt2_zero3 8
dsexamples_sglang_nvme 1
fastchat_deepspeed_config_s2 4
fastchat_deepspeed_config_s3 8
hf_docs_zero3_cpu_offload 2
hf_tests_ds_config_zero2 1
hf_tests_ds_config_zero3_bf16 2
llamafactory_ds_z2_offload_config 8
llamafactory_ds_z3_config 8
llava_zero2 8
llava_zero3_offload 8
"

n=0
for f in "$dir"/*.json; do
  name=$(basename "$f" .json)
  w=$(awk -v n="$name" '$1 == n { print $2 }' <<< "$worlds")
  [ -n "$w" ] || { fail "$name: no world size in this test"; continue; }
  grep -q "\`$name.json\`" "$dir/SOURCES.md" || fail "$name: not in SOURCES.md"
  # A published NVMe path is that machine's drive; point it at a directory here.
  sets=()
  for sec in $(python3 -c "import json, sys; z = json.load(open(sys.argv[1])).get('zero_optimization', {})
print(*(s for s in ('offload_optimizer', 'offload_param') if 'nvme_path' in (z.get(s) or {})))" "$f"); do
    sets+=(--set "zero_optimization.$sec.nvme_path=$tmp")
  done
  before=$fails
  expect 0 "$Z" check "$f" --world-size "$w" "${sets[@]}"
  [ "$fails" = "$before" ] || continue
  grep -qE '^zinf[a-z ]*: (warning|error):' "$tmp/err" && fail "$name: zinf check warned: $(cat "$tmp/err")"
  cp "$tmp/out" "$tmp/norm.json"
  python3 -c "import json, sys; json.load(open(sys.argv[1]))" "$tmp/norm.json" 2> /dev/null ||
    { fail "$name: the output is not JSON"; continue; }
  expect 0 "$Z" check "$tmp/norm.json" --world-size "$w"
  cmp -s "$tmp/out" "$tmp/norm.json" || fail "$name: the normalized config is not a fixed point"
  n=$((n + 1))
done
[ "$n" -ge 12 ] || fail "only $n fixtures in $dir"
for name in $(awk 'NF { print $1 }' <<< "$worlds"); do
  [ -f "$dir/$name.json" ] || fail "$name: listed here, but $dir/$name.json is missing"
done

finish test_ds_configs
