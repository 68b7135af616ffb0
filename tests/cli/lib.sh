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
