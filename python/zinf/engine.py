"""zinf.Engine: zinf's training engine from Python, one process per rank as `zinf train`
(under mpirun for several). The program gives each step's token windows; the engine does
the rest as the CLI does: forward and backward per micro-batch, the step, checkpoints.

    with zinf.Engine("examples/gpt-bytes-zero3.json", set={"model.n_layer": 2}) as engine:
        figures = engine.train_batch(windows)   # (accumulation x micro, seq_len + 1) ids

The config is a DeepSpeed-style file or dict, validated by zinf's own parser; `set`
overrides keys as `zinf train --set` does. Before the engine allocates anything the plan
is judged on every rank, and a plan past a budget raises ZinfError as the CLI refuses it.
"""
import atexit
import ctypes
import json
import os

import numpy as np

from . import plan as _plan
from ._lib import ZinfError, abi, c_ptr, check_status, lib, libc_free

STATE_PARAM, STATE_GRAD, STATE_EXP_AVG, STATE_EXP_AVG_SQ = (abi(f"ZINF_STATE_{k}") for k in
                                                             ("PARAM", "GRAD", "EXP_AVG", "EXP_AVG_SQ"))
_OPTIMIZER_STATES = {"exp_avg": STATE_EXP_AVG, "exp_avg_sq": STATE_EXP_AVG_SQ}

# zinf_step_info's fields as train_batch returns them (names as `zinf train --json` has them).
_STEP_FIELDS = [("step", ctypes.c_int64), ("loss", ctypes.c_double), ("lr", ctypes.c_double),
                ("grad_norm", ctypes.c_double), ("loss_scale", ctypes.c_double), ("skipped", ctypes.c_bool),
                ("step_seconds", ctypes.c_double), ("wait_params_s", ctypes.c_double),
                ("wait_params_nvme_s", ctypes.c_double),
                ("optim_s", ctypes.c_double), ("optim_io_wait_s", ctypes.c_double), ("wait_optim_s", ctypes.c_double),
                ("optim_backward_s", ctypes.c_double), ("optim_speculated", ctypes.c_int),
                ("optim_rolled_back", ctypes.c_int), ("nvme_read_bytes", ctypes.c_int64),
                ("nvme_write_bytes", ctypes.c_int64), ("nvme_read_s", ctypes.c_double),
                ("nvme_write_s", ctypes.c_double), ("param_handoff_bytes", ctypes.c_int64),
                ("comm_bytes_intra", ctypes.c_int64), ("comm_bytes_inter", ctypes.c_int64),
                ("simulated", ctypes.c_bool)]
_MEMORY_FIELDS = [("device_in_use", "device_bytes"), ("device_peak", "device_peak_bytes"), ("pinned", "pinned_bytes"),
                  ("nvme", "nvme_bytes")]


def _read(buf, struct, field, ctype):
    """The field of a C struct held in buf, at the offset the library gives for it."""
    return ctype.from_address(ctypes.addressof(buf) + abi(f"{struct}.{field}")).value


