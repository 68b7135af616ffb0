#!/usr/bin/env bash
# The simulated device (device.backend "sim"): training runs on it with every tier, the
# step lines say it is simulated, carry no loss and give each resource's busy time, the
# bound and the step over it; the modeled compute time is what the model's FLOPs need
# at the modeled matmul rate, give or take the memory-bound kernels, and follows the
# tflops override; device memory is not backed (a device peak of several GiB leaves
# the process small); checkpoints save and resume on it; estimate and the plan name
# the modeled GPU; keys left out are chosen for it, given ones kept; bad device.sim
# keys are refused by name; zinf device-bench and train --op-profile set each op beside
# its model.
# timeout: 45 san=65 cuda-emu=35
# backend: host: it trains on the sim device and the host backend
set -u
Z=${ZINF_BUILD:-build}/zinf
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
tokens "$tmp/train.tokens"
mkdir -p "$tmp/nvme"

# cfg STAGE OPTIMIZER_TIER PARAM_TIER MICRO [SIM_JSON [N_EMBD]]: a 4-step run on a
# simulated H100, one micro-batch per rank (two ranks at most).
cfg() {
  cat > "$tmp/cfg.json" <<JSON
{"train_batch_size": $(($4 * 2)), "train_micro_batch_size_per_gpu": $4, "seed": 3, "steps": 4, "steps_per_print": 1,
 "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "zero_optimization": {"stage": $1, "sub_group_size": 100000,
   "offload_optimizer": {"device": "$2", "nvme_path": "$tmp/nvme"},
   "offload_param": {"device": "$3", "nvme_path": "$tmp/nvme"}},
 "model": {"n_layer": 2, "n_head": 4, "n_embd": ${6:-128}, "vocab_size": 256, "block_size": 64},
 "data": {"path": "$tmp/train.tokens", "format": "tokens-u16", "seq_len": 64},
 "checkpoint": {"dir": "$tmp/ckpt"},
 "device": {"backend": "sim", "sim": ${5:-{\}}}}
JSON
}

# check OUT: every step line is marked simulated with null loss and norm, six busy
# times, a bound among them, the step over it.
check() {
  python3 - "$1" <<'PY' || fail "step lines of $1"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
steps, final = lines[:-1], lines[-1]
assert final["final"] and final["loss"] is None, final
for s in steps:
    assert s["simulated"] is True and s["loss"] is None and s["grad_norm"] is None, s
    b = s["busy_s"]
    assert set(b) == {"device_compute", "pcie_h2d", "pcie_d2h", "gpu_links", "nvme_read", "nvme_write", "cpu_adam"}, b
    assert s["bound"] in b and s["bound_s"] == max(b.values()) > 0, s
    assert abs(s["step_over_bound"] - s["step_seconds"] / s["bound_s"]) < 1e-6 * s["step_over_bound"] + 1e-9, s
    assert not s["skipped"], s
PY
}

# Every tier on one rank, and stage 3 on two ranks.
for tiers in "0 none none" "2 cpu none" "3 nvme none" "3 cpu cpu" "3 nvme nvme"; do
  set -- $tiers
  cfg "$1" "$2" "$3" 4
  run 1 "$tmp/run.$1$2$3"
  check "$tmp/run.$1$2$3"
done
python3 - "$tmp/run.3nvmenvme" <<'PY' || fail "nvme traffic with both tiers on nvme"
import json, sys
s = [json.loads(l) for l in open(sys.argv[1])][-2]
assert s["nvme_read_bytes"] > 0 and s["nvme_write_bytes"] > 0, s
b = s["busy_s"]
assert b["nvme_read"] > 0 and b["nvme_write"] > 0 and b["pcie_h2d"] > 0 and b["pcie_d2h"] > 0 and b["cpu_adam"] > 0, b
PY
cfg 3 nvme nvme 4
run 2 "$tmp/run.np2"
check "$tmp/run.np2"

# Collectives take the bytes this rank receives at the modeled link rates (80% of
# them), plus a few microseconds each: two ranks as two nodes over a 10 GB/s network,
# then as one node over a 100 GB/s NVLink.
links() {
  python3 - "$1" "$2" "$3" <<'PY' || fail "modeled collectives ($2): $(tail -c 300 "$1.err")"
import json, sys
s = [json.loads(l) for l in open(sys.argv[1])][-2]
got, moved = s["busy_s"]["gpu_links"], s["comm_bytes_" + sys.argv[2]]
lo = moved / (0.8 * float(sys.argv[3]) * 1e9)
assert moved > 0 and lo <= got <= lo + 200 * 4e-6, (moved, lo, got)
print(f"{sys.argv[2]}: {moved} bytes, links busy {got:.6f} s, at least {lo:.6f} s")
PY
}
cfg 3 none none 4 '{"net_gbps": 10, "nvlink_gbps": 100}' 512
ZINF_RANKS_PER_NODE=1 run 2 "$tmp/nodes2"
links "$tmp/nodes2" inter 10
ZINF_RANKS_PER_NODE=2 run 2 "$tmp/nodes1"
links "$tmp/nodes1" intra 100

