"""libzinf through ctypes: where the library is (and the zinf CLI, always beside it),
its failures as exceptions, and the C structs the package hands it (mirrors of
include/zinf/zinf_aio.h and include/zinf/zinf_adam.h)."""
import ctypes
import os
import pathlib


class ZinfError(RuntimeError):
    """A zinf call failed. The message is zinf's own: what failed, on which file, key or
    value, and why."""


def _find():
    if os.environ.get("ZINF_LIB"):
        return os.environ["ZINF_LIB"]
    here = pathlib.Path(__file__).resolve().parent
    # Installed: what pip put in _bin/. From the source tree: make's.
    for p in (here / "_bin" / "libzinf.so", here.parents[1] / "build" / "libzinf.so"):
        if p.exists():
            return str(p)
    raise ImportError("zinf: libzinf.so not found: run `make` in the zinf tree, "
                      "`pip install ./python`, or set ZINF_LIB to the library's path")


LIB_PATH = _find()
try:
    # Before libzinf: both link NCCL and the CUDA runtime, and the dynamic linker serves
    # a library's soname to whoever comes later from whichever copy came first. torch
    # needs its own (newer) copies; libzinf runs on them as well.
    import torch  # noqa: F401
except ImportError:
    pass
lib = ctypes.CDLL(LIB_PATH)
CLI_PATH = os.path.join(os.path.dirname(LIB_PATH), "zinf")

c_size = ctypes.c_size_t
c_ptr = ctypes.c_void_p

# zinf_dtype
DTYPE_NONE, DTYPE_F32, DTYPE_BF16, DTYPE_F16 = 0, 1, 2, 3
# zinf_optimizer
OPTIM_ADAM, OPTIM_ADAMW, OPTIM_ADAGRAD, OPTIM_LION = 0, 1, 2, 3


def last_error():
    return lib.zinf_last_error().decode(errors="replace")


def check_status(st):
    """Raise ZinfError for a zinf_status other than ZINF_OK."""
    if st != 0:
        raise ZinfError(last_error() or lib.zinf_status_str(st).decode())


def check_errno(rc):
    """Raise ZinfError for a negative errno return (the aio functions')."""
    if rc < 0:
        raise ZinfError(last_error() or os.strerror(-rc))


class AioParams(ctypes.Structure):
    _fields_ = [("block_size", ctypes.c_uint32), ("queue_depth", ctypes.c_uint32), ("threads", ctypes.c_uint32),
                ("sqpoll", ctypes.c_bool), ("use_threads", ctypes.c_bool)]


class AioFileConfig(ctypes.Structure):
    _fields_ = [("dirs", ctypes.POINTER(ctypes.c_char_p)), ("ndirs", ctypes.c_int), ("name", ctypes.c_char_p),
                ("size", ctypes.c_uint64), ("stripe_unit", ctypes.c_uint64), ("strict_direct", ctypes.c_bool),
                ("keep", ctypes.c_bool), ("check", c_ptr), ("check_arg", c_ptr)]


class AioStats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("requests", "fixed_buffer", "fixed_file", "resubmitted",
                                               "read_bytes", "write_bytes")] + \
               [("read_busy_ns", ctypes.c_int64), ("write_busy_ns", ctypes.c_int64)]


class OptimHparams(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int)] + \
               [(n, ctypes.c_double) for n in ("lr", "beta1", "beta2", "eps", "weight_decay", "lr_decay")] + \
               [("bias_correction", ctypes.c_bool), ("step", ctypes.c_int64), ("grad_scale", ctypes.c_float)]


class OptimTile(ctypes.Structure):
    _fields_ = [("param", c_ptr), ("exp_avg", c_ptr), ("exp_avg_sq", c_ptr), ("grad", c_ptr), ("grad_dtype", ctypes.c_int),
                ("out", c_ptr), ("out_dtype", ctypes.c_int), ("n", c_size),
                ("from_param", c_ptr), ("from_exp_avg", c_ptr), ("from_exp_avg_sq", c_ptr)]


def _check_mirrors():
    """The structs and constants above against the library's own (zinf_abi): a package
    and a library from different builds would otherwise pass fields at wrong offsets."""
    lib.zinf_abi.restype, lib.zinf_abi.argtypes = ctypes.c_int64, [ctypes.c_char_p]
    want = {"ZINF_OK": 0, "ZINF_DTYPE_NONE": DTYPE_NONE, "ZINF_DTYPE_F32": DTYPE_F32, "ZINF_DTYPE_BF16": DTYPE_BF16,
            "ZINF_DTYPE_F16": DTYPE_F16, "ZINF_OPTIM_ADAM": OPTIM_ADAM, "ZINF_OPTIM_ADAMW": OPTIM_ADAMW,
            "ZINF_OPTIM_ADAGRAD": OPTIM_ADAGRAD, "ZINF_OPTIM_LION": OPTIM_LION}
    for struct, name in ((AioParams, "zinf_aio_params"), (AioFileConfig, "zinf_aio_file_config"),
                         (AioStats, "zinf_aio_stats"), (OptimHparams, "zinf_optim_hparams"),
                         (OptimTile, "zinf_optim_tile")):
        want[name] = ctypes.sizeof(struct)
        want.update((f"{name}.{field}", getattr(struct, field).offset) for field, _ in struct._fields_)
    for name, value in want.items():
        got = lib.zinf_abi(name.encode())
        if got != value:
            raise ImportError(f"zinf: {LIB_PATH} has {name} = {got} where this package has {value} "
                              "(-1: the library does not know it): install the package and the library "
                              "from the same build")


