#!/usr/bin/env bash
# Offload on the host backend, in two parts, with synthetic tokens.
# 1. Overhead: a stage-3 GPT (~49 M parameters) with the optimizer states and the
#    16-bit parameters on NVMe against the same run with everything in memory and with
#    both tiers on cpu, at a size where a step's NVMe traffic takes less time than its
#    compute: median s/step over the steps after the first two, the ratios (goal <=
#    1.10 against memory), where the nvme step's time goes (the compute stream's waits
#    for parameters and for the background update, the update and its NVMe waits,
#    bytes and link busy time; "n/a" where this build does not report a field), and the
#    weights digests of the three runs, which must be identical (exit 1 if not). Then
#    the nvme run again with aio.checksum off: what the swap blocks' CRC-32C costs per
#    step (goal <= 3%), with the same weights.
# 2. Capacity: a GPT whose model states (16 bytes per parameter) are >= 1.5x this
#    machine's RAM trains 2 steps at stage 3 with both tiers on NVMe and a 2G device,
#    without being killed: parameters, states vs RAM, peak RSS, pinned and NVMe bytes,
#    s/step and the wall time including initialization. Skipped (exit 0, said loudly)
#    when the disk has less than ~14 bytes per parameter + 5% free. The 2G device holds
#    the gradient buckets, the activations and the gathered modules with buckets and
#    prefetch smaller than the defaults.
# On the host backend the device is one thread on these cores. In memory its Adam runs
# on the compute stream inside the step; offloaded, CPU Adam runs on another core under
# the next forward. So nvme/nvme may beat memory here; against cpu/cpu it shows what
# NVMe itself costs.
# ZINF_BENCH_DIR (default /var/tmp) should sit on the drive offload will use.
set -eu
Z=${ZINF_BUILD:-build}/zinf
base=${ZINF_BENCH_DIR:-/var/tmp}
dir=$base/zinf-bench-offload-$$
[ -x "$Z" ] || { echo "bench_offload: $Z is missing (make builds it)"; exit 1; }
[ -x /usr/bin/time ] || { echo "bench_offload: /usr/bin/time (GNU time) is not installed"; exit 1; }
mkdir -p "$dir/nvme"
trap 'rm -rf "$dir"' EXIT
trap 'exit 130' INT TERM

tokens() { # file vocab count: random little-endian uint16 token ids below vocab
  python3 -c "import random, array, sys; r = random.Random(1); v = int(sys.argv[2]); \
open(sys.argv[1], 'wb').write(array.array('H', (r.randrange(v) for _ in range(int(sys.argv[3])))).tobytes())" "$@"
}
failed() { # what, log: the command failed; say how and stop
  echo "bench_offload: $1 failed; stderr ends:"
  tail -n 15 "$2" | sed 's/^/  /'
  dmesg 2> /dev/null | grep -iE 'out of memory|oom-kill|killed process' | tail -n 5 | sed 's/^/  dmesg: /' || true
  exit 1
}

# ---- 1. overhead ----
steps=8 skip=2
tokens "$dir/o.tokens" 8192 262144
cat > "$dir/o.json" <<JSON
{"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2, "seed": 1, "steps": $steps, "steps_per_print": 1,
 "gradient_clipping": 1.0, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "weight_decay": 0.1}},
 "zero_optimization": {"stage": 3, "sub_group_size": 1e7,
   "offload_optimizer": {"device": "nvme", "nvme_path": "$dir/nvme"},
   "offload_param": {"device": "nvme", "nvme_path": "$dir/nvme", "max_in_cpu": 0, "buffer_count": 4}},
 "model": {"n_layer": 6, "n_head": 12, "n_embd": 768, "vocab_size": 8192, "block_size": 256},
 "data": {"path": "$dir/o.tokens", "format": "tokens-u16", "seq_len": 256},
 "device": {"backend": "host"}}
