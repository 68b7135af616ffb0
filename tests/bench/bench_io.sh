#!/usr/bin/env bash
# aio vs fio: the same directory, size, block size and queue depth, O_DIRECT, io_uring,
# in one run; prints each bandwidth and the zinf/fio ratio (goal >= 0.95). Then the
# setting zinf io-tune picks against fio's best over the same grid (goal >= 1).
# ZINF_BENCH_DIR (default /var/tmp) should sit on the drive offload will use.
set -eu
Z=${ZINF_BUILD:-build}/zinf
dir=${ZINF_BENCH_DIR:-/var/tmp}
size=${ZINF_BENCH_IO_SIZE:-1G}
loops=3
command -v fio > /dev/null || { echo "bench_io: fio is not installed (make deps installs it)"; exit 1; }
file="$dir/.zinf-bench-fio-$$.bin"
trap 'rm -f "$file"' EXIT INT TERM

bytes_of() { python3 -c "import sys; s=sys.argv[1]; print(int(s[:-1]) << {'K':10,'M':20,'G':30}[s[-1]])" "$1"; }
fio_bw() { # op bs qd [extra fio options] -> bytes/s
  fio --name=zinf-peer --filename="$file" --size="$size" --bs="$2" --iodepth="$3" --ioengine=io_uring \
      --direct=1 --rw="$1" --loops=$loops --numjobs=1 --group_reporting --output-format=json "${@:4}" 2> /dev/null |
    python3 -c "import json,sys; j=json.load(sys.stdin)['jobs'][0]; print(j['$1']['bw_bytes'])"
}
fio_jobs_bw() { # op bs qd jobs -> bytes/s: jobs workers, each on its own slice of the file
  local part=$(( $(bytes_of "$size") / $4 ))
  fio_bw "$1" "$2" "$3" --numjobs="$4" --size=$part --offset_increment=$part --fixedbufs=1 --registerfiles=1
}
zinf_bw() { # op bs qd [extra io-bench options] -> bytes/s
  "$Z" io-bench --path "$dir" --size "$size" --block-size "$2" --queue-depth "$3" --loops $loops --"$1" --json "${@:4}" |
    python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['bytes_per_s'])"
}

# The peer is fio at its defaults and with registered buffers and files; the ratio is
# taken against the faster of the two.
echo "aio vs fio (io_uring, O_DIRECT) in $dir, $size per pass; zinf: median of $loops passes, fio: mean"
printf '%-6s %6s %6s %10s %10s %12s %7s\n' op block depth "zinf GB/s" "fio GB/s" "fio+reg GB/s" ratio
for shape in "1M 32" "8M 8"; do
  set -- $shape
  for op in write read; do
    f=$(fio_bw $op "$1" "$2")
    r=$(fio_bw $op "$1" "$2" --fixedbufs=1 --registerfiles=1)
    z=$(zinf_bw $op "$1" "$2")
    python3 -c "print('%-6s %6s %6s %10.3f %10.3f %12.3f %7.3f' % ('$op', '$1', '$2', $z/1e9, $f/1e9, $r/1e9, $z/max($f,$r)))"
  done
done

# The tuned setting: io-tune's pick over a grid against fio's best over the same grid
# (zinf workers = fio jobs, each on its own slice of the file). Every point is measured
# for both, one right after the other, so a drive whose speed drifts affects both.
bs_grid="1M 8M" qd_grid="8 32" th_grid="1 2"
tuned=$("$Z" io-tune --path "$dir" --size "$size" --block-sizes "${bs_grid// /,}" --queue-depths "${qd_grid// /,}" \
  --threads "${th_grid// /,}" --json | tail -1)
pick=$(python3 -c "import json,sys; a=json.loads(sys.argv[1])['aio']; \
print('%dM %d %d' % (a['block_size'] >> 20, a['queue_depth'], a['intra_op_parallelism']))" "$tuned")
echo
echo "io-tune's pick over block {$bs_grid} x depth {$qd_grid} x threads {$th_grid}: $pick (bs qd threads)"
printf '%-6s %12s %10s %12s %10s %12s %7s\n' op "zinf at pick" "GB/s" "zinf best at" "GB/s" "fio best at" "GB/s"
for op in write read; do
  zp=0 zb=0 zat="" fb=0 fat=""
  for bs in $bs_grid; do for qd in $qd_grid; do for th in $th_grid; do
    f=$(fio_jobs_bw $op "$bs" "$qd" "$th")
    z=$(zinf_bw $op "$bs" "$qd" --threads "$th")
    [ "$bs $qd $th" = "$pick" ] && zp=$z
    if python3 -c "import sys; sys.exit(not $f > $fb)"; then fb=$f fat="$bs $qd $th"; fi
    if python3 -c "import sys; sys.exit(not $z > $zb)"; then zb=$z zat="$bs $qd $th"; fi
  done; done; done
  python3 -c "print('%-6s %12s %10.3f %12s %10.3f %12s %7.3f' % ('$op', '$pick', $zp/1e9, '$zat', $zb/1e9, '$fat', $fb/1e9))"
  python3 -c "print('%-6s ratio pick / fio best: %.3f   zinf best / fio best: %.3f' % ('$op', $zp/$fb, $zb/$fb))"
done
