#!/usr/bin/env bash
# The command-line contract: subcommands and --help, exit codes 0/1/2, and `zinf check`
# printing the normalized config as JSON (or one error naming the key).
# timeout: 10 san=20
# backend: host: it trains nothing, and reads configs the same in every build
set -u
Z=${ZINF_BUILD:-build}/zinf
tmp=$(mktemp -d /tmp/zinf-cli-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
json_get() { python3 -c "import json,sys; d=json.load(open('$tmp/out')); print(eval('d' + sys.argv[1]))" "$1"; }

# ---- subcommands ----
expect 0 "$Z" --help
cp "$tmp/out" "$tmp/help"
for c in check info train eval io-bench io-tune adam-bench estimate consolidate; do
  grep -q "^  $c " "$tmp/help" || fail "--help does not list $c"
  expect 0 "$Z" "$c" --help
  grep -q "^zinf $c" "$tmp/out" || fail "zinf $c --help prints no usage"
done
expect 2 "$Z"
expect 2 "$Z" frobnicate
grep -q 'unknown command "frobnicate"' "$tmp/err" || fail "unknown command not named"
expect 0 "$Z" --version
grep -q '^zinf [0-9]' "$tmp/out" || fail "--version"

# ---- check: valid configs print normalized JSON ----
for f in examples/*.json; do
  sets=()
  grep -q nvme_path "$f" && sets=(--set "zero_optimization.offload_optimizer.nvme_path=$tmp"
                                  --set "zero_optimization.offload_param.nvme_path=$tmp")
  # A recipe's data file (a tokenized corpus of the user's) stands in as an empty file.
  data=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("data", {}).get("path", ""))' "$f")
  [ -n "$data" ] && [ ! -e "$data" ] && : > "$tmp/data" && sets+=(--set "data.path=$tmp/data")
  expect 0 "$Z" check "$f" "${sets[@]}"
  python3 -c "import json; json.load(open('$tmp/out'))" || fail "check $f: output is not JSON"
  [ -s "$tmp/err" ] && fail "check $f wrote to stderr: $(cat "$tmp/err")"
done
expect 0 "$Z" check examples/zero3-offload-cpu.json --world-size 4
[ "$(json_get "['train_batch_size']")" = 32 ] || fail "micro 8 x 4 ranks is not 32"
[ "$(json_get "['zero_optimization']['overlap_comm']")" = True ] || fail "stage 3 default overlap_comm"
expect 0 "$Z" check examples/zero3-offload-cpu.json --set zero_optimization.stage=2 \
  --set zero_optimization.offload_param.device=none --set 'optimizer.params.betas=[0.8,0.9]'
[ "$(json_get "['zero_optimization']['stage']")" = 2 ] || fail "--set stage"
[ "$(json_get "['optimizer']['params']['betas'][0]")" = 0.8 ] || fail "--set betas"
# the normalized output is itself a valid config that normalizes to the same text
cp "$tmp/out" "$tmp/norm.json"
expect 0 "$Z" check "$tmp/norm.json"
cmp -s "$tmp/out" "$tmp/norm.json" || fail "normalized config is not a fixed point"

# ---- check: errors exit 2 and name the key ----
echo '{"train_batch_size": 8, "zero_optimization": {"offload_optimizer": {"devcie": "cpu"}}}' > "$tmp/bad.json"
expect 2 "$Z" check "$tmp/bad.json"
grep -q 'zero_optimization.offload_optimizer.devcie: unknown key; did you mean "device"?' "$tmp/err" ||
  fail "unknown key message: $(cat "$tmp/err")"
[ -s "$tmp/out" ] && fail "a failed check printed to stdout"
printf '{\n  "train_batch_size": 8,\n  "steps": 1,\n}\n' > "$tmp/bad.json"
expect 2 "$Z" check "$tmp/bad.json"
grep -q "bad.json:4:1: malformed JSON" "$tmp/err" || fail "malformed JSON position: $(cat "$tmp/err")"
expect 2 "$Z" check examples/zero3-offload-nvme.json --set "zero_optimization.offload_optimizer.nvme_path=$tmp" \
  --set "zero_optimization.offload_param.nvme_path=$tmp/none/deeper"
grep -q "zero_optimization.offload_param.nvme_path" "$tmp/err" || fail "missing nvme_path not named"
expect 2 "$Z" check "$tmp/missing.json"
grep -q "missing.json" "$tmp/err" || fail "missing config file not named"
expect 2 "$Z" check
expect 2 "$Z" check a.json b.json
expect 2 "$Z" check examples/zero3-offload-cpu.json --world-size 0
expect 2 "$Z" check examples/zero3-offload-cpu.json --bogus
expect 2 "$Z" check examples/zero3-offload-cpu.json --set nokey

finish test_check
