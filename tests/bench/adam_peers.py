#!/usr/bin/env python3
"""Peers for zinf adam-bench: the same AdamW step (fp32 weights, fp32 gradients, a bf16
copy of the updated weights) in PyTorch (torch.optim.AdamW, foreach and fused) and in
DeepSpeed's DeepSpeedCPUAdam, on PARAMS parameters with THREADS threads. DeepSpeed's
kernel no longer writes the 16-bit copy, so its engine makes it in a second pass,
timed here too. Prints one JSON object per peer: {"peer", "params_per_s", "seconds"}
or {"peer", "error"} when the peer cannot run here.

usage: adam_peers.py PARAMS THREADS [STEPS]
"""
import json
import os
import statistics
import sys
import time

import torch


def timed(step, steps):
    step()  # warm up (and build DeepSpeed's kernel on first use)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def torch_peer(n, steps, **kw):
    p = torch.nn.Parameter(torch.rand(n) + 0.5)
    p.grad = torch.rand(n) * 1e-2
    out = torch.empty(n, dtype=torch.bfloat16)
    opt = torch.optim.AdamW([p], lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, **kw)

    def step():
        opt.step()
        with torch.no_grad():
            out.copy_(p)

    return timed(step, steps)


def deepspeed_peer(n, steps):
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    p = torch.nn.Parameter(torch.rand(n) + 0.5)
    p.grad = torch.rand(n) * 1e-2
    out = torch.empty(n, dtype=torch.bfloat16)
    opt = DeepSpeedCPUAdam([p], lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, adamw_mode=True)

    def step():
        opt.step()
        with torch.no_grad():
            out.copy_(p)

    return timed(step, steps)


def main():
    n, threads = int(float(sys.argv[1])), int(sys.argv[2])
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    peers = [
        ("torch-foreach", lambda: torch_peer(n, steps, foreach=True)),
        ("torch-fused", lambda: torch_peer(n, steps, fused=True)),
        ("deepspeed-cpu-adam", lambda: deepspeed_peer(n, steps)),
    ]
    for name, run in peers:
        try:
            s = run()
            print(json.dumps({"peer": name, "params_per_s": n / s, "seconds": s}), flush=True)
        except Exception as e:  # a peer that cannot be built or run here says why
            msg = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            print(json.dumps({"peer": name, "error": msg}), flush=True)


if __name__ == "__main__":
    main()
