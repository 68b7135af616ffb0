"""zinf.Engine: training from Python gives `zinf train`'s losses and weights bit for bit,
its checkpoints resume either way, DeepSpeed's safe_get/set_full names read and write
the states, and bad input raises ZinfError naming what is wrong."""
import numpy as np
import pytest
import torch
from zinf_train import zinf_train

import zinf

CONFIG = "examples/gpt-bytes-zero3.json"  # ZeRO stage 3, optimizer states and parameters on NVMe
SEQ = 32


@pytest.fixture
def run(tmp_path):
    """The README's main job shrunk to seconds, on a token file of its own, with its
    windows in file order; and those windows, as zinf train's sampling reads them."""
    tokens = np.random.default_rng(7).integers(0, 256, 4000, dtype=np.uint16)
    path = tmp_path / "train.tokens"
    tokens.tofile(path)
    (tmp_path / "swap").mkdir()
    sets = {"model.n_layer": 2, "model.n_head": 2, "model.n_embd": 64, "model.block_size": SEQ,
            "data.seq_len": SEQ, "data.path": str(path), "data.format": "tokens-u16", "data.sampling": "sequential",
            "train_batch_size": 16, "train_micro_batch_size_per_gpu": 8, "device.backend": "host",
            "zero_optimization.offload_optimizer.nvme_path": str(tmp_path / "swap"),
            "zero_optimization.offload_param.nvme_path": str(tmp_path / "swap"), "checkpoint.interval": 0}

    def windows(step, batch=16):
        return np.stack([tokens[p * SEQ:p * SEQ + SEQ + 1] for p in range(step * batch, step * batch + batch)])

    return sets, windows


def cli(sets, *args):
    return zinf_train(CONFIG, sets, *args)


def test_train_batch_gives_zinf_trains_losses_and_weights(run):
    sets, windows = run
    steps, final = cli(sets, "--steps", "3")
    with zinf.Engine(CONFIG, set=sets) as engine:
        assert (engine.seq_len, engine.micro_batch, engine.gradient_accumulation_steps) == (SEQ, 8, 2)
        for i in range(3):
            figures = engine.train_batch(torch.from_numpy(windows(i).astype(np.int64)))
            for key in ("step", "loss", "lr", "grad_norm", "loss_scale", "skipped", "pinned_bytes", "nvme_bytes"):
                assert figures[key] == steps[i][key], key
        assert engine.global_steps == 3
        assert engine.weights_digest() == final["weights_digest"]


def test_checkpoints_resume_in_python_and_in_zinf_train(run, tmp_path):
    sets, windows = run
    with zinf.Engine(CONFIG, set=sets) as engine:
        for i in range(4):
            engine.train_batch(windows(i))
        whole = engine.weights_digest()
    ckpt = tmp_path / "ckpt"
    with zinf.Engine(CONFIG, set=sets) as engine:
        for i in range(2):
            engine.train_batch(windows(i))
        engine.save_checkpoint(ckpt)
    with zinf.Engine(CONFIG, set=sets) as engine:
        r = engine.load_checkpoint(ckpt)
        assert (r["step"], r["data_position"], r["world_size"]) == (2, 32, 1)
        assert r["dir"].endswith("global_step2")
        for i in range(2, 4):
            engine.train_batch(windows(i))
        assert engine.weights_digest() == whole
    # zinf train takes it up where Python left it: the step count and the data position.
    _, final = cli({**sets, "checkpoint.dir": str(ckpt), "checkpoint.load": "latest"}, "--steps", "4")
    assert final["weights_digest"] == whole


def test_full_tensors_by_deepspeeds_names(run):
    sets, windows = run
    with zinf.Engine(CONFIG, set=sets) as engine:
        name = "h.1.mlp.c_fc.weight"  # GPT-2's Conv1D: (in, out)
        w = engine.safe_get_full_fp32_param(name)
        assert w.shape == (64, 256) and w.dtype == torch.float32
        assert torch.count_nonzero(engine.safe_get_full_optimizer_state(name, "exp_avg")) == 0
        for i in range(3):  # the warm-up's first two steps have lr 0
            engine.train_batch(windows(i))
        m, v = (engine.safe_get_full_optimizer_state(name, k) for k in ("exp_avg", "exp_avg_sq"))
        assert torch.count_nonzero(m) > 0 and torch.all(v >= 0) and torch.count_nonzero(v) > 0
        assert not torch.equal(engine.safe_get_full_fp32_param(name), w)
        before = engine.weights_digest()
        new = torch.linspace(-1, 1, 64 * 256).reshape(64, 256)
        engine.safe_set_full_fp32_param(name, new)
        assert torch.equal(engine.safe_get_full_fp32_param(name), new)
        assert engine.weights_digest() != before
        engine.safe_set_full_optimizer_state(name, torch.ones(64, 256), "exp_avg_sq")
        assert torch.equal(engine.safe_get_full_optimizer_state(name, "exp_avg_sq"), torch.ones(64, 256))
        with pytest.raises(zinf.ZinfError, match="exp_avg.*exp_avg_sq"):
            engine.safe_get_full_optimizer_state(name, "momentum")
        with pytest.raises(zinf.ZinfError, match=r"no parameter \"h.9.mlp.c_fc.weight\""):
            engine.safe_get_full_fp32_param("h.9.mlp.c_fc.weight")
        with pytest.raises(zinf.ZinfError, match=r"shape \(256, 64\); the parameter is \(64, 256\)"):
            engine.safe_set_full_fp32_param(name, torch.zeros(256, 64))


def test_eval_batch_is_the_training_forwards_loss_and_changes_nothing(run):
    sets, windows = run
    with zinf.Engine(CONFIG, set=sets) as engine:
        before = engine.weights_digest()
        loss = engine.eval_batch(windows(0))
        assert engine.eval_batch(windows(0)) == loss
        assert engine.weights_digest() == before
        # the step's loss is the mean of its two micro-batches' over the same 16 windows
        assert engine.train_batch(windows(0))["loss"] == pytest.approx(loss, rel=1e-12)
        assert engine.eval_batch(windows(0)[:5]) != loss  # any number of windows


def test_bad_input_names_what_is_wrong(run):
    sets, windows = run
    with pytest.raises(zinf.ZinfError, match="zero_optimization.stage: expected an integer from 0 to 3, got 4"):
        zinf.Engine(CONFIG, set={**sets, "zero_optimization.stage": 4})
    with pytest.raises(zinf.ZinfError, match="no-such.json"):
        zinf.Engine("no-such.json")
    with pytest.raises(zinf.ZinfError, match="the plan"):
        zinf.Engine(CONFIG, set={**sets, "device.memory_limit": "1MB"})
    engine = zinf.Engine(CONFIG, set=sets)
    with pytest.raises(zinf.ZinfError, match=r"shape \(8, 33\); want \(16, 33\)"):
        engine.train_batch(windows(0)[:8])
    with pytest.raises(zinf.ZinfError, match="float64; give integer"):
        engine.train_batch(windows(0).astype(np.float64))
    bad = windows(0).astype(np.int64)
    bad[3, 5] = 256
    with pytest.raises(zinf.ZinfError, match=r"token id 256 is outside the vocabulary \[0, 256\)"):
        engine.train_batch(bad)
    assert engine.global_steps == 0  # nothing ran
    plan = engine.plan()
    assert plan["stage"] == 3 and plan["optimizer"] == "nvme" and plan["fits"] is True
    engine.close()
    with pytest.raises(zinf.ZinfError, match="closed"):
        engine.train_batch(windows(0))
    engine.close()  # twice is fine
