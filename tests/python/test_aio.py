"""zinf.aio against NumPy's own file reads and writes: round trips at offsets, queued
and synchronous, NumPy arrays and torch tensors, striped files, registered buffers,
pread/pwrite threads, and the refusals of what O_DIRECT cannot take."""
import os
import subprocess

import numpy as np
import pytest
import torch

import zinf
from zinf import aio

KIB = 1024


def data(n, seed):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


@pytest.fixture
def handle():
    with aio.Handle(block_size=64 * KIB, queue_depth=4, threads=2) as h:
        yield h


def test_sync_round_trip_against_numpy(tmp_path, handle):
    f = tmp_path / "x.bin"
    buf = aio.pinned_empty(192 * KIB, np.uint8)
    buf[:] = data(buf.size, 1)
    assert handle.sync_pwrite(buf, f) == 1
    assert np.array_equal(np.fromfile(f, np.uint8), buf)
    # A file NumPy wrote, read back at an offset.
    ref = data(256 * KIB + 100, 2)  # an unaligned tail the read stays clear of
    ref.tofile(f)
    out = aio.pinned_empty(128 * KIB, np.uint8)
    assert handle.sync_pread(out, f, file_offset=64 * KIB) == 1
    assert np.array_equal(out, ref[64 * KIB:192 * KIB])


def test_queued_reads_and_writes_of_tensors(tmp_path, handle):
    f = tmp_path / "t.bin"
    parts = [aio.pinned_empty(16 * KIB, "float32", like="torch") for _ in range(4)]
    for i, t in enumerate(parts):
        t.copy_(torch.randn(t.numel(), generator=torch.Generator().manual_seed(i)))
        assert handle.async_pwrite(t, f, file_offset=i * t.numel() * 4) == 0
    assert handle.wait() == 4
    whole = np.fromfile(f, np.float32)
    assert np.array_equal(whole, torch.cat(parts).numpy())
    back = [aio.pinned_empty(16 * KIB, "float32", like="torch") for _ in range(4)]
    for i, t in reversed(list(enumerate(back))):
        handle.async_pread(t, f, file_offset=i * t.numel() * 4)
    assert handle.wait() == 4
    assert all(torch.equal(a, b) for a, b in zip(parts, back))


def test_striped_file_holds_its_units_in_turn(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d in dirs:
        d.mkdir()
    unit = 8 * KIB
    with aio.Handle(block_size=16 * KIB, paths=dirs, stripe_unit=unit) as h:
        buf = aio.pinned_empty(80 * KIB, np.uint8)
        buf[:] = data(buf.size, 3)
        h.sync_pwrite(buf, "s.bin")
        units = buf.reshape(-1, unit)
        for k, d in enumerate(dirs):  # unit j in directory j % 2, at (j // 2) * unit
            assert np.array_equal(np.fromfile(d / "s.bin", np.uint8).reshape(-1, unit), units[k::2])
        out = aio.pinned_empty(48 * KIB, np.uint8)
        h.sync_pread(out, "s.bin", file_offset=24 * KIB)
        assert np.array_equal(out, buf[24 * KIB:72 * KIB])


def test_registered_buffer_and_threads(tmp_path):
    f = tmp_path / "r.bin"
    with aio.Handle(block_size=32 * KIB) as h:
        buf = aio.pinned_empty(128 * KIB, np.uint8)
        buf[:] = data(buf.size, 4)
        h.register_buffer(buf)
        h.sync_pwrite(buf, f)
        h.sync_pread(buf, f)
        if h.uses_io_uring():
            assert h.stats()["fixed_buffer"] == h.stats()["requests"] > 0
        h.unregister_buffer(buf)
    with aio.Handle(block_size=32 * KIB, use_threads=True, threads=2) as h:
        assert not h.uses_io_uring()
        out = aio.pinned_empty(128 * KIB, np.uint8)
        h.sync_pread(out, f)
        assert np.array_equal(out, buf)
        assert h.stats()["read_bytes"] == out.size


@pytest.mark.parametrize("case, message", [
    ("offset", "offset 0x64 is not a multiple of the alignment"),
    ("length", "length 0x3e8 is not a multiple of the alignment"),
    ("buffer", "is not a multiple of the alignment"),
    ("past the end", "holds 8192 bytes of the 12288 it needs"),
    ("missing", "no such file"),
])
def test_refusals_carry_zinfs_message(tmp_path, handle, case, message):
    f = tmp_path / "u.bin"
    data(8 * KIB, 5).tofile(f)
    buf = aio.pinned_empty(12 * KIB, np.uint8)
    args = {"offset": (buf[:4 * KIB], f, 100), "length": (buf[:1000], f, 0), "buffer": (buf[1:4 * KIB + 1], f, 0),
            "past the end": (buf[:12 * KIB], f, 0), "missing": (buf[:4 * KIB], tmp_path / "none.bin", 0)}[case]
    with pytest.raises(zinf.ZinfError, match=message):
        handle.sync_pread(*args)


def test_a_file_system_without_o_direct(tmp_path):
    """ramfs refuses O_DIRECT: buffered with a warning, or refused under strict_direct."""
    if os.geteuid() != 0:
        pytest.skip("mounting ramfs needs root (CI has it)")
    mnt = tmp_path / "ramfs"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "ramfs", "zinf-test", str(mnt)], check=True)
    try:
        buf = aio.pinned_empty(64 * KIB, np.uint8)
        buf[:] = data(buf.size, 6)
        with aio.Handle(strict_direct=True) as h:
            with pytest.raises(zinf.ZinfError, match="refuses O_DIRECT \\(strict direct IO was asked for\\)"):
                h.sync_pwrite(buf, mnt / "d.bin")
        with aio.Handle() as h:
            h.sync_pwrite(buf, mnt / "d.bin")
            assert np.array_equal(np.fromfile(mnt / "d.bin", np.uint8), buf)
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_a_bad_engine_is_refused():
    with pytest.raises(zinf.ZinfError, match="5000"):
        aio.Handle(block_size=5000)


def test_buffers_refused_before_any_io(tmp_path, handle):
    with pytest.raises(zinf.ZinfError, match="not contiguous"):
        handle.sync_pwrite(torch.zeros(64, 64).t(), tmp_path / "n.bin")
    ro = aio.pinned_empty(4 * KIB, np.uint8)
    ro.flags.writeable = False
    with pytest.raises(zinf.ZinfError, match="read-only"):
        handle.sync_pread(ro, tmp_path / "n.bin")
    assert not os.path.exists(tmp_path / "n.bin")
