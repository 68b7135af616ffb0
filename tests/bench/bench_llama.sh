#!/usr/bin/env bash
# A Llama-shaped model at stage 3 with both tiers on NVMe, on the host backend with
# synthetic tokens: a 44 M-parameter Llama (6 layers of 768, 12 query heads sharing
# 4 kv heads of 64, SwiGLU 2048 wide, llama3 rope, tied head, vocab 8192), micro-batch
# 2 x 256 tokens. Median s/step and tokens/s over the steps after the first two, against
# the same run with everything in memory (the ratio), where the nvme step's time goes
# (waits for parameters and for the background update, the update and its NVMe waits,
# bytes and link busy time), and the two runs' weights digests, which must be
# identical (exit 1 if not). ZINF_BENCH_DIR (default /var/tmp) should sit on the drive
# offload will use.
set -eu
Z=${ZINF_BUILD:-build}/zinf
base=${ZINF_BENCH_DIR:-/var/tmp}
dir=$base/zinf-bench-llama-$$
[ -x "$Z" ] || { echo "bench_llama: $Z is missing (make builds it)"; exit 1; }
mkdir -p "$dir/nvme"
trap 'rm -rf "$dir"' EXIT
trap 'exit 130' INT TERM

python3 -c "import random, array, sys; r = random.Random(1); \
open(sys.argv[1], 'wb').write(array.array('H', (r.randrange(8192) for _ in range(262144))).tobytes())" "$dir/t.tokens"
steps=8 skip=2
cat > "$dir/l.json" <<JSON
{"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2, "seed": 1, "steps": $steps, "steps_per_print": 1,
 "gradient_clipping": 1.0, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "weight_decay": 0.1}},
 "zero_optimization": {"stage": 3, "sub_group_size": 1e7,
   "offload_optimizer": {"device": "nvme", "nvme_path": "$dir/nvme"},
   "offload_param": {"device": "nvme", "nvme_path": "$dir/nvme", "max_in_cpu": 0, "buffer_count": 4}},
 "model": {"arch": "llama", "n_layer": 6, "n_head": 12, "n_kv_head": 4, "head_dim": 64, "n_embd": 768,
   "intermediate_size": 2048, "vocab_size": 8192, "block_size": 1024, "rope_theta": 500000,
   "rope_scaling": {"rope_type": "llama3", "factor": 8, "original_max_position_embeddings": 512}},
 "data": {"path": "$dir/t.tokens", "format": "tokens-u16", "seq_len": 256},
 "device": {"backend": "host"}}
JSON
run() { # name, sets...: one run, its --json lines in $dir/NAME.out
  local name=$1; shift
  "$Z" train "$dir/l.json" --json "$@" > "$dir/$name.out" 2> "$dir/$name.err" || {
    echo "bench_llama: the $name run failed; stderr ends:"; tail -n 15 "$dir/$name.err" | sed 's/^/  /'; exit 1; }
}
run mem --set zero_optimization.offload_optimizer.device=none --set zero_optimization.offload_param.device=none
run nvme
PYTHONPATH="$(dirname "$0")" python3 - "$dir" "$skip" <<'PY'
import re, sys
from steps import load, med, print_where
d, skip = sys.argv[1], int(sys.argv[2])
mem, mem_final = load(f"{d}/mem.out")
nv, nv_final = load(f"{d}/nvme.out")
head = re.search(r"^plan: (.*)$", open(f"{d}/nvme.err").read(), re.M).group(1)
print(f"llama at stage 3, host backend, micro-batch 2 x 256 tokens; median of steps {skip + 1}-{len(nv)}")
print(f"  {head}")
print("%-22s %8s %9s %7s" % ("tiers (optim/params)", "s/step", "tok/s", "ratio"))
tm, tn = med(mem, "step_seconds", skip), med(nv, "step_seconds", skip)
print("%-22s %8.3f %9.0f %7.3f" % ("none/none (memory)", tm, med(mem, "tokens_per_s", skip), 1.0))
print("%-22s %8.3f %9.0f %7.3f" % ("nvme/nvme", tn, med(nv, "tokens_per_s", skip), tn / tm))
print_where(nv, skip)
digests = mem_final["weights_digest"], nv_final["weights_digest"]
same = digests[0] == digests[1]
print("weights digest: memory %s, nvme %s: %s" % (*digests, "identical" if same else "DIFFERENT"))
sys.exit(0 if same else 1)
PY