# The modeled compute: the model's FLOPs (6 per parameter and token, plus attention's)
# take at least their time at the modeled matmul rate (88% of the peak) and, with the
# memory-bound kernels, attention's fp32 products and launches on top, less than 2.2
# times that; four times the tflops at least halves it (memory-bound kernels and
# launches do not scale).
compute() { python3 -c "import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-2]['busy_s']['device_compute'])" "$1"; }
cfg 0 none none 32 '{"tflops": 50}' 512
run 1 "$tmp/slow"
check "$tmp/slow"
cfg 0 none none 32 '{"tflops": 200}' 512
run 1 "$tmp/fast"
python3 - "$(compute "$tmp/slow")" "$(compute "$tmp/fast")" <<'PY' || fail "modeled compute time against the model's FLOPs"
import sys
slow, fast = float(sys.argv[1]), float(sys.argv[2])
L, C, V, T, B, micro = 2, 512, 256, 64, 32, 2
params = L * 12 * C * C + V * C + T * C
flops = micro * (6 * params * B * T + 12 * L * T * C * B * T)
lo = flops / (0.76 * 50e12)
hi = 2.2 * lo
assert lo <= slow <= hi, (lo, slow, hi)
assert fast <= slow / 2, (slow, fast)
print(f"compute {slow:.6f} s at 50 TFLOPS, {fast:.6f} s at 200; bounds {lo:.6f}..{hi:.6f}")
PY

# Device memory is reserved, not backed: a micro-batch whose activations take GiBs on
# the device leaves the process's peak RSS far below it.
cat > "$tmp/big.json" <<JSON
{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 64, "steps": 1, "bf16": {"enabled": true},
 "zero_optimization": {"stage": 0},
 "model": {"n_layer": 2, "n_head": 8, "n_embd": 512, "vocab_size": 8192, "block_size": 1024},
 "data": {"path": "$tmp/train.tokens", "format": "tokens-u16", "seq_len": 1024},
 "device": {"backend": "sim"}}
JSON
expect 0 "$Z" train "$tmp/big.json" --json
python3 - "$tmp/out" <<'PY' || fail "device memory is backed: $(tail -1 "$tmp/out")"
import json, sys
f = [json.loads(l) for l in open(sys.argv[1])][-1]
assert f["device_peak_bytes"] > 3 << 30 and f["peak_rss_bytes"] < f["device_peak_bytes"] / 4, f
PY

# Checkpoints: 2 steps, saved, then resumed to 4, end with the weights of 4 straight.
cfg 3 nvme nvme 4
run 1 "$tmp/straight"
rm -rf "$tmp/ckpt"
run 1 "$tmp/first" --steps 2
python3 - "$tmp/cfg.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["checkpoint"]["load"] = "latest"; json.dump(c, open(sys.argv[1], "w"))
PY
run 1 "$tmp/resumed"
grep -q "resumed from" "$tmp/resumed.err" || fail "no resume: $(tail -c 300 "$tmp/resumed.err")"
[ "$(tail -1 "$tmp/straight" | python3 -c 'import json,sys; print(json.load(sys.stdin)["weights_digest"])')" = \
  "$(tail -1 "$tmp/resumed" | python3 -c 'import json,sys; print(json.load(sys.stdin)["weights_digest"])')" ] ||
  fail "resumed weights differ from a straight run"

# The plan and estimate name the modeled GPU and its memory.
cfg 3 nvme nvme 4 '{"gpu": "a100"}'
expect 0 "$Z" estimate --config "$tmp/cfg.json"
grep -q "A100 SXM4 80GB" "$tmp/out" || fail "estimate does not name the simulated A100: $(head -c 300 "$tmp/out")"
grep -q "in use of 80 GiB on a simulated A100 SXM4 80GB" "$tmp/out" || fail "estimate's device line: $(grep device: "$tmp/out")"
run 1 "$tmp/a100"
grep -q "on a simulated A100 SXM4 80GB" "$tmp/a100.err" || fail "train's plan does not name the simulated A100"

# Keys left out are chosen for the machine and the plan says so; given ones are kept.
cfg 3 nvme nvme 4
sed -i 's/"sub_group_size": 100000,//' "$tmp/cfg.json"
run 1 "$tmp/chosen"
grep -q "chosen for this machine (the config leaves them out): reduce_bucket_size 100000000 .*; sub_group_size 100000000" \
  "$tmp/chosen.err" || fail "no choices in train's plan: $(grep -i chosen "$tmp/chosen.err")"
