"""GPU tests: skipped unless CuPy sees a CUDA device. The probe runs in a worker process: the
test process itself never creates a CUDA context, like the CLI and the language server."""
from __future__ import annotations

import functools

import pytest


@functools.lru_cache(maxsize=1)
def gpu_available() -> tuple[bool, str]:
    from astra_cuda.session import Session
    try:
        gpu = Session().statuses()["gpu"]
        return gpu.available, gpu.reason
    except Exception as e:  # noqa: BLE001 - any failure means no GPU here
        return False, f"{e.__class__.__name__}: {e}"


@pytest.fixture(autouse=True, scope="session")
def _require_gpu():
    ok, why = gpu_available()
    if not ok:
        pytest.skip(f"no GPU: {why}")
    print(f"\nGPU: {why}")
