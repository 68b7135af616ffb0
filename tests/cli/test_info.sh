#!/usr/bin/env bash
# `zinf info`: the --json contract (one line, the documented keys), the human table
# naming the CPU as /proc/cpuinfo does, and exit code 2 for a bad --path or option.
# without-cuda: zinf info reports CUDA and NCCL as not built
# timeout: 10 san=10 cuda-emu=10
set -u
zinf=${ZINF_BUILD:-build}/zinf
[ -x "$zinf" ] || { echo "FAIL: $zinf not built"; exit 1; }
dir=$(mktemp -d /tmp/zinf-info-test-XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$zinf" info --json --path "$dir" > "$dir/out.json" 2> "$dir/err" || fail "info --json exited $?: $(cat "$dir/err")"
[ "$(wc -l < "$dir/out.json")" = 1 ] || fail "info --json printed $(wc -l < "$dir/out.json") lines"
config_h=${ZINF_BUILD:-build}/config.h
mpi_built=$(grep -q '^#define ZINF_HAVE_MPI ' "$config_h" && echo true || echo false)
nccl_built=$(grep -q '^#define ZINF_HAVE_NCCL ' "$config_h" && echo true || echo false)
cuda_built=$(grep -q '^#define ZINF_HAVE_CUDA ' "$config_h" && echo true || echo false)
python3 - "$dir/out.json" "$dir" "$mpi_built" "$nccl_built" "$cuda_built" <<'EOF' || fail "info --json content"
import json, os, sys
text = open(sys.argv[1]).read()
j = json.loads(text)
path, mpi_built, nccl_built, cuda_built = sys.argv[2], sys.argv[3] == "true", sys.argv[4] == "true", sys.argv[5] == "true"
want = {
    "version": None,
    "cpu": ["model", "logical_cpus", "physical_cores", "numa_nodes", "last_level_cache_bytes", "simd", "avx512_bf16",
            "amx_bf16", "f16c"],
    "memory": ["total_bytes", "available_bytes", "memlock_limit_bytes", "transparent_hugepages"],
    "io_uring": ["available", "error", "features", "single_issuer", "defer_taskrun", "coop_taskrun", "sqpoll",
                 "read", "write", "read_fixed", "fallocate"],
    "paths": None,
    "cuda": ["built", "runtime_version", "driver_version", "device_count", "status", "cudnn_version", "cudnn_status",
             "devices"],
    "blas": ["config", "threads"],
    "mpi": ["built", "version"],
    "nccl": ["built", "version"],
}
bad = []
for k, sub in want.items():
    if k not in j:
        bad.append(k)
        continue
    for s in sub or []:
        if s not in j[k]:
            bad.append(k + "." + s)
p = j.get("paths", [])
if len(p) != 1:
    bad.append("paths has %d entries" % len(p))
else:
    for s in ["path", "fs_type", "free_bytes", "total_bytes", "logical_block_size", "dio_align", "o_direct",
              "o_direct_error"]:
        if s not in p[0]:
            bad.append("paths[0]." + s)
    if p[0].get("path") != path: bad.append("paths[0].path %r" % p[0].get("path"))
    if p[0].get("o_direct") is not True: bad.append("paths[0].o_direct %r" % p[0].get("o_direct"))
    if p[0].get("o_direct_error") is not None: bad.append("paths[0].o_direct_error %r" % p[0].get("o_direct_error"))
if j.get("cpu", {}).get("logical_cpus") != os.cpu_count(): bad.append("cpu.logical_cpus vs os.cpu_count()")
if j.get("io_uring", {}).get("available") is not True: bad.append("io_uring.available")
meminfo = dict(l.split(":", 1) for l in open("/proc/meminfo"))
if j.get("memory", {}).get("total_bytes") != int(meminfo["MemTotal"].split()[0]) * 1024: bad.append("memory.total_bytes")
if j.get("mpi", {}).get("built") is not mpi_built: bad.append("mpi.built vs config.h")
if mpi_built and not j["mpi"].get("version"): bad.append("mpi.version empty")
if j.get("nccl", {}).get("built") is not nccl_built: bad.append("nccl.built vs config.h")
if j.get("cuda", {}).get("built") is not cuda_built: bad.append("cuda.built vs config.h")
if len(j.get("cuda", {}).get("devices", [])) != j.get("cuda", {}).get("device_count"): bad.append("cuda.devices count")
c = j.get("cuda", {})
if (c.get("cudnn_version", 0) > 0) != (c.get("cudnn_status") == "ok"): bad.append("cuda.cudnn_version vs cudnn_status")
if not cuda_built and c.get("cudnn_version") != 0: bad.append("cuda.cudnn_version without the CUDA backend")
if bad:
    print("bad or missing:", ", ".join(bad))
    print(text)
    sys.exit(1)
EOF

model=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -1 | sed 's/[[:space:]]*$//')
"$zinf" info > "$dir/out.txt" 2> "$dir/err" || fail "info exited $?: $(cat "$dir/err")"
if [ -n "$model" ]; then
  grep -qF -- "$model" "$dir/out.txt" || fail "human output does not name the CPU \"$model\": $(cat "$dir/out.txt")"
fi
if [ "$cuda_built" = true ]; then
  grep -q '^ *cudnn ' "$dir/out.txt" || fail "human output has no cudnn row: $(cat "$dir/out.txt")"
fi

"$zinf" info --path /nonexistent-zinf-dir > /dev/null 2> "$dir/err"
rc=$?
[ $rc = 2 ] || fail "info --path /nonexistent-zinf-dir exited $rc, want 2"
grep -q '/nonexistent-zinf-dir' "$dir/err" || fail "stderr does not name the path: $(cat "$dir/err")"

touch "$dir/file"
"$zinf" info --path "$dir/file" > /dev/null 2> "$dir/err"
rc=$?
[ $rc = 2 ] || fail "info --path FILE exited $rc, want 2"

"$zinf" info --bogus > /dev/null 2> "$dir/err"
rc=$?
[ $rc = 2 ] || fail "info --bogus exited $rc, want 2"
grep -q -- '--bogus' "$dir/err" || fail "stderr does not name --bogus: $(cat "$dir/err")"
echo "ok"