_check_mirrors()


def abi(name):
    """A size, a field offset or a constant of the library (zinf_abi), for the structs the
    package holds as opaque buffers of the library's size and reads by field."""
    value = lib.zinf_abi(name.encode())
    if value < 0:
        raise ImportError(f"zinf: {LIB_PATH} does not know {name}: install the package and the library from the "
                          "same build")
    return value


def _sig(name, res, *args):
    f = getattr(lib, name)
    f.restype, f.argtypes = res, list(args)


_sig("zinf_last_error", ctypes.c_char_p)
_sig("zinf_status_str", ctypes.c_char_p, ctypes.c_int)
_sig("zinf_aio_create", ctypes.c_int, ctypes.POINTER(c_ptr), ctypes.POINTER(AioParams))
_sig("zinf_aio_destroy", None, c_ptr)
_sig("zinf_aio_uses_io_uring", ctypes.c_bool, c_ptr)
_sig("zinf_aio_register_buffer", ctypes.c_int, c_ptr, c_ptr, c_size)
_sig("zinf_aio_unregister_buffer", ctypes.c_int, c_ptr, c_ptr)
_sig("zinf_aio_get_stats", None, c_ptr, ctypes.POINTER(AioStats))
_sig("zinf_aio_file_open", ctypes.c_int, c_ptr, ctypes.POINTER(c_ptr), ctypes.POINTER(AioFileConfig))
_sig("zinf_aio_file_close", None, c_ptr)
_sig("zinf_aio_file_striped_bytes", ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int, ctypes.c_uint64)
_sig("zinf_aio_read", ctypes.c_int, c_ptr, c_ptr, ctypes.c_uint64, c_ptr, c_size, ctypes.POINTER(ctypes.c_uint64))
_sig("zinf_aio_write", ctypes.c_int, c_ptr, c_ptr, ctypes.c_uint64, c_ptr, c_size, ctypes.POINTER(ctypes.c_uint64))
_sig("zinf_aio_wait", ctypes.c_int, c_ptr, ctypes.c_uint64)
_sig("zinf_cpu_pool_create", ctypes.c_int, ctypes.POINTER(c_ptr), ctypes.c_int)
_sig("zinf_cpu_pool_destroy", None, c_ptr)
_sig("zinf_optim_step", ctypes.c_int, c_ptr, ctypes.POINTER(OptimHparams), ctypes.POINTER(OptimTile))
_sig("zinf_optim_update", ctypes.c_int, ctypes.POINTER(OptimHparams), ctypes.POINTER(OptimTile), ctypes.c_int)
_sig("zinf_config_parse", ctypes.c_int, c_ptr, ctypes.c_char_p, ctypes.c_char_p, c_ptr)
_sig("zinf_config_to_json", ctypes.c_int, c_ptr, ctypes.POINTER(ctypes.c_char_p))
_sig("zinf_config_free", None, c_ptr)
_sig("zinf_comm_create", ctypes.c_int, ctypes.POINTER(c_ptr), ctypes.c_int, ctypes.c_double)
_sig("zinf_comm_destroy", None, c_ptr)
_sig("zinf_comm_rank", ctypes.c_int, c_ptr)
_sig("zinf_comm_size", ctypes.c_int, c_ptr)
_sig("zinf_comm_allreduce_f64", ctypes.c_int, c_ptr, c_ptr, c_size)
_sig("zinf_engine_target", ctypes.c_int, c_ptr, c_ptr, c_ptr)
_sig("zinf_engine_plan", ctypes.c_int, c_ptr, c_ptr, c_ptr)
_sig("zinf_plan_verdict", ctypes.c_int, c_ptr)
_sig("zinf_engine_create", ctypes.c_int, ctypes.POINTER(c_ptr), c_ptr, c_ptr)
_sig("zinf_engine_destroy", None, c_ptr)
_sig("zinf_engine_model", c_ptr, c_ptr)
_sig("zinf_model_get_params", c_ptr, c_ptr)
_sig("zinf_model_find_param", c_ptr, c_ptr, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int))
_sig("zinf_engine_forward", ctypes.c_int, c_ptr, c_ptr, c_ptr, ctypes.c_int, ctypes.POINTER(ctypes.c_double))
_sig("zinf_engine_backward", ctypes.c_int, c_ptr)
_sig("zinf_engine_step", ctypes.c_int, c_ptr, c_ptr)
_sig("zinf_engine_memory_get", None, c_ptr, c_ptr)
_sig("zinf_engine_get_full", ctypes.c_int, c_ptr, ctypes.c_char_p, ctypes.c_int, c_ptr)
_sig("zinf_engine_set_full", ctypes.c_int, c_ptr, ctypes.c_char_p, ctypes.c_int, c_ptr)
_sig("zinf_engine_weights_digest", ctypes.c_int, c_ptr, ctypes.c_char_p)
_sig("zinf_engine_save", ctypes.c_int, c_ptr, ctypes.c_char_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)
_sig("zinf_engine_load", ctypes.c_int, c_ptr, ctypes.c_char_p, c_ptr)

# What the library malloc'd for the caller to free (zinf_config_to_json's text).
libc_free = ctypes.CDLL(None).free
libc_free.restype, libc_free.argtypes = None, [c_ptr]
