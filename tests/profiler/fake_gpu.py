"""A NumPy stand-in for the GPU backend: the Backend interface with real placement (views into
slabs, so buffers have addresses a kernel can key on), and 'kernels' that are Python functions
returning their launch's time in µs. It exercises the profiler's own logic without a GPU:
what every launch sees, what it leaves, and how per-launch times are judged."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from astra_cuda.compile import extract
from astra_cuda.model import source, spec as spec_mod
from astra_cuda.backends.base import Backend, Buffer, Capabilities, Module, ResourceUsage, TimingResult
from astra_cuda.backends.device_compare import within_tolerance
from astra_cuda.backends.device_digest import digest, holds_pattern

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "examples" / "silu_and_mul.cu").read_text()
SMALL = TEXT.replace("num_tokens = [4096]\nd = [11008, 13824, 28672]", "num_tokens = [64]\nd = [1024]")


class FakeBuf(Buffer):
    def __init__(self, host: np.ndarray):
        self.host, self.dtype, self.shape, self.nbytes = host, host.dtype, host.shape, host.nbytes

    @property
    def address(self) -> int:
        return self.host.__array_interface__["data"][0]


class FakeModule(Module):
    def __init__(self, kernel):
        self.kernel, self.launches = kernel, 0


class FakeGpu(Backend):
    """`kernels`: a marker found in the unit's source -> fn(args, launch_no) -> µs (None: `default_us`).
    Full comparisons run through the GPU backend's own `within_tolerance` (on NumPy arrays)."""

    name, caps = "fake-gpu", Capabilities(timing=True, copy_ceiling=True, device_info=True, device_arrays=True)

    def __init__(self, kernels, default_us: float = 20.0, noise: float = 0.005, seed: int = 0,
                 device_compare: bool = True):
        self.kernels, self.default_us, self.noise = kernels, default_us, noise
        self.device_compare = device_compare  # full checks where the data live (as the GPU does), or on the host
        self.rng = np.random.default_rng(seed)
        self.timed: list[list] = []   # the args of every timed launch, in order

    def compile(self, source, name_expressions, *, filename="kernel.cu", options=(), sanitize=False):
        return FakeModule(next(k for m, k in self.kernels.items() if m in source))

    def resources(self, module, name_expression):
        return ResourceUsage(registers=22, shared_static_bytes=0, stack_bytes=0, max_threads_per_block=1024)

    def upload(self, host):
        return FakeBuf(np.array(host, copy=True))

    def download(self, buf):
        return buf.host.copy()

    def fill_bytes(self, buf, byte):
        buf.host.reshape(-1).view(np.uint8)[...] = byte

    def allocate(self, nbytes):
        return FakeBuf(np.empty(max(1, nbytes), dtype=np.uint8))

    def view(self, buf, offset, dtype, shape):
        dt = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        assert offset % dt.itemsize == 0 and offset + n <= buf.nbytes
        return FakeBuf(buf.host.reshape(-1).view(np.uint8)[offset:offset + n].view(dt).reshape(shape))

    def copy(self, dst, src):
        assert dst.nbytes == src.nbytes
        dst.host.reshape(-1).view(np.uint8)[...] = src.host.reshape(-1).view(np.uint8)

    def within_tolerance(self, got, want, atol, rtol):
        if not self.device_compare:
            return None
        store = (lambda a: a.view(np.uint16)) if got.dtype.name == "bfloat16" else (lambda a: a)
        return within_tolerance(np, store(got.host), store(want.host), got.dtype, atol, rtol)

    # Arrays where the buffers live: NumPy here, as CuPy on the GPU (the gate's large cases,
    # gate/device_case.py), digests and poison checks by the GPU backend's own code.
    def array_module(self):
        return np

    def generator(self, seed):
        return np.random.Generator(np.random.PCG64(seed))

    def adopt(self, array, dtype, shape):
        return FakeBuf(np.ascontiguousarray(array).view(dtype).reshape(shape))

    def digest(self, buf, key):
        return digest(np, buf.host, key)

    def holds_byte(self, buf, byte):
        return holds_pattern(np, buf.host, buf.dtype.itemsize, byte)

    def launch(self, module, name_expression, launch, args, *, schedule=None, timeout_s=30.0):
        us = module.kernel(args, module.launches)
        module.launches += 1
        return us

    def time(self, module, name_expression, launch, launches, *, flush_l2=True):
        times = []
        for t in launches:
            for dst, src in t.copies:
                self.copy(dst, src)
            for buf, byte, pos in t.fills:
                raw = buf.host.reshape(-1).view(np.uint8)
                if pos is None:
                    raw[...] = byte
                else:
                    raw.reshape(-1, buf.dtype.itemsize)[pos.host] = byte
            self.timed.append(list(t.args))
            us = self.launch(module, name_expression, launch, t.args)
            times.append((self.default_us if us is None else us) * (1 + self.noise * self.rng.standard_normal()))
            for dst, src, pos in t.keeps:
                flat = src.host.reshape(-1)
                dst.host.reshape(-1)[...] = flat if pos is None else flat[pos.host]
        return TimingResult(times)

    def device_info(self):
        return {"name": "Fake H100", "regs_per_sm": 65536, "smem_per_sm": 228 * 1024, "threads_per_sm": 2048,
                "blocks_per_sm": 32, "l2_bytes": 50 << 20}

    def copy_ceiling(self):
        return 3.0e12


def silu(args) -> None:
    """The example kernel, in NumPy: out = silu(x) * y for each row [x | y] of the input."""
    out, inp, d = args[0], args[1], args[2].value
    x = inp.host.astype(np.float32)
    out.host[...] = (x[:, :d] / (1 + np.exp(-x[:, :d])) * x[:, d:]).astype(np.float16)


def mark(m: str) -> str:
    """A statement that tells FakeGpu which kernel a unit is (the key "// m"). Not a comment: a
    unit is cut from the preprocessed device pass of its file, which keeps no comment."""
    return f'(void)"// {m}";'


def units(marker: str, text: str = SMALL):
    """(reference unit, candidate unit marked `marker`, spec) for silu_and_mul."""
    def marked(m):  # the marker must sit inside the kernel to survive extraction
        t = text.replace("= blockIdx.x;", f"= blockIdx.x;  {mark(m)}")
        return extract.unit(t, "examples/silu_and_mul.cu", "silu_and_mul")
    model = source.parse(text)
    return marked("reference"), marked(marker), spec_mod.load(model.kernel("silu_and_mul"), model)
