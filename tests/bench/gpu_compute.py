#!/usr/bin/env python3
"""zinf's compute against PyTorch's: three models trained for a few steps on one CUDA device,
everything on the device, in tokens per second and model TFLOPS.

The models, random init (torch.manual_seed(0); zinf from its seed), as Hugging Face
transformers builds them:

  gpt2:       GPT-2 124M (GPT2Config's defaults: 12 layers, 12 heads, 768 wide, 50257 tokens,
              1024 positions; 124 M parameters)
  gpt2-large: GPT-2 large (36 layers, 20 heads, 1280 wide; 774 M)
  llama-1b:   the shape of Llama-3.2-1B (16 layers, 32 query and 8 key/value heads, 2048 wide,
              SwiGLU 8192, 128256 tokens, tied head, rope_theta 500000, 1024 positions, the
              plain rotary frequencies; 1.24 B)

each trained on one micro-batch of 8 x 1024 random token ids with AdamW (lr 1e-4, no weight
decay, no clipping), bf16, nothing partitioned or offloaded. Each trainer runs in a process of
its own, so that one that fails or runs out of memory leaves the others to run:

  torch: the transformers model with attn_implementation "sdpa", moved to the device in bf16
    (bf16 weights and AdamW states, no fp32 master), under torch.compile; torch.optim.AdamW,
    fused where the build has it. A step: forward with labels, backward, step, zero_grad.
  zinf: zinf train at stage 0 with the optimizer on the device, bf16 (bf16 weights, fp32
    master and AdamW states), the model from its preset, with zinf's own attention kernels
    (device.attention "zinf").
  zinf-cudnn: the same with cuDNN's fused attention (device.attention "cudnn"): libcudnn 9 must
    load (gpu_checks.sh puts torch's on LD_LIBRARY_PATH), or the row says why not.

Each trainer takes --warmup untimed steps, then --steps timed ones: PyTorch's each between
two torch.cuda.synchronize(), zinf's its --json step_seconds (from the first forward to the
end of the optimizer step). tokens/s is 8 x 1024 over the median timed step; model TFLOPS is
(6 x parameters + 12 x n_layer x width x 1024) x 8 x 1024 / the median step / 1e12: the
PaLM paper's count as llm.c and zinf's step line use it (a parameter costs 2 FLOPs per token
in the forward and 4 in the backward; attention's scores and their use of the values 12 per
layer, width and position of the sequence, the causal mask's saving not subtracted).

Prints one JSON object per model and trainer ({"bench": "gpu_compute", "model", "trainer",
"tokens_per_s", "step_s" (the median), "steps_s" (every timed step), "tflops",
"gpu_peak_gib", ...}, or {"bench", "model", "trainer", "error"} where a trainer cannot run),
then a table with zinf / PyTorch per model and the goals: GPT-2 124M at least 350 K tokens/s
under zinf; on all three zinf at least 35% of the H100's dense bf16 peak (989 TFLOPS) and at
least 1.1x PyTorch's tokens/s. Asserts no speed; exits 1 only when zinf itself fails.
"""
import argparse
import array
import dataclasses
import json
import os
import pathlib
import random
import shutil
import statistics
import sys
import tempfile
import time

import gpu_bench_runs

MICRO, SEQ, LR, WEIGHT_DECAY = 8, 1024, 1e-4, 0.0
TRAINERS = ("torch", "zinf", "zinf-cudnn")
# zinf's trainers: the attention each runs.
ZINF_ATTENTION = {"zinf": "zinf", "zinf-cudnn": "cudnn"}
H100_BF16_TFLOPS = 989.0  # the H100 SXM's dense bf16 tensor peak, the goals' yardstick


@dataclasses.dataclass(frozen=True)
class Model:
    label: str
    arch: str  # "gpt2" or "llama"
    n_layer: int
    n_head: int
    hidden: int
    vocab: int
    n_kv_head: int = 0  # llama: grouped-query attention
    intermediate: int = 0  # llama: the SwiGLU MLP's width
    zinf: dict = dataclasses.field(default_factory=dict, hash=False)  # zinf's model section


MODELS = {
    "gpt2": Model("GPT-2 124M", "gpt2", 12, 12, 768, 50257, zinf={"preset": "gpt2"}),
    "gpt2-large": Model("GPT-2 large", "gpt2", 36, 20, 1280, 50257, zinf={"preset": "gpt2-large"}),
    # The preset is the hub's Llama-3.2-1B: 131072 positions and llama3 rope scaling. Both are
    # overridden to the model PyTorch builds (1024 positions, plain rotary frequencies), which
    # computes the same work either way; transformers refuses llama3 scaling whose original
    # context (8192) is past max_position_embeddings.
    "llama-1b": Model("Llama-3.2-1B", "llama", 16, 32, 2048, 128256, n_kv_head=8, intermediate=8192,
                      zinf={"preset": "llama-3.2-1b", "block_size": SEQ, "rope_scaling": {"rope_type": "default"}}),
}


