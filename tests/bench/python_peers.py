#!/usr/bin/env python3
"""zinf's Python package against its peers in one process, on the same buffers, threads
and file.

adam: zinf.optim.CPUAdam, DeepSpeed's DeepSpeedCPUAdam and torch.optim.AdamW (fused;
foreach where fused is refused) on --params fp32 parameters, with fp32 and with bf16
gradients, each without and with a bf16 copy of the updated weights. zinf takes bf16
gradients and writes the copy within its step (step(grads=, out=)). The peers take only
an fp32 .grad (torch refuses a .grad of another dtype; DeepSpeed reads the gradient as
the parameter's dtype), so for bf16 they convert into it, and they make the copy with
out.copy_(p): both inside the timed step. Median of --steps steps after a warm-up.

io: one file in --dir written and read whole with O_DIRECT by zinf.aio (its buffers
registered) on its own pinned_empty buffer and on DeepSpeed's page-locked tensor,
DeepSpeed's aio_handle on that same tensor (overlap_events on as in DeepSpeed's default
aio config) and fio (io_uring, registered buffers and file), per block size and queue
depth: the median of --reps rounds of one pass by each. DeepSpeed's ratio is zinf's on
the same buffer over it; fio's, zinf's on its own.

Prints one JSON object per measurement ({"bench", "peer", its configuration,
"params_per_s" or "gbps" (GB/s, 1e9 bytes), "seconds"}, or {"bench", "peer", ...,
"error"} where a peer cannot run), then a table with the ratios zinf / peer. Asserts no
speed.
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

import torch

import zinf.aio
import zinf.optim


def amount(base):
    """A parser of 5M-style arguments: K, M, G as powers of base (1000 counts, 1024 bytes)."""
    def parse(s):
        s = s.strip().upper()
        k = "KMG".find(s[-1]) + 1
        return int(float(s[:-1] if k else s) * base ** k)
    return parse


def physical_cores():
    """Cores, not hyperthreads, as bench_adam.sh counts them: a memory-bound kernel gains
    nothing from a core's second thread."""
    topo = "/sys/devices/system/cpu/cpu{}/topology/{}"
    cpus = os.sched_getaffinity(0)
    try:
        return len({tuple(open(topo.format(c, f)).read() for f in ("physical_package_id", "core_id")) for c in cpus})
    except OSError:
        return len(cpus)


def median_seconds(fn, runs):
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


class Results:
    """Prints each measurement as a JSON line and keeps it for the table. A peer that
    failed once (an op that does not build, say) is not tried again."""

    def __init__(self, out):
        self.out, self.rows, self.broken = out, [], set()

    def emit(self, rec):
        self.rows.append(rec)
        print(json.dumps(rec), file=self.out, flush=True)

    def fail(self, bench, peer, cfg, e):
        self.broken.add((bench, peer))
        self.emit({"bench": bench, "peer": peer, **cfg, "error": f"{type(e).__name__}: {e}".splitlines()[0][:300]})

    def measure(self, bench, peer, cfg, fn):
        if (bench, peer) in self.broken:
            return
        try:
            self.emit({"bench": bench, "peer": peer, **cfg, **fn()})  # fn may name the peer more exactly
        except Exception as e:
            self.fail(bench, peer, cfg, e)


def adam(args, res):
    n, hp = args.params, dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    torch.manual_seed(0)
    # Every peer updates the same parameter from the same gradients into the same copy.
    p = torch.nn.Parameter(torch.rand(n) + 0.5)
    g32 = torch.rand(n) * 1e-2
    g16 = g32.to(torch.bfloat16)
    out16 = torch.empty(n, dtype=torch.bfloat16)
    p.grad = g32

    def zinf_opt():
        return "zinf", zinf.optim.CPUAdam([p], adamw_mode=True, threads=args.threads, **hp), []

    def deepspeed_opt():
        from deepspeed.ops.adam import DeepSpeedCPUAdam  # ninja builds its kernel on first use

        return "deepspeed-cpu-adam", DeepSpeedCPUAdam([p], adamw_mode=True, **hp), []

    def torch_opt():
        try:
            opt = torch.optim.AdamW([p], fused=True, **hp)
            opt.step()  # fused may be refused only at the first step
            return "torch-fused", opt, []
        except RuntimeError as e:
            return "torch-foreach", torch.optim.AdamW([p], foreach=True, **hp), [f"fused refused: {e}"[:200]]

    def step_of(peer, opt, grad, copy):
        if peer == "zinf":
            return lambda: opt.step(grads=[grad], out=[out16] if copy else None)

        def step():
            if grad is g16:
                p.grad.copy_(grad)
            opt.step()
            if copy:
                out16.copy_(p)
        return step

    for name, make in (("zinf", zinf_opt), ("deepspeed-cpu-adam", deepspeed_opt), ("torch", torch_opt)):
        # Built at the first measurement, so that a peer that cannot build reports it there;
        # rebinding drops the previous peer's state before this one allocates its own.
        made = []

        def run(grad, copy):
            if not made:
                made.extend(make())
            peer, opt, notes = made
            if peer != "zinf":
                notes = notes + (["bf16 grad -> fp32 .grad timed in"] if grad is g16 else []) + \
                    (["copy by out.copy_(p) timed in"] if copy else [])
            step = step_of(peer, opt, grad, copy)
            step()  # warm up
            s = median_seconds(step, args.steps)
            return {"peer": peer, "params_per_s": n / s, "seconds": s, **({"note": "; ".join(notes)} if notes else {})}

        for gname, grad in (("fp32", g32), ("bf16", g16)):
            for copy in (False, True):
                cfg = {"params": n, "threads": args.threads, "grad": gname, "copy": "bf16" if copy else "none"}
                res.measure("adam", name, cfg, lambda: run(grad, copy))


