#!/usr/bin/env python3
"""Reference Llama-family forward/backward from Hugging Face transformers, for zinf's model tests.

Four tiny models ("cases"), each transformers' *ForCausalLM built offline with
AutoModelForCausalLM.from_config(config, attn_implementation="eager") in fp32 after
torch.manual_seed(SEED + case index), hidden_act "silu", bos/eos/pad_token_id None (so
no padding_idx), attention_dropout 0:
  0 "llama"    LlamaConfig: vocab_size 97, hidden_size 48, num_hidden_layers 2,
               num_attention_heads 4, num_key_value_heads 2, head_dim 16 (not 48/4),
               intermediate_size 72, max_position_embeddings 64, rms_norm_eps 1e-5,
               rope_theta 1e4, rope "llama3" {factor 4, low_freq_factor 1,
               high_freq_factor 4, original_max_position_embeddings 32},
               attention_bias (biases on q, k, v AND o_proj), mlp_bias (biases on gate,
               up and down), untied (lm_head.weight stored). With head_dim 16 the 8
               wavelengths 2*pi*1e4^(i/8) hit all three llama3 bands: i = 0 (6.3 < 32/4)
               kept, i = 1 (19.9) smoothed, i >= 2 (> 32/1) divided by 4 (asserted).
               Saved sharded: model.safetensors.index.json + >= 3 shards.
  1 "qwen2"    Qwen2Config: vocab_size 97, hidden_size 32, num_hidden_layers 2,
               num_attention_heads 4, num_key_value_heads 1 (head_dim 32/4 = 8),
               intermediate_size 48, max_position_embeddings 64, rms_norm_eps 1e-6,
               rope_theta 1e6, rope "linear" factor 2 (inv_freq / 2),
               use_sliding_window false (full causal attention in every layer), tied
               (lm_head.weight is model.embed_tokens.weight, not stored). Qwen2 always
               has q/k/v biases and never an o_proj or MLP bias. Saved as one
               model.safetensors.
  2 "mistral"  MistralConfig: vocab_size 97, hidden_size 32, num_hidden_layers 2,
               num_attention_heads 4, num_key_value_heads 2, head_dim 8,
               intermediate_size 48, max_position_embeddings 64, rms_norm_eps 1e-5,
               rope_theta 1e4 default rope, sliding_window 5 (query q sees keys k with
               q - 5 < k <= q, in every layer; asserted to matter since T > 5), untied,
               no biases. Saved sharded (index + >= 2 shards).
  3 "qwen2w"   Qwen2Config: vocab_size 97, hidden_size 32, num_hidden_layers 2,
               num_attention_heads 4, num_key_value_heads 2 (head_dim 8),
               intermediate_size 48, max_position_embeddings 64, rms_norm_eps 1e-6,
               rope "dynamic" factor 2 rope_theta 1e4 (below max_position_embeddings
               the default's inv_freq), use_sliding_window true, sliding_window 4,
               max_window_layers 1: layer 0 attends to every earlier key, layer 1
               through the window (its layer_types "full_attention",
               "sliding_attention"; asserted to matter since T > 4), untied. Saved as
               one model.safetensors.
In every case the model's rotary inv_freq equals, bit for bit, the documented rule
computed in fp32 (1 / theta^(arange(0, hd, 2) / hd), then linear: / factor, llama3: the
three bands, dynamic: unchanged) (asserted).
Weights: HF's random init, then every parameter gets += 0.02 * randn from a generator
seeded SEED + 100, in sorted(named_parameters()) order (the tied embedding once), so
no parameter is a constant (RMSNorm weights included). model.eval(). Forward semantics
(RMSNorm, rotate_half rope, GQA, eager softmax in fp32): transformers' modeling_llama.py.
The run is on the CPU, one thread, torch.use_deterministic_algorithms(True), float32
matmul precision "highest".

Writes, in OUT's directory (default build/ref/), each directory built in a temporary
directory there and renamed into place (an old one is replaced):
  llama-<case>/         model.save_pretrained(dir, max_shard_size=...) of each case:
                        config.json (in the form transformers 5.23 writes: rope in
                        "rope_parameters" {rope_type, rope_theta, ...}, "dtype"
                        "float32"), generation_config.json, and model.safetensors or
                        model.safetensors.index.json + model-0000i-of-0000N.safetensors.
                        from_pretrained(dir, dtype=torch.float32,
                        attn_implementation="eager") gives bit-identical fp32 logits
                        (asserted).
  llama-llama-oldcfg/   the "llama" case's files copied, with config.json rewritten in
                        the older (4.x) form: top-level "rope_theta" and "rope_scaling"
                        {"rope_type": "llama3", factor, low_freq_factor,
                        high_freq_factor, original_max_position_embeddings} instead of
                        "rope_parameters", and "torch_dtype" instead of "dtype".
                        transformers loads it into the same config rope and
                        bit-identical logits (asserted).
and OUT, the fixture. For each case B = 2, T = 12 (T > sliding window 5, T <
max_position_embeddings), tokens and targets uniform in [0, 97) from a generator seeded
SEED + 200 + case index (tokens drawn first). Two runs on the same tokens, targets
and weights:
  fp32  logits = model(tokens).logits (B, T, V); loss = mean F.cross_entropy(
        logits.float() over the B*T positions, targets) (no shift: targets are given
        per position); loss.backward().
  bf16  a deepcopy of the fp32 model converted with .to(torch.bfloat16) before any grad
        exists, after which the rotary inv_freq buffers are put back in fp32 (the .to()
        would round them to bf16; from_pretrained(dir, dtype=torch.bfloat16) keeps them
        fp32, and this run's logits equal that model's bit for bit, asserted): rope
        angles and cos/sin are computed in fp32 and cast to bf16. Loss from the bf16
        logits upcast with .float(); logits and grads stored converted to f32.
The tied case's model.embed_tokens.weight gradient includes the head's contribution
(it is the .grad of the one shared tensor). Every stored gradient is nonzero somewhere
(asserted); note that a k_proj.bias gets a gradient only through rope (softmax is
invariant to a per-query constant), so it is small.

Format of OUT, little-endian:
  "ZINFLLM1" (8 bytes), u32 version 1, u32 ncases;
  then per case:
    case name (16 bytes, NUL-padded, at least one NUL), u32 B, u32 T, u32 V;
    i32 tokens[B*T], i32 targets[B*T] (row-major (B, T));
    u32 nparams; nparams times: name (64 bytes, NUL-padded, at least one NUL), u32
    ndim, u32 shape[ndim]. The names are those of the saved files ("model.embed_tokens.
    weight", "model.layers.0.self_attn.q_proj.weight", ..., "lm_head.weight" only when
    untied), sorted by byte value; shapes as stored (Linear weights (out, in));
    then for each run, fp32 then bf16: f32 loss, f32 logits[B*T*V] (row-major
    (B, T, V)), and for each parameter in the name order f32 grad[numel] (row-major,
    stored shape).
"""
import copy
import json
import math
import os
import shutil
import struct
import tempfile

