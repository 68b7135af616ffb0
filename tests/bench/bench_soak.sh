#!/usr/bin/env bash
# Soak: a long run of the README's main job leaks nothing. `zinf train
# examples/gpt-bytes-zero3.json --json` (ZeRO stage 3, optimizer states and parameters
# in swap files on NVMe) for 3000 steps, a checkpoint every 50, the swap files and the
# checkpoints in a fresh directory under ZINF_BENCH_DIR (default /var/tmp; it should sit
# on the drive offload uses), never build/ckpt or build/swap. At every step line it
# samples the zinf process: resident memory (VmRSS, /proc/PID/status), open files
# (entries of /proc/PID/fd), threads (Threads), the swap files (the sum of st_size, and of
# allocated blocks, of every file under the swap directory), the checkpoint directory's
# bytes, and the step line's pinned_bytes and heap_bytes (the heap in use, glibc's count,
# taken by zinf at the step line: what a leak raises exactly). Then a table, one row per checkpoint interval
# (its last sample), and a verdict per column: after the warm-up (the first two
# checkpoint intervals or the first 10% of the steps, whichever is later) every sample
# must be within +-1% of the first one after it (open files and threads: equal), else
# "GROWS" (or "SHRINKS") from that first value to the farthest one. Resident memory is
# judged otherwise: a step allocates and frees buffers (the main job: ~8 MiB per
# micro-batch), so a sample taken inside one is lifted by them; it is also read every
# 50 ms between the step lines, and each checkpoint interval's lowest reading must be
# within +-3% (--rss-tolerance) of the first interval wholly after the warm-up: where the
# heap in use stays flat, what resident memory gains beyond it is the allocator's
# fragmentation and what it keeps from trimming, or memory zinf maps itself. The heap
# is judged by each checkpoint interval's median against that of the first interval
# wholly after the warm-up: on the host backend the device's memory is heap too (stage
# 3's gathered parameters), and in two of six host suites on 2026-11-29, with tests
# beside it, one step line's heap came 0.2 MiB under the others (about three of this
# test's 68 KiB gathers), where a leak moves every sample after it.
# A save opens files for a moment (the checkpoint being written), so samples are taken
# between checkpoints only: a sample taken after step line k counts when no save can
# have run while it was taken, that is when no checkpoint step lies between k and the
# last step line zinf had printed by the sample's end (the save of step s runs after
# line s and before line s + 1), and k is not the last step (the final save and the
# teardown follow it). The others are dropped and counted.
#
# Usage: tests/bench/bench_soak.sh [--steps N] [--interval N] [--rss-tolerance PCT]
#                                  [--config FILE] [--csv FILE] [-- ZINF_TRAIN_ARGS...]
#   --steps N      optimizer steps (default 3000)
#   --interval N   checkpoint.interval (default 50); set it here, not with --set
#   --rss-tolerance PCT  the band for resident memory, in percent (default 3; the
#                  other byte columns keep 1): glibc's heap settles at a level that
#                  moves by 1-2% between checkpoint intervals of a healthy main job
#   --no-memory    show resident memory and the heap but judge neither (an ASan
#                  build: its allocator's quarantine and stack depot grow, and glibc's
#                  heap it replaces counts nothing; LeakSanitizer checks at exit instead)
#   --config FILE  the config (default examples/gpt-bytes-zero3.json, which reads
#                  build/data/english.txt: `make all corpus` makes both)
#   --csv FILE     every kept sample, one CSV row each: step, seconds since the start,
#                  VmRSS (rss_low/rss_high: the lowest/highest reading since the step
#                  line before), RssAnon, RssFile, heap_bytes, pinned_bytes, nvme_bytes, open files,
#                  threads, swap size/allocated bytes, checkpoint bytes, warmup (1 in it)
#   -- ARGS        passed to zinf train unchanged, after the soak's own --set options
#                  (e.g. -- --set model.n_layer=2 --set train_batch_size=4)
# ZINF_BUILD: the build directory (default build). One process only (no mpirun).
# Exit 0: every column flat; 1: something grows or shrinks, or the run failed;
# 2: bad usage or nothing to run (zinf or the corpus missing).
set -u
usage() { sed -n '/^# Usage:/,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
bad() { echo "bench_soak: $*" >&2; echo "(tests/bench/bench_soak.sh --help for usage)" >&2; exit 2; }
steps=3000 interval=50 rsstol=3 judge_memory=1 config= csv= extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --steps|--interval|--rss-tolerance|--config|--csv) [ $# -ge 2 ] || bad "$1 wants a value" ;;&
    --steps) steps=$2; shift 2 ;;
    --interval) interval=$2; shift 2 ;;
    --rss-tolerance) rsstol=$2; shift 2 ;;
    --no-memory) judge_memory=0; shift ;;
    --config) config=$2; shift 2 ;;
    --csv) csv=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) usage; exit 0 ;;
    *) bad "unknown argument '$1'" ;;
  esac