JSON
OO=zero_optimization.offload_optimizer OP=zero_optimization.offload_param
"$Z" train "$dir/o.json" --json --set $OO.device=none --set $OP.device=none > "$dir/mem.out" 2> "$dir/mem.err" ||
  failed "the in-memory run ($Z train $dir/o.json, tiers none)" "$dir/mem.err"
"$Z" train "$dir/o.json" --json --set $OO.device=cpu --set $OP.device=cpu > "$dir/cpu.out" 2> "$dir/cpu.err" ||
  failed "the cpu run ($Z train $dir/o.json, tiers cpu)" "$dir/cpu.err"
"$Z" train "$dir/o.json" --json > "$dir/nvme.out" 2> "$dir/nvme.err" || failed "the nvme run ($Z train $dir/o.json)" "$dir/nvme.err"
"$Z" train "$dir/o.json" --json --set aio.checksum=false > "$dir/nosum.out" 2> "$dir/nosum.err" ||
  failed "the nvme run without checksums ($Z train $dir/o.json --set aio.checksum=false)" "$dir/nosum.err"
PYTHONPATH="$(dirname "$0")" python3 - "$dir" "$steps" "$skip" <<'PY'
import re, sys
from steps import load, med, print_where
d, steps, skip = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
mem, mem_final = load(f"{d}/mem.out")
cpu, cpu_final = load(f"{d}/cpu.out")
nv, nv_final = load(f"{d}/nvme.out")
nosum, nosum_final = load(f"{d}/nosum.out")
plan = re.search(r"\(([0-9.]+) M parameters\)", open(f"{d}/nvme.err").read()).group(1)
print(f"offload overhead: GPT 6 x 768, {plan} M parameters, stage 3, host backend, micro-batch 2 x 256 tokens; "
      f"median of steps {skip + 1}-{steps}")
tm, tc, tn, tu = (med(r, "step_seconds", skip) for r in (mem, cpu, nv, nosum))
print("%-22s %8s %7s" % ("tiers (optim/params)", "s/step", "ratio"))
print("%-22s %8.3f %7.3f" % ("none/none (memory)", tm, 1.0))
print("%-22s %8.3f %7.3f" % ("cpu/cpu", tc, tc / tm))
print("%-22s %8.3f %7.3f   goal <= 1.10: %s; vs cpu/cpu %.3f" % ("nvme/nvme", tn, tn / tm,
      "met" if tn / tm <= 1.10 else "NOT met", tn / tc))
print_where(nv, skip)
print("checksums: nvme/nvme %.3f s/step with aio.checksum, %.3f without: they cost %+.1f%% of the step "
      "(goal <= 3%%: %s)" % (tn, tu, 100 * (tn / tu - 1), "met" if tn / tu <= 1.03 else "NOT met"))
digests = [f["weights_digest"] for f in (mem_final, cpu_final, nv_final, nosum_final)]
same = len(set(digests)) == 1
print("weights digest: memory %s, cpu %s, nvme %s, nvme without checksums %s: %s" % (*digests,
      "identical" if same else "DIFFERENT (the tiers must be bit-identical)"))
sys.exit(0 if same else 1)
PY

# ---- 2. capacity ----
# n_embd 2048, vocab 50257, block 64; n_layer the least making 16 B/param >= 1.5 x RAM.
mem=$(awk '/^MemTotal:/ { printf "%.0f\n", $2 * 1024 }' /proc/meminfo)
read -r layers params <<< "$(python3 -c "
C, V, B, mem = 2048, 50257, 64, $mem
p = lambda L: 12 * L * C * C + 13 * L * C + C * (V + B) + 2 * C
L = 1
while 16 * p(L) < 1.5 * mem: L += 1
print(L, p(L))")"
need=$(( params * 14 * 105 / 100 ))
free=$(df -B1 --output=avail "$dir" | tail -n 1 | tr -d ' ')
echo
gib() { python3 -c "print('%.1f GiB' % ($1 / 2**30))"; }
if [ "$free" -lt "$need" ]; then
  echo "capacity: SKIPPED: needs $(gib "$need") free under $dir, has $(gib "$free") (set ZINF_BENCH_DIR to a bigger drive)"
  exit 0
