"""zinf.optim against torch.optim (the reference nobody here wrote): 10 steps within
1e-6 of the parameters' scale, every optimizer, fp32 and 16-bit gradients; the same bits
as the C kernel called directly; the 16-bit copy; torch's state dicts both ways; and a
training loop whose optimizer states live on disk through zinf.aio."""
import ctypes

import numpy as np
import pytest
import torch

import zinf
from zinf import aio, optim
from zinf._lib import DTYPE_F32, DTYPE_NONE, OptimTile, lib

SIZES = (1000, 4099, 70000, 1100000)  # ragged ends for every SIMD width and pool split; the last
# one's states in huge pages


def params(seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, generator=g) for n in SIZES]


def grads(step, dtype=torch.float32):
    g = torch.Generator().manual_seed(1000 + step)
    return [(torch.randn(n, generator=g) * 1e-2).to(dtype) for n in SIZES]


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


def lion_reference(ps, gs, lr, betas, wd, state):
    """Lion in torch ops, as the lion-pytorch package writes it (tests/ref/optim_ref.py's)."""
    for p, g in zip(ps, gs):
        m = state.setdefault(id(p), torch.zeros_like(p))
        update = m.clone().mul_(betas[0]).add(g, alpha=1 - betas[0]).sign_()
        p.mul_(1 - lr * wd).add_(update, alpha=-lr)
        m.mul_(betas[1]).add_(g, alpha=1 - betas[1])


CASES = {
    "adamw": (lambda ps: optim.CPUAdam(ps, lr=1e-2, weight_decay=0.1),
              lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1)),
    "adam": (lambda ps: optim.CPUAdam(ps, lr=1e-2, weight_decay=0.1, adamw_mode=False),
             lambda ps: torch.optim.Adam(ps, lr=1e-2, weight_decay=0.1)),
    "adagrad": (lambda ps: optim.Adagrad(ps, lr=1e-1, lr_decay=0.01, weight_decay=0.1),
                lambda ps: torch.optim.Adagrad(ps, lr=1e-1, lr_decay=0.01, weight_decay=0.1)),
    "lion": (lambda ps: optim.Lion(ps, lr=1e-3, weight_decay=0.1), None),
}


@pytest.mark.parametrize("gdtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", list(CASES))
def test_ten_steps_against_torch(name, gdtype):
    make, make_ref = CASES[name]
    ours, ref = params(1), params(1)
    opt = make(ours)
    ref_opt = make_ref([torch.nn.Parameter(p) for p in ref]) if make_ref else None
    lion_state = {}
    for step in range(10):
        gs = grads(step, gdtype)
        opt.step(grads=gs)
        wide = [g.float() for g in gs]  # what the kernel reads: the 16-bit values widened
        if ref_opt:
            for p, g in zip(ref_opt.param_groups[0]["params"], wide):
                p.grad = g
            ref_opt.step()
        else:
            lion_reference(ref, wide, 1e-3, (0.9, 0.99), 0.1, lion_state)
    for a, b in zip(ours, ref):
        assert rel(a, b) <= 1e-6, f"{name} with {gdtype} grads: off by {rel(a, b):.2e} of the scale"


def test_same_bits_as_the_c_kernel_and_the_16_bit_copy():
    ours, mine = params(2), params(2)
    opt = optim.CPUAdam(ours, lr=1e-2, weight_decay=0.1)
    m = [torch.zeros_like(p) for p in mine]
    v = [torch.zeros_like(p) for p in mine]
    for step in range(1, 4):
        gs = grads(step)
        out = [torch.empty(p.numel(), dtype=torch.bfloat16) for p in ours]
        opt.step(grads=gs, out=out)
        for p, g, a, b in zip(mine, gs, m, v):  # the scalar kernel on this thread
            h = opt._hparams(opt.param_groups[0], step)
            t = OptimTile(param=p.data_ptr(), exp_avg=a.data_ptr(), exp_avg_sq=b.data_ptr(), grad=g.data_ptr(),
                          grad_dtype=DTYPE_F32, out_dtype=DTYPE_NONE, n=p.numel())
            assert lib.zinf_optim_update(ctypes.byref(h), ctypes.byref(t), 0) == 0
        for p, q, o in zip(ours, mine, out):
            assert torch.equal(p, q)
            assert torch.equal(o, p.to(torch.bfloat16))  # round to nearest even, as torch rounds


