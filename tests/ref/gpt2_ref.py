#!/usr/bin/env python3
"""Reference GPT-2 forward/backward from Hugging Face transformers, for zinf's model tests.

The model is transformers' GPT2LMHeadModel, which fixes the parameter names and layouts
zinf must read: n_layer 2, n_head 4, n_embd 64, vocab_size 101, n_positions (block_size)
32, activation "gelu_new" (the tanh approximation), layer_norm_epsilon 1e-5, all dropout
0, tie_word_embeddings (lm_head.weight is transformer.wte.weight), attn_implementation
"eager" (softmax(q k^T / sqrt(head_dim) + causal mask) v, no scaling by layer index, no
reordered upcast), model in eval mode. Weights are HF's random init (seed SEED), then
every parameter gets += 0.02 * randn, so no parameter (layernorm weights and biases
included) is a constant and every parameter's gradient is nonzero (all but the rows
T..block_size-1 of transformer.wpe.weight's, which are exactly 0: T < block_size on
purpose). A Conv1D computes x @ weight + bias with weight stored (in, out). The run is
on the CPU, one thread, torch.use_deterministic_algorithms(True).

Writes, next to OUT (default build/ref/gpt2.bin) and with its stem (here "gpt2"):
  gpt2.safetensors           the weights as save_pretrained(safe_serialization=True)
                             writes them: names "transformer.*", F32, lm_head.weight
                             (tied) not stored.
  gpt2-noprefix.safetensors  the same weights under the names without "transformer."
                             (as OpenAI's GPT-2 files on the hub have them), written by
                             safetensors.torch.save_file, plus for each block a buffer
                             h.{i}.attn.bias, F32 (1, 1, block_size, block_size), ones on
                             and below the diagonal, zeros above: old files carry it and
                             a reader must ignore it.
  gpt2.tokens                a token file for `zinf eval`: N_EVAL = 1 + 5*T + 7
                             little-endian u16 token ids, uniform in [0, vocab_size); no
                             header.
and OUT, the fixture. Two runs on the same tokens, targets and weights:
  fp32  logits = model(tokens).logits (B, T, V); loss = mean cross_entropy(logits,
        targets) over the B*T positions; loss.backward().
  bf16  a copy of the same fp32 weights converted with .to(torch.bfloat16); loss from the
        bf16 logits upcast with .float(); logits and grads stored converted to f32.
The gradient of transformer.wte.weight includes the tied head's contribution (it is
the .grad of the one shared tensor). eval: the fp32 model over gpt2.tokens read as
non-overlapping windows of T+1 tokens at offsets 0, T, 2T, ... (inputs tok[o:o+T],
targets tok[o+1:o+T+1]; only complete windows, so the trailing 8 tokens are dropped):
eval_loss = sum of the per-token fp32 losses, summed in f64, / eval_tokens, with
eval_tokens = 5*T.

Format of OUT, little-endian:
  "ZINFGPT1" (8 bytes), u32 version 1, u32 n_layer, n_head, n_embd, vocab_size,
  block_size, B, T;
  i32 tokens[B*T], i32 targets[B*T] (row-major (B, T));
  u32 nparams; nparams times: name (64 bytes, NUL-padded, at least one NUL), u32 ndim,
  u32 shape[ndim]. The names are those of gpt2.safetensors ("transformer." prefix),
  sorted by byte value (the order safe_open(...).keys() gives them); shapes as stored,
  i.e. Conv1D weights (in, out);
  then for each run, fp32 then bf16: f32 loss, f32 logits[B*T*V] (row-major (B, T, V)),
  and for each parameter in the name order f32 grad[numel] (row-major, stored shape);
  then f64 eval_loss, u64 eval_tokens.
"""
import copy
import os
import struct
import tempfile

import reflib  # before transformers: it sets the Hugging Face environment
import torch
import torch.nn.functional as F
from reflib import f32, publish, write_atomic
from safetensors import safe_open
from safetensors.torch import load_file
from transformers import GPT2Config, GPT2LMHeadModel

SEED = 20240601
N_LAYER, N_HEAD, N_EMBD, VOCAB, BLOCK = 2, 4, 64, 101, 32
B, T = 3, 16  # T < BLOCK on purpose
N_EVAL = 1 + 5 * T + 7  # the last window is incomplete
NAME_LEN = 64
PREFIX = "transformer."


def make_model():
    config = GPT2Config(
        n_layer=N_LAYER, n_head=N_HEAD, n_embd=N_EMBD, vocab_size=VOCAB, n_positions=BLOCK,
        activation_function="gelu_new", layer_norm_epsilon=1e-5,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        scale_attn_weights=True, scale_attn_by_inverse_layer_idx=False,
        reorder_and_upcast_attn=False, tie_word_embeddings=True,
        bos_token_id=None, eos_token_id=None, attn_implementation="eager")
    torch.manual_seed(SEED)
    model = GPT2LMHeadModel(config)
    reflib.perturb(model, SEED + 1)  # the tied wte/lm_head once
    model.eval()
    assert model.config._attn_implementation == "eager"
    assert model.lm_head.weight is model.transformer.wte.weight
    return model