fi
# The pinned budget: the default (half the memory available) is short of the fp32
# gradient partition (4 B/param) plus the swap, parameter and staging buffers (~5
# GiB here, sized by the largest module, the 103 M-element embedding).
pinned=$(( params * 4 + (6 << 30) ))
tokens "$dir/c.tokens" 50257 65536
cat > "$dir/c.json" <<JSON
{"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1, "seed": 1, "steps": 2, "steps_per_print": 1,
 "gradient_clipping": 1.0, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "weight_decay": 0.1}},
 "zero_optimization": {"stage": 3, "sub_group_size": 5e7, "reduce_bucket_size": 2e7,
   "stage3_prefetch_bucket_size": 1e7, "stage3_max_live_parameters": 3e8,
   "offload_optimizer": {"device": "nvme", "nvme_path": "$dir/nvme"},
   "offload_param": {"device": "nvme", "nvme_path": "$dir/nvme", "max_in_cpu": 0, "buffer_count": 4}},
 "model": {"n_layer": $layers, "n_head": 16, "n_embd": 2048, "vocab_size": 50257, "block_size": 64},
 "data": {"path": "$dir/c.tokens", "format": "tokens-u16", "seq_len": 64},
 "device": {"backend": "host", "memory_limit": "2G", "pinned_memory_limit": $pinned}}
JSON
/usr/bin/time -v -o "$dir/cap.time" "$Z" train "$dir/c.json" --json > "$dir/cap.out" 2> "$dir/cap.err" ||
  failed "the capacity run ($Z train $dir/c.json --json, $(grep -E 'Exit status|signal' "$dir/cap.time"))" "$dir/cap.err"
python3 - "$dir" "$params" "$mem" "$pinned" <<'PY'
import json, re, sys
d, est, mem, pinned = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
err = open(f"{d}/cap.err").read()
rows = [json.loads(l) for l in open(f"{d}/cap.out") if l.startswith("{")]
st, final = [r for r in rows if not r.get("final")], next(r for r in rows if r.get("final"))
plan = float(re.search(r"\(([0-9.]+) M parameters\)", err).group(1)) * 1e6
layers = re.search(r"n_layer (\d+)", err).group(1)
tv = open(f"{d}/cap.time").read()
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", tv).group(1)) * 1024
h, m, s = ([0] + re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([0-9:.]+)", tv).group(1).split(":"))[-3:]
wall = 3600 * float(h) + 60 * float(m) + float(s)
devmem = re.search(r"in use of ([0-9.]+ [KMGT]?i?B)", err).group(1)
print(f"capacity: GPT {layers} x 2048, vocab 50257, stage 3, both tiers on nvme, host backend with a {devmem} device, "
      f"pinned budget {pinned / 2**30:.1f} GiB; 2 steps of 1 x 64 tokens")
print("%9s %10s %7s %7s %12s %10s %8s %9s %9s %8s" % ("M params", "states GB", "RAM GB", "ratio", "peak RSS GB",
      "pinned GB", "nvme GB", "step 1 s", "step 2 s", "wall s"))
print("%9.2f %10.2f %7.2f %7.3f %12.2f %10.2f %8.2f %9.1f %9.1f %8.1f" % (plan / 1e6, 16 * plan / 1e9, mem / 1e9,
      16 * plan / mem, rss / 1e9, st[-1]["pinned_bytes"] / 1e9, st[-1]["nvme_bytes"] / 1e9, st[0]["step_seconds"],
      st[1]["step_seconds"], wall))
print("wall s includes start-up and initialization (writing the swap store); ratio = model states / RAM (goal >= 1.5)")
if abs(plan - est) > 0.01 * est:
    print(f"plan's parameter count {plan / 1e6:.2f} M is not the estimate {est / 1e6:.2f} M within 1%")
    sys.exit(1)
PY
