"""zinf's CPU optimizers as torch.optim optimizers over CPU parameters: the kernels of
cpu_adam/ (AVX-512, AVX2 or scalar, the same bits at every level) on zinf's pinned
thread pool.

Parameters are fp32 master weights on the CPU. Gradients are their .grad, or any of
fp32, bf16 and fp16 given to step(grads=...) (torch allows a parameter only a .grad of
its own dtype). step(out=...) also writes each updated parameter rounded to bf16 or fp16
into a tensor of the caller's (pinned staging bound for the GPU, say) in the same pass.
The state is torch's own layout ("step", "exp_avg", "exp_avg_sq"; Adagrad's "sum"), so
state_dict() and load_state_dict() move between these and torch.optim.Adam, AdamW and
Adagrad.
"""
import ctypes
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
    """A state tensor of p's shape in zeroed memory, in transparent huge pages when it
    spans some (as the engine keeps its optimizer states): the update streams it, and
    huge pages spare the TLB misses of 4 KiB ones."""
    nbytes = p.numel() * 4
    if nbytes < 4 << 20 or not hasattr(mmap, "MADV_HUGEPAGE"):
        return torch.zeros_like(p, memory_format=torch.contiguous_format)
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

    def __init__(self, params, defaults, threads):
        super().__init__(params, defaults)
        self._pool = _Pool(threads)

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

    def _update(self, group, p, g, o, i):
        name = f"parameter {i}"
        tile = OptimTile(param=_cpu(p, name, (torch.float32,)), n=p.numel())
        tile.grad, tile.grad_dtype = _cpu(g, f"the gradient of {name}", tuple(_DTYPES)), _DTYPES[g.dtype]
        if g.numel() != p.numel():
            raise ZinfError(f"zinf.optim: the gradient of {name} has {g.numel()} elements, the parameter {p.numel()}")
        tile.out_dtype = DTYPE_NONE
        if o is not None:
            tile.out = _cpu(o, f"out[{i}]", (torch.bfloat16, torch.float16))
            tile.out_dtype = _DTYPES[o.dtype]
            if o.numel() != p.numel():
                raise ZinfError(f"zinf.optim: out[{i}] has {o.numel()} elements, {name} {p.numel()}")
        st = self.state[p]
        if not st:
            st["step"] = torch.tensor(0.0)
            for k in self._states.values():
                st[k] = _zeros_like(p)
        st["step"] += 1
        for field, k in self._states.items():
            setattr(tile, field, _cpu(st[k], f"state {k} of {name}", (torch.float32,)))
        h = self._hparams(group, int(st["step"].item()))
        check_status(lib.zinf_optim_step(self._pool.p, ctypes.byref(h), ctypes.byref(tile)))


class CPUAdam(_Optimizer):
    """Adam over CPU parameters, DeepSpeedCPUAdam's arguments: adamw_mode (default)
    decays the weights as torch.optim.AdamW does, otherwise as torch.optim.Adam (L2)."""

    def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, adamw_mode=True, threads=0):
        if amsgrad:
            raise ZinfError("zinf.optim: amsgrad is not supported (zinf's Adam keeps no max_exp_avg_sq)")
        self.adamw_mode = adamw_mode
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      bias_correction=bias_correction), threads)

    def _kind(self):
        return OPTIM_ADAMW if self.adamw_mode else OPTIM_ADAM


class AdamW(CPUAdam):
    """torch.optim.AdamW's arguments and defaults (weight_decay 0.01)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, threads=0):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, adamw_mode=True,
                         threads=threads)


class Adagrad(_Optimizer):
    """torch.optim.Adagrad with initial_accumulator_value 0; its state "sum"."""
    _states = {"exp_avg_sq": "sum"}

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, eps=1e-10, threads=0):
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay, eps=eps), threads)

    def _kind(self):
        return OPTIM_ADAGRAD


class Lion(_Optimizer):
    """Lion (Chen et al. 2023): the sign of an interpolated momentum, decoupled weight
    decay; its state "exp_avg"."""
    _states = {"exp_avg": "exp_avg"}

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0, threads=0):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay), threads)

    def _kind(self):
        return OPTIM_LION
