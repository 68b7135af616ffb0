"""zinf's io_uring engine for CPU tensors and NumPy arrays: reads and writes at file
offsets, synchronous or queued, with DeepNVMe's method names (async_pread,
async_pwrite, sync_pread, sync_pwrite, wait), so that moving from DeepSpeed's
aio_handle is a change of constructor.

What differs from DeepNVMe: offsets, lengths and buffer addresses must be multiples of
the file's alignment (4096 bytes or the drive's logical block), and zinf refuses
anything else with a message instead of bouncing it through a buffer of its own
(pinned_empty gives aligned buffers); a handle made with several `paths` stripes each
file over them, the filename naming a file inside each path; a read never goes past
the end of a file; a failed request raises ZinfError naming the file, the offset and
the error, where DeepNVMe returns a count.
"""
import ctypes
import mmap
import os

from ._lib import (AioFileConfig, AioParams, AioStats, ZinfError, check_errno, last_error, lib)

_libc = ctypes.CDLL(None, use_errno=True)


def _span(buf, writable):
    """(address, bytes) of a contiguous CPU torch tensor or NumPy array."""
    if hasattr(buf, "data_ptr"):  # a torch tensor
        if buf.device.type != "cpu":
            raise ZinfError(f"zinf.aio: the tensor is on {buf.device}; zinf.aio reads and writes CPU tensors")
        if not buf.is_contiguous():
            raise ZinfError("zinf.aio: the tensor is not contiguous; pass tensor.contiguous()")
        return buf.data_ptr(), buf.numel() * buf.element_size()
    if hasattr(buf, "__array_interface__"):  # a NumPy array
        if not buf.flags["C_CONTIGUOUS"]:
            raise ZinfError("zinf.aio: the array is not contiguous; pass numpy.ascontiguousarray(a)")
        if writable and not buf.flags["WRITEABLE"]:
            raise ZinfError("zinf.aio: the array is read-only; a read needs a writable one")
        return buf.__array_interface__["data"][0], buf.nbytes
    raise TypeError(f"zinf.aio: expected a CPU torch tensor or a NumPy array, not {type(buf).__name__}")


def pinned_empty(n, dtype="float32", like="numpy"):
    """n elements of dtype in page-aligned memory locked in RAM (mlock; a refused lock
    is a warning, the memory works the same), as a NumPy array or, with like="torch",
    a tensor (pinned for CUDA too where torch has a GPU). The memory lives as long as
    the array or tensor."""
    import numpy as np

    # A torch dtype by its name (torch.float32 -> float32), anything else as NumPy takes it.
    dt = np.dtype(str(dtype).replace("torch.", "") if type(dtype).__module__ == "torch" else dtype)
    nbytes = max(int(n) * dt.itemsize, 1)
    # Private (a shared anonymous mapping is shmem) and in transparent huge pages, which
    # O_DIRECT pins per request faster: one ring read 1 GiB into a shared locked buffer at
    # 1.4 GB/s here, a private one at 2.6-3.0, a private one in huge pages at 3.3-3.4.
    m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        m.madvise(mmap.MADV_HUGEPAGE)
    arr = np.frombuffer(m, dtype=dt, count=int(n))
    addr = arr.__array_interface__["data"][0]
    if _libc.mlock(ctypes.c_void_p(addr), ctypes.c_size_t(nbytes)) != 0:
        import warnings
        warnings.warn(f"zinf.aio: mlock of {nbytes} bytes refused ({os.strerror(ctypes.get_errno())}); "
                      "the buffer is not locked in RAM (raise `ulimit -l`)", stacklevel=2)
    if like == "numpy":
        return arr
    import torch

    t = torch.from_numpy(arr)
    if torch.cuda.is_available():
        torch.cuda.cudart().cudaHostRegister(addr, nbytes, 0)
    return t


