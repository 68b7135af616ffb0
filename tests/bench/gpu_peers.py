#!/usr/bin/env python3
"""zinf against its GPU peers: GPT-2 large trained for a few steps on one CUDA device, each
trainer with its optimizer on the CPU, in tokens per second.

The model is GPT-2 large as Hugging Face transformers builds it (36 layers, 20 heads, 1280
wide, 50257 tokens, 1024 positions; 774 M parameters, random init, torch.manual_seed(0)),
trained on one micro-batch of 8 x 1024 random token ids (fixed seed) with AdamW, lr 1e-5,
gradients clipped at norm --clip (1.0 by default) where the trainer can. Each peer runs in
a process of its own, so that one that fails or runs out of memory leaves the others to
run:

  fsdp2_cpu_offload: PyTorch FSDP2 (fully_shard per block and at the root) with
    CPUOffloadPolicy, one rank, bf16 parameters in compute (MixedPrecisionPolicy), fp32
    sharded parameters, gradients and torch.optim.AdamW on the CPU.
  torchao_cpu_offload_optimizer: torchao's CPUOffloadOptimizer over a bf16 model on the
    device, fused CPU AdamW on bf16 host copies (no fp32 master); gradients are copied to
    the host as backward makes them, so none is clipped.
  deepspeed_zero3_offload_cpu: DeepSpeed ZeRO stage 3, one rank, bf16, the optimizer on the
    CPU (DeepSpeedCPUAdam, pinned), gradient_clipping --clip.
  zinf: zinf train, ZeRO stage 3 with the optimizer on the CPU, bf16, gradient_clipping --clip.
    At GPT-2 large's random start the gradients' norm is about 1.7, so at 1.0 every step
    clips and zinf's update waits for the backward's end (a step that clips would redo
    the sub-groups updated under the backward); --clip 0 shows the update under it.
  zinf_ratio: the same with offload_optimizer.ratio 0.5: the first half of the sub-groups
    keep their states on the device and are updated there (DeepSpeed's partial offload).
  zinf_stage0: zinf train at stage 0 with nothing offloaded, the in-memory reference.

A PyTorch peer takes --warmup untimed steps, then --steps steps each timed between two
torch.cuda.synchronize(); zinf runs --steps + 2 steps and its first two are untimed (its
--json step_seconds). tokens/s is 8 x 1024 over the median timed step.

Prints one JSON object per peer ({"bench": "gpu_peers", "peer", "tokens_per_s", "step_s"
(the median), "steps_s" (every timed step), "gpu_peak_gib", ...}, or {"bench", "peer",
"error"} where a peer cannot run), then a table with the ratios zinf / peer and the two
goals: zinf stage 3 with the optimizer on the CPU within 1.15x of zinf stage 0's step, and
zinf at least 1.5x the fastest peer's tokens/s. Asserts no speed; exits 1 only when zinf
itself fails.
"""
import argparse
import array
import json
import os
import pathlib
import random
import shutil
import socket
import statistics
import sys
import tempfile
import time

import gpu_bench_runs

MICRO, SEQ, VOCAB, LR = 8, 1024, 50257, 1e-5
TORCH_PEERS = ("fsdp2_cpu_offload", "torchao_cpu_offload_optimizer", "deepspeed_zero3_offload_cpu")
ZINF_PEERS = ("zinf", "zinf_ratio", "zinf_stage0")
PEERS = ZINF_PEERS + TORCH_PEERS  # zinf's first: a run cut short by its limit still has them
ZINF_SKIPPED = 2  # zinf's first steps, untimed: the first allocates, pins and gathers


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def first_line(e):
    return (f"{type(e).__name__}: {e}".strip().splitlines() or [type(e).__name__])[0][:300]


# ---- the PyTorch peers, each run in a worker process of its own -----------------------

def gpt2_large():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=36, n_head=20, n_embd=1280, vocab_size=VOCAB, n_positions=1024)
    return GPT2LMHeadModel(cfg)


def batch():
    import torch

    g = torch.Generator().manual_seed(0)
    return torch.randint(0, VOCAB, (MICRO, SEQ), generator=g).cuda()


