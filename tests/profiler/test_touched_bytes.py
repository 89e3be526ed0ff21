"""The bytes a kernel must move, seen on the trusted kernel (`profiler.touched`, issue 29): an
array the launch reads only in part, an output the spec calls read-write and a read-write array
only read no longer inflate the share of the copy ceiling (bitsandbytes kOptimizer32bit2State,
vLLM static_scaled_int8_quant and FlashInfer PackBits read as beyond the ceiling on an H100 and
got no share). On the NumPy stand-in for the GPU."""
from __future__ import annotations

import numpy as np

from astra_cuda import gate, profiler
from astra_cuda.compile import extract
from astra_cuda.gate import checks
from astra_cuda.model import source, spec as spec_mod
from astra_cuda.profiler import model, touched

from .fake_gpu import FakeGpu, mark

ROWS, N = 8, 4096
TEXT = f"""
/* @astra
grid = ["cdiv(n, 256)"]
block = ["256"]

[sizes]
rows = [2]
n = [256]

[bench]
rows = [{ROWS}]
n = [{N}]

[args]
x    = {{ type = "float", shape = ["rows", "n"] }}
q    = {{ type = "int8", shape = ["n"], inout = true }}
acc  = {{ type = "float", shape = ["n"], inout = true }}
w    = {{ type = "float", shape = ["n"], inout = true }}
n    = "n"
*/
__global__ void quant(const float* x, signed char* q, float* acc, float* w, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  {mark("quant")}
  if (i < n) {{ q[i] = (signed char)(x[i] * w[i]); acc[i] += x[i]; }}
}}
"""


def quant(args, _n):
    """Reads the first row of x only; writes q without reading it; adds into acc; reads w only."""
    x, q, acc, w = (a.host for a in args[:4])
    q[...] = np.clip(x[0] * w * 10, -127, 127).astype(np.int8)
    acc[...] += x[0]


def setup(kernel=quant):
    m = source.parse(TEXT)
    sp = spec_mod.load(m.kernel("quant"), m)
    unit = extract.unit(TEXT, "quant.cu", "quant")
    backend = FakeGpu({"// quant": lambda a, n: kernel(a, n) or 10.0}, noise=0.0)
    return sp, unit, backend


def seen(sp, unit, backend):
    sizes = {"rows": ROWS, "n": N}
    sets = gate.prepare_timed(sp, backend, sizes, sets=2, seed=3)
    k = checks.Compiled(backend.compile_unit(unit), unit.name_expression, "reference")
    touched._cache.clear()
    return touched.measure(sp, backend, k, sets, checks.arg_types(sp, backend, k, unit.param_types)), sizes


def test_what_the_trusted_kernel_needs_is_seen_per_array():
    sp, unit, backend = setup()
    t, sizes = seen(sp, unit, backend)
    assert t is not None
    assert N <= t.read["x"] <= N + ROWS * N // touched.STEP      # its first row, to a bisection step
    assert t.read["q"] == 0 and t.read["acc"] == N and t.read["w"] == N
    assert t.written == {"q": N, "acc": N, "w": 0}               # w is read, never written
    spec_bytes = model.floor_bytes(sp, sizes)
    assert spec_bytes == ROWS * N * 4 + 2 * N + 2 * 4 * N + 2 * 4 * N
    measured = model.floor_bytes(sp, sizes, t)
    assert measured == t.read["x"] * 4 + N + 2 * 4 * N + 4 * N


def test_a_read_write_array_written_in_part_counts_that_part():
    """apex index_mul_2d_float's inferred spec: `out` read-write over `size` rows, `n` of them written."""
    def half(args, n):
        x, q, acc, w = (a.host for a in args[:4])
        q[...] = np.clip(x[0] * w * 10, -127, 127).astype(np.int8)
        acc[: N // 2] += x[0][: N // 2]
    sp, unit, backend = setup(half)
    t, _ = seen(sp, unit, backend)
    assert t.written["acc"] == N // 2 and N // 2 <= t.read["acc"] <= N // 2 + N // touched.STEP


def test_results_that_vary_between_identical_runs_tell_nothing():
    def racy(args, n):
        quant(args, n)
        args[3].host[...] += 0 if n % 2 else 1e-3   # w drifts: its output differs from one launch to the next
    sp, unit, backend = setup(racy)
    assert seen(sp, unit, backend)[0] is None


def test_the_profile_reports_the_measured_bytes_and_a_share_from_them(monkeypatch):
    sp, unit, backend = setup()
    probes = []
    real = touched._measure
    monkeypatch.setattr(touched, "_measure", lambda *a: probes.append(1) or real(*a))
    touched._cache.clear()
    p = profiler.profile(unit, unit, sp, backend, seed=1, sizes="bench")
    (s,) = p.sizes
    assert s.bytes_moved < model.floor_bytes(sp, {"rows": ROWS, "n": N})
    assert s.candidate.gbps == s.bytes_moved / (s.candidate.median_us * 1e-6) / 1e9
    again = profiler.profile(unit, unit, sp, backend, seed=1, sizes="bench")   # a later evaluation of the run
    assert again.sizes[0].bytes_moved == s.bytes_moved and len(probes) == 1     # seen once, kept by its code


def test_without_a_reference_nothing_is_probed():
    """The probe runs only the trusted reference: the file's own kernel timed alone (no reference)
    would meet its inputs before it is timed, so its bytes stay the spec's."""
    sp, unit, backend = setup()
    touched._cache.clear()
    p = profiler.profile(None, unit, sp, backend, seed=1, sizes="bench")
    assert p.sizes[0].bytes_moved == model.floor_bytes(sp, {"rows": ROWS, "n": N}) and not touched._cache
