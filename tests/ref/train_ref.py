#!/usr/bin/env python3
"""Reference 10-step fp32 training run from PyTorch + transformers, for zinf's engine tests.

Model: transformers' GPT2LMHeadModel(GPT2Config(n_layer 2, n_head 2, n_embd 64,
vocab_size 256, n_positions 32, activation "gelu_new", all dropout 0, layer_norm_epsilon
1e-5, tie_word_embeddings)), attn_implementation "eager", fp32 on the CPU, HF's default
random init after torch.manual_seed(1234), model.train(). One thread,
torch.use_deterministic_algorithms(True), float32 matmul precision "highest".

Data: N_TOK = 48*T + 1 tokens (T = 32), a period-23 pattern from numpy
default_rng(7) with 10% of the positions replaced by uniform noise, all < 256.
Window w is tok[w*T : w*T+T+1]: inputs tok[w*T : w*T+T], targets tok[w*T+1 : w*T+T+1].
Step i (0-based) takes windows i*B .. i*B+B-1 (B = 4) as its global batch, in order
(row b of the batch is window i*B+b); the 10 steps use windows 0..39, 40..47 unused.

Step: logits = model(inputs).logits (B, T, V); loss = F.cross_entropy over the B*T
flattened positions (mean); loss.backward(); total_norm =
clip_grad_norm_(params, max_norm=1.0), i.e. the global L2 norm of all gradients
before clipping (torch computes it in fp32: the norm of the per-tensor norms), after
which every gradient is multiplied by min(1, 1.0 / (total_norm + 1e-6));
then torch.optim.AdamW(lr 1e-3, betas (0.9, 0.95), eps 1e-8, weight_decay 0.1,
single-tensor path), one group, every parameter decays (biases, layernorms, wpe,
the tied wte/lm_head too), each parameter once. AdamW per parameter, step t from 1:
  p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g;
  p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
No LR schedule, no warmup. The gradient of transformer.wte.weight includes the tied
head's contribution.

Writes, in OUT's directory (default build/ref/):
  train_init.safetensors   the weights before step 0, F32, the names of the model's
                           state_dict ("transformer.wte.weight", "transformer.h.0.
                           attn.c_attn.weight", ...; Conv1D weights stored (in, out)),
                           without lm_head.weight (tied) and the attn bias buffers.
  train_final.safetensors  the weights after the 10th step, same names and shapes.
  train.tokens             the N_TOK tokens, little-endian u16, no header.
and OUT, little-endian:
  "ZINFTRN1" (8 bytes), u32 version 1, u32 steps, u32 B, u32 T;
  f64 loss[steps]  (the batch loss of the forward before step i's update; fp32 value
                    widened to f64);
  f64 norm[steps]  (clip_grad_norm_'s return value at step i, fp32 widened to f64).
The losses are also printed to stderr.
"""
import os
import struct
import sys

import numpy as np
import reflib  # before transformers: it sets the Hugging Face environment
import torch
from reflib import save_weights, write_atomic
from transformers import GPT2Config, GPT2LMHeadModel

SEED, DATA_SEED = 1234, 7
N_LAYER, N_HEAD, N_EMBD, VOCAB, BLOCK = 2, 2, 64, 256, 32
B, T, STEPS, N_WIN = 4, 32, 10, 48
N_TOK = N_WIN * T + 1
PERIOD, NOISE = 23, 0.1
ADAMW = dict(lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
MAX_NORM = 1.0


def make_model():
    config = GPT2Config(
        n_layer=N_LAYER, n_head=N_HEAD, n_embd=N_EMBD, vocab_size=VOCAB, n_positions=BLOCK,
        activation_function="gelu_new", layer_norm_epsilon=1e-5,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        scale_attn_weights=True, scale_attn_by_inverse_layer_idx=False,
        reorder_and_upcast_attn=False, tie_word_embeddings=True,
        bos_token_id=None, eos_token_id=None, attn_implementation="eager")
    torch.manual_seed(SEED)
    model = GPT2LMHeadModel(config).float()
    model.train()
    assert model.config._attn_implementation == "eager"
    assert model.lm_head.weight is model.transformer.wte.weight
    return model


def weights(model):
    """{name: contiguous f32 tensor} of the state_dict, minus the tied head and buffers."""
    out = {}
    for n, t in model.state_dict().items():
        if n == "lm_head.weight" or n.endswith(".attn.bias") or n.endswith(".attn.masked_bias"):
            continue
        assert t.dtype == torch.float32, n
        out[n] = t.detach().clone().contiguous()
    return out


def main():
    path, outdir = reflib.out_path("build/ref/train.bin")
    reflib.deterministic()

    model = make_model()
    names = {n for n, _ in model.named_parameters()}
    init = weights(model)
    assert set(init) == names, sorted(set(init) ^ names)
    save_weights(init, os.path.join(outdir, "train_init.safetensors"))

    tok = reflib.make_tokens(N_TOK, VOCAB, PERIOD, NOISE, DATA_SEED)
    write_atomic(os.path.join(outdir, "train.tokens"), tok.tobytes())
    tok_t = torch.from_numpy(tok.astype(np.int64))

    losses, norms = reflib.train(model, tok_t, B, T, STEPS, ADAMW, MAX_NORM, "train_ref")

    final = weights(model)
    assert set(final) == set(init)
    assert all(final[n].shape == init[n].shape for n in init)
    save_weights(final, os.path.join(outdir, "train_final.safetensors"))

    out = [b"ZINFTRN1", struct.pack("<4I", 1, STEPS, B, T),
           struct.pack(f"<{STEPS}d", *losses), struct.pack(f"<{STEPS}d", *norms)]
    write_atomic(path, b"".join(out))
    print(f"train_ref: {len(init)} params, {sum(t.numel() for t in init.values())} weights,"
          f" loss {losses[0]:.6f} -> {losses[-1]:.6f}, torch {torch.__version__}, wrote {path}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
