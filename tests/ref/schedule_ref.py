#!/usr/bin/env python3
"""Reference learning rates and loss scales from DeepSpeed for zinf's schedule tests.

Writes OUT (default build/ref/schedule.bin). DeepSpeed's own classes compute every
value, driven as its engine drives them (deepspeed/runtime/engine.py,
DeepSpeedEngine._take_model_step, checked below):

- lr schedules (deepspeed.runtime.lr_schedules WarmupLR, WarmupDecayLR,
  WarmupCosineLR): built on a torch optimizer with the config's params, which sets the
  lr the first step uses; then per attempted step the lr in the optimizer's param
  group (what optimizer.step() uses) is recorded, and scheduler.step() is called only
  when the step did not overflow. No scheduler: the optimizer's lr throughout.
- loss scaler (deepspeed.runtime.fp16.loss_scaler.CreateLossScaler with
  DeepSpeedFP16Config's arguments, as the ZeRO optimizers build it): update_scale is fed
  an overflow pattern; the exception DeepSpeed raises at the minimum scale ends a case.
- rejected: schedule params DeepSpeed's constructors refuse (checked here that they do).

Format, little-endian: "ZINFSCH1", u32 version 1, u32 n_lr, u32 n_scaler, u32 n_rejected.
lr case: name (48 bytes, NUL-padded), u32 type (0 none, 1 WarmupLR, 2 WarmupDecayLR,
3 WarmupCosineLR), u32 warmup_type (0 log, 1 linear), i64 warmup_num_steps,
i64 total_num_steps (-1: not given), f64 optimizer lr, warmup_min_lr, warmup_max_lr
(-1: None, i.e. the optimizer's lr), warmup_min_ratio, cos_min_ratio, u32 steps; then
per attempted step u8 overflow, f64 lr used.
scaler case: name (48), u32 fp16_enabled, f64 loss_scale, i64 initial_scale_power,
loss_scale_window, hysteresis, u32 consecutive_hysteresis, f64 min_loss_scale,
u32 steps; then per step u8 overflow, u8 raised (DeepSpeed raised: the last step),
f64 scale before the update, f64 scale after, i64 cur_hysteresis, last_overflow_iter,
cur_iter after (0, -1, 0 for a static scaler).
rejected: name (48), u32 type, i64 warmup_num_steps, i64 total_num_steps (-1: not given).
"""
import inspect
import io
import logging
import os
import random
import struct
import sys
import types

# No GPU needed or wanted: DeepSpeed picks its CPU accelerator without probing for one.
os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch  # noqa: E402
import deepspeed  # noqa: E402
from deepspeed.runtime import lr_schedules  # noqa: E402
from deepspeed.runtime.engine import DeepSpeedEngine  # noqa: E402
from deepspeed.runtime.fp16 import loss_scaler  # noqa: E402
from deepspeed.runtime.precision_config import DeepSpeedFP16Config  # noqa: E402
from deepspeed.utils import logger  # noqa: E402
from reflib import write_atomic  # noqa: E402

NONE, WLR, WDLR, WCLR = range(4)
SCHED_NAMES = {WLR: "WarmupLR", WDLR: "WarmupDecayLR", WCLR: "WarmupCosineLR"}
# Values for keys a schedule does not take (never read for it); the ones it takes
# default to DeepSpeed's own defaults, read from its signature (WarmupLR's warmup_max_lr
# is None there: the optimizer's lr).
UNUSED = dict(warmup_min_lr=0.0, warmup_max_lr=1e-3, warmup_num_steps=1000, warmup_type="log",
              total_num_steps=-1, warmup_min_ratio=0.0, cos_min_ratio=1e-4)


def pattern(n, p=0.0, seed=0, bursts=()):
    """Overflow flags for n attempted steps: random with probability p, plus bursts
    (start, length) of consecutive overflows."""
    rng = random.Random(seed)
    flags = [rng.random() < p for _ in range(n)]
    for start, length in bursts:
        for i in range(start, min(n, start + length)):
            flags[i] = True
    return flags


