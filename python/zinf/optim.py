"""zinf's CPU optimizers as torch.optim optimizers over CPU parameters: the kernels of
cpu_adam/ (AVX-512, AVX2 or scalar, the same bits at every level) on zinf's pinned
thread pool.

Parameters live on the CPU in fp32, bf16 or fp16, as DeepSpeed's CPU optimizers take
them: a 16-bit parameter is widened to fp32, updated, and rounded back to its dtype
(round to nearest even). The states are fp32, or with fp32_optimizer_states=False of the
parameter's dtype, widened and rounded the same way. Gradients are .grad, or any of
fp32, bf16 and fp16 given to step(grads=...) (torch allows a parameter only a .grad of
its own dtype). step(out=...) also writes each updated parameter rounded to bf16 or fp16
into a tensor of the caller's (pinned staging bound for the GPU, say) in the same pass.
The state is torch's own layout ("step", "exp_avg", "exp_avg_sq"; Adagrad's "sum"), so
state_dict() and load_state_dict() move between these and torch.optim.Adam, AdamW and
Adagrad. Adagrad also takes sparse gradients (an embedding's), as torch.optim.Adagrad
does: only the rows they hold are updated.

DeepSpeed's step_subgroup(id) and rollback_subgroup(id) update every parameter with a
gradient from the state of sub-group id (created at its first step, kept apart from
step()'s), and undo the last such update: Adam's step solved backwards from the state
and the gradient it used (which must still be .grad), in float64, so the previous
values come back within rounding, not bit for bit (DeepSpeed's rollback is the same
inverse).
"""
import ctypes
import math
import mmap

import torch

from ._lib import (DTYPE_BF16, DTYPE_F16, DTYPE_F32, DTYPE_NONE, OPTIM_ADAGRAD, OPTIM_ADAM, OPTIM_ADAMW, OPTIM_LION,
                   OptimHparams, OptimTile, ZinfError, check_status, lib)

_DTYPES = {torch.float32: DTYPE_F32, torch.bfloat16: DTYPE_BF16, torch.float16: DTYPE_F16}


class _Pool:
    """zinf's CPU thread pool (threads 0: one per physical core)."""

    def __init__(self, threads):
        self.p = ctypes.c_void_p()
        check_status(lib.zinf_cpu_pool_create(ctypes.byref(self.p), int(threads or 0)))

    def __del__(self):
        if getattr(self, "p", None):
            lib.zinf_cpu_pool_destroy(self.p)


def _zeros_like(p):
    """An fp32 state tensor of p's shape in zeroed memory, in transparent huge pages when
    it spans some (as the engine keeps its optimizer states): the update streams it, and
    huge pages spare the TLB misses of 4 KiB ones."""
    nbytes = p.numel() * 4
    if nbytes < 4 << 20 or not hasattr(mmap, "MADV_HUGEPAGE"):
        return torch.zeros(p.shape, dtype=torch.float32)
    m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # zeroed by the kernel
    m.madvise(mmap.MADV_HUGEPAGE)
    return torch.frombuffer(m, dtype=torch.float32).view(p.shape)  # the tensor keeps m alive


def _cpu(t, what, dtypes):
    fault = (f"is on {t.device}" if t.device.type != "cpu" else "is sparse" if t.is_sparse else
             "is not contiguous" if not t.is_contiguous() else None)
    if fault:
        raise ZinfError(f"zinf.optim: {what} {fault}; it must be a dense, contiguous CPU tensor")
    if t.dtype not in dtypes:
        raise ZinfError(f"zinf.optim: {what} is {t.dtype}; it must be one of {', '.join(map(str, dtypes))}")
    return t.data_ptr()


