#!/usr/bin/env bash
# Offload at GPU speed: GPT-2 large (774 M) and a Llama-3.2-1B-shaped model (1.24 B),
# micro-batch 8 x 1024 tokens at stage 3 on a simulated H100 (device.backend "sim":
# the GPU's time is modeled, this machine's drive and CPU are real), with the
# optimizer on cpu (its gradients and 16-bit outputs pageable, DeepSpeed's default, and
# pinned: pin_memory true), on nvme, and both tiers on nvme (every parameter slice on
# disk: max_in_cpu 0), and the optimizer on cpu with half its sub-groups kept on the
# device (offload_optimizer.ratio 0.5, pinned). Per run the median step over the steps
# after the first, the bound (the busiest resource), the step over it, the device's busy
# fraction, and zinf estimate --time --measure's prediction for that config with its
# error. Then the step against its real floor, measured right after it in the same
# run: fio alone moving that step's NVMe bytes (one reader and one writer at once,
# aio's block size and queue depth, O_DIRECT, io_uring), and zinf adam-bench over the
# elements the CPU updates (the partition, less what a ratio keeps on the device); the
# floor is the slower of the two. Last, the planner's pick among every stage and tier
# that fits, on the H100 and on an RTX 4090. The both-tiers-on-nvme row runs again
# with aio.checksum off ("sums off"): what the swap blocks' CRC-32C costs there.
# A row whose host memory does not fit this machine is skipped, saying so. The
# figures are the modeled GPU's with this machine's drive and CPU, never a GPU's.
# ZINF_BENCH_DIR (default /var/tmp) should sit on the drive offload will use.
set -eu
Z=${ZINF_BUILD:-build}/zinf
base=${ZINF_BENCH_DIR:-/var/tmp}
dir=$base/zinf-bench-sim-$$
[ -x "$Z" ] || { echo "bench_sim: $Z is missing (make builds it)"; exit 1; }
command -v fio > /dev/null || { echo "bench_sim: fio is not installed (make deps installs it)"; exit 1; }
mkdir -p "$dir/nvme"
trap 'rm -rf "$dir"' EXIT
trap 'exit 130' INT TERM

python3 -c "import random, array, sys; r = random.Random(1); \
open(sys.argv[1], 'wb').write(array.array('I', (r.randrange(50257) for _ in range(1 << 20))).tobytes())" "$dir/t.tokens"
steps=4
config() { # NAME PRESET: a config of that model with both tiers on nvme
  cat > "$dir/$1.json" <<JSON
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 8, "seed": 1, "steps": $steps,
 "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}},
 "zero_optimization": {"stage": 3,
   "offload_optimizer": {"device": "nvme", "nvme_path": "$dir/nvme", "pin_memory": false},
   "offload_param": {"device": "nvme", "nvme_path": "$dir/nvme", "max_in_cpu": 0}},
 "model": {"preset": "$2"},
 "data": {"path": "$dir/t.tokens", "format": "tokens-u32", "seq_len": 1024},
 "device": {"backend": "sim", "sim": {"gpu": "h100"}}}
JSON
}
config gpt2l gpt2-large
config llama llama-3.2-1b

