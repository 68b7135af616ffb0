"""zinf.estimate and zinf.check_config: the CLI's answers as Python objects, the
config as a path or a dict, --set overrides, and zinf's messages as exceptions."""
import json

import pytest

import zinf

CONFIG = "examples/gpt-bytes-zero3.json"


def test_estimate_rows_for_a_parameter_count():
    rows = zinf.estimate(params="124M", gpus_per_node=4)["rows"]
    # stage 0; stages 1-2 with the optimizer on the device, cpu or nvme; stage 3 with
    # each of those times the parameters on the device, cpu or nvme
    assert [(r["stage"], r["optimizer"], r["params"]) for r in rows][:4] == [
        (0, "none", "none"), (1, "none", "none"), (1, "cpu", "none"), (1, "nvme", "none")]
    assert len(rows) == 1 + 3 + 3 + 9
    assert {r["model_numel"] for r in rows} == {124439808}  # GPT-2 small, as transformers counts it
    dev = {(r["stage"], r["optimizer"], r["params"]): r["device_bytes"] for r in rows}
    peak = {(r["stage"], r["optimizer"], r["params"]): r["device_peak_bytes"] for r in rows}
    assert {r["world_size"] for r in rows} == {4}
    # the states the engine holds once made: stage 1 partitions the optimizer over the 4
    # ranks, stage 3 the parameters too; offload takes them off the device
    assert dev[(3, "none", "none")] < dev[(1, "none", "none")] < dev[(0, "none", "none")]
    assert peak[(3, "nvme", "nvme")] < peak[(3, "none", "none")]


def test_estimate_of_a_config_path_and_dict_with_overrides():
    by_path = zinf.estimate(CONFIG)
    cfg = json.load(open(CONFIG))
    by_dict = zinf.estimate(cfg)
    assert by_dict["rows"] == by_path["rows"]
    plan = by_path["plan"]
    moving = ("host_available_bytes", "pinned_budget_bytes")  # this machine's free memory, read each time
    assert {k: v for k, v in by_dict["plan"].items() if k not in moving} == \
        {k: v for k, v in plan.items() if k not in moving}
    assert plan["stage"] == 3 and plan["optimizer"] == "nvme" and plan["params"] == "nvme"
    bigger = zinf.estimate(cfg, set={"train_micro_batch_size_per_gpu": 16, "train_batch_size": 32})["plan"]
    assert bigger["activation_bytes"] > plan["activation_bytes"]


def test_check_config_fills_defaults_and_refuses_bad_keys():
    cfg = json.load(open(CONFIG))
    full = zinf.check_config(cfg)
    assert full["zero_optimization"]["stage"] == 3
    assert full["gradient_accumulation_steps"] == cfg["train_batch_size"] // cfg["train_micro_batch_size_per_gpu"]
    assert zinf.check_config(CONFIG, set={"seed": 7})["seed"] == 7
    with pytest.raises(zinf.ZinfError, match='the config dict: train_batch_size: expected an integer, got "x"'):
        zinf.check_config(dict(cfg, train_batch_size="x"))
    with pytest.raises(zinf.ZinfError, match="zero_optimization.stage"):
        zinf.check_config(CONFIG, set={"zero_optimization.stage": 5})
    with pytest.raises(zinf.ZinfError, match="give a config or params"):
        zinf.estimate()