def fsdp2(clip):
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    torch.cuda.set_device(0)
    url, notes = f"tcp://127.0.0.1:{free_port()}", []
    try:
        dist.init_process_group("nccl", init_method=url, rank=0, world_size=1)
    except Exception as e:
        notes.append(f"nccl refused ({first_line(e)[:120]}): gloo")
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    model = gpt2_large()  # fp32 on the host: CPUOffloadPolicy keeps the sharded parameters there
    kw = dict(offload_policy=CPUOffloadPolicy(),
              mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
    for block in model.transformer.h:
        fully_shard(block, **kw)
    fully_shard(model, **kw)  # the root: embeddings (tied to the head), final norm
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    x = batch()

    def step():
        model(input_ids=x, labels=x).loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
    info = {"precision": "bf16 compute, fp32 master, grads and AdamW on the host", "gradient_clipping": clip,
            "backend": dist.get_backend()}
    return step, info, notes


def torchao(clip):
    import torch

    try:
        from torchao.optim import CPUOffloadOptimizer
    except ImportError:
        from torchao.prototype.low_bit_optim import CPUOffloadOptimizer
    model = gpt2_large().to(device="cuda", dtype=torch.bfloat16)
    opt = CPUOffloadOptimizer(model.parameters(), torch.optim.AdamW, offload_gradients=False, fused=True, lr=LR)
    x = batch()

    def step():
        model(input_ids=x, labels=x).loss.backward()  # each gradient goes to the host as it is made
        opt.step()
        opt.zero_grad()
    import torchao as ao
    info = {"precision": "bf16 weights, no fp32 master; fused AdamW on the host", "gradient_clipping": None,
            "torchao": getattr(ao, "__version__", "?")}
    return step, info, ["no clipping: gradients leave the device during backward"]


def deepspeed_zero3(clip):
    import torch

    port = str(free_port())
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    import deepspeed

    torch.cuda.set_device(0)
    deepspeed.init_distributed()
    config = {"train_batch_size": MICRO, "train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": 1,
              "gradient_clipping": clip, "bf16": {"enabled": True},
              "optimizer": {"type": "AdamW", "params": {"lr": LR}},
              "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True}},
              "steps_per_print": 1 << 30, "wall_clock_breakdown": False}
    model = gpt2_large()
    # DeepSpeedCPUAdam is built with ninja on first use (minutes, once).
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    x = batch()

    def step():
        engine.backward(engine(input_ids=x, labels=x).loss)
        engine.step()  # clips, steps and zeroes the gradients
    inner = getattr(engine.optimizer, "optimizer", engine.optimizer)  # ZeRO-3's wrapper holds the Adam
    info = {"precision": "bf16 weights, fp32 master; DeepSpeedCPUAdam", "gradient_clipping": clip,
            "deepspeed": deepspeed.__version__, "optimizer": type(inner).__name__}
    return step, info, []


def worker(peer, args):
    """Builds the peer and times its steps: its JSON record. The process ends right after
    (os._exit), so nothing is torn down here."""
    rec = {"bench": "gpu_peers", "peer": peer}
    try:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
        build = {"fsdp2_cpu_offload": fsdp2, "torchao_cpu_offload_optimizer": torchao,
                 "deepspeed_zero3_offload_cpu": deepspeed_zero3}[peer]
        step, info, notes = build(args.clip)
        for _ in range(args.warmup):
            step()
        times = []
        for _ in range(args.steps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        s = statistics.median(times)
        rec.update({"tokens_per_s": MICRO * SEQ / s, "step_s": s, "steps_s": times, "warmup": args.warmup,
                    "gpu_peak_gib": torch.cuda.max_memory_allocated() / 2**30, **info,
                    "torch": torch.__version__, "device": torch.cuda.get_device_name(0)})
        if notes:
            rec["note"] = "; ".join(notes)
    except BaseException as e:  # an OOM, a missing package, a peer's own exit
        rec["error"] = first_line(e)
    return rec


def run_worker(peer, args):
    return gpu_bench_runs.worker(os.path.abspath(__file__), peer, args, {"bench": "gpu_peers", "peer": peer},
                                 ["--clip", str(args.clip)])


# ---- zinf ------------------------------------------------------------------------------

def zinf_config(stage, ratio, tokens, steps, clip):
    zero = {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": ratio}} if stage == 3 else {"stage": 0}
    return {"train_batch_size": MICRO, "train_micro_batch_size_per_gpu": MICRO, "steps": steps,
            "gradient_clipping": clip, "bf16": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": {"lr": LR}}, "zero_optimization": zero,
            "model": {"preset": "gpt2-large"},
            "data": {"path": tokens, "format": "tokens-u32", "seq_len": SEQ}, "device": {"backend": "cuda"}}


def run_zinf(peer, args, tmp):
    rec = {"bench": "gpu_peers", "peer": peer}
    exe = os.path.join(args.zinf, "zinf")
    if not os.access(exe, os.X_OK):
        return {**rec, "error": f"{exe} is missing (make builds it)"}
    tokens = os.path.join(tmp, "t.tokens")
    if not os.path.exists(tokens):  # 1 M random ids, as bench_sim.sh writes them
        r = random.Random(1)
        with open(tokens, "wb") as f:
            f.write(array.array("I", (r.randrange(VOCAB) for _ in range(1 << 20))).tobytes())
    steps = args.steps + ZINF_SKIPPED
    stage, ratio = (0, 1) if peer == "zinf_stage0" else (3, 0.5 if peer == "zinf_ratio" else 1)
    cfg = os.path.join(tmp, f"{peer}.json")
    with open(cfg, "w") as f:
        json.dump(zinf_config(stage, ratio, tokens, steps, args.clip), f)
    # The planner's step for the same config, to hold it to the card's: the step that
    # clips where --clip is set (at the random start every step does).
    plan = gpu_bench_runs.predicted(exe, cfg, 120, args.set) or {}
    timed, final = gpu_bench_runs.train(exe, cfg, steps, ZINF_SKIPPED, peer, tmp, args.timeout, args.set)
    if final is None:
        return {**rec, "error": timed}
    rec.update(gpu_bench_runs.figures(timed, final, ZINF_SKIPPED, MICRO * SEQ))
    rec.update({"zinf_tokens_per_s": statistics.median(o["tokens_per_s"] for o in timed),
                "precision": "bf16 weights, fp32 master", "gradient_clipping": args.clip,
                "zero": ("stage 0, nothing offloaded" if stage == 0 else "stage 3, optimizer on cpu"
                         + (f" (ratio {ratio}: half its sub-groups on the device)" if ratio < 1 else "")),
                "predicted_step_s": plan.get("step_seconds_clipping" if args.clip else "step_seconds"),
                "sets": args.set})
    for k in ("optim_backward_s", "wait_optim_s", "optim_s"):  # where the update ran
        rec[k] = statistics.median(o.get(k, 0) for o in timed)
    if stage == 3 and plan:
        # The CPU's floor: its Adam alone over the elements it updates, right after the run.
        cpu = plan["partition_numel"] - plan.get("optimizer_device_numel", 0)
        rec.update({"cpu_update_elements": cpu, "cpu_update_s": gpu_bench_runs.cpu_update_s(exe, cpu, 120)})
    return rec


# ---- the table -------------------------------------------------------------------------

def table(rows, m, out):
    ok = {r["peer"]: r for r in rows if "error" not in r}
    z = ok.get("zinf")
    print(f"\ngpu_peers: GPT-2 large (774 M), micro-batch {MICRO} x {SEQ} random tokens, bf16, AdamW lr 1e-5, "
          f"median step; {m['gpu']}, {m['cores']} cores, commit {m['commit']}, {m['date']}", file=out)
    print(f"{'peer':<31} {'tokens/s':>10} {'step s':>8} {'zinf/peer':>9} {'GPU GiB':>8}  note", file=out)
    for r in rows:
        if "error" in r:
            print(f"{r['peer']:<31} cannot run: {r['error']}", file=out)
            continue
        ratio = f"{z['tokens_per_s'] / r['tokens_per_s']:9.2f}" if z and r["peer"] != "zinf" else f"{'':9}"
        gib = f"{r['gpu_peak_gib']:8.1f}" if r.get("gpu_peak_gib") is not None else f"{'':8}"
        note = r.get("zero") or r.get("precision", "")
        if r.get("sets"):
            note += " with " + ", ".join(r["sets"])
        if r.get("predicted_step_s"):
            note += f"; planner {r['predicted_step_s']:.3f} s"
        if r.get("optim_s") or r.get("optim_backward_s"):
            note += (f"; update {r['optim_backward_s']:.3f} s under the backward, {r['optim_s']:.3f} s after, "
                     f"forward's wait {r['wait_optim_s']:.3f} s")
        if r.get("cpu_update_s"):
            note += f"; Adam alone {r['cpu_update_s']:.3f} s (adam-bench, {r['cpu_update_elements'] / 1e6:.0f} M)"
        if not r.get("gradient_clipping"):
            note += "; no clipping"
        print(f"{r['peer']:<31} {r['tokens_per_s']:10.0f} {r['step_s']:8.3f} {ratio} {gib}  {note}", file=out)

    def goal(text, have, value, target, met):
        if have:
            print(f"{text}: {value:.2f} (goal {target}: {'met' if met else 'not met'})", file=out)
        else:
            print(f"{text}: not measured", file=out)
    s0 = ok.get("zinf_stage0")
    r = z["step_s"] / s0["step_s"] if z and s0 else 0
    goal("zinf stage 3 with the optimizer on cpu, its step / stage 0's", z and s0, r, "<= 1.15", r <= 1.15)
    zr = ok.get("zinf_ratio")
    r = zr["step_s"] / s0["step_s"] if zr and s0 else 0
    goal("the same with offload_optimizer.ratio 0.5, its step / stage 0's", zr and s0, r, "<= 1.15", r <= 1.15)
    # Where the CPU's Adam takes longer than stage 0's step, that goal is out of reach:
    # the step's floor is the slower of the two.
    for row in (z, zr):
        if row and s0 and row.get("cpu_update_s"):
            floor = max(s0["step_s"], row["cpu_update_s"])
            print(f"{row['peer']}: its step / its floor (the slower of stage 0's step and its CPU Adam alone): "
                  f"{row['step_s'] / floor:.2f}", file=out)
    peers = [ok[p] for p in TORCH_PEERS if p in ok]
    best = max(peers, key=lambda p: p["tokens_per_s"]) if peers else None
    r = z["tokens_per_s"] / best["tokens_per_s"] if z and best else 0
    goal(f"zinf tokens/s / the fastest peer's ({best['peer'] if best else 'none ran'})", z and best, r, ">= 1.5",
         r >= 1.5)


def main():
    root = pathlib.Path(__file__).resolve().parents[2]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peers", default=",".join(PEERS), help=f"comma list of {', '.join(PEERS)} (default all)")
    ap.add_argument("--zinf", default=os.environ.get("ZINF_BUILD", str(root / "build")),
                    help="build directory holding the zinf CLI (default $ZINF_BUILD or build)")
    ap.add_argument("--steps", type=int, default=6, help="timed steps per peer, of which the median (default 6)")
    ap.add_argument("--warmup", type=int, default=3,
                    help=f"untimed steps before them, PyTorch peers (default 3; zinf's first {ZINF_SKIPPED} "
                    "are untimed)")
    ap.add_argument("--clip", type=float, default=1.0,
                    help="gradient_clipping of every trainer that clips (default 1.0; 0 clips none: zinf's "
                    "update then goes under the backward, which a clipping step holds back)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config key of zinf's rows, passed to zinf train and estimate as --set (repeatable), e.g. "
                    "zero_optimization.offload_optimizer.cpuadam_cores_perc=0.8")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds a peer may take in all (default 1800)")
    ap.add_argument("--out", help="also write the JSON lines to this file")
    ap.add_argument("--worker", choices=TORCH_PEERS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.steps < 1 or args.warmup < 0:
        ap.error("--steps must be at least 1 and --warmup at least 0")

    if args.worker:
        # DeepSpeed's logger, its C++ and ninja print on stdout: the result keeps the real
        # stdout, everything else goes to stderr.
        out = os.fdopen(os.dup(1), "w")
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        rec = worker(args.worker, args)
        print(json.dumps(rec), file=out, flush=True)
        os._exit(0)  # past the peers' atexit hooks and process-group teardown, which may hang

    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    bad = [p for p in peers if p not in PEERS]
    if bad:
        ap.error(f"unknown peer(s) {', '.join(bad)}: choose among {', '.join(PEERS)}")
    outf = open(args.out, "w") if args.out else None
    tmp = tempfile.mkdtemp(prefix="zinf-gpu-peers-", dir=os.environ.get("ZINF_BENCH_DIR", "/var/tmp"))
    rows = []
    try:
        for peer in peers:
            rec = run_zinf(peer, args, tmp) if peer in ZINF_PEERS else run_worker(peer, args)
            rows.append(rec)
            for f in (sys.stdout, outf):
                if f:
                    print(json.dumps(rec), file=f, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if outf:
            outf.close()
    table(rows, gpu_bench_runs.machine(root), sys.stdout)
    sys.exit(1 if any("error" in r for r in rows if r["peer"] in ZINF_PEERS) else 0)


if __name__ == "__main__":
    main()
