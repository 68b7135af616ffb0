#!/usr/bin/env python3
"""Reference optimizer steps from PyTorch for zinf's cpu_adam tests.

Writes OUT (default build/ref/optim.bin): for each case the hyperparameters, the
initial weights and states, and for each of STEPS steps the gradient given and
PyTorch's weights, states and 16-bit copies (bf16, fp16) after the step.

Adam, AdamW and Adagrad are torch.optim's own (single-tensor path). Two variants
torch.optim does not have are written with torch tensor ops: Adam/AdamW without bias
correction (DeepSpeed's bias_correction=false: step size lr, denominator sqrt(v) + eps)
and Lion (Chen et al. 2023, as the lion-pytorch package implements it).

Format, little-endian: "ZINFOPT1", u32 version 1, u32 cases; per case: name (48 bytes,
NUL-padded), u32 kind (0 Adam, 1 AdamW, 2 Adagrad, 3 Lion), u32 bias_correction,
u32 n, u32 steps, u32 bf16_grads (gradients are exact in bf16), f64 lr, beta1, beta2,
eps, weight_decay, lr_decay, f32 grad_scale; f32 param[n], exp_avg[n], exp_avg_sq[n];
then per step f32 grad[n], f32 param[n], exp_avg[n], exp_avg_sq[n], u16 bf16[n],
u16 fp16[n].
"""
import io
import struct
import sys

import torch
from reflib import f32, write_atomic

N, STEPS = 3001, 10
ADAM, ADAMW, ADAGRAD, LION = range(4)

CASES = [
    # name, kind, bias_correction, lr, beta1, beta2, eps, weight_decay, lr_decay, grad_scale, grads
    ("adamw-defaults", ADAMW, 1, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0.0, 1.0, "normal"),
    ("adamw-gpt", ADAMW, 1, 3e-4, 0.8, 0.95, 1e-6, 0.1, 0.0, 1.0, "normal"),
    ("adam-l2", ADAM, 1, 1e-3, 0.9, 0.999, 1e-8, 0.05, 0.0, 1.0, "normal"),
    ("adam-plain", ADAM, 1, 1e-2, 0.9, 0.99, 1e-8, 0.0, 0.0, 1.0, "normal"),
    ("adamw-no-bias-correction", ADAMW, 0, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0.0, 1.0, "normal"),
    ("adam-no-bias-correction", ADAM, 0, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0.0, 1.0, "normal"),
    ("adamw-unscale-clip", ADAMW, 1, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0.0, 0.37 / 1024, "scaled"),
    ("adamw-tiny-grads", ADAMW, 1, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0.0, 1.0, "tiny"),
    ("adamw-huge-grads", ADAMW, 1, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0.0, 1.0, "huge"),
    ("adamw-bf16-grads", ADAMW, 1, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0.0, 1.0, "bf16"),
    ("adagrad", ADAGRAD, 1, 1e-2, 0.0, 0.0, 1e-10, 0.01, 0.01, 1.0, "normal"),
    ("adagrad-plain", ADAGRAD, 1, 1e-1, 0.0, 0.0, 1e-10, 0.0, 0.0, 1.0, "normal"),
    ("lion", LION, 1, 1e-4, 0.9, 0.99, 0.0, 0.1, 0.0, 1.0, "normal"),
    ("lion-no-decay", LION, 1, 3e-4, 0.95, 0.98, 0.0, 0.0, 0.0, 1.0, "normal"),
]


def grads(kind, gen):
    g = torch.randn(N, generator=gen)
    if kind == "scaled":
        return g * 1024 * 3  # as a loss-scaled fp16 run would give them
    if kind == "tiny":
        return g * 1e-20
    if kind == "huge":
        return g * 1e15
    if kind == "bf16":
        return g.to(torch.bfloat16).to(torch.float32)
    return g


def u16(t):
    return t.detach().contiguous().view(torch.int16).numpy().tobytes()


def run_case(out, case, seed):
    name, kind, bc, lr, b1, b2, eps, wd, lr_decay, scale, gkind = case
    gen = torch.Generator().manual_seed(seed)
    p = torch.nn.Parameter(torch.randn(N, generator=gen))
    m = torch.zeros(N)
    v = torch.zeros(N)
    out.write(struct.pack("<48s5I6df", name.encode(), kind, bc, N, STEPS, gkind == "bf16",
                          lr, b1, b2, eps, wd, lr_decay, scale))
    out.write(f32(p) + f32(m) + f32(v))
    builtin = bc and kind in (ADAM, ADAMW, ADAGRAD)
    if builtin:
        if kind == ADAGRAD:
            opt = torch.optim.Adagrad([p], lr=lr, lr_decay=lr_decay, weight_decay=wd, eps=eps, foreach=False)
        else:
            cls = torch.optim.AdamW if kind == ADAMW else torch.optim.Adam
            opt = cls([p], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, foreach=False)
    for _ in range(STEPS):
        g = grads(gkind, gen)
        with torch.no_grad():
            gs = g * scale if scale != 1.0 else g.clone()
            if builtin:
                p.grad = gs
                opt.step()
                st = opt.state[p]
                if kind == ADAGRAD:
                    v = st["sum"]
                else:
                    m, v = st["exp_avg"], st["exp_avg_sq"]
            elif kind == LION:
                p.mul_(1 - lr * wd)
                update = m.clone().mul_(b1).add(gs, alpha=1 - b1).sign_()
                p.add_(update, alpha=-lr)
                m.mul_(b2).add_(gs, alpha=1 - b2)
            else:  # Adam/AdamW without bias correction, as DeepSpeed's cpu_adam runs it
                if kind == ADAMW:
                    p.mul_(1 - lr * wd)
                elif wd:
                    gs = gs.add(p, alpha=wd)
                m.lerp_(gs, 1 - b1)
                v.mul_(b2).addcmul_(gs, gs, value=1 - b2)
                p.addcdiv_(m, v.sqrt().add_(eps), value=-lr)
        out.write(f32(g) + f32(p) + f32(m) + f32(v))
        out.write(u16(p.to(torch.bfloat16)) + u16(p.to(torch.float16)))


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "build/ref/optim.bin"
    torch.set_num_threads(1)
    out = io.BytesIO()
    out.write(b"ZINFOPT1" + struct.pack("<II", 1, len(CASES)))
    for i, case in enumerate(CASES):
        run_case(out, case, 1234 + i)
    write_atomic(path, out.getvalue())
    print(f"optim_ref: {len(CASES)} cases, torch {torch.__version__}, wrote {path}")


if __name__ == "__main__":
    main()
