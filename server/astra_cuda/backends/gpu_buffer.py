"""The GPU backend's buffers: a CuPy device array with the logical dtype and shape (types CuPy
cannot hold, bfloat16, as unsigned integers of their width), uploaded with a guard after it
(`backends/guard.py`) unless a sanitizer wants exact allocations."""
from __future__ import annotations

from typing import Any

import numpy as np

from . import guard
from .base import Buffer


class GpuBuffer(Buffer):
    """A device array. Types CuPy cannot hold (bfloat16) live as unsigned integers of the same
    width; `dtype` and `shape` are the logical ones."""

    def __init__(self, array: Any, dtype: np.dtype, shape: tuple[int, ...], raw: Any = None, pattern: Any = None):
        self.array, self.raw = array, raw   # raw: the allocation with the guard after the array (upload)
        self.pattern = pattern              # the guard's bytes (on the device), for the check after a launch
        self.dtype = np.dtype(dtype)
        self.shape = tuple(shape)
        self.nbytes = int(array.nbytes)


def storage_dtype(cp: Any, dt: np.dtype) -> np.dtype:
    try:
        cp.dtype(dt)
        if dt.kind in "biufc":
            return dt
    except TypeError:
        pass
    return np.dtype(f"u{dt.itemsize}")  # bfloat16 and friends: raw bits


def upload(cp: Any, host: np.ndarray, pattern: Any) -> GpuBuffer:
    """`host` on the device: with `pattern` (the guard's, on the device), the buffer's bytes and
    the guard after them in one allocation, so a write past the end reaches the guard first;
    with None (under compute-sanitizer, which reports the access itself) exactly its bytes."""
    host = np.ascontiguousarray(host)
    store = storage_dtype(cp, host.dtype)
    data = host.view(store) if store != host.dtype else host
    if pattern is None:
        return GpuBuffer(cp.asarray(data), host.dtype, host.shape)
    arr, raw = guard.placed(cp, data, pattern)
    return GpuBuffer(arr, host.dtype, host.shape, raw, pattern)


def guarded(cp: Any, dt: np.dtype, shape: tuple[int, ...], pattern: Any) -> GpuBuffer:
    """An uninitialised buffer of `dt` and `shape` with `pattern` (on the device) as the guard
    after it in the same allocation, as `upload` places one."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    raw = cp.empty(nbytes + guard.GUARD_BYTES, dtype=cp.uint8)
    guard.fill(cp, raw, nbytes, pattern)
    array = raw[:nbytes].view(storage_dtype(cp, dt)).reshape(shape)
    return GpuBuffer(array, dt, shape, raw, pattern)
