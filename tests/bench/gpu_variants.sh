#!/usr/bin/env bash
# Builds zinf at other commits, to time their kernels beside this build's on a GPU in one
# device run: `tests/bench/gpu_variants.sh NAME=REF ...` (REF any commit: a branch with one
# knob changed, say) leaves each stripped CLI at $ZINF_BUILD/variants/zinf-NAME, built in a
# git worktree of its own (this tree is not touched); then tests/bench/gpu_pack.sh packs
# them with the rest and `tests/bench/gpu_checks.sh --variants` runs each op of GPT-2 124M
# and Llama-3.2-1B under every variant and this build, twice, in one run
# (tests/bench/gpu_variants.py prints the table). Each CLI is about 7 MB packed; the device
# machine takes 64 MB in all. A knob's choice rests on ops timed side by side on one card
# in one minute: on an H200 (2026-11-27) an op's two timings in one run agreed within 5%,
# where PyTorch's step moved by 3% between runs minutes apart.
set -eu
B=${ZINF_BUILD:-build}
[ $# -gt 0 ] || { echo "usage: tests/bench/gpu_variants.sh NAME=REF ..."; exit 2; }
for v in "$@"; do
  case "$v" in
    *=*) ;;
    *) echo "gpu_variants: '$v' is not NAME=REF"; exit 2 ;;
  esac
  name=${v%%=*}
  [[ "$name" =~ ^[A-Za-z0-9_-]+$ ]] || { echo "gpu_variants: name '$name': letters, digits, - and _ only"; exit 2; }
  git rev-parse --verify -q "${v#*=}^{commit}" > /dev/null || { echo "gpu_variants: ${v#*=} is not a commit here"; exit 2; }
done
rm -rf "$B/variants"
mkdir -p "$B/variants"
for v in "$@"; do
  name=${v%%=*} ref=${v#*=}
  tree=$(mktemp -d)
  git worktree add -q --detach "$tree" "$ref"
  echo "gpu_variants: $name: building zinf at $(git rev-parse --short "$ref")"
  if ! make -C "$tree" -j"$(nproc)" build/zinf > "$B/variants/$name.log" 2>&1; then
    echo "gpu_variants: $name does not build (its log: $B/variants/$name.log)"
    git worktree remove --force "$tree"
    exit 1
  fi
  strip -o "$B/variants/zinf-$name" "$tree/build/zinf"
  git -C "$tree" rev-parse --short HEAD > "$B/variants/$name.commit"
  git worktree remove --force "$tree"
done
ls "$B/variants"/zinf-* | sed 's|.*/zinf-|gpu_variants: built |'
echo "gpu_variants: now tests/bench/gpu_pack.sh, then carry $B/gpu-pack.tar.xz and run gpu_checks.sh --variants"