def _struct(name):
    """A zeroed buffer of the library's size for struct name, aligned as its doubles and
    pointers need."""
    return (ctypes.c_uint64 * ((abi(name) + 7) // 8))()


_process_comm = None  # the job's communicator: one per process, kept until exit (MPI starts once)


def _comm():
    global _process_comm
    if _process_comm is None:
        comm = c_ptr()
        check_status(lib.zinf_comm_create(ctypes.byref(comm), abi("ZINF_COMM_AUTO"), 0.0))
        _process_comm = comm
        atexit.register(lib.zinf_comm_destroy, comm)
    return _process_comm


def _sets(set):
    return [f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in (set or {}).items()]


class Engine:
    """One rank's engine. config: a path or a dict of DeepSpeed keys (plus zinf's `model`
    section); set: {"key.path": value} overrides. Every rank makes the same calls in the
    same order, as with DeepSpeed's engine."""

    def __init__(self, config, *, set=None):
        self._engine = self._comm = None
        self._cfg = _struct("zinf_config")
        self._cfg_loaded = False
        self._config, self._set = config, dict(set or {})
        if isinstance(config, dict):
            text, name = json.dumps(config), "the config dict"
        else:
            name = os.fspath(config)
            try:
                with open(name) as f:
                    text = f.read()
            except OSError as e:
                raise ZinfError(f"{name}: {e.strerror}: give a config file's path or a dict") from None
        sets = _sets(set)
        argv = (ctypes.c_char_p * max(len(sets), 1))(*[s.encode() for s in sets])
        opts = _struct("zinf_config_options")
        for field, ctype, value in (("sets", ctypes.c_void_p, ctypes.addressof(argv)), ("nsets", ctypes.c_int, len(sets)),
                                    ("world_size", ctypes.c_int, 0)):
            ctype.from_address(ctypes.addressof(opts) + abi(f"zinf_config_options.{field}")).value = value
        check_status(lib.zinf_config_parse(self._cfg, text.encode(), name.encode(), opts))
        self._cfg_loaded = True
        out = c_ptr()
        check_status(lib.zinf_config_to_json(self._cfg, ctypes.cast(ctypes.byref(out), ctypes.POINTER(ctypes.c_char_p))))
        try:
            self.config = json.loads(ctypes.string_at(out).decode())  # normalized, every default filled in
        finally:
            libc_free(out)
        self._comm = comm = _comm()
        self.rank, self.world_size = lib.zinf_comm_rank(comm), lib.zinf_comm_size(comm)
        self._admit()
        engine = c_ptr()
        check_status(lib.zinf_engine_create(ctypes.byref(engine), self._cfg, comm))
        self._engine = engine
        params = lib.zinf_model_get_params(lib.zinf_engine_model(engine))
        at = lambda f: ctypes.c_int.from_address(params + abi(f"zinf_model_params.{f}")).value  # noqa: E731
        self.seq_len, self.micro_batch, self.vocab_size = at("seq_len"), at("batch"), at("shape.vocab_size")
        self.gradient_accumulation_steps = self.config["gradient_accumulation_steps"]
        self.train_batch_size = self.config["train_batch_size"]
        self.global_steps = 0
        self.data_position = 0  # training sequences consumed, as checkpoints store it

    def _admit(self):
        """The plan's verdict on every rank before anything is allocated: one rank's refusal
        is every rank's, as in `zinf train`."""
        target, plan = _struct("zinf_plan_target"), _struct("zinf_plan")
        check_status(lib.zinf_engine_target(self._cfg, self._comm, target))
        check_status(lib.zinf_engine_plan(self._cfg, target, plan))
        st = lib.zinf_plan_verdict(plan)
        message = lib.zinf_last_error().decode(errors="replace")
        refused = ctypes.c_double(st != 0)
        check_status(lib.zinf_comm_allreduce_f64(self._comm, ctypes.byref(refused), 1))
        if st != 0:
            raise ZinfError(message)
        if refused.value > 0:
            raise ZinfError("the plan does not fit on another rank: see its error")

    def plan(self):
        """The plan of this config as `zinf estimate --json` gives it: bytes per tier and
        budget, and the verdict ("fits")."""
        return _plan.estimate(self._config, set=self._set)["plan"]

    # ---- steps ----

    def _live(self):
        if not self._engine:
            raise ZinfError("this zinf.Engine is closed")
        return self._engine

    def _windows(self, tokens, rows, what):
        """tokens (torch or NumPy integers) as int32 windows of seq_len + 1 ids, rows of them."""
        if hasattr(tokens, "detach"):  # a torch tensor
            tokens = tokens.detach().cpu().numpy()
        a = np.asarray(tokens)
        if a.dtype.kind not in "iu":
            raise ZinfError(f"{what}: tokens are {a.dtype}; give integer token ids")
        want = f"({rows}, {self.seq_len + 1})"
        if a.ndim != 2 or a.shape[1] != self.seq_len + 1 or (rows and a.shape[0] != rows) or not a.shape[0]:
            raise ZinfError(f"{what}: tokens have shape {tuple(a.shape)}; want {want if rows else f'(n, {self.seq_len + 1})'}"
                            f": windows of seq_len + 1 = {self.seq_len + 1} ids, the last {self.seq_len} the targets"
                            + (f", gradient_accumulation_steps x train_micro_batch_size_per_gpu = {rows} of them"
                               if rows else ""))
        if a.min() < 0 or a.max() >= self.vocab_size:
            bad = int(a.min()) if a.min() < 0 else int(a.max())
            raise ZinfError(f"{what}: token id {bad} is outside the vocabulary [0, {self.vocab_size})")
        return a.astype(np.int32)

    def _forward(self, windows):
        n = windows.shape[0]
        inputs = np.ascontiguousarray(windows[:, :-1])
        targets = np.ascontiguousarray(windows[:, 1:])
        loss = ctypes.c_double()
        check_status(lib.zinf_engine_forward(self._live(), inputs.ctypes.data, targets.ctypes.data, n,
                                             ctypes.byref(loss)))
        return loss.value

    def train_batch(self, tokens):
        """One optimizer step on this rank's part of the global batch: tokens holds
        gradient_accumulation_steps x train_micro_batch_size_per_gpu windows of seq_len + 1
        ids (micro-batch m is rows m*micro to m*micro + micro - 1; the last seq_len ids of a
        window are its targets). Returns the step's figures as `zinf train --json` prints
        them: loss (the mean over every rank's micro-batches), lr, grad_norm, loss_scale,
        skipped, step_seconds (from the first forward) and tokens_per_s, the stall seconds
        and the bytes moved."""
        windows = self._windows(tokens, self.gradient_accumulation_steps * self.micro_batch, "train_batch")
        for m in range(self.gradient_accumulation_steps):
            self._forward(windows[m * self.micro_batch:(m + 1) * self.micro_batch])
            check_status(lib.zinf_engine_backward(self._live()))
        info = _struct("zinf_step_info")
        check_status(lib.zinf_engine_step(self._live(), info))
        figures = {name: _read(info, "zinf_step_info", name, ctype) for name, ctype in _STEP_FIELDS}
        figures["tokens_per_s"] = self.train_batch_size * self.seq_len / figures["step_seconds"]
        memory = _struct("zinf_engine_memory")
        lib.zinf_engine_memory_get(self._live(), memory)
        figures.update((key, _read(memory, "zinf_engine_memory", field, ctypes.c_int64))
                       for field, key in _MEMORY_FIELDS)
        self.global_steps = figures["step"]
        self.data_position += self.train_batch_size
        return figures

    def eval_batch(self, tokens):
        """The mean loss of tokens (any number of windows of seq_len + 1 ids, as in
        train_batch) over every rank, without a backward: the weights do not change."""
        windows = self._windows(tokens, 0, "eval_batch")
        total = np.zeros(2)
        for i in range(0, windows.shape[0], self.micro_batch):
            w = windows[i:i + self.micro_batch]
            total += (self._forward(w) * w.shape[0], w.shape[0])
        check_status(lib.zinf_comm_allreduce_f64(self._comm, total.ctypes.data, 2))
        return float(total[0] / total[1])

    # ---- full tensors (DeepSpeed's safe_get_full_* and safe_set_full_*) ----

    def _param(self, name):
        mod = ctypes.c_int()
        info = lib.zinf_model_find_param(lib.zinf_engine_model(self._live()), name.encode(), ctypes.byref(mod))
        if not info:
            raise ZinfError(f"no parameter \"{name}\" in this model: names are Hugging Face's, e.g. "
                            "\"h.0.attn.c_attn.weight\" (GPT-2, without `transformer.`) or "
                            "\"model.layers.0.self_attn.q_proj.weight\"")
        ndim = ctypes.c_int.from_address(info + abi("zinf_param_info.ndim")).value
        shape = (ctypes.c_int64 * 2).from_address(info + abi("zinf_param_info.shape"))
        return tuple(shape[:ndim])

    def _get(self, name, kind):
        import torch

        out = torch.empty(self._param(name), dtype=torch.float32)
        check_status(lib.zinf_engine_get_full(self._live(), name.encode(), kind, out.data_ptr()))
        return out

    def _set_full(self, name, kind, value):
        shape = self._param(name)
        if hasattr(value, "detach"):
            value = value.detach().cpu().numpy()
        a = np.ascontiguousarray(value, dtype=np.float32)
        if a.shape != shape:
            raise ZinfError(f"{name}: the value has shape {a.shape}; the parameter is {shape}")
        check_status(lib.zinf_engine_set_full(self._live(), name.encode(), kind, a.ctypes.data))

    def safe_get_full_fp32_param(self, name):
        """The fp32 master weights of parameter name, whole, on every rank. Collective."""
        return self._get(name, STATE_PARAM)

    def safe_get_full_grad(self, name):
        """Its gradient accumulated since the last step, unscaled. Collective."""
        return self._get(name, STATE_GRAD)

    def safe_get_full_optimizer_state(self, name, optim_state_key):
        """Its "exp_avg" or "exp_avg_sq", whole. Collective."""
        return self._get(name, self._state_kind(optim_state_key))

    def safe_set_full_fp32_param(self, name, value):
        """Set its fp32 master weights (and the 16-bit copy) on every rank. Collective:
        every rank passes the same value."""
        self._set_full(name, STATE_PARAM, value)

    def safe_set_full_optimizer_state(self, name, value, optim_state_key):
        """Set its "exp_avg" or "exp_avg_sq". Collective."""
        self._set_full(name, self._state_kind(optim_state_key), value)

    @staticmethod
    def _state_kind(key):
        if key not in _OPTIMIZER_STATES:
            raise ZinfError(f"optim_state_key \"{key}\": Adam's states are \"exp_avg\" and \"exp_avg_sq\"")
        return _OPTIMIZER_STATES[key]

    def weights_digest(self):
        """A digest of the fp32 master weights, the one `zinf train` ends with. Collective."""
        out = ctypes.create_string_buffer(17)
        check_status(lib.zinf_engine_weights_digest(self._live(), out))
        return out.value.decode()

    # ---- checkpoints (zinf's format, which `zinf train` resumes from) ----

    def save_checkpoint(self, save_dir, *, keep=0):
        """Save the states after the last step as save_dir/global_step<N> and point
        save_dir/latest at it, keeping the newest `keep` (0: all). Collective."""
        check_status(lib.zinf_engine_save(self._live(), os.fspath(save_dir).encode(), keep, self.data_position,
                                          self.config["seed"]))

    def load_checkpoint(self, load_dir):
        """Load a checkpoint (a directory with `latest`, or a step directory) saved at any
        stage and world size. Returns {"dir", "step", "data_position", "seed", "world_size"}.
        Collective."""
        r = _struct("zinf_ckpt_resume")
        check_status(lib.zinf_engine_load(self._live(), os.fspath(load_dir).encode(), r))
        out = {k: _read(r, "zinf_ckpt_resume", k, ctypes.c_int64) for k in ("step", "data_position", "seed")}
        out["world_size"] = _read(r, "zinf_ckpt_resume", "world_size", ctypes.c_int)
        out["dir"] = ctypes.string_at(ctypes.addressof(r) + abi("zinf_ckpt_resume.dir")).decode()
        self.global_steps, self.data_position = out["step"], out["data_position"]
        return out

    # ---- the end ----

    def close(self):
        """Free the engine and the config. The engine is unusable after; the process stays
        in the job (MPI starts once a process), so another Engine may follow."""
        if self._engine:
            lib.zinf_engine_destroy(self._engine)
            self._engine = None
        self._comm = None
        if self._cfg_loaded:
            lib.zinf_config_free(self._cfg)
            self._cfg_loaded = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()
