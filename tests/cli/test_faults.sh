#!/usr/bin/env bash
# Faults on the swap path under a live zinf train (stage 3, optimizer and parameters on
# NVMe, a checkpoint every 3 steps). Injected (ZINF_FAULT): EINTR, EAGAIN and short
# transfers are carried on to the uninterrupted run's weights; EIO and ENOSPC on a
# swap read or write and a byte flipped in a read stop the run with exit 1, naming the
# operation, the file, the offset and the sub-group or module, and the checkpoint it
# names resumes to the uninterrupted run's weights; a failed checkpoint write stops
# (checkpoint.on_error "stop", the previous one whole) or is warned about in every step
# line until the next one is written ("warn"); on 2 ranks a fault on one ends both.
# Real: a FUSE file system (tests/cli/faultfs.py) under the swap store and the
# checkpoints returns EIO or ENOSPC mid-run, with the same outcomes.
# timeout: 60 san=120 cuda-emu=120
set -u
Z=${ZINF_BUILD:-build}/zinf
PY=build/pyenv/bin/python
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
faultfs_pid=
cleanup() {
  if [ -n "$faultfs_pid" ]; then
    kill "$faultfs_pid" 2> /dev/null
    wait "$faultfs_pid" 2> /dev/null
    fusermount -u "$tmp/mnt" 2> /dev/null || umount -l "$tmp/mnt" 2> /dev/null
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
. "$(dirname "$0")/lib.sh"
tokens "$tmp/train.tokens"
backend=${ZINF_TEST_BACKEND:-host}

# config ROOT: the job with its swap store and checkpoints under ROOT.
config() {
  cat > "$tmp/cfg.json" <<JSON
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "seed": 7, "steps": 8, "steps_per_print": 1,
 "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.95], "weight_decay": 0.1}},
 "bf16": {"enabled": true},
 "zero_optimization": {"stage": 3, "reduce_bucket_size": 60000, "sub_group_size": 40000,
   "stage3_param_persistence_threshold": 0,
   "offload_optimizer": {"device": "nvme", "nvme_path": "$1/nvme"},
   "offload_param": {"device": "nvme", "nvme_path": "$1/nvme", "max_in_cpu": 0, "buffer_count": 3}},
 "aio": {"block_size": 65536},
 "model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 256, "block_size": 32},
 "data": {"path": "$tmp/train.tokens", "format": "tokens-u16", "seq_len": 32},
 "checkpoint": {"dir": "$1/ck", "interval": 3, "keep": 2},
 "device": {"backend": "$backend"}}
JSON
}
config "$tmp"
digest() { tail -n 1 "$1" | sed -n 's/.*"weights_digest": *"\([0-9a-f]*\)".*/\1/p'; }

run 1 "$tmp/ref"
want=$(digest "$tmp/ref")
[ -n "$want" ] || fail "the uninterrupted run gave no digest"

# Carried on: the same weights, bit for bit.
rm -rf "$tmp/ck"
ZINF_FAULT=read:5:eintr,read:40:eagain,read:77:short,write:3:short,write:30:eintr,write:61:eagain \
  run 1 "$tmp/transient"
[ "$(digest "$tmp/transient")" = "$want" ] || fail "EINTR, EAGAIN and short transfers changed the weights"

# stopped NAME SPEC WORDS...: the run stops with exit 1 and an error holding each of
# WORDS; the checkpoint rank 0 names resumes to the uninterrupted weights, and
# no temporary checkpoint directory is left.
stopped() {
  local name=$1 spec=$2; shift 2
  rm -rf "$tmp/ck"
  ZINF_FAULT=$spec "$Z" train "$tmp/cfg.json" --json > "$tmp/$name" 2> "$tmp/$name.err"
  local rc=$?
  [ $rc = 1 ] || { fail "$name ($spec): exit $rc, want 1: $(tail -c 300 "$tmp/$name.err")"; return; }
  for w in "$@"; do grep -q -- "$w" "$tmp/$name.err" || fail "$name: no \"$w\" in: $(tail -c 600 "$tmp/$name.err")"; done
  ls -a "$tmp/ck" 2> /dev/null | grep -q '^\.tmp-' && fail "$name: a temporary checkpoint is left"
  local tag
  tag=$(sed -n 's/.*the newest checkpoint is .*\/\(global_step[0-9]*\): resume.*/\1/p' "$tmp/$name.err")
  [ -n "$tag" ] || { fail "$name: no checkpoint named to resume from: $(tail -c 300 "$tmp/$name.err")"; return; }
  [ "$(cat "$tmp/ck/latest")" = "$tag" ] || fail "$name: latest is $(cat "$tmp/ck/latest"), the message says $tag"
  run 1 "$tmp/$name.resumed" --set checkpoint.load=latest
  [ "$(digest "$tmp/$name.resumed")" = "$want" ] || fail "$name: resumed from $tag, other weights"
}
nvme="$tmp/nvme/zinf-"
stopped read_eio read:250:eio "error: .*read $nvme" "Input/output error" "at offset" "of module\|of sub-group"
stopped write_enospc write:260:enospc "error: .*write $nvme" "No space left on device" "at offset"
stopped read_corrupt read:230:corrupt "read $nvme" "fail their checksum" "at offset" "of module\|of sub-group"
stopped save_eio save:6:eio "global_step6 was not saved: .*: write at offset" "Input/output error" "latest still names global_step3"

# Before the first checkpoint there is none to name.
rm -rf "$tmp/ck"
ZINF_FAULT=read:20:eio "$Z" train "$tmp/cfg.json" --json > "$tmp/early" 2> "$tmp/early.err"
[ $? = 1 ] || fail "a fault in step 1: exit $?, want 1"
grep -q "no checkpoint in $tmp/ck to resume from (.*): a new run starts from step 0" "$tmp/early.err" ||
  fail "a fault in step 1: $(tail -c 300 "$tmp/early.err")"