import reflib  # before transformers: it sets the Hugging Face environment
import torch
import transformers
from reflib import f32, publish_dir, write_atomic
from safetensors import safe_open
from transformers import AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config

SEED = 20240701
B, T, VOCAB = 2, 12, 97
NAME_LEN, CASE_LEN = 64, 16
INDEX = "model.safetensors.index.json"
LLAMA3 = {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 32}
NONE_IDS = dict(bos_token_id=None, eos_token_id=None, pad_token_id=None)


def configs():
    """[(case name, config, max_shard_size or None, minimum shard count)]."""
    return [
        ("llama", LlamaConfig(
            vocab_size=VOCAB, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, intermediate_size=72,
            max_position_embeddings=64, rms_norm_eps=1e-5,
            rope_parameters=dict(LLAMA3, rope_theta=10000.0), attention_bias=True,
            mlp_bias=True, tie_word_embeddings=False, hidden_act="silu", **NONE_IDS),
         "40KB", 3),
        ("qwen2", Qwen2Config(
            vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=1, intermediate_size=48, max_position_embeddings=64,
            rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6},
            tie_word_embeddings=True, use_sliding_window=False, hidden_act="silu",
            **NONE_IDS),
         None, 1),
        ("mistral", MistralConfig(
            vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, intermediate_size=48,
            max_position_embeddings=64, rms_norm_eps=1e-5,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            sliding_window=5, tie_word_embeddings=False, hidden_act="silu", **NONE_IDS),
         "30KB", 2),
        ("qwen2w", Qwen2Config(
            vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, intermediate_size=48, max_position_embeddings=64,
            rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0},
            use_sliding_window=True, sliding_window=4, max_window_layers=1,
            tie_word_embeddings=False, hidden_act="silu", **NONE_IDS),
         None, 1),
    ]