# name, type, optimizer lr, params (as in the config's scheduler.params), overflow pattern
LR_CASES = [
    ("none", NONE, 3e-4, {}, pattern(20, 0.2, 1)),
    ("warmup-log", WLR, 1e-3, dict(warmup_min_lr=1e-5, warmup_max_lr=3e-4, warmup_num_steps=10), pattern(30)),
    ("warmup-log-overflow", WLR, 1e-3, dict(warmup_min_lr=1e-5, warmup_max_lr=3e-4, warmup_num_steps=10),
     pattern(40, 0.2, 2, bursts=[(0, 3), (12, 4)])),
    ("warmup-linear", WLR, 1e-3, dict(warmup_min_lr=0, warmup_max_lr=1e-3, warmup_num_steps=7,
                                      warmup_type="linear"), pattern(25, 0.15, 3)),
    ("warmup-defaults", WLR, 2e-3, {}, pattern(1100, 0.01, 4)),
    ("warmup-max-none", WLR, 6e-4, dict(warmup_max_lr=None, warmup_num_steps=5), pattern(12)),
    ("warmup-1-log", WLR, 1e-3, dict(warmup_min_lr=1e-4, warmup_max_lr=2e-3, warmup_num_steps=1), pattern(8)),
    ("warmup-1-linear", WLR, 1e-3, dict(warmup_min_lr=1e-4, warmup_max_lr=2e-3, warmup_num_steps=1,
                                        warmup_type="linear"), pattern(8)),
    ("warmup-2-linear", WLR, 1e-3, dict(warmup_min_lr=1e-4, warmup_max_lr=2e-3, warmup_num_steps=2,
                                        warmup_type="linear"), pattern(8)),
    ("warmup-min-above-max", WLR, 1e-3, dict(warmup_min_lr=1e-3, warmup_max_lr=1e-4, warmup_num_steps=6),
     pattern(10)),
    ("decay-log", WDLR, 1e-3, dict(warmup_min_lr=1e-6, warmup_max_lr=3e-4, warmup_num_steps=10,
                                   total_num_steps=50), pattern(70, 0.1, 5)),
    ("decay-linear-1", WDLR, 1e-3, dict(warmup_min_lr=0, warmup_max_lr=1e-3, warmup_num_steps=1,
                                        warmup_type="linear", total_num_steps=20), pattern(30)),
    ("decay-total-eq-warmup", WDLR, 1e-3, dict(warmup_min_lr=1e-5, warmup_max_lr=1e-3, warmup_num_steps=8,
                                               total_num_steps=8), pattern(15)),
    ("decay-total-below-warmup", WDLR, 1e-3, dict(warmup_min_lr=1e-5, warmup_max_lr=1e-3, warmup_num_steps=10,
                                                  total_num_steps=5), pattern(20)),
    ("decay-total-1", WDLR, 1e-3, dict(warmup_min_lr=1e-5, warmup_max_lr=1e-3, warmup_num_steps=1,
                                       total_num_steps=1), pattern(6)),
    ("decay-max-none", WDLR, 5e-4, dict(warmup_max_lr=None, warmup_num_steps=3, total_num_steps=12), pattern(16)),
    ("decay-defaults", WDLR, 1e-3, dict(total_num_steps=3000), pattern(3100, 0.02, 6)),
    ("cosine-log", WCLR, 1e-3, dict(warmup_num_steps=10, total_num_steps=60), pattern(80, 0.1, 7)),
    ("cosine-linear", WCLR, 3e-4, dict(warmup_num_steps=20, total_num_steps=100, warmup_type="linear",
                                       warmup_min_ratio=0.1, cos_min_ratio=0.05),
     pattern(130, 0.1, 8, bursts=[(0, 2), (50, 5)])),
    ("cosine-1-linear", WCLR, 1e-3, dict(warmup_num_steps=1, total_num_steps=10, warmup_type="linear"),
     pattern(15)),
    ("cosine-1-log", WCLR, 1e-3, dict(warmup_num_steps=1, total_num_steps=3, warmup_min_ratio=0.5), pattern(8)),
    ("cosine-total-below-warmup", WCLR, 1e-3, dict(warmup_num_steps=10, total_num_steps=4,
                                                   warmup_min_ratio=0.01), pattern(16)),
    ("cosine-total-warmup-plus-1", WCLR, 2e-3, dict(warmup_num_steps=5, total_num_steps=6, cos_min_ratio=0.0),
     pattern(10)),
    ("cosine-min-ratio-1", WCLR, 1e-3, dict(warmup_num_steps=4, total_num_steps=9, warmup_min_ratio=1.0,
                                            cos_min_ratio=1.0), pattern(12)),
    ("cosine-defaults", WCLR, 1e-3, dict(total_num_steps=3000), pattern(3100, 0.02, 9)),
]