# fio_step READ WRITE: seconds fio takes to read READ bytes and write WRITE bytes at
# once in $dir/fio (a reader and a writer, each over a file of its own).
fio_step() {
  local jobs=()
  if [ "$1" -gt 0 ]; then
    fio --name=fill --filename="$dir/fio/r" --size="$1" --bs=1M --iodepth=8 --ioengine=io_uring --direct=1 \
      --rw=write > /dev/null || return 1
    jobs+=(--name=r --filename="$dir/fio/r" --size="$1" --rw=read)
  fi
  [ "$2" -gt 0 ] && jobs+=(--name=w --filename="$dir/fio/w" --size="$2" --rw=write)
  [ ${#jobs[@]} -gt 0 ] || { echo 0; return; }
  fio --bs=1M --iodepth=8 --ioengine=io_uring --direct=1 --output-format=json "${jobs[@]}" > "$dir/fio.json" || return 1
  rm -f "$dir/fio/r" "$dir/fio/w"
  python3 -c "import json, sys; print(max(j['job_runtime'] for j in json.load(open(sys.argv[1]))['jobs']) / 1e3)" \
    "$dir/fio.json"
}
mkdir -p "$dir/fio"

echo "bench_sim: a simulated H100 (modeled time), this machine's drive under $base and its CPU; micro-batch 8 x 1024, stage 3"
echo "  floor: the slower of fio moving the step's NVMe bytes and adam-bench over its parameters, both measured here"
printf '%-14s %-26s %8s %-14s %9s %8s %10s %7s %7s %7s %10s\n' model "optim/par" s/step bound step/bound "dev busy" \
  predicted error "fio s" "adam s" step/floor
for m in gpt2l llama; do
  for tiers in "cpu none true 1 false" "cpu none true 1 true" "cpu none true 0.5 true" "nvme none true 1 false" \
    "nvme nvme true 1 false" "nvme nvme false 1 false"; do
    set -- $tiers
    sets=(--set "zero_optimization.offload_optimizer.device=\"$1\"" --set "zero_optimization.offload_param.device=\"$2\""
      --set "aio.checksum=$3" --set "zero_optimization.offload_optimizer.ratio=$4"
      --set "zero_optimization.offload_optimizer.pin_memory=$5")
    # The cpu rows take half a second a step: 8 steps, so the median is not a warm-up's.
    [ "$1" = cpu ] && sets+=(--set steps=8)
    label=$1/$2$([ "$3" = true ] || echo " sums off")$([ "$5" = false ] || echo " pinned")$([ "$4" = 1 ] || echo " ratio $4")
    if ! "$Z" estimate --config "$dir/$m.json" "${sets[@]}" --time --measure --json > "$dir/plan" 2> "$dir/plan.err"; then
      echo "bench_sim: estimate failed: $(tail -c 300 "$dir/plan.err")"; exit 1
    fi
    if ! "$Z" train "$dir/$m.json" "${sets[@]}" --json > "$dir/run" 2> "$dir/run.err"; then
      if grep -q "verdict: does not fit" "$dir/run.err"; then
        printf '%-14s %-26s  skipped: %s\n' "$m" "$label" "$(grep -o 'does not fit: .*' "$dir/run.err" | head -1 | cut -c1-90)"
        continue
      fi
      echo "bench_sim: the $m $label run failed; stderr ends:"; tail -n 15 "$dir/run.err" | sed 's/^/  /'; exit 1
    fi
    rm -rf "$dir/nvme"/*
    python3 - "$dir/run" > "$dir/median" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1])][:-1][1:]
steps.sort(key=lambda s: s["step_seconds"])
json.dump(steps[len(steps) // 2], sys.stdout)
PY
    read -r rd wr np < <(python3 -c "import json, sys; s = json.load(open(sys.argv[1])); \
p = [o for o in map(json.loads, open(sys.argv[2])) if o.get('plan')][0]; \
print(s['nvme_read_bytes'], s['nvme_write_bytes'], p['partition_numel'] - p['optimizer_device_numel'])" \
  "$dir/median" "$dir/plan")
    fio_s=$(fio_step "$rd" "$wr") || { echo "bench_sim: fio failed"; exit 1; }
    "$Z" adam-bench --params "$np" --steps 3 --json > "$dir/adam" || { echo "bench_sim: adam-bench failed"; exit 1; }
    python3 - "$dir/plan" "$dir/median" "$dir/adam" "$fio_s" "$m" "$label" <<'PY'
import json, sys
plan = [o for o in map(json.loads, open(sys.argv[1])) if o.get("plan")][0]
s = json.load(open(sys.argv[2]))
adam = json.load(open(sys.argv[3]))
fio, t = float(sys.argv[4]), s["step_seconds"]
adam_s = adam["params"] / adam["params_per_s"]
print("%-14s %-26s %8.3f %-14s %9.2f %8.0f%% %9.3fs %+6.0f%% %7.2f %7.2f %10.2f" % (sys.argv[5], sys.argv[6], t,
      s["bound"], s["step_over_bound"], 100 * s["busy_s"]["device_compute"] / t, plan["step_seconds"],
      100 * (plan["step_seconds"] / t - 1), fio, adam_s, t / max(fio, adam_s)))
PY
  done
  # The planner's pick among every stage and tier for this model on this machine, with
  # the H100, and with a 24 GB RTX 4090 that cannot hold the model's states.
  for gpu in h100 rtx4090; do
    "$Z" estimate --config "$dir/$m.json" --time --measure --gpu $gpu > "$dir/pick" 2>&1 || { cat "$dir/pick"; exit 1; }
    echo "  $m on $gpu: $(grep '^Fastest that fits' "$dir/pick")"
  done
done
