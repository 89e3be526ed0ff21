"""The catalogue's `overrun` entries: a write past the end of a buffer is a verdict that names the
buffer, the same on every backend and in every run (backends/guard.py, gate.checks.overran).
Without the guard, on the CPU the write went to the unused tail of the buffer's page (unseen: the
candidate passed) and on a GPU into whatever CuPy's pool placed next. The GPU backend's own upload
and guard check run here on NumPy arrays (its array module swapped, as tests/static/test_nvcc.py
does for its compile); tests/gpu/test_overrun_gpu.py runs real launches on a GPU."""
from __future__ import annotations

import types

import numpy as np
import pytest

from astra_cuda import api, gate
from astra_cuda.backends import guard
from astra_cuda.backends.base import LaunchError
from astra_cuda.gate import checks
from astra_cuda.session import Session

from . import catalogue
from .reference_files import SPEC, units
from .test_attacks import cpu  # noqa: F401 - the fixture

EXPECTED = {a.name for a in catalogue.ALL if a.kind == "overrun"}

ORIGINAL = """__global__ void scale_ref(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * 3.0f;
}

"""
# right on every element; thread n (there is one in the test cases n = 8 and 800) writes y[n] too
ONE_PAST = ORIGINAL + SPEC + """__global__ void scale_fast(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n) y[i] = x[i < n ? i : 0] * 3.0f;
}
"""
# 256 bytes past the end: where CuPy's pool (512-byte blocks) places the next small allocation
INTO_NEXT = ORIGINAL + SPEC + """__global__ void scale_fast(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * 3.0f;
  if (i == 0) y[n + 64] = 1.0f;
}
"""


def _failure(text, folder, cpu):
    ref, cand, spec = units(text, folder)
    v = gate.check(ref, cand, spec, cpu, quick=True)
    assert v.status == "failed", v.human()
    return v.failures[0]


def test_write_one_past_output(cpu, tmp_path):
    f = _failure(ONE_PAST, tmp_path, cpu)
    assert f.check == "launch" and "`y`: the kernel wrote past its end: element 8 of a buffer of 8 " \
        "(byte 0 past its end, in the guard after it)" in f.message, f.message
    again = _failure(ONE_PAST, tmp_path, cpu)     # the same verdict on every run
    assert again.message == f.message


def test_write_into_next_buffer(cpu, tmp_path):
    f = _failure(INTO_NEXT, tmp_path, cpu)
    assert "`y`: the kernel wrote past its end: element 72 of a buffer of 8 (byte 256 past its end" in f.message, \
        f.message


