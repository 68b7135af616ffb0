#!/usr/bin/env bash
# CPU Adam: zinf adam-bench against its same-traffic roofline (goal >= 0.90) with one
# thread and with every core, and against its peers in the same run, on the same
# machine, parameter count and threads: torch.optim.AdamW (foreach, fused) and
# DeepSpeed's DeepSpeedCPUAdam, each with the bf16 weight copy the engine needs
# (goals: >= 4x PyTorch, >= 1.2x DeepSpeed). AdamW, fp32 gradients, bf16 copy.
set -eu
Z=${ZINF_BUILD:-build}/zinf
PY=${ZINF_PY:-build/pyenv/bin/python}
params=${ZINF_BENCH_PARAMS:-100000000}
cores=$(lscpu -p=core,socket | grep -v '^#' | sort -u | wc -l)

zinf_json() { "$Z" adam-bench --params "$params" --threads "$1" --grad-dtype "$2" --out-dtype bf16 --json; }
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1]).get('$2', ''))" "$1"; }

echo "CPU Adam (AdamW, bf16 copy), $params parameters; roofline = same bytes, no arithmetic, same run"
printf '%-8s %-5s %12s %14s %7s\n' threads grad "M params/s" "roofline M/s" ratio
for t in 1 $cores; do
  for g in fp32 bf16; do
    j=$(zinf_json "$t" "$g")
    python3 -c "import json,sys; d=json.loads(sys.argv[1]); \
print('%-8d %-5s %12.1f %14.1f %7.3f' % (d['threads'], d['grad_dtype'], d['params_per_s']/1e6, \
d['roofline_params_per_s']/1e6, d['ratio_to_roofline']))" "$j"
  done
done

echo
if [ ! -x "$PY" ]; then echo "peers: $PY is missing (make bench installs it)"; exit 1; fi
echo "peers (fp32 gradients, bf16 copy included), zinf measured right before each set:"
printf '%-8s %-20s %12s %12s\n' threads peer "M params/s" "zinf / peer"
for t in 1 $cores; do
  z=$(field "$(zinf_json "$t" fp32)" params_per_s)
  printf '%-8s %-20s %12.1f\n' "$t" zinf "$(python3 -c "print($z/1e6)")"
  "$PY" tests/bench/adam_peers.py "$params" "$t" 2> /dev/null | while read -r line; do
    python3 -c "import json,sys; d=json.loads(sys.argv[1]); z=float(sys.argv[2]); \
print('%-8s %-20s %12.1f %12.2f' % (sys.argv[3], d['peer'], d['params_per_s']/1e6, z/d['params_per_s'])) \
if 'error' not in d else print('%-8s %-20s cannot run here: %s' % (sys.argv[3], d['peer'], d['error']))" "$line" "$z" "$t"
  done
done
