"""The inline PTX idioms the CPU backend runs as C++ (backends/cpu/inline_asm.py) against the GPU
running the real instructions: the same kernels (tests/cpu/test_reach_refusal.py's IDIOMS), the
same inputs, every output bit for bit — hinted vector and predicated loads, stores, f16/bf16
conversions (NaN, infinity, overflow, ties), saturating integer conversions (vLLM's int8
quantization: cvt.rni.sat.s8/s32.f32, cvt.sat.s8.s32), 16-bit packing, %laneid, a butterfly shuffle."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from astra_cuda.execution import worker
from astra_cuda.backends.base import Launch, Scalar

import gpu_jobs
from gpu_jobs import Call

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]


def _idioms() -> str:
    tree = ast.parse((ROOT / "tests" / "cpu" / "test_reach_refusal.py").read_text())
    return next(n.value.value for n in tree.body if isinstance(n, ast.Assign)
                and getattr(n.targets[0], "id", "") == "IDIOMS" and isinstance(n.value, ast.Constant))


def _plan():
    a = np.random.default_rng(0).standard_normal(32).astype(np.float32)
    x = np.concatenate([np.random.default_rng(1).standard_normal(26).astype(np.float32) * 900,
                        np.array([np.nan, np.inf, 65520.0, 65519.99, 2.0**-25, -2.0**-25], np.float32)])
    q = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 126.5, 127.5, -128.5, 300, -300, np.nan, np.inf, -np.inf, 1e9, -1e9,
                  0.49999997, *np.random.default_rng(2).standard_normal(16) * 100], np.float32)
    i32 = lambda v: Scalar("int", v, "int32")  # noqa: E731
    return [("copy", 8, [np.full(32, 7, np.float32), a, i32(24), i32(0)]),
            ("conv", 32, [x, np.zeros(32, np.uint16), np.zeros(32, np.float32), np.zeros(32, np.uint32),
                          np.zeros(32, np.uint32), np.zeros(32, np.float32)]),
            ("quant", 32, [q, np.zeros(32, np.uint32), np.zeros(32, np.int32), np.zeros(32, np.uint32),
                           np.zeros(32, np.uint16)])]


def test_the_cpu_emulation_of_ptx_idioms_matches_the_gpu_bit_for_bit():
    source = _idioms()
    pool = worker.Pool(1, name="gpu-asm")
    try:
        gpu = pool.run(Call(gpu_jobs.launches, {"source": source, "launches": _plan()}), timeout=300)
    finally:
        pool.close()
    from astra_cuda.backends.cpu import CpuBackend
    cpu = CpuBackend()
    try:
        mod = cpu.compile(source, [name for name, _, _ in _plan()], filename="idioms.cu")
        for name, block, args in _plan():
            bufs = [cpu.upload(a) if isinstance(a, np.ndarray) else a for a in args]
            cpu.launch(mod, name, Launch((1, 1, 1), (block, 1, 1)), bufs, timeout_s=60)
            want = [cpu.download(b) for a, b in zip(args, bufs) if isinstance(a, np.ndarray)]
            for i, (g, w) in enumerate(zip(gpu[name], want)):
                np.testing.assert_array_equal(g.view(np.uint8), w.view(np.uint8), err_msg=f"{name} output {i}")
    finally:
        cpu.close()
