"""The catalogue's `reference` entries: a candidate and the reference it is judged against, two
kernels of one file (the spec's `reference = "…"`, as tests/realcode/test_kernel_versions.py), in
one worker. On the CPU backend every launch runs in a fresh process and every compile is a module
of its own with its own `__device__` variables (`CpuModule.state`), so these hold through the whole
gate here; on the GPU the two run in one process and one CUDA context, where one file's two kernels
were one loaded module (one cubin) — tests/gpu/test_reference_apart_gpu.py runs them there, and
`test_gpu_reference_module_is_its_own` below checks the GPU backend's wiring with CuPy stood in."""
from __future__ import annotations

import dataclasses

import pytest

from astra_cuda.compile import toolkit
from astra_cuda.gate.building import Building

from . import catalogue
from .reference_files import ORIGINAL, REWRITES_GAIN, SPEC, slows_reference, units
from .test_attacks import PAYLOAD_HEADERS, _no_screen, cpu, scribbler  # noqa: F401 - the fixture

EXPECTED = {a.name for a in catalogue.ALL if a.kind == "reference"}

# Wrong (every output 0x41414141), and its launch leaves a thread (host code in the kernel) that,
# once the launch is over, writes 0x41 into every buffer mapped beside it for ~4 s: where a later
# launch of the reference shared its process, the reference's outputs would be the candidate's.
THREAD_REWRITES = PAYLOAD_HEADERS + "#include <pthread.h>\n" + ORIGINAL + scribbler("astra_rewrite", 200000) + r"""
""" + SPEC + """__global__ void scale_fast(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i == 0) { pthread_t t; if (pthread_create(&t, 0, astra_rewrite, 0) == 0) pthread_detach(t); }
  if (i < n) { unsigned b = 0x41414141u; memcpy(&y[i], &b, 4); }
}
"""


def _no_cut_check(monkeypatch):
    """The cut check (nvcc's PTX of the file against the cut's) refuses a kernel that writes a
    `__device__` variable another kernel of its file reads ("the code of S1 differs", a false
    refusal found here, reported): these entries are about what runs after it, so it is off."""
    monkeypatch.setattr(Building, "cut_check", lambda self: True)


def test_device_global_rewrites_reference(cpu, tmp_path, monkeypatch):  # noqa: F811
    """Checked twice in one worker (the language server checks a document on every save), the
    rewrite that sets the reference's `gain` to 1 fails both times: the reference computes with its
    own. Its module is compiled for the reference (`role`), never the candidate's."""
    from astra_cuda import gate
    _no_cut_check(monkeypatch)
    ref, cand, spec = units(REWRITES_GAIN, tmp_path)
    roles = []
    compile_unit = cpu.compile_unit

    def recorded(unit, **kw):
        roles.append((unit.kernel, kw.get("role")))
        return compile_unit(unit, **kw)
    monkeypatch.setattr(cpu, "compile_unit", recorded)
    for _ in range(2):
        v = gate.check(ref, cand, spec, cpu, quick=True)
        assert v.status == "failed" and any(f.check == "compare" for f in v.failures), v.human()
    assert ("scale_ref", "reference") in roles and ("scale_fast", "candidate") in roles, roles
    assert {r for k, r in roles if k == "scale_ref"} == {"reference"}, roles


def test_device_global_slows_reference(cpu, tmp_path, monkeypatch):  # noqa: F811
    """A right rewrite that raises the reference's work count to 2**30 passes per element: the
    reference's launches never see it — had they, each would have run into its time limit (the
    check an error naming the reference) — so the check passes, in about the time of the original."""
    from astra_cuda import gate
    _no_cut_check(monkeypatch)
    ref, cand, spec = units(slows_reference(1 << 30), tmp_path)
    v = gate.check(ref, cand, spec, cpu, quick=True)
    assert v.passed, v.human()


def test_leftover_thread_rewrites_reference(cpu, tmp_path, monkeypatch):  # noqa: F811
    """Host code (the screens and the GPU-first compile off: only the executor stands): the
    thread the candidate's launch leaves dies with that launch's process, so the reference's
    outputs are its own and the wrong rewrite fails."""
    from astra_cuda import gate
    from astra_cuda.gate import screen
    _no_screen(monkeypatch)
    # the gate's screen off too (it refuses host calls, and host functions a candidate adds)
    monkeypatch.setattr(screen, "screen", lambda *a, **k: screen.ScreenResult(stateful_suspect=True))
    monkeypatch.setattr(Building, "device_compile", lambda self: True)
    _no_cut_check(monkeypatch)
    ref, cand, spec = units(THREAD_REWRITES, tmp_path)
    cand = dataclasses.replace(cand, source=THREAD_REWRITES)   # the file as written, no cut: host code kept
    v = gate.check(ref, cand, spec, cpu, quick=True)
    # the constant output is judged against the reference's own, which varies
    assert v.status == "failed" and any(f.check in ("compare", "not_constant") for f in v.failures), v.human()


@pytest.mark.skipif(toolkit.find() is None, reason="no CUDA toolkit (nvcc) here")
def test_gpu_reference_module_is_its_own(tmp_path, monkeypatch):
    """With a toolkit the GPU backend compiles the whole file with nvcc: the reference kernel and
    the rewrite of one file are one cubin, and the backend kept one loaded module per cubin — one
    `gain` and one `passes` for both (on main: the same module object). CuPy itself keeps one
    module per cubin path (and per NVRTC source) in a process, so the reference's is now loaded
    from a copy of its own (`backends/own_module.py`) and kept per role: never the candidate's,
    reused by its own role (the reference across the checks of one worker)."""
    import types

    from astra_cuda.backends import own_module
    from tests.static.test_nvcc import _FakeRaw, _gpu_backend
    loaded: list[str] = []

    class Raw(_FakeRaw):   # CuPy's RawModule(path=…), which loads one module per path string
        def __init__(self, path):
            loaded.append(path)
            super().__init__(path)
    b = _gpu_backend(monkeypatch)
    b.cp = types.SimpleNamespace(RawModule=Raw)
    (tmp_path / "proj").mkdir()
    ref, cand, _ = units(REWRITES_GAIN, tmp_path / "proj")
    r = b.compile_unit(ref, role="reference")
    c = b.compile_unit(cand, role="candidate")
    assert r is not c and r.raw is not c.raw
    assert len(loaded) == 2 and len(set(loaded)) == 2, loaded   # two paths: two modules in CuPy too
    with open(loaded[0], "rb") as f1, open(loaded[1], "rb") as f2:
        assert f1.read() == f2.read()   # the same cubin (one file), loaded twice
    assert b.compile_unit(ref, role="reference") is r and b.compile_unit(cand, role="candidate") is c
    assert len(loaded) == 2
    # the candidate's unit as a reference (an unchanged file against its pinned baseline): the
    # reference's module of that cubin, never the candidate's
    assert b.compile_unit(cand, role="reference") is r and len(loaded) == 2
    # NVRTC (no toolkit, or the search's cut): the reference's source is another source, its lines unmoved
    code = "__device__ int passes = 1;\n__global__ void k(int* y) { y[0] = passes; }\n"
    own = own_module.nvrtc_source(code, "reference")
    assert own != code and own.startswith(code) and own_module.nvrtc_source(code, "candidate") == code


def test_every_reference_entry_has_a_test():
    tested = {n[len("test_"):] for n in globals() if n.startswith("test_")}
    assert EXPECTED and EXPECTED <= tested, EXPECTED - tested
