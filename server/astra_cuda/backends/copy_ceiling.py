"""The device's copy ceiling: the bytes per second (read + written) a large device-to-device copy
moves, the roofline every measured bandwidth is read against. Measured once per device model
(`measure`, CUDA events around 20 copies, the median) and cached on disk, a cache only: a full
disk keeps nothing, half-written or whole."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "astra"


def cached(device: str, measure: Callable[[], float]) -> float:
    """The ceiling of the device named `device`: the cached measure, else `measure()`, kept."""
    name = "".join(c if c.isalnum() else "-" for c in device).strip("-")
    path = _cache_dir() / f"ceiling-{name}.json"
    try:
        data = json.loads(path.read_text())
        if data.get("bytes_per_s", 0) > 0:
            return float(data["bytes_per_s"])
    except (OSError, ValueError):
        pass
    bps = measure()
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"device": device, "bytes_per_s": bps,
                                   "measured_at": time.time(), "method": "device-to-device copy, "
                                   "bytes read + written, median of 20"}))
        os.replace(tmp, path)
    except OSError:  # a cache only: a full disk keeps nothing, half-written or whole
        tmp.unlink(missing_ok=True)
    return bps


def measure(cp: Any, nbytes: int = 1 << 30) -> float:
    """The ceiling measured now on CuPy's current device (`cp`: the CuPy module)."""
    free, _ = cp.cuda.runtime.memGetInfo()
    nbytes = int(min(nbytes, free // 4)) // 256 * 256
    src = cp.empty(nbytes, dtype=cp.uint8)
    dst = cp.empty(nbytes, dtype=cp.uint8)
    cp.cuda.runtime.memsetAsync(src.data.ptr, 1, nbytes, cp.cuda.get_current_stream().ptr)
    stream = cp.cuda.get_current_stream().ptr
    kind = cp.cuda.runtime.memcpyDeviceToDevice
    for _ in range(3):
        cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, kind, stream)
    times = []
    for _ in range(20):
        s, e = cp.cuda.Event(), cp.cuda.Event()
        s.record()
        cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, kind, stream)
        e.record()
        e.synchronize()
        times.append(cp.cuda.get_elapsed_time(s, e) / 1000.0)
    del src, dst
    cp.get_default_memory_pool().free_all_blocks()
    return 2.0 * nbytes / float(np.median(times))
