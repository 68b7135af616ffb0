# Helpers the CLI test scripts source: count failures, run a command expecting an exit
# code with its output in $tmp/out and $tmp/err, and finish with the right exit code.
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
expect() {
  local want=$1; shift
  "$@" > "$tmp/out" 2> "$tmp/err"; local rc=$?
  [ $rc = "$want" ] || fail "'$*' exited $rc, want $want; stderr: $(head -c 400 "$tmp/err")"
}
finish() {
  [ $fails = 0 ] && echo "$1: all checks passed"
  [ $fails = 0 ]
}

# For the training tests. run NP OUT [--set ...]: train $tmp/cfg.json with --json on NP
# ranks (mpirun when NP > 1); stdout in OUT, stderr in OUT.err.
run() {
  local np=$1 out=$2; shift 2
  if [ "$np" = 1 ]; then
    "$Z" train "$tmp/cfg.json" --json "$@" > "$out" 2> "$out.err"
  else
    mpirun -np "$np" "$Z" train "$tmp/cfg.json" --json "$@" > "$out" 2> "$out.err"
  fi || fail "train on $np ranks $*: exit $?: $(tail -c 400 "$out.err")"
}

# The losses of every step and the weights digest of a run's --json output, one line.
summary() {
  python3 - "$1" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
print(" ".join(repr(s["loss"]) for s in lines[:-1]), lines[-1]["weights_digest"])
PY
}

# tokens FILE [COUNT [VOCAB]]: a token file for a test to train on, made with Python's
# standard library: COUNT little-endian u16 ids below VOCAB (1537 and 256 by default,
# 48 windows of 32 and GPT-2 bytes), a random pattern of 23 repeated with a tenth of
# the ids replaced at random, so that a few steps lower the loss.
tokens() {
  python3 - "$1" "${2:-1537}" "${3:-256}" <<'PY'
import random, struct, sys
path, n, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
r = random.Random(7)
pattern = [r.randrange(vocab) for _ in range(23)]
ids = [r.randrange(vocab) if r.random() < 0.1 else pattern[i % 23] for i in range(n)]
with open(path, "wb") as f:
    f.write(struct.pack("<%dH" % n, *ids))
PY
}

# reduced: true where tests/run asks for the reduced matrix (ASan, the CUDA emulation):
# every value of each dimension, not every combination.
reduced() { [ "${ZINF_TEST_MATRIX:-full}" = reduced ]; }
# ranks I: the world sizes the I-th configuration of a matrix trains on: 1 and 2, or in
# the reduced matrix 1 or 2 by turns (2 for I even).
ranks() { if reduced; then echo $((2 - $1 % 2)); else echo 1 2; fi; }