done
[[ $steps =~ ^[1-9][0-9]*$ ]] || bad "--steps wants a positive number, not '$steps'"
[[ $interval =~ ^[1-9][0-9]*$ ]] || bad "--interval wants a positive number, not '$interval'"
[[ $rsstol =~ ^[0-9]+(\.[0-9]+)?$ ]] || bad "--rss-tolerance wants a percentage, not '$rsstol'"
[ "$interval" -ge 3 ] || bad "--interval must be 3 or more (samples are taken between checkpoints)"
for a in "${extra[@]}"; do
  case $a in
    checkpoint.interval=*|checkpoint.dir=*|checkpoint.load=*|*nvme_path=*)
      bad "'$a' after --: the soak sets that itself (--interval for the interval)" ;;
    --steps|--json) bad "'$a' after --: the soak sets that itself" ;;
  esac
done
warmup=$((2 * interval)) why="the first two checkpoint intervals"
tenth=$(((steps + 9) / 10))
[ "$tenth" -gt "$warmup" ] && warmup=$tenth why="the first 10% of the steps"
[ "$steps" -ge $((warmup + 2 * interval)) ] ||
  bad "$steps steps leave less than two checkpoint intervals after the warm-up ($warmup steps, $why)"

# Paths the user gave, absolute, then work from the repository's root (the main job's
# data path is relative to it).
abs() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
build=$(abs "${ZINF_BUILD:-build}")
[ -n "$csv" ] && csv=$(abs "$csv")
[ -n "$config" ] && config=$(abs "$config")
cd "$(dirname "$0")/../.." || exit 2
config=${config:-examples/gpt-bytes-zero3.json}
Z=$build/zinf
[ -x "$Z" ] || bad "$Z is missing (make all corpus builds it)"
[ -f "$config" ] || bad "no config $config"
if [ "$config" = examples/gpt-bytes-zero3.json ] && [ ! -s build/data/english.txt ] &&
  [[ " ${extra[*]} " != *" data.path="* ]] && [[ " ${extra[*]} " != *" data="* ]]; then
  bad "build/data/english.txt is missing (make corpus makes it)"
fi
base=${ZINF_BENCH_DIR:-/var/tmp}
dir=$(mktemp -d -p "$base" zinf-bench-soak.XXXXXX) || bad "cannot make a directory in $base"
trap 'rm -rf "$dir"' EXIT
trap 'exit 130' INT TERM
mkdir -p "$dir/swap"

cmd=("$Z" train "$config" --json --steps "$steps"
  --set checkpoint.interval="$interval" --set checkpoint.dir="$dir/ckpt"
  --set zero_optimization.offload_optimizer.nvme_path="$dir/swap"
  --set zero_optimization.offload_param.nvme_path="$dir/swap" "${extra[@]}")
echo "bench_soak: ${cmd[*]}"
echo "bench_soak: warm-up: $warmup steps ($why); checkpoint every $interval steps"

python3 - "$dir" "$steps" "$interval" "$warmup" "$why" "$csv" "$rsstol" "$judge_memory" "${cmd[@]}" <<'PY'
import json, os, select, signal, statistics, subprocess, sys, time

d, steps, interval, warmup, why, csv_path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), \
    sys.argv[5], sys.argv[6]
rss_tol, judge_memory = float(sys.argv[7]) / 100, sys.argv[8] == "1"
cmd = sys.argv[9:]
swap, ckpt = os.path.join(d, "swap"), os.path.join(d, "ckpt")
MiB = 2**20
err = open(os.path.join(d, "train.err"), "w+")
p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(130))
fd = p.stdout.fileno()
buf, pending = b"", []  # bytes not yet a whole line; lines read but not yet handled
eof = False

