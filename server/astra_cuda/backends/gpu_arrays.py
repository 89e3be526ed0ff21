"""The GPU backend's arrays where they
live (`Capabilities.device_arrays`): CuPy as the array
module, its random generator, device arrays taken as buffers, and the digest and poison checks of
`device_digest` run on the device — what lets the gate draw a timed size's inputs there and judge
its outputs without copying them over PCIe (`gate/device_case.py`)."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .base import Buffer
from .device_digest import digest, holds_pattern
from .gpu_buffer import GpuBuffer, storage_dtype


class DeviceArrays:
    """Mixed into `gpu.GpuBackend` (which provides `cp`, `_check_usable` and `_fault`)."""

    cp: Any
    _check_usable: Callable[[], None]
    _fault: Callable[..., Exception]

    def array_module(self) -> Any:
        return self.cp

    def generator(self, seed: int) -> Any:
        """CuPy's generator (XORWOW), seeded: the same seed draws the same values on this device."""
        return self.cp.random.default_rng(int(seed))

    def adopt(self, array: Any, dtype: np.dtype, shape: tuple[int, ...]) -> Buffer:
        self._check_usable()
        arr = self.cp.ascontiguousarray(array).reshape(shape)
        store = storage_dtype(self.cp, np.dtype(dtype))
        if arr.dtype != store:
            raise ValueError(f"an array of {arr.dtype} cannot hold {np.dtype(dtype).name} (stored as {store})")
        return GpuBuffer(arr, np.dtype(dtype), tuple(shape))

    def digest(self, buf: Any, key: tuple[int, int]) -> int:
        self._check_usable()
        try:
            return digest(self.cp, buf.array, key)
        except Exception as e:
            raise self._fault(e) from None

    def holds_byte(self, buf: Any, byte: int) -> bool:
        self._check_usable()
        try:
            return holds_pattern(self.cp, buf.array, buf.dtype.itemsize, byte)
        except Exception as e:
            raise self._fault(e) from None
