"""Helpers shared by the reference scripts in tests/ref/ (imported as `reflib`: a script's
own directory is on sys.path). Not named *_ref.py, so the Makefile makes no fixture of it.

What each script writes, and the recipe behind it, is specified in that script's
docstring; the helpers here implement the parts two or more of them share, with the
values that define a fixture (sizes, seeds, hyperparameters) passed in by the script.
Importing this module first also sets the Hugging Face environment for transformers.
"""
import os
import shutil
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here needs the network
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors.torch import save_file  # noqa: E402


def out_path(default):
    """OUT (argv[1], else default) and its directory, made if missing."""
    path = sys.argv[1] if len(sys.argv) > 1 else default
    outdir = os.path.dirname(path) or "."
    os.makedirs(outdir, exist_ok=True)
    return path, outdir


def deterministic():
    """One CPU thread, deterministic kernels, full fp32 matmul precision (torch's default)."""
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.set_float32_matmul_precision("highest")


def f32(t):
    return t.detach().to(torch.float32).contiguous().numpy().tobytes()


def publish(tmp, path):
    """Rename tmp to path with ordinary permissions (tempfile and safetensors make 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    os.replace(tmp, path)


def write_atomic(path, data):
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    publish(path + ".tmp", path)


def save_weights(w, path):
    """{name: tensor} to a safetensors file, as safetensors' save_file writes it."""
    save_file(w, path + ".tmp", metadata={"format": "pt"})
    publish(path + ".tmp", path)


def publish_dir(tmp, path):
    """Rename the directory tmp to path (replacing an old one) with ordinary permissions."""
    umask = os.umask(0)
    os.umask(umask)
    for f in os.listdir(tmp):
        os.chmod(os.path.join(tmp, f), 0o666 & ~umask)
    os.chmod(tmp, 0o777 & ~umask)
    if os.path.lexists(path):
        trash = tempfile.mkdtemp(dir=os.path.dirname(path) or ".")
        os.replace(path, os.path.join(trash, "old"))
        os.replace(tmp, path)
        shutil.rmtree(trash)
    else:
        os.replace(tmp, path)


def perturb(model, seed):
    """Every parameter += 0.02 * randn from a generator seeded seed, so none is a constant."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):  # a tied weight once
            p.add_(0.02 * torch.randn(p.shape, generator=gen))


def forward_backward(model, tokens, targets):
    """loss, logits (f32) and {name: grad (f32)} of one forward/backward."""
    B, T = tokens.shape
    V = model.config.vocab_size
    model.zero_grad(set_to_none=True)
    logits = model(tokens.long()).logits
    assert logits.shape == (B, T, V)
    loss = F.cross_entropy(logits.float().reshape(-1, V), targets.long().reshape(-1))
    loss.backward()
    grads = {n: p.grad.detach().float() for n, p in model.named_parameters()}
    return loss.detach().float(), logits.detach().float(), grads


def rel_diff(a, b):
    """max |a - b| relative to max |b|, for the bf16/fp32 summary line."""
    return float((a - b).abs().max() / b.abs().max())


def make_tokens(n_tok, vocab, period, noise, seed):
    """n_tok u16 tokens: a random period-long pattern, a noise fraction replaced at random."""
    rng = np.random.default_rng(seed)
    pattern = rng.integers(0, vocab, size=period)
    tok = np.tile(pattern, n_tok // period + 1)[:n_tok]
    noisy = rng.random(n_tok) < noise
    tok[noisy] = rng.integers(0, vocab, size=int(noisy.sum()))
    tok = tok.astype("<u2")
    assert tok.shape == (n_tok,) and int(tok.max()) < vocab
    return tok


def train(model, tok, B, T, steps, adamw, max_norm, tag):
    """The training loop of train_ref.py and llama_train_ref.py: step i's batch is windows
    i*B .. i*B+B-1 of tok (int64), mean cross-entropy, clip_grad_norm_(max_norm), then
    single-tensor AdamW(**adamw). Returns the per-step losses and pre-clip norms."""
    V = model.config.vocab_size
    params = list(model.parameters())  # a tied weight appears once
    opt = torch.optim.AdamW(params, **adamw, foreach=False)
    losses, norms = [], []
    for i in range(steps):
        wins = [tok[w * T: w * T + T + 1] for w in range(i * B, i * B + B)]
        batch = torch.stack(wins)
        x, y = batch[:, :T], batch[:, 1:]
        opt.zero_grad(set_to_none=True)
        logits = model(x).logits
        assert logits.shape == (B, T, V) and logits.dtype == torch.float32
        loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm=max_norm)
        opt.step()
        losses.append(float(loss.detach()))
        norms.append(float(norm))
        print(f"{tag}: step {i} loss {losses[-1]:.6f} grad_norm {norms[-1]:.6f}", file=sys.stderr)
    return losses, norms
