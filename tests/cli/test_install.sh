#!/usr/bin/env bash
# make install PREFIX=...: the public headers, libzinf.so under its soname, libzinf.a,
# the zinf program and zinf.pc land under the prefix; examples/train_loop.c, compiled
# and linked against them with nothing but `pkg-config --cflags --libs zinf`, loads the
# installed library and trains to the in-tree example's losses and weights digest, bit
# for bit. libzinf.so exports only zinf_ names, and pkg-config's version is the
# program's.
# timeout: 10
set -u
Z=${ZINF_BUILD:-build}/zinf
E=${ZINF_BUILD:-build}/examples/train_loop
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
tokens "$tmp/train.tokens"
backend=${ZINF_TEST_BACKEND:-host}
P=$tmp/prefix

# The build this suite runs: its variant's switches (nothing is rebuilt).
variant=(SAN="${SAN:-}" NO_CUDA="${NO_CUDA:-}" BACKEND=$([ -n "${ZINF_TEST_CUDA_EMU:-}" ] && echo cuda-emu || echo host))
expect 0 make --no-print-directory install PREFIX="$P" "${variant[@]}"
for f in include/zinf/zinf.h include/zinf/zinf_engine.h lib/libzinf.a bin/zinf lib/pkgconfig/zinf.pc; do
  [ -f "$P/$f" ] || fail "not installed: $f"
done
[ "$(readlink "$P/lib/libzinf.so")" = libzinf.so.0 ] || fail "lib/libzinf.so is not a link to libzinf.so.0"
readelf -d "$P/lib/libzinf.so.0" | grep -q 'SONAME.*\[libzinf.so.0\]' || fail "no soname libzinf.so.0"

others=$(nm -D --defined-only "$P/lib/libzinf.so.0" | awk '{print $3}' | grep -v '^zinf_')
[ -z "$others" ] || fail "libzinf.so exports $(echo "$others" | wc -l) names without zinf_: $(echo $others | head -c 300)"

export PKG_CONFIG_PATH=$P/lib/pkgconfig
version=$(pkg-config --modversion zinf) || fail "pkg-config knows no zinf"
[ "zinf $version" = "$("$Z" --version)" ] || fail "pkg-config says $version; $("$Z" --version)"

# An ASan build's library wants the program built with it.
san=()
ldd "$Z" | grep -q libasan && san=(-fsanitize=address,undefined)
cc -std=c11 -Wall -Werror "${san[@]}" examples/train_loop.c -o "$tmp/train_loop" \
  $(pkg-config --cflags --libs zinf) 2> "$tmp/cc.err" || fail "cc with pkg-config: $(head -c 600 "$tmp/cc.err")"
ldd "$tmp/train_loop" | grep -q "libzinf.so.0 => $P/lib/libzinf.so.0" ||
  fail "the program does not load the installed library: $(ldd "$tmp/train_loop" | grep zinf)"

cat > "$tmp/cfg.json" <<JSON
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "seed": 7, "steps": 3, "steps_per_print": 3,
 "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
 "zero_optimization": {"stage": 3},
 "model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 256, "block_size": 32},
 "data": {"path": "$tmp/train.tokens", "format": "tokens-u16", "seq_len": 32},
 "device": {"backend": "$backend"}}
JSON
"$E" "$tmp/cfg.json" > "$tmp/in_tree" 2> "$tmp/err" || fail "in-tree example: $(tail -c 400 "$tmp/err")"
"$tmp/train_loop" "$tmp/cfg.json" > "$tmp/installed" 2> "$tmp/err" || fail "installed example: $(tail -c 400 "$tmp/err")"
grep -q weights_digest "$tmp/in_tree" || fail "the in-tree example printed no digest: $(cat "$tmp/in_tree")"
cmp -s "$tmp/in_tree" "$tmp/installed" || fail "installed and in-tree differ: $(diff "$tmp/in_tree" "$tmp/installed" | head -5)"

finish test_install