# name, fp16 section (DeepSpeed's keys), overflow pattern
SCALER_CASES = [
    ("defaults", dict(enabled=True), pattern(2600, 0.002, 10, bursts=[(100, 1), (1500, 3)])),
    ("hysteresis-1-window-4", dict(enabled=True, initial_scale_power=8, loss_scale_window=4, hysteresis=1),
     pattern(200, 0.12, 11)),
    ("hysteresis-3", dict(enabled=True, initial_scale_power=30, loss_scale_window=5, hysteresis=3),
     pattern(300, 0.15, 12, bursts=[(40, 6)])),
    ("hysteresis-3-consecutive", dict(enabled=True, initial_scale_power=30, loss_scale_window=5, hysteresis=3,
                                      consecutive_hysteresis=True), pattern(300, 0.15, 12, bursts=[(40, 6)])),
    ("window-1", dict(enabled=True, initial_scale_power=12, loss_scale_window=1, hysteresis=1),
     pattern(60, 0.3, 13)),
    ("window-1-hysteresis-2", dict(enabled=True, initial_scale_power=4, loss_scale_window=1, hysteresis=2),
     pattern(60, 0.3, 14)),
    ("min-raises", dict(enabled=True, initial_scale_power=3, loss_scale_window=4, hysteresis=1),
     pattern(20, bursts=[(2, 10)])),
    ("min-raises-hysteresis-2", dict(enabled=True, initial_scale_power=2, loss_scale_window=100, hysteresis=2),
     pattern(20, bursts=[(1, 3), (6, 10)])),
    ("min-not-power-of-2", dict(enabled=True, initial_scale_power=5, loss_scale_window=3, hysteresis=1,
                                min_loss_scale=3), pattern(40, bursts=[(0, 4), (8, 1), (30, 10)])),
    ("min-above-initial", dict(enabled=True, initial_scale_power=0, loss_scale_window=2, hysteresis=1,
                               min_loss_scale=4), pattern(20, bursts=[(0, 1), (10, 5)])),
    ("min-reached-then-grow", dict(enabled=True, initial_scale_power=2, loss_scale_window=3, hysteresis=1,
                                   min_loss_scale=1), pattern(40, bursts=[(0, 2), (6, 1), (20, 1)])),
    ("random-consecutive", dict(enabled=True, loss_scale_window=20, hysteresis=2, consecutive_hysteresis=True),
     pattern(3000, 0.05, 15)),
    ("random-long-window", dict(enabled=True, initial_scale_power=20, loss_scale_window=50, hysteresis=4),
     pattern(3000, 0.02, 16)),
    ("static-128", dict(enabled=True, loss_scale=128), pattern(30, 0.2, 17)),
    ("fp16-off", dict(enabled=False), pattern(10, 0.2, 18)),
]

# name, type, params: DeepSpeed's constructors must refuse them
REJECTED = [
    ("warmup-0", WLR, dict(warmup_num_steps=0)),
    ("warmup-negative", WLR, dict(warmup_num_steps=-3)),
    ("decay-warmup-0", WDLR, dict(warmup_num_steps=0, total_num_steps=10)),
    ("cosine-warmup-0", WCLR, dict(warmup_num_steps=0, total_num_steps=10)),
    ("decay-no-total", WDLR, dict(warmup_num_steps=10)),
    ("cosine-no-total", WCLR, dict(warmup_num_steps=10)),
]


def check_engine_order():
    """The driving loop below assumes DeepSpeed 0.19's _take_model_step: optimizer.step()
    first, then lr_scheduler.step() only when the step did not overflow."""
    src = inspect.getsource(DeepSpeedEngine._take_model_step)
    i_opt = src.index("self.optimizer.step()")
    i_ovf = src.index("if overflow:")
    i_sched = src.index("self.lr_scheduler.step(")
    assert i_opt < i_ovf < src.index("else:", i_ovf) < i_sched, "DeepSpeed's step order changed"


def resolved(sched, params):
    """Every param as the schedule sees it: the given ones, else DeepSpeed's defaults."""
    full = dict(UNUSED)
    if sched != NONE:
        sig = inspect.signature(getattr(lr_schedules, SCHED_NAMES[sched]).__init__)
        full.update({k: p.default for k, p in sig.parameters.items()
                     if k in full and p.default is not inspect.Parameter.empty})
    full.update(params)
    return full


