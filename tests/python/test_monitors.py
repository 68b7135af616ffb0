"""DeepSpeed's tensorboard and csv_monitor sections: what zinf train writes is read back
with TensorBoard's own reader and as CSV, and every value is the one `zinf train --json`
printed for the step (TensorBoard holds float32); a resumed run appends; zinf.Engine
writes the same; wandb is refused naming the two that work."""
import csv
import pathlib
import subprocess

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from zinf_train import zinf_train

import zinf
from zinf._lib import CLI_PATH

CONFIG = "examples/gpt-bytes-zero3.json"
# the figures each monitor holds, by DeepSpeed's name, and their --json keys
FIGURES = {"train_loss": "loss", "grad_norm": "grad_norm", "lr": "lr", "loss_scale": "loss_scale",
           "step_seconds": "step_seconds", "tokens_per_s": "tokens_per_s", "wait_params_s": "wait_params_s",
           "wait_optim_s": "wait_optim_s", "optim_s": "optim_s", "optim_backward_s": "optim_backward_s"}
BATCH = 16


@pytest.fixture
def sets(tmp_path):
    tokens = np.random.default_rng(3).integers(0, 256, 3000, dtype=np.uint16)
    tokens.tofile(tmp_path / "train.tokens")
    (tmp_path / "swap").mkdir()
    return {"model.n_layer": 2, "model.n_head": 2, "model.n_embd": 64, "model.block_size": 32, "data.seq_len": 32,
            "data.path": str(tmp_path / "train.tokens"), "data.format": "tokens-u16", "train_batch_size": BATCH,
            "train_micro_batch_size_per_gpu": 8, "device.backend": "host", "checkpoint.dir": str(tmp_path / "ckpt"),
            "checkpoint.interval": 0, "zero_optimization.offload_optimizer.nvme_path": str(tmp_path / "swap"),
            "zero_optimization.offload_param.nvme_path": str(tmp_path / "swap"),
            "tensorboard.enabled": "true", "tensorboard.output_path": str(tmp_path / "tb"),
            "csv_monitor.enabled": "true", "csv_monitor.output_path": str(tmp_path / "csv"),
            "csv_monitor.job_name": "run"}


def train(sets, *args):
    return zinf_train(CONFIG, sets, *args)[0]


def tensorboard(directory):
    events = EventAccumulator(str(directory), size_guidance={"scalars": 0})
    events.Reload()
    return {tag.rsplit("/", 1)[1]: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def csvs(directory):
    out = {}
    for path in sorted(pathlib.Path(directory).glob("*.csv")):
        rows = list(csv.reader(open(path)))
        name = rows[0][1]
        assert path.name == f"Train_Samples_{name}.csv" and rows[0] == ["step", name], (path, rows[0])
        out[name] = [(int(s), float(v)) for s, v in rows[1:]]
    return out


def test_zinf_train_writes_every_figure_of_its_step_lines(sets, tmp_path):
    steps = train(sets, "--steps", "3")
    want = {name: [(s["step"] * BATCH, s[key]) for s in steps] for name, key in FIGURES.items()}
    assert tensorboard(tmp_path / "tb" / "DeepSpeedJobName") == \
        {name: [(n, float(np.float32(v))) for n, v in rows] for name, rows in want.items()}
    assert csvs(tmp_path / "csv" / "run") == want
    # Resumed: the same files go on, each CSV with its one header, and a second event file.
    more = train({**sets, "checkpoint.load": "latest"}, "--steps", "5")
    assert [s["step"] for s in more] == [4, 5]
    got = csvs(tmp_path / "csv" / "run")
    assert got["lr"] == want["lr"] + [(s["step"] * BATCH, s["lr"]) for s in more]
    assert len(list((tmp_path / "tb" / "DeepSpeedJobName").glob("events.out.tfevents.*"))) == 2
    assert [n for n, _ in tensorboard(tmp_path / "tb" / "DeepSpeedJobName")["train_loss"]] == \
        [16, 32, 48, 64, 80]


def test_the_engine_writes_the_same(sets, tmp_path):
    tokens = np.fromfile(tmp_path / "train.tokens", dtype=np.uint16)
    with zinf.Engine(CONFIG, set={**sets, "data.sampling": "sequential"}) as engine:
        figures = [engine.train_batch(np.stack([tokens[p * 32:p * 32 + 33] for p in range(i * BATCH, i * BATCH + BATCH)]))
                   for i in range(2)]
    got = csvs(tmp_path / "csv" / "run")
    assert got == {name: [(f["step"] * BATCH, f[key]) for f in figures] for name, key in FIGURES.items()}


def test_wandb_and_comet_are_refused_naming_what_works():
    for section in ("wandb", "comet"):
        with pytest.raises(zinf.ZinfError, match=f"{section}.*enable tensorboard or csv_monitor"):
            zinf.check_config(CONFIG, set={f"{section}.enabled": True})


def test_a_place_that_cannot_be_made_is_named(sets, tmp_path):
    (tmp_path / "file").write_text("")
    argv = [CLI_PATH, "train", CONFIG, "--steps", "1"]
    for k, v in {**sets, "csv_monitor.output_path": str(tmp_path / "file")}.items():
        argv += ["--set", f"{k}={v}"]
    r = subprocess.run(argv, capture_output=True, text=True)
    assert r.returncode == 1
    assert f"csv_monitor: {tmp_path}/file is not a directory; set output_path or job_name elsewhere" in r.stderr