def n_params(m):
    """The parameters as transformers counts them (a tied head once), so that PyTorch's and
    zinf's TFLOPS use the same count; zinf's step line counts the same."""
    c = m.hidden
    if m.arch == "gpt2":
        # Token and position embeddings; per block ln_1, c_attn, c_proj, ln_2, c_fc, c_proj
        # (weights and biases); ln_f.
        return m.vocab * c + SEQ * c + m.n_layer * (12 * c * c + 13 * c) + 2 * c
    head_dim = c // m.n_head
    attn = 2 * c * m.n_head * head_dim + 2 * c * m.n_kv_head * head_dim  # q, o; k, v
    mlp = 3 * c * m.intermediate  # gate, up, down
    return m.vocab * c + m.n_layer * (attn + mlp + 2 * c) + c  # RMSNorms: two a block, one last


def flops_per_token(m):
    # 6 per parameter (2 forward, 4 backward) + attention's 12 x n_layer x width x seq_len:
    # PaLM's appendix B and llm.c's count; zinf's step line (zinf_engine_flops_per_token) the same.
    return 6 * n_params(m) + 12 * m.n_layer * m.hidden * SEQ


def first_line(e):
    return (f"{type(e).__name__}: {e}".strip().splitlines() or [type(e).__name__])[0][:300]


# ---- PyTorch, run in a worker process of its own per model ------------------------------

def torch_model(m):
    """The transformers model for m, fp32 on the current default device."""
    import torch
    from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig

    torch.manual_seed(0)
    if m.arch == "gpt2":
        cfg = GPT2Config(n_layer=m.n_layer, n_head=m.n_head, n_embd=m.hidden, vocab_size=m.vocab, n_positions=SEQ)
    else:
        # rms_norm_eps as Llama-3.2-1B's config.json has it (and zinf's preset); LlamaConfig's
        # default is 1e-6.
        cfg = LlamaConfig(hidden_size=m.hidden, intermediate_size=m.intermediate, num_hidden_layers=m.n_layer,
                          num_attention_heads=m.n_head, num_key_value_heads=m.n_kv_head, vocab_size=m.vocab,
                          tie_word_embeddings=True, rope_theta=500000.0, max_position_embeddings=SEQ,
                          rms_norm_eps=1e-5)
    return AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")


def adamw(params):
    """torch.optim.AdamW, fused where this torch has the fused kernel for these parameters
    (else its default, foreach): the fastest that PyTorch offers out of the box."""
    import torch

    try:
        return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY, fused=True), "fused"
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY), "foreach"


def worker(name, args):
    """Builds the model, times its steps: its JSON record. The process ends right after
    (os._exit), so nothing is torn down here."""
    m = MODELS[name]
    rec = {"bench": "gpu_compute", "model": name, "trainer": "torch"}
    try:
        import torch
        import transformers

        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
        # Built on the device: initializing a billion parameters there takes seconds, on the
        # host a minute.
        with torch.device("cuda"):
            model = torch_model(m)
        model = model.to(torch.bfloat16)
        model.train()
        opt, kind = adamw(list(model.parameters()))
        compiled = torch.compile(model)
        g = torch.Generator().manual_seed(0)
        x = torch.randint(0, m.vocab, (MICRO, SEQ), generator=g).cuda()

        def step():
            compiled(input_ids=x, labels=x).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        for _ in range(args.warmup):  # the first compiles (and autotunes): minutes, not timed
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
                    "tflops": flops_per_token(m) * MICRO * SEQ / s / 1e12,
                    "params": sum(p.numel() for p in model.parameters()),
                    "gpu_peak_gib": torch.cuda.max_memory_allocated() / 2**30,
                    "precision": "bf16 weights and AdamW states, no fp32 master",
                    "optimizer": f"torch.optim.AdamW ({kind})", "attention": model.config._attn_implementation,
                    "torch": torch.__version__, "transformers": transformers.__version__,
                    "device": torch.cuda.get_device_name(0)})
    except BaseException as e:  # an OOM, a missing package, a compile error
        rec["error"] = first_line(e)
    return rec


def run_worker(name, args):
    return gpu_bench_runs.worker(os.path.abspath(__file__), name, args, {"bench": "gpu_compute", "model": name, "trainer": "torch"})


# ---- zinf ------------------------------------------------------------------------------

def zinf_config(m, tokens, steps, attention="zinf"):
    return {"train_batch_size": MICRO, "train_micro_batch_size_per_gpu": MICRO, "steps": steps,
            "bf16": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": {"lr": LR, "weight_decay": WEIGHT_DECAY}},
            "zero_optimization": {"stage": 0}, "model": m.zinf,
            "data": {"path": tokens, "format": "tokens-u32", "seq_len": SEQ},
            "device": {"backend": "cuda", "attention": attention}}