class _Optimizer(torch.optim.Optimizer):
    # The state tensors: the kernel's field for each, and torch's name for it.
    _states = {"exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq"}
    _takes_sparse = False  # sparse gradients: torch's Adagrad takes them, its Adam does not

    def __init__(self, params, defaults, threads, fp32_optimizer_states=True):
        super().__init__(params, defaults)
        self._pool = _Pool(threads)
        self.fp32_optimizer_states = fp32_optimizer_states

    def _kind(self):
        raise NotImplementedError

    def _hparams(self, group, step):
        b1, b2 = group.get("betas", (0.0, 0.0))
        return OptimHparams(kind=self._kind(), lr=group["lr"], beta1=b1, beta2=b2, eps=group.get("eps", 0.0),
                            weight_decay=group["weight_decay"], lr_decay=group.get("lr_decay", 0.0),
                            bias_correction=group.get("bias_correction", True), step=step)

    @torch.no_grad()
    def step(self, closure=None, grads=None, out=None):
        """One update of every parameter with a gradient. grads: a gradient per parameter
        (fp32, bf16 or fp16; None skips it) in param_groups order, instead of .grad.
        out: a bf16 or fp16 tensor per parameter (or None) that receives the updated
        values."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        params = [p for g in self.param_groups for p in g["params"]]
        for what, given in (("grads", grads), ("out", out)):
            if given is not None and len(given) != len(params):
                raise ZinfError(f"zinf.optim: {what} has {len(given)} entries for {len(params)} parameters")
        i = 0
        for group in self.param_groups:
            for p in group["params"]:
                g = grads[i] if grads is not None else p.grad
                o = out[i] if out is not None else None
                i += 1
                if g is not None:
                    self._update(group, p, g, o, i - 1)
        return loss

    def _update(self, group, p, g, o, i, st=None):
        name = f"parameter {i}"
        _cpu(p, name, tuple(_DTYPES))
        if not g.is_sparse:
            _cpu(g, f"the gradient of {name}", tuple(_DTYPES))
        if g.numel() != p.numel():
            raise ZinfError(f"zinf.optim: the gradient of {name} has {g.numel()} elements, the parameter {p.numel()}")
        if o is not None:
            _cpu(o, f"out[{i}]", (torch.bfloat16, torch.float16))
            if o.numel() != p.numel():
                raise ZinfError(f"zinf.optim: out[{i}] has {o.numel()} elements, {name} {p.numel()}")
        st = self.state[p] if st is None else st
        if not st:
            st["step"] = torch.tensor(0.0)
            for k in self._states.values():
                st[k] = _zeros_like(p) if self.fp32_optimizer_states or p.dtype == torch.float32 else \
                    torch.zeros_like(p, memory_format=torch.contiguous_format)
        st["step"] += 1
        h = self._hparams(group, int(st["step"].item()))
        states = [(field, st[k]) for field, k in self._states.items()]
        if g.is_sparse:
            self._sparse(p, g, states, h, name)
        else:
            self._kernel(p, g, o, states, h, name)

    def _kernel(self, p, g, o, states, h, name):
        """The C kernel over dense tensors: 16-bit parameters and states through fp32
        copies, rounded back after (the parameter as the kernel's 16-bit output)."""
        tile = OptimTile(n=p.numel(), grad=g.data_ptr(), grad_dtype=_DTYPES[g.dtype], out_dtype=DTYPE_NONE)
        wide = p if p.dtype == torch.float32 else p.float()
        tile.param = wide.data_ptr()
        if p.dtype != torch.float32:
            tile.out, tile.out_dtype = p.data_ptr(), _DTYPES[p.dtype]
        elif o is not None:
            tile.out, tile.out_dtype = o.data_ptr(), _DTYPES[o.dtype]
        back = []
        for field, t in states:
            w = t if t.dtype == torch.float32 else t.float()
            _cpu(w, f"state {field} of {name}", (torch.float32,))
            setattr(tile, field, w.data_ptr())
            if w is not t:
                back.append((t, w))
        check_status(lib.zinf_optim_step(self._pool.p, ctypes.byref(h), ctypes.byref(tile)))
        for t, w in back:
            t.copy_(w)
        if o is not None and p.dtype != torch.float32:
            o.copy_(p)

    def _sparse(self, p, g, states, h, name):
        """A sparse gradient (Adagrad): the kernel over the entries it holds, gathered and
        put back; torch.optim.Adagrad's update of those entries."""
        if not self._takes_sparse:
            raise ZinfError(f"zinf.optim: the gradient of {name} is sparse; only Adagrad takes sparse gradients")
        if h.weight_decay:
            raise ZinfError(f"zinf.optim: the gradient of {name} is sparse, and weight_decay is not 0: torch's "
                            "Adagrad refuses that pair too")
        g = g.coalesce()
        mask = torch.zeros(p.shape, dtype=torch.bool)
        mask[tuple(g.indices())] = True  # the entries, or with dense values whole rows
        at = mask.reshape(-1).nonzero().squeeze(1)
        dense_g = g.to_dense().reshape(-1)[at].contiguous()
        sub_p = p.reshape(-1)[at].contiguous()
        sub_states = [(field, t.reshape(-1)[at].contiguous()) for field, t in states]
        self._kernel(sub_p, dense_g, None, sub_states, h, name)
        p.reshape(-1)[at] = sub_p
        for (_, t), (_, sub) in zip(states, sub_states):
            t.reshape(-1)[at] = sub

class CPUAdam(_Optimizer):
    """Adam over CPU parameters, DeepSpeedCPUAdam's arguments: adamw_mode (default)
    decays the weights as torch.optim.AdamW does, otherwise as torch.optim.Adam (L2)."""

    def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, adamw_mode=True, fp32_optimizer_states=True, threads=0):
        if amsgrad:
            raise ZinfError("zinf.optim: amsgrad is not supported (zinf's Adam keeps no max_exp_avg_sq)")
        self.adamw_mode = adamw_mode
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      bias_correction=bias_correction), threads, fp32_optimizer_states)

    def _kind(self):
        return OPTIM_ADAMW if self.adamw_mode else OPTIM_ADAM

    def _with_grad(self, what):
        """The parameter with a gradient, with its group and index: a sub-group's state
        serves one parameter, as ZeRO-Offload hands a sub-group over."""
        found = [(g, i, p) for i, (g, p) in enumerate((g, p) for g in self.param_groups for p in g["params"])
                 if p.grad is not None]
        if len(found) > 1:
            raise ZinfError(f"zinf.optim: {what}: {len(found)} parameters have gradients; a sub-group's state "
                            "serves one")
        return found

    @torch.no_grad()
    def step_subgroup(self, subgroup_id, closure=None):
        """DeepSpeed's: update the parameter with a .grad from sub-group subgroup_id's
        state, made at its first step."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group, i, p in self._with_grad("step_subgroup"):
            self._update(group, p, p.grad, None, i, self.state[subgroup_id])
        return loss

    @torch.no_grad()
    def rollback_subgroup(self, sub_group_id, closure=None):
        """DeepSpeed's: undo sub-group sub_group_id's last step_subgroup with the same
        .grad, within rounding; its step count goes down by one."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if sub_group_id not in self.state or not self.state[sub_group_id]:
            raise ZinfError(f"Cannot rollback optimizer state for sub_group_id {sub_group_id} "
                            "as it has not been initialized.")
        st = self.state[sub_group_id]
        if st["step"] <= 0:
            raise ZinfError(f"Cannot rollback sub_group_id {sub_group_id}: step count is {int(st['step'])}")
        for group, _, p in self._with_grad("rollback_subgroup"):
            self._unstep(group, p, p.grad, st)
        st["step"] -= 1
        return loss

    def _unstep(self, group, p, g, st):
        """Adam's step solved backwards (cpu_adam's adam_elem) in float64: from the new
        parameter, moments and the gradient to the ones before."""
        lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        t = int(st["step"].item())
        bc1, bc2 = (1 - b1 ** t, 1 - b2 ** t) if group["bias_correction"] else (1, 1)
        x, m, v, g = p.double(), st["exp_avg"].double(), st["exp_avg_sq"].double(), g.double()
        x = x + (lr / bc1) * m / (v.sqrt() / math.sqrt(bc2) + eps)
        if self.adamw_mode:
            x = x / (1 - lr * wd)
        else:  # L2: the step's gradient held the decay of the parameter before it
            g = g + wd * x
        p.copy_(x)
        st["exp_avg"].copy_((m - (1 - b1) * g) / b1)
        st["exp_avg_sq"].copy_(((v - (1 - b2) * g * g) / b2).clamp_(min=0))


class AdamW(CPUAdam):
    """torch.optim.AdamW's arguments and defaults (weight_decay 0.01)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, fp32_optimizer_states=True,
                 threads=0):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, adamw_mode=True,
                         fp32_optimizer_states=fp32_optimizer_states, threads=threads)


class Adagrad(_Optimizer):
    """torch.optim.Adagrad with initial_accumulator_value 0; its state "sum"."""
    _states = {"exp_avg_sq": "sum"}
    _takes_sparse = True

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, eps=1e-10, fp32_optimizer_states=True, threads=0):
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay, eps=eps), threads,
                         fp32_optimizer_states)

    def _kind(self):
        return OPTIM_ADAGRAD


class Lion(_Optimizer):
    """Lion (Chen et al. 2023): the sign of an interpolated momentum, decoupled weight
    decay; its state "exp_avg"."""
    _states = {"exp_avg": "exp_avg"}

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0, fp32_optimizer_states=True, threads=0):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay), threads, fp32_optimizer_states)

    def _kind(self):
        return OPTIM_LION
