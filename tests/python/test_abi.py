"""The package's ctypes mirrors against the library (zinf_abi): they agree (import
succeeded), and a mirror that drifted (a field moved, a constant renumbered) is refused
at import, naming what differs."""
import ctypes

import pytest

from zinf import _lib


def test_library_lists_what_the_package_mirrors():
    assert _lib.lib.zinf_abi(b"zinf_optim_tile") == ctypes.sizeof(_lib.OptimTile)
    assert _lib.lib.zinf_abi(b"zinf_optim_tile.grad_dtype") == _lib.OptimTile.grad_dtype.offset
    assert _lib.lib.zinf_abi(b"ZINF_DTYPE_BF16") == _lib.DTYPE_BF16
    assert _lib.lib.zinf_abi(b"zinf_no_such_struct") == -1


def test_moved_field_is_refused(monkeypatch):
    class Swapped(ctypes.Structure):  # grad_dtype and out swapped
        _fields_ = [(n, t) for n, t in _lib.OptimTile._fields_ if n not in ("grad_dtype", "out")] + \
                   [("out", _lib.c_ptr), ("grad_dtype", ctypes.c_int)]
    monkeypatch.setattr(_lib, "OptimTile", Swapped)
    with pytest.raises(ImportError, match=r"zinf_optim_tile\.(grad_dtype|out|n|out_dtype) = "):
        _lib._check_mirrors()


def test_renumbered_constant_is_refused(monkeypatch):
    monkeypatch.setattr(_lib, "DTYPE_F16", 4)
    with pytest.raises(ImportError, match="ZINF_DTYPE_F16 = 3 where this package has 4"):
        _lib._check_mirrors()