class _NumpyDevice(types.SimpleNamespace):
    """CuPy's array interface as the GPU backend's upload and guard check use it, on NumPy."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def asnumpy(a):
        return np.asarray(a)


def _gpu_backend(exact: bool = False):
    from astra_cuda.backends.gpu import GpuBackend
    b = object.__new__(GpuBackend)   # no device here: only what upload, download and overrun touch
    b.cp, b.poisoned, b.exact_alloc, b._guard, b._uploads = _NumpyDevice(), None, exact, None, 0
    return b


def _past(buf, at: int, value: bytes) -> None:
    """What device code writing `at` bytes past the end of `buf` changes: the same allocation."""
    buf.raw[buf.nbytes + at:buf.nbytes + at + len(value)] = np.frombuffer(value, np.uint8)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_gpu_backend_names_the_same_write(dtype, cpu):
    import ml_dtypes
    dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float32
    said = []
    for b in (_gpu_backend(), cpu):
        y, x = b.upload(np.zeros(8, dt)), b.upload(np.ones(8, dt))
        checks.overran(b, {"y": y, "x": x})        # intact after upload
        assert np.array_equal(b.download(x), np.ones(8, dt))
        _past(y, 0, np.ones(1, dt).tobytes())
        with pytest.raises(LaunchError) as e:
            checks.overran(b, {"y": y, "x": x})
        said.append(str(e.value))
    assert said[0] == said[1] and said[0].startswith("`y`: the kernel wrote past its end: element 8 of a buffer of 8"), said


def test_the_guard_and_the_buffer_are_one_allocation():
    b = _gpu_backend()
    y = b.upload(np.arange(5, dtype=np.float32))
    assert y.raw.nbytes == y.nbytes + guard.GUARD_BYTES and np.shares_memory(y.array, y.raw)
    assert y.raw.ctypes.data == y.array.ctypes.data    # the buffer first, its guard right after it
    assert np.array_equal(y.raw[y.nbytes:], y.pattern)


def test_a_read_past_the_end_sees_other_bytes_in_the_next_run():
    """On the GPU, two uploads of the same input (the determinism check's two runs) have guards that
    differ in every byte, so a kernel reading past the end gives two runs that disagree — the signal
    the gate and inference's validation take for such a read (cuda-samples' matrixMul: whole tiles
    read past `wA`). With one fixed pattern both runs read the same bytes and the read passed unseen.
    (The CPU keeps one pattern: its sanitizer build names the read itself.)"""
    b = _gpu_backend()
    first, second = (b.upload(np.ones(4, np.float32)) for _ in range(2))
    past = [np.asarray(x.raw[x.nbytes:]) for x in (first, second)]
    assert np.all(past[0] != past[1])
    checks.overran(b, {"first": first, "second": second})     # each guard intact against its own bytes


def test_under_compute_sanitizer_allocations_are_exact():
    b = _gpu_backend(exact=True)    # compute-sanitizer reports the access itself
    y = b.upload(np.zeros(3, np.float32))
    assert y.raw is None and b.overrun(y) is None


@pytest.mark.parametrize("exact", [False, True])
def test_write_past_device_case_buffer(exact):
    """A device case's run buffers (gate/device_case.py, `Backend.guarded`) on the GPU backend's
    own code: one allocation with a keyed guard after the buffer, a write past its end named as an
    upload's is; exact allocations (compute-sanitizer) get none. The gate's whole device path with
    such a write: tests/gate/test_device_case.py (fake GPU), tests/gpu/test_device_guard_gpu.py."""
    b = _gpu_backend(exact)
    out = b.guarded(np.dtype(np.float32), (8,))
    assert out.shape == (8,) and out.nbytes == 32
    if exact:
        assert out.raw is None and b.overrun(out) is None
        return
    up = b.upload(np.zeros(8, np.float32))
    assert out.raw.nbytes == out.nbytes + guard.GUARD_BYTES and out.raw.ctypes.data == out.array.ctypes.data
    assert np.all(np.asarray(out.raw[out.nbytes:]) != np.asarray(up.raw[up.nbytes:]))   # keyed as uploads are
    checks.overran(b, {"out": out})     # intact as placed
    _past(out, 4, np.ones(1, np.float32).tobytes())
    with pytest.raises(LaunchError) as e:
        checks.overran(b, {"out": out})
    assert str(e.value).startswith("`out`: the kernel wrote past its end: element 9 of a buffer of 8 "
                                   "(byte 4 past its end"), str(e.value)


# the interleaving kernel writes two values per element; the draft gives `y` one per element (the
# too-small `x_new` of TGI's column_remap under its first draft)
INTERLEAVE = """/* @astra
grid = ["cdiv(n, 64)"]
block = [64]
[sizes]
n = [1, 7, 64]
[args]
y = { type = "float", shape = ["SHAPE"], output = true }
x = { type = "float", shape = ["n"] }
n = "n"
*/
__global__ void interleave(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { y[2 * i] = x[i]; y[2 * i + 1] = -x[i]; }
}
"""


def test_draft_shape_too_small(tmp_path):
    f = tmp_path / "interleave.cu"
    text = INTERLEAVE.replace("SHAPE", "n")
    f.write_text(text)
    snap = api.snapshot(text, str(f))
    comment = text[:text.index("*/") + 3]
    bare = snap.text.replace(comment, "")
    f.write_text(bare)
    trial = api._trial(api.snapshot(bare, str(f)), "interleave", types.SimpleNamespace(comment=comment), "cpu",
                       None, Session())
    assert not trial.passed and "launch" in trial.failed_checks, trial
    assert "`y`: the kernel wrote past its end: element 1 of a buffer of 1" in trial.evidence, trial
    right = comment.replace('shape = ["n"], output', 'shape = ["2 * n"], output')
    ok = api._trial(api.snapshot(bare, str(f)), "interleave", types.SimpleNamespace(comment=right), "cpu",
                    None, Session())
    assert ok.passed, ok


def test_every_entry_is_tested():
    tested = {n[len("test_"):] for n in globals() if n.startswith("test_")}
    assert EXPECTED and EXPECTED <= tested, EXPECTED - tested
