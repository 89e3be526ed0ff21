"""The gate's pass rule (`astra_cuda.gate.compare`) on whole device arrays, so a full check
compares on the GPU without copying outputs back: written for any array module with NumPy's
interface (CuPy in the GPU backend, NumPy in the tests), in bounded chunks."""
from __future__ import annotations

from typing import Any

import numpy as np


TOLERANCE_CHUNK = 1 << 25  # elements per step of the on-device comparison (bounded temporaries)


def within_tolerance(xp: Any, got: Any, want: Any, dtype: np.dtype, atol: float, rtol: float) -> bool | None:
    """astra_cuda.gate.compare's pass rule on arrays of the array module `xp` (CuPy here; NumPy in the
    tests), in storage types (bfloat16 as uint16): every element bitwise equal, both NaN, or both
    finite within atol + rtol * |want|, 16-bit floats compared in float32 and the others in
    float64 like the host. None for a constant `got` (the host's constant-output rule decides)."""
    g, w = got.reshape(-1), want.reshape(-1)
    if g.size == 0:
        return True
    eight = dtype.itemsize == 1 and dtype.name.startswith("float8")
    if dtype.kind != "f" and dtype.name != "bfloat16" and not eight:  # integers, booleans: exact
        return bool(xp.array_equal(g, w))
    if g.size > 1 and bool(xp.all(g == g[0])):
        return None
    # 8-bit floats: every bit pattern's value, looked up (they are stored as bytes)
    table = xp.asarray(np.arange(256, dtype=np.uint8).view(dtype).astype(np.float32)) if eight else None
    for start in range(0, g.size, TOLERANCE_CHUNK):
        a, b = g[start:start + TOLERANCE_CHUNK], w[start:start + TOLERANCE_CHUNK]
        if dtype.name == "bfloat16":  # the upper half of a float32
            a = (a.astype(xp.uint32) << 16).view(xp.float32)
            b = (b.astype(xp.uint32) << 16).view(xp.float32)
        elif table is not None:
            a, b = table[a.view(xp.uint8)], table[b.view(xp.uint8)]
        else:
            work = xp.float32 if dtype.itemsize <= 2 else xp.float64
            a, b = a.astype(work), b.astype(work)
        with np.errstate(invalid="ignore", over="ignore"):
            close = xp.isfinite(a) & xp.isfinite(b) & (xp.abs(a - b) <= atol + rtol * xp.abs(b))
            ok = (a == b) | (xp.isnan(a) & xp.isnan(b)) | close
        if not bool(xp.all(ok)):
            return False
    return True
