#!/usr/bin/env bash
# Packs what tests/bench/gpu_checks.sh needs on a GPU machine that has no network and
# none of zinf's libraries, into one file small enough to carry ($ZINF_BUILD/gpu-pack.tar.xz,
# about 20 MB): zinf, the four GPU test programs and the transformers fixtures they read
# (build/ref), stripped, and every shared library they load from outside the CUDA toolkit
# and the C runtime (liburing, libnuma, OpenBLAS, MPI, jansson and theirs), 80 MB
# unpacked. Built beforehand with `make all tests`. On the GPU machine gpu_checks.sh
# unpacks it and puts the libraries on LD_LIBRARY_PATH.
# Extra arguments are more files under $ZINF_BUILD to pack (another build of zinf to
# compare, say); prints the pack's path and size.
set -eu
B=${ZINF_BUILD:-build}
programs=(zinf tests/test_gpu_ops tests/test_model_gpt2 tests/test_model_llama tests/test_gpu_device)
# The CLIs tests/bench/gpu_variants.sh built at other commits, for gpu_checks.sh --variants.
for v in "$B"/variants/zinf-*; do [ -f "$v" ] && set -- "$@" "${v#"$B"/}"; done
for p in "${programs[@]}" "$@"; do
  [ -f "$B/$p" ] || { echo "gpu_pack: $B/$p is missing (make all tests builds it)"; exit 1; }
done
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/tests" "$stage/gpu-libs"
for p in "${programs[@]}" "$@"; do
  mkdir -p "$stage/$(dirname "$p")"
  strip -o "$stage/$p" "$B/$p"
done
cp -r "$B/ref" "$stage/ref"
# The libraries ldd resolves, less the CUDA toolkit's (the GPU machine has its own) and
# the C runtime's, which every Linux has.
for p in "${programs[@]}"; do ldd "$B/$p"; done |
  awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -v -e '^/usr/local/cuda' -e '/libc\.so' -e '/libm\.so' -e '/libdl\.so' -e '/librt\.so' \
    -e '/libpthread\.so' -e '/libgcc_s\.so' -e '/libstdc++\.so' -e '/ld-linux' |
  while read -r lib; do cp -L "$lib" "$stage/gpu-libs/"; done
git describe --always --dirty > "$stage/gpu-pack-commit.txt"
tar -cJf "$B/gpu-pack.tar.xz" -C "$stage" .
echo "gpu_pack: $B/gpu-pack.tar.xz, $(du -h "$B/gpu-pack.tar.xz" | cut -f1) (carry it; gpu_checks.sh unpacks it)${*:+; with $*}"