def run_lr_case(out, case):
    name, sched, lr, params, flags = case
    full = resolved(sched, params)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    # engine._scheduler_from_config: getattr(lr_schedules, name)(optimizer, **params).
    # The engine passes its ZeRO optimizer, which get_torch_optimizer unwraps to this one.
    s = getattr(lr_schedules, SCHED_NAMES[sched])(opt, **params) if sched != NONE else None
    lrs = []
    for overflow in flags:
        lrs.append(float(opt.param_groups[0]["lr"]))  # what optimizer.step() uses
        if not overflow and s is not None:
            s.step()
    max_lr = full["warmup_max_lr"]
    out.write(struct.pack("<48sIIqqdddddI", name.encode(), sched, full["warmup_type"] == "linear",
                          full["warmup_num_steps"], full["total_num_steps"], lr, full["warmup_min_lr"],
                          -1.0 if max_lr is None else max_lr, full["warmup_min_ratio"], full["cos_min_ratio"],
                          len(flags)))
    for overflow, x in zip(flags, lrs):
        out.write(struct.pack("<Bd", overflow, x))


def run_scaler_case(out, case):
    name, fp16, flags = case
    c = DeepSpeedFP16Config(**fp16)
    # As DeepSpeedEngine._configure_zero_optimizer passes them to the ZeRO optimizer,
    # which calls CreateLossScaler; dtype is fp16 only with fp16.enabled.
    dtype = torch.half if c.enabled else torch.bfloat16
    s = loss_scaler.CreateLossScaler(dtype=dtype, static_loss_scale=c.loss_scale,
                                     dynamic_scaling=c.loss_scale == 0,
                                     dynamic_loss_args=c.dynamic_loss_scale_args())
    assert s.dynamic == (c.enabled and c.loss_scale == 0)
    rows = []
    for overflow in flags:
        before = float(s.cur_scale)
        raised = False
        try:
            s.update_scale(overflow)
        except Exception as e:  # DeepSpeed raises a plain Exception and the run ends
            assert "already at minimum" in str(e), e
            raised = True
        rows.append((overflow, raised, before, float(s.cur_scale), getattr(s, "cur_hysteresis", 0),
                     getattr(s, "last_overflow_iter", -1), getattr(s, "cur_iter", 0)))
        if raised:
            break
    out.write(struct.pack("<48sIdqqqIdI", name.encode(), c.enabled, c.loss_scale, c.initial_scale_power,
                          c.loss_scale_window, c.hysteresis, c.consecutive_hysteresis, c.min_loss_scale, len(rows)))
    for r in rows:
        out.write(struct.pack("<BBddqqq", *r))
    return rows[-1][1]


def run_rejected(out, case):
    name, sched, params = case
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    try:
        getattr(lr_schedules, SCHED_NAMES[sched])(opt, **params)
    except (ValueError, TypeError):
        pass
    else:
        raise AssertionError(f"{name}: DeepSpeed accepted {params}")
    full = resolved(sched, params)
    out.write(struct.pack("<48sIqq", name.encode(), sched, full["warmup_num_steps"], full["total_num_steps"]))


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "build/ref/schedule.bin"
    logger.setLevel(logging.ERROR)  # DeepSpeed warns of total < warmup and logs every overflow
    # update_scale asks deepspeed.comm for the rank only to decide who logs; a stand-in
    # spares initializing a process group (which builds DeepSpeed's shm op on CPU).
    loss_scaler.dist = types.SimpleNamespace(get_rank=lambda: 0)
    check_engine_order()
    out = io.BytesIO()
    out.write(b"ZINFSCH1" + struct.pack("<IIII", 1, len(LR_CASES), len(SCALER_CASES), len(REJECTED)))
    for case in LR_CASES:
        run_lr_case(out, case)
    raised = [run_scaler_case(out, case) for case in SCALER_CASES]
    for case in REJECTED:
        run_rejected(out, case)
    write_atomic(path, out.getvalue())
    print(f"schedule_ref: {len(LR_CASES)} lr cases, {len(SCALER_CASES)} scaler cases ({sum(raised)} reach the "
          f"minimum and raise), {len(REJECTED)} rejected, deepspeed {deepspeed.__version__}, wrote {path}")


if __name__ == "__main__":
    main()