# With aio.checksum off the same flipped byte goes unseen: the check is what caught it.
rm -rf "$tmp/ck"
ZINF_FAULT=read:230:corrupt run 1 "$tmp/unchecked" --set aio.checksum=false

# checkpoint.on_error "warn": the failed save is said, repeated, and training goes on.
rm -rf "$tmp/ck"
ZINF_FAULT=save:5:enospc run 1 "$tmp/warn" --set checkpoint.on_error=warn
[ "$(digest "$tmp/warn")" = "$want" ] || fail "warn: other weights"
errors=$(python3 -c '
import json, sys
print(" ".join("-" if s.get("checkpoint_error") is None else "E" for s in map(json.loads, open(sys.argv[1])) if "step" in s and "final" not in s))' "$tmp/warn")
[ "$errors" = "- - - - - - E E" ] || fail "warn: checkpoint_error per step: $errors, want the two steps after step 6"
grep -q 'checkpoint: warning: global_step6 was not saved.*No space left.*checkpoint.on_error "warn"' "$tmp/warn.err" ||
  fail "warn: no warning line: $(tail -c 300 "$tmp/warn.err")"
ls "$tmp/ck" | tr '\n' ' ' | grep -qx 'global_step3 global_step8 latest ' || fail "warn: checkpoints $(ls -a "$tmp/ck")"

# Two ranks: rank 1's read fails; both end (rank 0 within the comm timeout) with exit 1.
rm -rf "$tmp/ck"
start=$SECONDS
ZINF_COMM_TIMEOUT=20 ZINF_FAULT=read:150:eio@1 mpirun -np 2 "$Z" train "$tmp/cfg.json" --json > "$tmp/ranks" 2> "$tmp/ranks.err"
rc=$?
[ $rc != 0 ] || fail "2 ranks, rank 1 failing: exit 0"
grep -q "\[rank 1\].*Input/output error\|rank1/.*Input/output error" "$tmp/ranks.err" || fail "2 ranks: rank 1's error missing: $(tail -c 500 "$tmp/ranks.err")"
[ $((SECONDS - start)) -lt 40 ] || fail "2 ranks took $((SECONDS - start)) s to stop"

# ---- a real file system that fails ----
if [ ! -c /dev/fuse ]; then
  echo "test_faults: /dev/fuse is missing here: the FUSE cases did not run"
elif ! $PY -c 'import fuse; fuse.FUSE' 2> /dev/null; then
  fail "fusepy is not in $PY (make tests installs it)"
else
  mkdir -p "$tmp/backing" "$tmp/mnt"
  $PY "$(dirname "$0")/faultfs.py" "$tmp/backing" "$tmp/mnt" --control "$tmp/control" 2> "$tmp/faultfs.err" &
  faultfs_pid=$!
  for _ in $(seq 100); do mountpoint -q "$tmp/mnt" && break; sleep 0.1; done
  mountpoint -q "$tmp/mnt" || fail "faultfs did not mount: $(cat "$tmp/faultfs.err")"
  config "$tmp/mnt"
  # arm JSON: a rule for the file system, written whole.
  arm() { echo "$1" > "$tmp/control.new" && mv "$tmp/control.new" "$tmp/control"; }
  # on_fuse NAME RULE [--set ...]: 40 steps on the mount, the rule armed once the
  # first checkpoint is there.
  on_fuse() {
    local name=$1 rule=$2; shift 2
    rm -f "$tmp/control"
    rm -rf "$tmp/mnt/ck"
    "$Z" train "$tmp/cfg.json" --json --steps 40 "$@" > "$tmp/$name" 2> "$tmp/$name.err" &
    local pid=$!
    for _ in $(seq 300); do [ -e "$tmp/mnt/ck/latest" ] && break; sleep 0.05; done
    arm "$rule"
    wait $pid
  }
  on_fuse fuse_eio '{"op": "write", "errno": "EIO", "match": "/nvme/"}'
  rc=$?
  [ $rc = 1 ] || fail "FUSE EIO on swap writes: exit $rc, want 1"
  grep -q "error: .*write $tmp/mnt/nvme/zinf-.*Input/output error" "$tmp/fuse_eio.err" ||
    fail "FUSE EIO: $(tail -c 400 "$tmp/fuse_eio.err")"
  grep -q "write EIO /nvme/" "$tmp/control.log" || fail "FUSE EIO: faultfs failed nothing"
  rm -f "$tmp/control"
  run 1 "$tmp/fuse_eio.resumed" --steps 40 --set checkpoint.load=latest
  grep -q '"final"' "$tmp/fuse_eio.resumed" || fail "FUSE EIO: the checkpoint did not resume"

  on_fuse fuse_nospc '{"op": "write", "errno": "ENOSPC", "match": "/ck/"}' --set checkpoint.on_error=warn
  rc=$?
  [ $rc = 0 ] || fail "FUSE ENOSPC on checkpoints with warn: exit $rc: $(tail -c 300 "$tmp/fuse_nospc.err")"
  grep -q "checkpoint: warning: .*No space left on device" "$tmp/fuse_nospc.err" || fail "FUSE ENOSPC: no warning"
  on_fuse fuse_nospc_stop '{"op": "write", "errno": "ENOSPC", "match": "/ck/"}'
  rc=$?
  [ $rc = 1 ] || fail "FUSE ENOSPC on checkpoints with stop: exit $rc"
  grep -q "was not saved: .*No space left on device.*latest still names global_step" "$tmp/fuse_nospc_stop.err" ||
    fail "FUSE ENOSPC stop: $(tail -c 300 "$tmp/fuse_nospc_stop.err")"
fi
finish test_faults