def expected_inv_freq(config):
    """inv_freq by transformers' rope rules (modeling_rope_utils.py), and the llama3 bands."""
    rp = config.rope_parameters
    hd = config.head_dim if getattr(config, "head_dim", None) else \
        config.hidden_size // config.num_attention_heads
    inv = 1.0 / (rp["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    bands = None
    if rp["rope_type"] == "linear":
        inv = inv / rp["factor"]
    elif rp["rope_type"] == "llama3":
        f, lo, hi = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"]
        l0 = rp["original_max_position_embeddings"]
        wl = 2 * math.pi / inv
        keep, div = wl < l0 / hi, wl > l0 / lo
        mid = ~keep & ~div
        s = (l0 / wl - lo) / (hi - lo)
        inv = torch.where(div, inv / f, torch.where(mid, (1 - s) * inv / f + s * inv, inv))
        bands = (int(keep.sum()), int(mid.sum()), int(div.sum()))
    else:  # dynamic scaling starts only past max_position_embeddings, which T never is
        assert rp["rope_type"] in ("default", "dynamic"), rp
    return inv, bands


def make_model(index, config):
    torch.manual_seed(SEED + index)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    assert model.dtype == torch.float32
    reflib.perturb(model, SEED + 100)  # the tied embedding once
    model.eval()
    assert model.config._attn_implementation == "eager"
    tied = model.lm_head.weight is model.model.embed_tokens.weight
    assert tied == config.tie_word_embeddings
    assert model.model.embed_tokens.padding_idx is None
    return model


def logits_of(model, tokens):
    with torch.no_grad():
        return model(tokens.long()).logits.detach().float()


def to_bf16(model):
    """A bf16 copy whose rotary buffers stay fp32, as from_pretrained(dtype=bf16) has them."""
    m16 = copy.deepcopy(model).to(torch.bfloat16)
    bufs = dict(model.named_buffers())
    for name, _ in list(m16.named_buffers()):
        assert name.endswith("inv_freq") and bufs[name].dtype == torch.float32, name
        mod, _, attr = name.rpartition(".")
        setattr(m16.get_submodule(mod), attr, bufs[name].clone())
    return m16


def saved_tensors(d):
    """{name: (shape, dtype)} of the weights in a save_pretrained directory, and the shard count."""
    if os.path.exists(os.path.join(d, INDEX)):
        assert not os.path.exists(os.path.join(d, "model.safetensors"))
        with open(os.path.join(d, INDEX)) as f:
            wmap = json.load(f)["weight_map"]
        files = sorted(set(wmap.values()))
        n = len(files)
        assert files == [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)], files
    else:
        files, wmap = ["model.safetensors"], None
    out = {}
    for fn in files:
        with safe_open(os.path.join(d, fn), "pt") as f:
            assert f.metadata() == {"format": "pt"}, f.metadata()
            for k in f.keys():
                assert k not in out and (wmap is None or wmap[k] == fn), k
                out[k] = (tuple(f.get_slice(k).get_shape()), f.get_slice(k).get_dtype())
    assert wmap is None or set(wmap) == set(out)
    return out, len(files)


def save_case(model, outdir, name, max_shard):
    path = os.path.join(outdir, f"llama-{name}")
    tmp = tempfile.mkdtemp(dir=outdir)
    if max_shard is None:
        model.save_pretrained(tmp)
    else:
        model.save_pretrained(tmp, max_shard_size=max_shard)
    publish_dir(tmp, path)
    return path


def write_oldcfg(src, dst):
    """Copy src's files to dst with config.json in the older rope_theta/rope_scaling form."""
    tmp = tempfile.mkdtemp(dir=os.path.dirname(dst) or ".")
    for f in sorted(os.listdir(src)):
        shutil.copyfile(os.path.join(src, f), os.path.join(tmp, f))
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    if "rope_parameters" in cfg:  # new form: move it to the old one
        rp = dict(cfg.pop("rope_parameters"))
        cfg["rope_theta"] = rp.pop("rope_theta")
        cfg["rope_scaling"] = rp
        if "dtype" in cfg:
            cfg["torch_dtype"] = cfg.pop("dtype")
        form = "rope_theta+rope_scaling"
    else:  # old form: move it to the new one
        rp = dict(cfg.pop("rope_scaling"), rope_theta=cfg.pop("rope_theta"))
        rp["rope_type"] = rp.pop("type", rp.get("rope_type"))
        cfg["rope_parameters"] = rp
        form = "rope_parameters"
    with open(os.path.join(tmp, "config.json"), "w") as f:
        f.write(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    publish_dir(tmp, dst)
    return form


def main():
    path, outdir = reflib.out_path("build/ref/llama.bin")
    reflib.deterministic()

    cases = configs()
    out = [b"ZINFLLM1", struct.pack("<2I", 1, len(cases))]
    summary, forms = [], set()
    for ci, (cname, config, max_shard, min_shards) in enumerate(cases):
        model = make_model(ci, config)
        params = dict(model.named_parameters())

        # rope as transformers computes it vs the documented rules
        inv, bands = expected_inv_freq(model.config)
        got = model.model.rotary_emb.inv_freq
        assert got.dtype == torch.float32 and torch.equal(got, inv), (got, inv)
        if cname == "llama":
            assert bands is not None and min(bands) > 0, bands
            llama_bands = "/".join(map(str, bands))
        if cname == "qwen2":
            assert model.config.sliding_window is None
            assert all(t == "full_attention" for t in model.config.layer_types)
        if cname == "qwen2w":
            assert model.config.layer_types == ["full_attention", "sliding_attention"], \
                model.config.layer_types

        # save, and check the files against the model
        d = save_case(model, outdir, cname, max_shard)
        with open(os.path.join(d, "config.json")) as f:
            cfg_json = json.load(f)
        forms.add("rope_parameters" if "rope_parameters" in cfg_json else "rope_theta+rope_scaling")
        stored, nshards = saved_tensors(d)
        assert nshards >= min_shards and (max_shard is None) == (nshards == 1), nshards
        assert os.path.exists(os.path.join(d, INDEX)) == (max_shard is not None)
        names = sorted(stored, key=lambda n: n.encode())
        assert set(names) == set(params), sorted(set(names) ^ set(params))
        assert ("lm_head.weight" in names) != config.tie_word_embeddings
        assert all(stored[n] == (tuple(params[n].shape), "F32") for n in names)
        assert all(len(n.encode()) < NAME_LEN for n in names)

        gen = torch.Generator().manual_seed(SEED + 200 + ci)
        tokens = torch.randint(0, VOCAB, (B, T), generator=gen, dtype=torch.int32)
        targets = torch.randint(0, VOCAB, (B, T), generator=gen, dtype=torch.int32)

        model_bf16 = to_bf16(model)  # before any grad exists
        assert (model_bf16.lm_head.weight is model_bf16.model.embed_tokens.weight) == \
            config.tie_word_embeddings
        runs = [reflib.forward_backward(model, tokens, targets),
                reflib.forward_backward(model_bf16, tokens, targets)]
        (l32, lg32, g32), (l16, lg16, g16) = runs

        # the saved directory reproduces the model, in fp32 and bf16
        re32 = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32,
                                                    attn_implementation="eager").eval()
        assert torch.equal(logits_of(re32, tokens), lg32), cname
        re16 = AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16,
                                                    attn_implementation="eager").eval()
        assert re16.model.rotary_emb.inv_freq.dtype == torch.float32
        assert torch.equal(logits_of(re16, tokens), lg16), cname
        del re32, re16

        if cname == "llama":
            old = os.path.join(outdir, "llama-llama-oldcfg")
            old_form = write_oldcfg(d, old)
            reold = AutoModelForCausalLM.from_pretrained(old, dtype=torch.float32,
                                                         attn_implementation="eager").eval()
            assert reold.config.rope_parameters == model.config.rope_parameters, \
                (reold.config.rope_parameters, model.config.rope_parameters)
            assert torch.equal(reold.model.rotary_emb.inv_freq, got)
            assert torch.equal(logits_of(reold, tokens), lg32)
            del reold
        if cname in ("mistral", "qwen2w"):  # the window matters: full causal differs from t = W on
            full_cfg = copy.deepcopy(model.config)
            full_cfg.sliding_window = None
            if cname == "qwen2w":
                full_cfg.use_sliding_window = False
                full_cfg.layer_types = ["full_attention"] * full_cfg.num_hidden_layers
            full = AutoModelForCausalLM.from_config(full_cfg, attn_implementation="eager").eval()
            full.load_state_dict(model.state_dict())
            lgf = logits_of(full, tokens)
            W = config.sliding_window
            assert torch.equal(lgf[:, :W], lg32[:, :W])
            assert all(not torch.allclose(lgf[:, t], lg32[:, t]) for t in range(W, T))
            del full

        out.append(struct.pack(f"<{CASE_LEN}s3I", cname.encode(), B, T, VOCAB))
        assert len(cname.encode()) < CASE_LEN
        out.append(tokens.numpy().astype("<i4").tobytes() + targets.numpy().astype("<i4").tobytes())
        out.append(struct.pack("<I", len(names)))
        for n in names:
            shape = stored[n][0]
            out.append(struct.pack(f"<{NAME_LEN}sI{len(shape)}I", n.encode(), len(shape), *shape))
        for loss, logits, grads in runs:
            out.append(f32(loss.reshape(1)) + f32(logits))
            for n in names:
                assert tuple(grads[n].shape) == stored[n][0] and float(grads[n].abs().max()) > 0, \
                    (cname, n)
                out.append(f32(grads[n]))

        rel = reflib.rel_diff
        worst = max((rel(g16[n], g32[n]), n) for n in names)
        summary.append(f"{cname} ({len(names)} params, {nshards} file{'s' * (nshards > 1)},"
                       f" loss fp32 {float(l32):.6f} bf16 {float(l16):.6f}, bf16/fp32 max rel"
                       f" diff logits {rel(lg16, lg32):.3g} grads {worst[0]:.3g})")

    write_atomic(path, b"".join(out))
    print(f"llama_ref: {'; '.join(summary)}; llama3 bands keep/smooth/divide {llama_bands},"
          f" config.json form {'/'.join(sorted(forms))}, llama-llama-oldcfg form {old_form},"
          f" transformers {transformers.__version__} torch {torch.__version__},"
          f" wrote {path}")


if __name__ == "__main__":
    main()