def test_state_dicts_move_to_and_from_torch(tmp_path):
    def run(make_first, make_second):
        ps = [torch.nn.Parameter(p) for p in params(3)]
        first = make_first(ps)
        for step in range(6):
            if step == 3:  # saved to a file by torch.save, loaded into the other optimizer
                torch.save(first.state_dict(), tmp_path / "optim.pt")
                second = make_second(ps)
                second.load_state_dict(torch.load(tmp_path / "optim.pt"))
                first = second
            for p, g in zip(ps, grads(step)):
                p.grad = g
            first.step()
        return ps

    zinf_adamw = lambda ps: optim.AdamW(ps, lr=1e-2)
    torch_adamw = lambda ps: torch.optim.AdamW(ps, lr=1e-2)
    ref = run(torch_adamw, torch_adamw)
    for first, second in ((torch_adamw, zinf_adamw), (zinf_adamw, torch_adamw)):
        for a, b in zip(run(first, second), ref):
            assert rel(a.detach(), b.detach()) <= 1e-6


def test_refusals():
    p = [torch.zeros(8)]
    with pytest.raises(zinf.ZinfError, match="amsgrad is not supported"):
        optim.CPUAdam(p, amsgrad=True)
    opt = optim.CPUAdam(p)
    with pytest.raises(zinf.ZinfError, match="grads has 2 entries for 1 parameters"):
        opt.step(grads=[torch.zeros(8), torch.zeros(8)])
    with pytest.raises(zinf.ZinfError, match="gradient of parameter 0 has 4 elements"):
        opt.step(grads=[torch.zeros(4)])
    with pytest.raises(zinf.ZinfError, match=r"out\[0\] is torch.float32"):
        opt.step(grads=[torch.zeros(8)], out=[torch.zeros(8)])
    with pytest.raises(zinf.ZinfError, match="the gradient of parameter 0 is not contiguous"):
        optim.CPUAdam([torch.zeros(4, 2)]).step(grads=[torch.zeros(2, 4).t()])
    with pytest.raises(zinf.ZinfError, match="parameter 0 is torch.float64"):
        optim.CPUAdam([torch.zeros(8, dtype=torch.float64)]).step(grads=[torch.zeros(8)])
    with pytest.raises(zinf.ZinfError, match="lr"):  # the kernel's own check, through the status
        optim.CPUAdam(p, lr=-1.0).step(grads=[torch.zeros(8)])


def test_training_loop_with_states_on_disk(tmp_path):
    """The same model trained twice: states in memory, and states read from and written
    back to a file through zinf.aio around each parameter's update."""
    def train(on_disk):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 4))
        ps = list(model.parameters())
        opt = optim.CPUAdam(ps, lr=1e-2)
        x, y = torch.randn(64, 32), torch.randn(64, 4)
        h = aio.Handle(block_size=64 * 1024) if on_disk else None
        slots, off = [], 0  # per parameter: its states' aligned buffers and their file offset
        for p in ps:
            span = -(-p.numel() * 4 // 4096) * 4096
            slots.append((aio.pinned_empty(span // 4, like="torch"), aio.pinned_empty(span // 4, like="torch"), off))
            off += 2 * span
        losses = []
        for step in range(8):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            losses.append(loss.item())
            if not on_disk:
                opt.step()
                continue
            for i, (p, (m, v, at)) in enumerate(zip(ps, slots)):
                if step > 0:
                    h.async_pread(m, tmp_path / "states", at)
                    h.async_pread(v, tmp_path / "states", at + 4 * m.numel())
                    h.wait()
                    opt.state[p].update(exp_avg=m[:p.numel()].view_as(p), exp_avg_sq=v[:p.numel()].view_as(p))
                opt.step(grads=[p.grad if q is p else None for q in ps])
                m[:p.numel()] = opt.state[p]["exp_avg"].flatten()
                v[:p.numel()] = opt.state[p]["exp_avg_sq"].flatten()
                del opt.state[p]["exp_avg"], opt.state[p]["exp_avg_sq"]  # nothing of it stays in memory
                h.async_pwrite(m, tmp_path / "states", at)
                h.async_pwrite(v, tmp_path / "states", at + 4 * m.numel())
            h.wait()
        return losses, [p.detach().clone() for p in ps]

    mem_losses, mem_params = train(False)
    disk_losses, disk_params = train(True)
    assert disk_losses == mem_losses and mem_losses[-1] < mem_losses[0]
    assert all(torch.equal(a, b) for a, b in zip(mem_params, disk_params))
