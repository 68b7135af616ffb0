#!/usr/bin/env python3
"""Reference 10-step fp32 training run of a tiny Llama from PyTorch + transformers, for zinf.

Model: transformers' LlamaForCausalLM from AutoModelForCausalLM.from_config(LlamaConfig(
vocab_size 256, hidden_size 64, num_hidden_layers 2, num_attention_heads 4,
num_key_value_heads 2, head_dim 16, intermediate_size 96, max_position_embeddings 32,
rms_norm_eps 1e-5, rope_theta 1e4 default rope, hidden_act "silu", attention_bias and
mlp_bias false (no biases at all), attention_dropout 0, tie_word_embeddings (lm_head.
weight is model.embed_tokens.weight), bos/eos/pad_token_id None (no padding_idx)),
attn_implementation "eager"), fp32 on the CPU: HF's default random init after
torch.manual_seed(1234), then every parameter gets += 0.02 * randn from a generator
seeded 1234 + 100, in sorted(named_parameters()) order (the tied embedding once), so the
RMSNorm weights are not all ones; model.train() (nothing in it behaves differently in
train mode). Forward semantics: transformers' modeling_llama.py. One
thread, torch.use_deterministic_algorithms(True), float32 matmul precision "highest".

Data (as train_ref.py): N_TOK = 48*T + 1 tokens (T = 32), a period-23 pattern from
numpy default_rng(7) with 10% of the positions replaced by uniform noise, all < 256.
Window w is tok[w*T : w*T+T+1]: inputs tok[w*T : w*T+T], targets tok[w*T+1 : w*T+T+1].
Step i (0-based) takes windows i*B .. i*B+B-1 (B = 4) as its global batch, in order
(row b of the batch is window i*B+b); the 10 steps use windows 0..39, 40..47 unused.

Step: logits = model(inputs).logits (B, T, V); loss = F.cross_entropy over the B*T
flattened positions (mean); loss.backward(); total_norm =
clip_grad_norm_(params, max_norm=1.0), i.e. the global L2 norm of all gradients
before clipping (torch computes it in fp32: the norm of the per-tensor norms), after
which every gradient is multiplied by min(1, 1.0 / (total_norm + 1e-6));
then torch.optim.AdamW(lr 1e-3, betas (0.9, 0.95), eps 1e-8, weight_decay 0.1,
single-tensor path), one group, every parameter decays (RMSNorm weights and the tied
embedding/lm_head too), each parameter once. AdamW per parameter, step t from 1:
  p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g;
  p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
No LR schedule, no warmup. The gradient of model.embed_tokens.weight includes the tied
head's contribution.

Writes, in OUT's directory (default build/ref/):
  llama_train_init/              the weights before step 0 as model.save_pretrained(dir,
                                 max_shard_size="100KB") writes them (built in a
                                 temporary directory and renamed into place, an old one
                                 replaced): config.json (rope in "rope_parameters"),
                                 generation_config.json, model.safetensors.index.json and
                                 >= 2 shards model-0000i-of-0000N.safetensors; F32, the
                                 names of named_parameters() ("model.embed_tokens.weight",
                                 "model.layers.0.self_attn.q_proj.weight", ...), no
                                 lm_head.weight (tied). from_pretrained(dir,
                                 dtype=torch.float32, attn_implementation="eager") gives
                                 the model's logits bit for bit (asserted).
  llama_train_final.safetensors  the weights after the 10th step, same names and shapes,
                                 F32, written by safetensors' save_file with metadata
                                 {"format": "pt"}.
  llama_train.tokens             the N_TOK tokens, little-endian u16, no header.
and OUT (default build/ref/llama_train.bin), little-endian:
  "ZINFLTR1" (8 bytes), u32 version 1, u32 steps, u32 B, u32 T;
  f64 loss[steps]  (the batch loss of the forward before step i's update; fp32 value
                    widened to f64);
  f64 norm[steps]  (clip_grad_norm_'s return value at step i, fp32 widened to f64).
The losses are also printed to stderr.
"""
import json
import os
import struct
import sys
import tempfile

import numpy as np
import reflib  # before transformers: it sets the Hugging Face environment
import torch
from reflib import publish_dir, save_weights, write_atomic
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, LlamaConfig