expect 0 "$Z" estimate --config "$tmp/cfg.json" --set zero_optimization.reduce_bucket_size=5e8 \
  --set zero_optimization.sub_group_size=1e9
! grep -q "chosen for this machine" "$tmp/out" || fail "given keys were replaced: $(grep chosen "$tmp/out")"

# zinf device-bench on sim holds the model to itself: the ops, each timed on the device,
# take their modeled seconds (the sim's events hold modeled times) and the untimed pass
# their sum; on the host backend it runs too. train --op-profile prints the same rows.
# The modeled GPU is slow (0.05 TFLOPS and 50 GB/s, a pass of about 20 ms), so that the
# ops outlast the host's launching of them even in a sanitizer build on a loaded machine
# (an op starts no earlier than it is launched), and the median of 5 passes: at 1 TFLOPS
# (2.4 ms) a pass on CI's 2 cores once came out 13% over its model, and at 0.25 (4.4 ms)
# 11% over under ASan beside test_plan_time's --measure.
slow='{"tflops": 0.05, "hbm_gbps": 50}'
cfg 0 none none 4 "$slow"
expect 0 "$Z" device-bench --config "$tmp/cfg.json" --passes 5 --json
python3 - "$tmp/out" <<'PY' || fail "device-bench on sim against its own model"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
total, ops = rows[-1], rows[:-1]
assert total["total"] and "simulated" in total["device"], total
assert {"gemm", "attention_fwd", "attention_bwd", "layernorm_bwd", "cross_entropy"} <= {r["op"] for r in ops}, ops
gemm = [r for r in ops if r["op"] == "gemm"][0]
assert abs(gemm["seconds"] / gemm["modeled_seconds"] - 1) < 0.05, gemm
for k in ("ops_seconds", "pass_seconds"):
    assert abs(total[k] / total["modeled_seconds"] - 1) < 0.1, (k, total)
# The host hands the ops to the sim's stream thread and goes on: it issues them in less
# time than they take at 0.05 TFLOPS.
assert 0 < total["issue_seconds"] < total["pass_seconds"], total
print(f"device-bench on sim: pass {total['pass_seconds']:.6f} s, modeled {total['modeled_seconds']:.6f} s; "
      f"gemm {gemm['seconds'] / gemm['modeled_seconds']:.3f} of its model")
PY
sed "s/\"backend\": \"sim\", \"sim\": $slow/\"backend\": \"host\"/" "$tmp/cfg.json" > "$tmp/host.json"
grep -q '"backend": "host"' "$tmp/host.json" || fail "no host config made from $(cat "$tmp/cfg.json")"
expect 0 "$Z" device-bench --config "$tmp/host.json" --passes 1 --shapes
grep -q '^gemm .* 128 ' "$tmp/out" && grep -q '^pass (untimed)' "$tmp/out" || fail "device-bench on host: $(cat "$tmp/out")"
expect 0 "$Z" train "$tmp/cfg.json" --op-profile
grep -q '^op profile: per step over the last 3, on simulated H100' "$tmp/out" && grep -q '^optim  *fp32' "$tmp/out" ||
  fail "train --op-profile: $(tail -n 20 "$tmp/out")"
expect 2 "$Z" device-bench --config "$tmp/cfg.json" --gpu v100
grep -q -- '--gpu: "v100" is not a modeled GPU' "$tmp/err" || fail "device-bench --gpu v100: $(cat "$tmp/err")"

# Bad input names the key.
cfg 3 nvme nvme 4 '{"gpu": "v100"}'
expect 2 "$Z" train "$tmp/cfg.json"
grep -q 'device.sim.gpu' "$tmp/err" || fail "unknown preset: $(cat "$tmp/err")"
cfg 3 nvme nvme 4 '{"tflops": 0}'
expect 2 "$Z" train "$tmp/cfg.json"
grep -q 'device.sim.tflops' "$tmp/err" || fail "tflops 0: $(cat "$tmp/err")"
cfg 3 nvme nvme 4
sed -i 's/"backend": "sim"/"backend": "host"/; s/"sim": {}/"sim": {"gpu": "h200"}/' "$tmp/cfg.json"
expect 2 "$Z" train "$tmp/cfg.json"
grep -q 'device.sim describes the simulated device, but device.backend is "host"' "$tmp/err" ||
  fail "device.sim with the host backend: $(cat "$tmp/err")"
cfg 3 nvme nvme 4
sed -i 's/"backend": "sim"/"backend": "sim", "memory_limit": "100G"/' "$tmp/cfg.json"
expect 1 "$Z" train "$tmp/cfg.json"
grep -q 'device.memory_limit 100 GiB exceeds simulated H100 SXM5 80GB' "$tmp/err" || fail "memory_limit above the modeled memory: $(cat "$tmp/err")"

finish test_sim
