#!/usr/bin/env bash
# Checkpoints of GPT-2 124M trained at ZeRO-3 with both tiers on NVMe: the save's
# bandwidth against dd writing as many bytes through the page cache and syncing them
# (what a save does) in the same directory; the load's against cat reading the same
# files; consolidation's bandwidth and how much its peak RSS exceeds the process's own
# (the same command on a checkpoint 1000 times smaller).
# ZINF_BENCH_DIR (default /var/tmp) should sit on the drive checkpoints will use.
set -eu
Z=${ZINF_BUILD:-build}/zinf
R=${ZINF_REF_DIR:-build/ref}
dir=$(mktemp -d -p "${ZINF_BENCH_DIR:-/var/tmp}" zinf-bench-ckpt.XXXXXX)
trap 'rm -rf "$dir"' EXIT INT TERM
mkdir -p "$dir/swap"

cat > "$dir/cfg.json" <<JSON
{"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2, "steps": 1, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
 "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "$dir/swap"},
   "offload_param": {"device": "nvme", "nvme_path": "$dir/swap", "max_in_cpu": 0}},
 "model": {"preset": "gpt2"},
 "data": {"path": "$R/train.tokens", "format": "tokens-u16", "seq_len": 32},
 "checkpoint": {"dir": "$dir/ck"},
 "device": {"backend": "host"}}
JSON
secs() { sed -n "s/.*checkpoint .* $1 in \([0-9.]*\) s.*/\1/p" "$2" | tail -1; }

"$Z" train "$dir/cfg.json" > "$dir/save.log" 2>&1
save=$(secs saved "$dir/save.log")
bytes=$(du -sb "$dir/ck/global_step1" | cut -f1)
dd if=/dev/zero of="$dir/dd.bin" bs=8M count=$((bytes / 8388608)) conv=fsync 2> "$dir/dd.log"
dd_s=$(sed -n 's/.* copied, \([0-9.]*\) s.*/\1/p' "$dir/dd.log")
rm -f "$dir/dd.bin"
"$Z" train "$dir/cfg.json" --set checkpoint.load=latest > "$dir/load.log" 2>&1
load=$(secs loaded "$dir/load.log")
t0=$(date +%s.%N); cat "$dir/ck/global_step1/"* > /dev/null; t1=$(date +%s.%N)
"$Z" consolidate "$dir/ck" "$dir/gpt2.safetensors" --json > "$dir/cons.json"
sed -e 's/"preset": "gpt2"/"n_layer": 1, "n_head": 1, "n_embd": 64, "vocab_size": 256, "block_size": 32/' \
  -e "s|$dir/ck|$dir/tiny|" "$dir/cfg.json" > "$dir/tiny.json"
"$Z" train "$dir/tiny.json" > /dev/null 2>&1
"$Z" consolidate "$dir/tiny" "$dir/tiny.safetensors" --json > "$dir/tiny.cons.json"
python3 - "$bytes" "$save" "$dd_s" "$load" "$t0" "$t1" "$dir/cons.json" "$dir/tiny.cons.json" <<'PY'
import json, sys
b, save, dd, load, t0, t1 = int(sys.argv[1]), *map(float, sys.argv[2:7])
c, tiny = json.load(open(sys.argv[7])), json.load(open(sys.argv[8]))
print(f"checkpoints of GPT-2 124M (ZeRO-3, both tiers on NVMe): {b / 1e9:.2f} GB per step directory")
print(f"  save         {save:7.2f} s  {b / save / 1e9:6.3f} GB/s   dd write+fsync {b / dd / 1e9:6.3f} GB/s   ratio {dd / save:.3f}")
print(f"  load         {load:7.2f} s  {b / load / 1e9:6.3f} GB/s   cat            {b / (t1 - t0) / 1e9:6.3f} GB/s   ratio {(t1 - t0) / load:.3f}")
print(f"  consolidate  {c['seconds']:7.2f} s  {c['bytes'] / c['seconds'] / 1e9:6.3f} GB/s written (fp32); peak RSS "
      f"{(c['peak_rss_bytes'] - tiny['peak_rss_bytes']) / 2**20:.1f} MiB above the same command on a tiny checkpoint")
PY