def fill(timeout):
    """Read what zinf has written into pending lines, waiting up to timeout seconds for it
    (None: until some comes)."""
    global buf, eof
    while not eof:
        if not select.select([fd], [], [], timeout)[0]:
            return
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            eof = True
            return
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            try:
                pending.append(json.loads(line))
            except ValueError:
                pass
        timeout = 0

def tree(path):
    """Bytes (st_size) and allocated bytes (st_blocks) of every file under path."""
    size = alloc = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                st = os.lstat(os.path.join(root, f))
            except FileNotFoundError:
                continue
            size += st.st_size
            alloc += st.st_blocks * 512
    return size, alloc

def probe(pid):
    status = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            status[k] = v.split()
    kib = lambda k: int(status[k][0]) * 1024 if k in status else 0  # noqa: E731
    s = {"rss": kib("VmRSS"), "rss_anon": kib("RssAnon"), "rss_file": kib("RssFile"),
         "threads": int(status["Threads"][0]), "files": len(os.listdir(f"/proc/{pid}/fd"))}
    s["swap_size"], s["swap_alloc"] = tree(swap)
    s["ckpt"] = tree(ckpt)[0]
    return s

def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise ProcessLookupError

# quiet(k): after step line k, zinf computes step k + 1 and saves nothing before line k + 1.
quiet = lambda k: k > 0 and k % interval != 0 and k < steps  # noqa: E731
samples, dropped, last_step, t0 = [], 0, 0, time.monotonic()
low = high = None  # VmRSS read every 50 ms while waiting for the next line
try:
    while True:
        while not pending and not eof:
            fill(0.05)
            if pending or eof or not quiet(last_step):
                continue
            try:
                r = rss(p.pid)
            except (FileNotFoundError, ProcessLookupError):
                continue
            fill(0)
            if not pending:  # still no line: zinf was inside step last_step + 1 throughout
                low, high = min(low or r, r), max(high or r, r)
        if not pending:
            break
        o = pending.pop(0)
        if o.get("final") or "step" not in o:
            continue
        k = last_step = o["step"]
        step_low, step_high, low, high = low, high, None, None  # the reads while zinf computed step k
        if pending or not quiet(k):
            continue  # lines behind us (zinf is further on) or a save right after this line
        try:
            s = probe(p.pid)
        except (FileNotFoundError, ProcessLookupError, KeyError):
            continue  # zinf ended under us
        fill(0)  # the lines zinf printed while we sampled
        newest = max([k] + [q["step"] for q in pending if "step" in q and not q.get("final")])
        if any(x % interval == 0 for x in range(k, newest + 1)) or newest >= steps:
            dropped += 1  # a save may have run meanwhile
            continue
        s.update(step=k, t=time.monotonic() - t0, pinned=o["pinned_bytes"], heap=o["heap_bytes"], nvme=o["nvme_bytes"],
                 rss_low=min(step_low or s["rss"], s["rss"]), rss_high=max(step_high or s["rss"], s["rss"]))
        samples.append(s)
except BaseException as e:  # interrupted (SIGINT, SIGTERM) or broken: zinf goes too
    p.kill()
    p.wait()
    sys.exit(130 if isinstance(e, (KeyboardInterrupt, SystemExit)) else 1)
rc = p.wait()
wall = time.monotonic() - t0
if rc != 0:
    err.seek(0)
    tail = err.read().splitlines()[-15:]
    print(f"bench_soak: zinf train exited {rc} after step {last_step}; its stderr ends:")
    print("\n".join("  " + l for l in tail))
    sys.exit(1)
if last_step != steps:
    print(f"bench_soak: zinf train stopped at step {last_step}, not {steps}")
    sys.exit(1)

cols = [  # key, table heading, scale, tolerance (None: equal)
    ("rss", "RSS MiB", MiB, rss_tol), ("rss_max", "RSS max MiB", MiB, None), ("heap", "heap MiB", MiB, 0.01),
    ("pinned", "pinned MiB", MiB, 0.01),
    ("files", "open files", 1, None), ("threads", "threads", 1, None), ("swap_size", "swap MiB", MiB, 0.01),
    ("swap_alloc", "swap alloc MiB", MiB, 0.01), ("ckpt", "ckpt MiB", MiB, 0.01)]
fmt = lambda v, scale: f"{v / scale:.1f}" if scale != 1 else str(v)  # noqa: E731