class Handle:
    """One io_uring engine: `threads` workers with a ring each, requests of block_size
    bytes, queue_depth in flight per ring (or pread/pwrite threads with use_threads).
    paths: directories to stripe every file over in stripe_unit bytes (default
    block_size); without them a filename is a plain path. A file system that refuses
    O_DIRECT (tmpfs before Linux 6.6) runs buffered, with a warning, unless
    strict_direct, which refuses it."""

    def __init__(self, block_size=1 << 20, queue_depth=8, threads=1, paths=None, stripe_unit=0, use_threads=False,
                 strict_direct=False):
        p = AioParams(block_size=block_size, queue_depth=queue_depth, threads=threads, use_threads=use_threads)
        self._h = ctypes.c_void_p()
        check_errno(lib.zinf_aio_create(ctypes.byref(self._h), ctypes.byref(p)))
        self.block_size, self.queue_depth, self.threads = block_size, queue_depth, threads
        self.paths = [os.fspath(d) for d in paths] if paths else None
        self.stripe_unit, self.strict_direct = stripe_unit, strict_direct
        self._pending = []  # (ticket, file, buffer): the buffer is kept alive until waited for

    def close(self):
        """Wait for what is queued and release the engine."""
        if getattr(self, "_h", None):
            try:
                self.wait()
            finally:
                lib.zinf_aio_destroy(self._h)
                self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except ZinfError:
            pass  # a failure of a request nobody waited for; close() raises it to those who call it

    def get_block_size(self):
        return self.block_size

    def get_queue_depth(self):
        return self.queue_depth

    def get_intra_op_parallelism(self):
        return self.threads

    def uses_io_uring(self):
        return bool(lib.zinf_aio_uses_io_uring(self._h))

    def stats(self):
        """Requests, bytes and busy time so far, as a dict (zinf_aio_stats)."""
        s = AioStats()
        lib.zinf_aio_get_stats(self._h, ctypes.byref(s))
        return {name: getattr(s, name) for name, _ in AioStats._fields_}

    def register_buffer(self, buf):
        """Register buf's memory with every ring, so requests into it skip the kernel's
        per-request page pinning (meant for long-lived pinned buffers)."""
        addr, n = _span(buf, False)
        check_errno(lib.zinf_aio_register_buffer(self._h, addr, n))

    def unregister_buffer(self, buf):
        check_errno(lib.zinf_aio_unregister_buffer(self._h, _span(buf, False)[0]))

    def new_cpu_locked_tensor(self, num_elem, example_tensor):
        """DeepNVMe's allocator: a pinned, aligned tensor of example_tensor's dtype."""
        return pinned_empty(num_elem, example_tensor.dtype, like="torch")

    def free_cpu_locked_tensor(self, tensor):
        """Nothing to do: the memory goes with the tensor."""

    def _open(self, filename, end, write):
        if self.paths:
            dirs, name = self.paths, os.fspath(filename)
        else:
            path = os.path.abspath(os.fspath(filename))
            dirs, name = [os.path.dirname(path)], os.path.basename(path)
        # One directory is not striped: its unit is the alignment, so a file of an aligned
        # size is preallocated to exactly that size.
        stripe = self.stripe_unit or (self.block_size if len(dirs) > 1 else 4096)
        if not write:  # each file must hold its share of [0, end): reading never grows a file
            need = lib.zinf_aio_file_striped_bytes(end, len(dirs), stripe) // len(dirs) if len(dirs) > 1 else end
            for d in dirs:
                f = os.path.join(d, name)
                have = os.path.getsize(f) if os.path.exists(f) else None
                if have is None:
                    raise ZinfError(f"zinf.aio: read of {f}: no such file")
                if have < need:
                    raise ZinfError(f"zinf.aio: read of bytes ..{end} of {name}: {f} holds {have} bytes of the "
                                    f"{need} it needs")
        arr = (ctypes.c_char_p * len(dirs))(*[os.fsencode(d) for d in dirs])
        cfg = AioFileConfig(dirs=arr, ndirs=len(dirs), name=os.fsencode(name), size=end, stripe_unit=stripe,
                            strict_direct=self.strict_direct, keep=True)
        f = ctypes.c_void_p()
        check_errno(lib.zinf_aio_file_open(self._h, ctypes.byref(f), ctypes.byref(cfg)))
        return f

    def _submit(self, buf, filename, file_offset, write):
        addr, n = _span(buf, not write)
        f = self._open(filename, file_offset + n, write)
        t = ctypes.c_uint64()
        op = lib.zinf_aio_write if write else lib.zinf_aio_read
        if op(self._h, f, file_offset, addr, n, ctypes.byref(t)) < 0:
            err = ZinfError(last_error())  # before the close can set another
            lib.zinf_aio_file_close(f)
            raise err
        return t.value, f

    def _finish(self, ticket, f):
        rc = lib.zinf_aio_wait(self._h, ticket)
        err = last_error() if rc < 0 else None
        lib.zinf_aio_file_close(f)
        return err

    def async_pread(self, buffer, filename, file_offset=0):
        """Queue a read of len(buffer) bytes at file_offset into buffer; 0. Do not touch
        buffer until wait()."""
        self._pending.append((*self._submit(buffer, filename, file_offset, False), buffer))
        return 0

    def async_pwrite(self, buffer, filename, file_offset=0):
        """Queue a write of buffer at file_offset (the file is created or grown); 0."""
        self._pending.append((*self._submit(buffer, filename, file_offset, True), buffer))
        return 0

    def sync_pread(self, buffer, filename, file_offset=0):
        """Read now; 1 (the operations completed)."""
        return self._sync(buffer, filename, file_offset, False)

    def sync_pwrite(self, buffer, filename, file_offset=0):
        """Write now; 1 (the operations completed)."""
        return self._sync(buffer, filename, file_offset, True)

    def _sync(self, buffer, filename, file_offset, write):
        err = self._finish(*self._submit(buffer, filename, file_offset, write))
        if err:
            raise ZinfError(err)
        return 1

    def wait(self):
        """Wait for every queued read and write; the number completed. The first failure
        is raised (as ZinfError) once all of them are over."""
        pending, self._pending = self._pending, []
        errs = [e for e in (self._finish(t, f) for t, f, _ in pending) if e]
        if errs:
            raise ZinfError(errs[0] + (f" (and {len(errs) - 1} more failed)" if len(errs) > 1 else ""))
        return len(pending)