SEED, DATA_SEED = 1234, 7
VOCAB, HIDDEN, N_LAYER, N_HEAD, N_KV, HEAD_DIM, INTER, BLOCK = 256, 64, 2, 4, 2, 16, 96, 32
B, T, STEPS, N_WIN = 4, 32, 10, 48
N_TOK = N_WIN * T + 1
PERIOD, NOISE = 23, 0.1
ADAMW = dict(lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
MAX_NORM = 1.0
MAX_SHARD = "100KB"
INDEX = "model.safetensors.index.json"


def make_model():
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=N_LAYER,
        num_attention_heads=N_HEAD, num_key_value_heads=N_KV, head_dim=HEAD_DIM,
        intermediate_size=INTER, max_position_embeddings=BLOCK, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, hidden_act="silu",
        attention_bias=False, mlp_bias=False, attention_dropout=0.0,
        tie_word_embeddings=True, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").float()
    reflib.perturb(model, SEED + 100)  # the tied embedding once
    model.train()
    assert model.config._attn_implementation == "eager"
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert model.model.embed_tokens.padding_idx is None
    assert all(not n.endswith(".bias") for n, _ in model.named_parameters())
    return model


def weights(model):
    """{name: contiguous f32 tensor} of the state_dict, minus the tied head."""
    out = {}
    for n, t in model.state_dict().items():
        if n == "lm_head.weight":
            continue
        assert t.dtype == torch.float32, n
        out[n] = t.detach().clone().contiguous()
    return out


def save_init(model, outdir, init):
    """llama_train_init/ by save_pretrained, checked against init; returns the shard count."""
    path = os.path.join(outdir, "llama_train_init")
    tmp = tempfile.mkdtemp(dir=outdir)
    model.save_pretrained(tmp, max_shard_size=MAX_SHARD)
    publish_dir(tmp, path)
    with open(os.path.join(path, INDEX)) as f:
        wmap = json.load(f)["weight_map"]
    files = sorted(set(wmap.values()))
    n = len(files)
    assert n >= 2 and not os.path.exists(os.path.join(path, "model.safetensors")), files
    assert files == [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)], files
    stored = {}
    for fn in files:
        stored.update(load_file(os.path.join(path, fn)))
    assert set(stored) == set(wmap) == set(init), sorted(set(stored) ^ set(init))
    assert all(stored[k].dtype == torch.float32 and torch.equal(stored[k], init[k]) for k in init)
    return path, n


def main():
    path, outdir = reflib.out_path("build/ref/llama_train.bin")
    reflib.deterministic()

    model = make_model()
    names = {n for n, _ in model.named_parameters()}
    init = weights(model)
    assert set(init) == names, sorted(set(init) ^ names)
    init_dir, nshards = save_init(model, outdir, init)

    tok = reflib.make_tokens(N_TOK, VOCAB, PERIOD, NOISE, DATA_SEED)
    write_atomic(os.path.join(outdir, "llama_train.tokens"), tok.tobytes())
    tok_t = torch.from_numpy(tok.astype(np.int64))

    # the saved directory reproduces the model
    re = AutoModelForCausalLM.from_pretrained(init_dir, dtype=torch.float32,
                                              attn_implementation="eager").train()
    x0 = torch.stack([tok_t[w * T: w * T + T] for w in range(B)])
    with torch.no_grad():
        assert torch.equal(re(x0).logits, model(x0).logits)
    del re

    losses, norms = reflib.train(model, tok_t, B, T, STEPS, ADAMW, MAX_NORM, "llama_train_ref")

    final = weights(model)
    assert set(final) == set(init)
    assert all(final[n].shape == init[n].shape for n in init)
    save_weights(final, os.path.join(outdir, "llama_train_final.safetensors"))

    out = [b"ZINFLTR1", struct.pack("<4I", 1, STEPS, B, T),
           struct.pack(f"<{STEPS}d", *losses), struct.pack(f"<{STEPS}d", *norms)]
    write_atomic(path, b"".join(out))
    print(f"llama_train_ref: {len(init)} params, {sum(t.numel() for t in init.values())} weights"
          f" ({nshards} init shards), loss {losses[0]:.6f} -> {losses[-1]:.6f},"
          f" torch {torch.__version__}, wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