if csv_path:
    keys = ["step", "t", "rss", "rss_low", "rss_high", "rss_anon", "rss_file", "heap", "pinned", "nvme", "files", "threads",
            "swap_size", "swap_alloc", "ckpt"]
    with open(csv_path, "w") as f:
        f.write("step,seconds,rss_bytes,rss_low_bytes,rss_high_bytes,rss_anon_bytes,rss_file_bytes,heap_bytes,pinned_bytes,nvme_bytes,open_files,threads,"
                "swap_size_bytes,swap_alloc_bytes,ckpt_bytes,warmup\n")
        for s in samples:
            f.write(",".join(f"{s[k]:.3f}" if k == "t" else str(s[k]) for k in keys) + f",{int(s['step'] <= warmup)}\n")

print(f"{steps} steps in {wall:.0f} s ({wall / steps:.3f} s/step); {len(samples)} samples kept, {dropped} dropped "
      f"(a checkpoint may have been saved while they were taken)")
# One row per checkpoint interval: its last sample, with the interval's lowest and highest
# resident memory.
groups = {}
for s in samples:
    groups.setdefault((s["step"] - 1) // interval, []).append(s)
rows = []
for j, g in sorted(groups.items()):
    r = dict(g[-1], rss=min(x["rss_low"] for x in g), rss_max=max(x["rss_high"] for x in g),
             heap=statistics.median_low(x["heap"] for x in g), first=j * interval + 1)
    rows.append(r)
heads = ["step"] + [c[1] for c in cols]
print("  ".join(f"{h:>{max(len(h), 6)}}" for h in heads))
for r in rows:
    vals = [str(r["step"])] + [fmt(r[c[0]], c[2]) for c in cols]
    print("  ".join(f"{v:>{max(len(h), 6)}}" for v, h in zip(vals, heads)) + ("  (warm-up)" if r["step"] <= warmup else ""))
print("RSS MiB: the interval's lowest VmRSS, RSS max MiB its highest (what a step holds for a moment), of the samples "
      "and of reads every 50 ms between them; heap MiB: the interval's median")

after = [s for s in samples if s["step"] > warmup]
full = [r for r in rows if r["first"] > warmup]  # the checkpoint intervals wholly after the warm-up
if not after or not full:
    print("bench_soak: no sample after the warm-up")
    sys.exit(1)
print(f"within {rss_tol * 100:g}% (RSS), 1% (the other byte columns) or equal (open files, threads): "
      f"after the warm-up (steps 1-{warmup}: {why}), every sample against the first after it (step "
      f"{after[0]['step']}); RSS: each checkpoint interval's lowest VmRSS against that of the first interval "
      f"after the warm-up (steps {full[0]['first']}-{full[0]['first'] + interval - 1}), as the buffers a step "
      f"allocates and frees lift the samples taken inside it; the heap: each interval's median against that "
      f"first interval's, as one step line may catch the device's memory (heap on the host backend) lower")

def verdict(series, key, scale, tol):
    b = series[0][key]
    lo, hi = (b, b) if tol is None else (b * (1 - tol), b * (1 + tol))
    top, bottom = max(series, key=lambda s: s[key]), min(series, key=lambda s: s[key])
    unit = "" if scale == 1 else " MiB"
    if top[key] > hi:
        return f"GROWS: from {fmt(b, scale)} to {fmt(top[key], scale)}{unit} (step {top['step']}; " \
               f"last {fmt(series[-1][key], scale)} at step {series[-1]['step']})"
    if bottom[key] < lo:
        return f"SHRINKS: from {fmt(b, scale)} to {fmt(bottom[key], scale)}{unit} (step {bottom['step']})"
    return "flat"

ok = True
for key, head, scale, tol in cols:
    if key == "rss_max":
        continue  # shown, not judged: the lowest sample carries what stays
    series = full if key in ("rss", "heap") else after
    if key in ("rss", "heap") and not judge_memory:
        print(f"  {head + ':':16} not judged (--no-memory): {verdict(series, key, scale, tol)}")
        continue
    v = verdict(series, key, scale, tol)
    ok = ok and v == "flat"
    print(f"  {head + ':':16} {v}")
print("bench_soak: " + ("everything flat" if ok else "NOT flat"))
sys.exit(0 if ok else 1)
PY