def token_file(m, tmp):
    """1 M random ids below m's vocabulary, uint32 (Llama's ids pass 65535), as gpu_peers.py
    and bench_sim.sh write them; one file per vocabulary."""
    path = os.path.join(tmp, f"v{m.vocab}.tokens")
    if not os.path.exists(path):
        r = random.Random(1)
        with open(path, "wb") as f:
            f.write(array.array("I", (r.randrange(m.vocab) for _ in range(1 << 20))).tobytes())
    return path


def write_zinf_config(name, args, tmp, attention="zinf"):
    """The config zinf trains name with, written to tmp: its path and the run's steps."""
    steps = args.warmup + args.steps
    cfg = os.path.join(tmp, f"{name}.json" if attention == "zinf" else f"{name}-{attention}.json")
    with open(cfg, "w") as f:
        json.dump(zinf_config(MODELS[name], token_file(MODELS[name], tmp), steps, attention), f, indent=1)
    return cfg, steps


def run_zinf(name, trainer, args, tmp, exe=None, attention=None):
    """trainer's row: zinf's build (or the CLI exe) with its attention (or attention)."""
    m = MODELS[name]
    rec = {"bench": "gpu_compute", "model": name, "trainer": trainer}
    exe = exe or os.path.join(args.zinf, "zinf")
    if not os.access(exe, os.X_OK):
        return {**rec, "error": f"{exe} is missing (make builds it)"}
    cfg, steps = write_zinf_config(name, args, tmp, attention or ZINF_ATTENTION[trainer])
    timed, final = gpu_bench_runs.train(exe, cfg, steps, args.warmup, f"{name}_{trainer}", tmp, args.timeout)
    if final is None:
        return {**rec, "error": timed}
    rec.update(gpu_bench_runs.figures(timed, final, args.warmup, MICRO * SEQ))
    rec.update({"tflops": flops_per_token(m) * MICRO * SEQ / rec["step_s"] / 1e12,
                # zinf's own figure, from its parameter count: a check on n_params here.
                "zinf_tflops": statistics.median(o["tflops"] for o in timed), "params": n_params(m),
                "precision": "bf16 weights, fp32 master and AdamW states", "zero": "stage 0, nothing offloaded"})
    return rec


# ---- the table -------------------------------------------------------------------------

def table(rows, models, m, out):
    ok = {(r["model"], r["trainer"]): r for r in rows if "error" not in r}
    print(f"\ngpu_compute: micro-batch {MICRO} x {SEQ} random tokens, bf16, AdamW on the device, stage 0, "
          f"median step; {m['gpu']}, {m['cores']} cores, commit {m['commit']}, {m['date']}", file=out)
    print(f"{'model':<14} {'trainer':<18} {'params':>8} {'step s':>8} {'tokens/s':>10} {'TFLOPS':>7} "
          f"{'% 989':>6} {'zinf/torch':>10} {'GPU GiB':>8} {'update wait s':>13}", file=out)
    for r in rows:
        label = MODELS[r["model"]].label
        if "error" in r:
            print(f"{label:<14} {r['trainer']:<18} cannot run: {r['error']}", file=out)
            continue
        t = ok.get((r["model"], "torch"))
        ratio = f"{r['tokens_per_s'] / t['tokens_per_s']:10.2f}" if t and r["trainer"] != "torch" else f"{'':10}"
        gib = f"{r['gpu_peak_gib']:8.1f}" if r.get("gpu_peak_gib") is not None else f"{'':8}"
        # zinf's: the median step's idle time on the compute stream waiting for the update
        # under the forward, what of the update the card did not hide.
        wait = f"{r['wait_optim_s']:13.4f}" if "wait_optim_s" in r else ""
        print(f"{label:<14} {r['trainer']:<18} {r['params'] / 1e6:7.0f}M {r['step_s']:8.3f} {r['tokens_per_s']:10.0f} "
              f"{r['tflops']:7.1f} {100 * r['tflops'] / H100_BF16_TFLOPS:5.1f}% {ratio} {gib} {wait}", file=out)

    def goal(text, value, fmt, target, met):
        if value is None:
            print(f"{text}: not measured", file=out)
        else:
            print(f"{text}: {fmt.format(value)} (goal {target}: {'met' if met else 'not met'})", file=out)
    def best(name):  # zinf's faster attention on this model, as device.attention "auto" would pick
        runs = [ok[(name, z)] for z in ZINF_ATTENTION if (name, z) in ok]
        return max(runs, key=lambda r: r["tokens_per_s"]) if runs else None
    z = best("gpt2")
    v = z["tokens_per_s"] / 1e3 if z else None
    goal("GPT-2 124M, zinf tokens/s (its faster attention)", v, "{:.0f} K", ">= 350 K", v is not None and v >= 350)
    for name in models:
        z, t = best(name), ok.get((name, "torch"))
        v = z["tflops"] / H100_BF16_TFLOPS if z else None
        goal(f"{MODELS[name].label}, zinf model TFLOPS / the H100's dense bf16 peak ({H100_BF16_TFLOPS:.0f})", v,
             "{:.1%}", ">= 35%", v is not None and v >= 0.35)
        v = z["tokens_per_s"] / t["tokens_per_s"] if z and t else None
        goal(f"{MODELS[name].label}, zinf tokens/s / PyTorch's", v, "{:.2f}x", ">= 1.1x", v is not None and v >= 1.1)