def fio(path, op, bs, qd, threads, size):
    """One pass of fio over the file; its own measure of the seconds it took."""
    part = size // threads  # each job on its own slice, as zinf and DeepSpeed split a request
    cmd = ["fio", "--name=python-peers", f"--filename={path}", f"--size={part}", f"--offset_increment={part}",
           f"--numjobs={threads}", "--group_reporting", "--ioengine=io_uring", "--direct=1", f"--rw={op}",
           f"--bs={bs}", f"--iodepth={qd}", "--fixedbufs=1", "--registerfiles=1", "--output-format=json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"fio exited {r.returncode}: {r.stderr.strip()[:200]}")
    return size / json.loads(r.stdout[r.stdout.index("{"):])["jobs"][0][op]["bw_bytes"]


def rounds(res, cfg, passes, reps):
    """The median of reps rounds of one pass by each peer: rounds, so that a drive whose
    speed drifts (a VM's, a busy one's) slows every peer alike."""
    times = {peer: [] for peer in passes if ("io", peer) not in res.broken}
    for _ in range(reps):
        for peer in list(times):
            try:
                times[peer].append(passes[peer]())
            except Exception as e:
                res.fail("io", peer, cfg, e)
                del times[peer]
    for peer, ts in times.items():
        s = statistics.median(ts)
        res.emit({"bench": "io", "peer": peer, **cfg, "gbps": cfg["size"] / s / 1e9, "seconds": s})


def io(args, res):
    os.makedirs(args.dir, exist_ok=True)
    path = os.path.join(args.dir, "python-peers.bin")
    size, threads = args.io_size, args.io_threads
    # What a buffer's pages are moves O_DIRECT's speed as much as the engine does (the
    # kernel pins them per request), so zinf runs twice: on its own pinned_empty buffer
    # (locked, transparent huge pages) and on DeepSpeed's (posix_memalign + mlock, which
    # DeepSpeed needs: it bounces any buffer it did not lock itself when there is no GPU),
    # and DeepSpeed is set beside zinf on the same buffer. fio uses buffers of its own.
    bufs = {"zinf": zinf.aio.pinned_empty(size, "uint8", like="torch")}
    try:
        from deepspeed.ops.op_builder import AsyncIOBuilder

        ds_aio = AsyncIOBuilder().load()  # builds only where libaio-dev is installed
        bufs["zinf-ds-buffer"] = ds_aio.aio_handle().new_cpu_locked_tensor(size, torch.empty(0, dtype=torch.uint8))
    except Exception as e:
        ds_aio = None
        res.fail("io", "deepspeed-aio", {"size": size}, e)
    for b in bufs.values():
        b.fill_(0x5A)

    def timed(fn, op, buf):
        t0 = time.perf_counter()
        if (fn.sync_pwrite if op == "write" else fn.sync_pread)(buf, path) < 0:
            raise RuntimeError(f"sync_p{op} returned -1 (DeepSpeed's reason is on stderr)")
        return time.perf_counter() - t0

    try:
        for bs in args.block_sizes:
            for qd in args.queue_depths:
                zh = zinf.aio.Handle(bs, qd, threads, strict_direct=True)  # O_DIRECT, as the peers
                for b in bufs.values():
                    zh.register_buffer(b)
                passes = {"zinf": lambda: timed(zh, op, bufs["zinf"])}
                if ds_aio:
                    dh = ds_aio.aio_handle(bs, qd, False, True, threads)
                    passes["zinf-ds-buffer"] = lambda: timed(zh, op, bufs["zinf-ds-buffer"])
                    passes["deepspeed-aio"] = lambda: timed(dh, op, bufs["zinf-ds-buffer"])
                passes["fio"] = lambda: fio(path, op, bs, qd, threads, size)
                for op in ("write", "read"):
                    cfg = {"op": op, "block_size": bs, "queue_depth": qd, "threads": threads, "size": size}
                    rounds(res, cfg, passes, args.reps)
                zh.close()
    finally:
        if os.path.exists(path):
            os.remove(path)


def table(rows, out):
    """Per configuration, each peer's speed and zinf's over it."""
    def human(b):
        return f"{b >> 20}M" if b % (1 << 20) == 0 else f"{b >> 10}K"

    specs = {"adam": (("grad", "copy"), "params_per_s", "M params/s", 1e-6,
                      "CPU Adam (AdamW), {params} parameters, {threads} threads, median step; the peers' "
                      "bf16 grad conversion and bf16 copy are timed in"),
             "io": (("op", "block_size", "queue_depth"), "gbps", "GB/s", 1,
                    "file IO, O_DIRECT, {mib} MiB file, {threads} thread(s), median pass")}
    for bench, (keys, field, unit, scale, title) in specs.items():
        mine = [r for r in rows if r["bench"] == bench]
        if not mine:
            continue
        conf = lambda r: tuple(r[k] for k in keys)
        at = {(conf(r), r["peer"]): r[field] for r in mine if r["peer"].startswith("zinf") and field in r}
        print("\n" + title.format(**mine[0], mib=mine[0].get("size", 0) >> 20), file=out)
        print(" ".join(f"{k:>11}" for k in keys) + f"  {'peer':<20} {unit:>11} {'zinf/peer':>9}", file=out)
        order = list(dict.fromkeys(map(conf, mine)))
        for r in sorted(mine, key=lambda r: (order.index(conf(r)), r["peer"] != "zinf")):
            lead = " ".join(f"{human(r[k]) if k == 'block_size' else r[k]:>11}" for k in keys)
            if "error" in r:
                print(f"{lead}  {r['peer']:<20} cannot run: {r['error']}", file=out)
                continue
            # DeepSpeed against zinf on the same buffer, the others against zinf on its own
            z = at.get((conf(r), "zinf-ds-buffer" if r["peer"] == "deepspeed-aio" else "zinf"))
            ratio = f"{z / r[field]:9.2f}" if z and not r["peer"].startswith("zinf") else ""
            print(f"{lead}  {r['peer']:<20} {r[field] * scale:11.3f} {ratio}", file=out)


def main():
    root = pathlib.Path(__file__).resolve().parents[2]
    sizes = amount(1024)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", choices=("adam", "io", "all"), default="all")
    ap.add_argument("--params", type=amount(1000), default=100_000_000, help="Adam parameters (100M, 5M, ...)")
    ap.add_argument("--threads", type=int, default=physical_cores(), help="Adam threads, every peer")
    ap.add_argument("--steps", type=int, default=5, help="timed Adam steps, of which the median")
    ap.add_argument("--dir", default=str(root / "build" / "bench-io"), help="directory of the IO file")
    ap.add_argument("--io-size", type=sizes, default=1 << 30, help="IO file size (1G, 64M, ...)")
    ap.add_argument("--block-sizes", type=lambda s: [sizes(x) for x in s.split(",")], default=[128 << 10, 1 << 20])
    ap.add_argument("--queue-depths", type=lambda s: [int(x) for x in s.split(",")], default=[8, 32])
    ap.add_argument("--io-threads", type=int, default=1, help="zinf threads = DeepSpeed intra_op = fio jobs")
    ap.add_argument("--reps", type=int, default=3, help="rounds of passes over the file, of which the median")
    args = ap.parse_args()
    if args.io_size % (4096 * args.io_threads) or any(b % 4096 for b in args.block_sizes):
        ap.error("each IO thread's share of --io-size and every block size must be a multiple of 4096")

    # DeepSpeed's Adam is OpenMP: built here it shares torch's libgomp, whose threads
    # torch.set_num_threads sets; an OpenMP runtime of its own would load with its op and
    # read OMP_NUM_THREADS then. zinf is told directly.
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    torch.set_num_threads(args.threads)
    # DeepSpeed's logger, its C++ and ninja print on stdout: the results keep the real
    # stdout, everything else goes to stderr.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    res = Results(out)
    if args.bench in ("adam", "all"):
        adam(args, res)
    if args.bench in ("io", "all"):
        io(args, res)
    table(res.rows, out)


if __name__ == "__main__":
    main()