def eval_loss(model, toks):
    nwin = (len(toks) - 1) // T
    x = torch.stack([toks[o:o + T] for o in range(0, nwin * T, T)]).long()
    y = torch.stack([toks[o + 1:o + T + 1] for o in range(0, nwin * T, T)]).long()
    with torch.no_grad():
        logits = model(x).logits
        per_tok = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1), reduction="none")
    return float(per_tok.double().sum()) / per_tok.numel(), per_tok.numel()


def main():
    path, outdir = reflib.out_path("build/ref/gpt2.bin")
    stem = os.path.splitext(path)[0]
    reflib.deterministic()

    model = make_model()

    # 1. gpt2.safetensors, as save_pretrained writes it
    st_path = stem + ".safetensors"
    with tempfile.TemporaryDirectory(dir=outdir) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        publish(os.path.join(tmp, "model.safetensors"), st_path)
    with safe_open(st_path, "pt") as f:
        names = sorted(f.keys())
        shapes = {n: tuple(f.get_slice(n).get_shape()) for n in names}
        assert all(f.get_slice(n).get_dtype() == "F32" for n in names)
    params = dict(model.named_parameters())
    assert "lm_head.weight" not in names and set(names) == set(params), names
    assert all(len(n.encode()) < NAME_LEN and n.startswith(PREFIX) for n in names)
    assert all(tuple(params[n].shape) == shapes[n] for n in names)

    # 2. gpt2-noprefix.safetensors, the old OpenAI naming plus the attn.bias buffers
    weights = load_file(st_path)
    noprefix = {n[len(PREFIX):]: t for n, t in weights.items()}
    mask = torch.tril(torch.ones(BLOCK, BLOCK, dtype=torch.float32)).view(1, 1, BLOCK, BLOCK)
    for i in range(N_LAYER):
        noprefix[f"h.{i}.attn.bias"] = mask.clone()
    reflib.save_weights(noprefix, stem + "-noprefix.safetensors")

    # 3. gpt2.tokens
    gen = torch.Generator().manual_seed(SEED + 2)
    eval_toks = torch.randint(0, VOCAB, (N_EVAL,), generator=gen)
    write_atomic(stem + ".tokens", eval_toks.numpy().astype("<u2").tobytes())

    tokens = torch.randint(0, VOCAB, (B, T), generator=gen, dtype=torch.int32)
    targets = torch.randint(0, VOCAB, (B, T), generator=gen, dtype=torch.int32)

    model_bf16 = copy.deepcopy(model).to(torch.bfloat16)  # before any grad exists
    assert model_bf16.lm_head.weight is model_bf16.transformer.wte.weight
    runs = [reflib.forward_backward(model, tokens, targets),
            reflib.forward_backward(model_bf16, tokens, targets)]
    ev_loss, ev_tokens = eval_loss(model, eval_toks)
    assert ev_tokens == 5 * T

    out = [b"ZINFGPT1", struct.pack("<8I", 1, N_LAYER, N_HEAD, N_EMBD, VOCAB, BLOCK, B, T)]
    out.append(tokens.numpy().astype("<i4").tobytes() + targets.numpy().astype("<i4").tobytes())
    out.append(struct.pack("<I", len(names)))
    for n in names:
        out.append(struct.pack(f"<{NAME_LEN}sI{len(shapes[n])}I", n.encode(), len(shapes[n]), *shapes[n]))
    for loss, logits, grads in runs:
        out.append(f32(loss.reshape(1)) + f32(logits))
        for n in names:
            assert tuple(grads[n].shape) == shapes[n] and float(grads[n].abs().max()) > 0, n
            out.append(f32(grads[n]))
    out.append(struct.pack("<dQ", ev_loss, ev_tokens))
    write_atomic(path, b"".join(out))

    (l32, lg32, g32), (l16, lg16, g16) = runs
    rel = reflib.rel_diff
    worst = max((rel(g16[n], g32[n]), n) for n in names)
    print(f"gpt2_ref: transformers GPT2LMHeadModel, {len(names)} params, loss fp32 {float(l32):.6f}"
          f" bf16 {float(l16):.6f}, bf16/fp32 max rel diff logits {rel(lg16, lg32):.3g} grads"
          f" {worst[0]:.3g} ({worst[1]}), eval {ev_loss:.6f} over {ev_tokens} tokens,"
          f" torch {torch.__version__}, wrote {path}")


if __name__ == "__main__":
    main()