def main():
    root = pathlib.Path(__file__).resolve().parents[2]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma list of {', '.join(MODELS)} (default all)")
    ap.add_argument("--trainers", default=",".join(TRAINERS),
                    help=f"comma list of {', '.join(TRAINERS)} (default all)")
    ap.add_argument("--zinf", default=os.environ.get("ZINF_BUILD", str(root / "build")),
                    help="build directory holding the zinf CLI (default $ZINF_BUILD or build)")
    ap.add_argument("--steps", type=int, default=10, help="timed steps per run, of which the median (default 10)")
    ap.add_argument("--warmup", type=int, default=3,
                    help="untimed steps before them, for each trainer (default 3: PyTorch compiles in its first, "
                    "zinf allocates in its first)")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds a run may take in all (default 1800)")
    ap.add_argument("--out", help="also write the JSON lines to this file")
    ap.add_argument("--variants", metavar="DIR",
                    help="after each model's trainers, train it with cuDNN's attention under each CLI DIR/zinf-NAME "
                    "too (tests/bench/gpu_variants.sh builds them at other commits): a row zinf-cudnn@NAME each, "
                    "on the same card in the same run")
    ap.add_argument("--write-configs", metavar="DIR",
                    help="write zinf's config for each model (and its token file) to DIR and exit: "
                    "for zinf estimate --config or zinf check on a machine with no GPU")
    ap.add_argument("--worker", choices=tuple(MODELS), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.steps < 1 or args.warmup < 0:
        ap.error("--steps must be at least 1 and --warmup at least 0")

    if args.worker:
        # Inductor's and Triton's messages may go to stdout: the result keeps the real stdout,
        # everything else goes to stderr.
        out = os.fdopen(os.dup(1), "w")
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        rec = worker(args.worker, args)
        print(json.dumps(rec), file=out, flush=True)
        os._exit(0)  # past compile workers' atexit hooks, which may hang

    models = [s.strip() for s in args.models.split(",") if s.strip()]
    trainers = [s.strip() for s in args.trainers.split(",") if s.strip()]
    bad = [s for s in models if s not in MODELS] + [s for s in trainers if s not in TRAINERS]
    if bad:
        ap.error(f"unknown model(s) or trainer(s) {', '.join(bad)}: models {', '.join(MODELS)}; "
                 f"trainers {', '.join(TRAINERS)}")
    if args.write_configs:
        os.makedirs(args.write_configs, exist_ok=True)
        for name in models:
            print(write_zinf_config(name, args, args.write_configs)[0])
        return

    outf = open(args.out, "w") if args.out else None
    tmp = tempfile.mkdtemp(prefix="zinf-gpu-compute-", dir=os.environ.get("ZINF_BENCH_DIR", "/var/tmp"))
    rows = []
    # Each variant's row: its trainer name, the CLI.
    variants = {f"zinf-cudnn@{p.name[5:]}": str(p)
                for p in sorted(pathlib.Path(args.variants).glob("zinf-*"))} if args.variants else {}
    if args.variants and not variants:
        ap.error(f"--variants {args.variants}: no zinf-NAME CLI there (tests/bench/gpu_variants.sh builds them)")
    try:
        for name in models:
            for trainer in trainers + list(variants):
                if trainer in variants:
                    rec = run_zinf(name, trainer, args, tmp, variants[trainer], "cudnn")
                elif trainer in ZINF_ATTENTION:
                    rec = run_zinf(name, trainer, args, tmp)
                else:
                    rec = run_worker(name, args)
                rows.append(rec)
                for f in (sys.stdout, outf):
                    if f:
                        print(json.dumps(rec), file=f, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if outf:
            outf.close()
    table(rows, models, gpu_bench_runs.machine(root), sys.stdout)
    sys.exit(1 if any("error" in r for r in rows if r["trainer"] == "zinf") else 0)  # cuDNN may be absent


if __name__ == "__main__":
    main()
