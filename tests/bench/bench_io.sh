#!/usr/bin/env bash
# aio vs fio: the same directory, size, block size and queue depth, O_DIRECT, io_uring,
# in one run; prints each bandwidth and the zinf/fio ratio (goal >= 0.95).
# ZINF_BENCH_DIR (default /var/tmp) should sit on the drive offload will use.
set -eu
Z=${ZINF_BUILD:-build}/zinf
dir=${ZINF_BENCH_DIR:-/var/tmp}
size=${ZINF_BENCH_IO_SIZE:-1G}
loops=3
command -v fio > /dev/null || { echo "bench_io: fio is not installed (make deps installs it)"; exit 1; }
file="$dir/.zinf-bench-fio-$$.bin"
trap 'rm -f "$file"' EXIT INT TERM

fio_bw() { # op bs qd [extra fio options] -> bytes/s
  fio --name=zinf-peer --filename="$file" --size="$size" --bs="$2" --iodepth="$3" --ioengine=io_uring \
      --direct=1 --rw="$1" --loops=$loops --numjobs=1 --output-format=json "${@:4}" 2> /dev/null |
    python3 -c "import json,sys; j=json.load(sys.stdin)['jobs'][0]; print(j['$1']['bw_bytes'])"
}
zinf_bw() { # op bs qd -> bytes/s
  "$Z" io-bench --path "$dir" --size "$size" --block-size "$2" --queue-depth "$3" --loops $loops --"$1" --json |
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
