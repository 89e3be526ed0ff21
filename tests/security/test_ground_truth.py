"""The catalogue's `truth` entries: what a candidate is judged against must be values it could not
have written. On a GPU the reference and the candidate run in one process and one CUDA context:
every allocation of the worker is reachable from the candidate's device code through a pointer it
kept from an earlier launch (CuPy's pool hands freed memory to the next allocation) or one it
guessed. The NumPy fake GPU (tests/profiler/fake_gpu.py) is that shared address space here: a fake
kernel reaches every live device buffer of the process (found with `gc`, as a kernel scans or
keeps addresses) — the proof runs on this machine; tests/gpu/test_ground_truth_gpu.py is the real
launch for the lead's GPU run. On the CPU backend a launch's process maps its own arguments only
(`test_scribbling_every_mapping_reaches_no_reference_output`)."""
from __future__ import annotations

import dataclasses
import gc

import numpy as np
import pytest

from astra_cuda import gate, profiler
from astra_cuda.gate import checks, judging
from astra_cuda.gate.building import Building

from tests.profiler.fake_gpu import FakeBuf, FakeGpu, silu, units

from . import catalogue
from .reference_files import ORIGINAL, SPEC
from .test_attacks import PAYLOAD_HEADERS, _no_screen, cpu  # noqa: F401 - the fixture

EXPECTED = {a.name for a in catalogue.ALL if a.kind == "truth"}


def _live_buffers() -> list[FakeBuf]:
    """Every device buffer alive in the process: what a kernel reaches through kept or guessed
    addresses where all of a worker's allocations share one address space."""
    return [o for o in gc.get_objects() if isinstance(o, FakeBuf)]


def scribbling_candidate(args, n) -> float:
    """Wrong (out = x, the first half of each input row), and it writes the same into every live
    buffer shaped like its output — where the reference's outputs of the case lie, when they are
    still on the device."""
    out, inp, d = args[0], args[1], args[2].value
    out.host[...] = inp.host[:, :d]
    for b in _live_buffers():
        if b.shape == out.shape and b.dtype == out.dtype and b is not out:
            b.host[...] = out.host
    return 20.0


def test_guessed_pointers_rewrite_reference_outputs():
    """The whole gate on the fake GPU: the wrong candidate fails the comparison — each case's
    reference outputs are host copies taken before the candidate's launch. The control below
    (expectations left on the device until compared) shows the rule, not luck, contains it."""
    ref, cand, spec = units("cand")
    b = FakeGpu({"// reference": lambda a, n: silu(a), "// cand": scribbling_candidate})
    v = gate.check(ref, cand, spec, b, quick=True)
    assert v.status == "failed" and any(f.check == "compare" for f in v.failures), v.human()


class _OnDevice(dict):
    """Expectations read from the device when compared (what the rule forbids)."""

    def __init__(self, backend, buffers):
        super().__init__()
        self.backend, self.buffers = backend, buffers

    def __getitem__(self, name):
        return self.backend.download(self.buffers[name])

    def __contains__(self, name):
        return name in self.buffers


def test_control_expectations_left_on_the_device_are_rewritten(monkeypatch):
    """The control of `test_guessed_pointers_rewrite_reference_outputs`: with the reference's
    outputs left on the device until compared, the same wrong candidate passes the comparison."""
    ref, cand, spec = units("cand")
    b = FakeGpu({"// reference": lambda a, n: silu(a), "// cand": scribbling_candidate})

    def lazy(self, sizes, host, poison, info, schedule=None):
        if self.ref is None:
            return None
        run = checks.prepare(self.rspec, self.backend, sizes, host, self.ctypes, poison)
        self.backend.launch(self.ref.module, self.ref.name, checks.launch_of(self.rspec, sizes), run.args)
        return _OnDevice(self.backend, run.buffers)
    monkeypatch.setattr(judging.Judging, "expected", lazy)
    v = gate.check(ref, cand, spec, b, quick=True)
    # every case of the suite compared equal: each expectation was rewritten before it was read
    # (a later check, whose reference runs after the candidate's launch, still catches it here)
    assert v.coverage.cases >= 5 and not any(f.check == "compare" for f in v.failures), v.human()


# ---- the timing loop ------------------------------------------------------------------------

ROWS, D = 64, 1024   # the fake spec's bench size


def timing_inputs_candidate():
    """Wrong on the real inputs (it treats every input element the checks do not sample as 0), fast,
    and it writes 0 there in every live buffer that holds a copy of its input — the timing's pristine
    input sets among them, which no launch is given but from which the loop copies every launch's
    inputs and the reference's expectations are computed after the loop. The sampled elements it leaves alone (it
    reads where they are: the positions buffers), so every sampled input still holds the host's
    value; the reference, launched on the same spoiled sets, agrees with it everywhere."""
    keep: dict[str, np.ndarray] = {}

    def kernel(args, n) -> float:
        out, inp, d = args[0], args[1], args[2].value
        live = _live_buffers()
        if not keep:   # the sampled positions: every int64 buffer of the process
            mask = np.zeros(inp.host.size, bool)
            for b in live:
                if b.dtype == np.int64 and b.host.size and int(b.host.max()) < mask.size:
                    mask[b.host.reshape(-1)] = True
            keep["mask"] = mask.reshape(inp.host.shape)
        mask = keep["mask"]
        for b in live:   # copies of its input elsewhere (found by content): the set it was copied from
            if b.shape == inp.shape and b.dtype == inp.dtype and not np.shares_memory(b.host, inp.host) \
                    and np.array_equal(b.host, inp.host):
                b.host[~mask] = 0
        x = np.where(mask, inp.host, 0).astype(np.float32)
        out.host[...] = (x[:, :d] / (1 + np.exp(-x[:, :d])) * x[:, d:]).astype(np.float16)
        return 5.0
    return kernel


def test_guessed_pointers_rewrite_timing_inputs():
    """The profiler's timing at the bench size (64 x 1024): the reference's expectations come from
    the host's inputs after the loop, so the candidate's outputs are compared with the real result
    and the spoiled sets are named."""
    ref, cand, spec = units("cand")
    b = FakeGpu({"// reference": lambda a, n: silu(a) or 25.0, "// cand": timing_inputs_candidate()})
    p = profiler.profile(ref, cand, spec, b, seed=7)
    s = p.sizes[0]
    assert not p.valid and s.output_failures, (s.speedup, s.implausible)
    assert any("no launch was given" in m and "`input`" in m for m in s.output_failures), s.output_failures
    assert any("elements differ" in m for m in s.output_failures), s.output_failures


def test_guessed_global_rewrites_timing_expectations():
    """The reference's module is kept per worker (own_module), its `__device__` variables at
    addresses a candidate can guess (one CUDA context): a candidate that halves the reference's
    `gain` at its first timed launch, and outputs half the result itself, made the reference of the
    loop and of the expectations computed after it agree with it — a valid profile, 5x faster. The
    expectations are now computed before any candidate launch of the job."""
    gain = {"v": 1.0}   # the reference's `__device__ float gain`

    def reference(args, n):
        silu(args)
        args[0].host[...] = (args[0].host.astype(np.float32) * gain["v"]).astype(np.float16)
        return 25.0

    def halves(args, n):
        gain["v"] = 0.5   # through the guessed address
        silu(args)
        args[0].host[...] = (args[0].host.astype(np.float32) * 0.5).astype(np.float16)
        return 5.0
    ref, cand, spec = units("cand")
    p = profiler.profile(ref, cand, spec, FakeGpu({"// reference": reference, "// cand": halves}), seed=7)
    s = p.sizes[0]
    assert not p.valid and s.output_failures, (s.speedup, s.implausible)
    assert any("elements differ" in m for m in s.output_failures), s.output_failures


def test_guessed_pointers_rewrite_timing_expectations():
    """The expectations, computed before the loop, stay on the device (no transfer for honest
    kernels): a candidate that writes its own result into them (found by shape, as
    `guessed_pointers_rewrite_reference_outputs` does) is named by their keyed digests (what
    computing them before the loop would open; before, they came after it)."""
    def forges(args, n):
        out, inp, d = args[0], args[1], args[2].value
        out.host[...] = inp.host[:, :d]
        for b in _live_buffers():
            if b.shape == out.shape and b.dtype == out.dtype and not np.shares_memory(b.host, out.host):
                b.host[...] = out.host
        return 5.0
    ref, cand, spec = units("cand")
    p = profiler.profile(ref, cand, spec, FakeGpu({"// reference": lambda a, n: silu(a) or 25.0, "// cand": forges}),
                         seed=7)
    s = p.sizes[0]
    assert not p.valid, (s.speedup, s.implausible)
    assert any("expected outputs" in m and "changed while the timing loop ran" in m for m in s.output_failures), \
        s.output_failures


def test_honest_kernels_time_as_before():
    """Nothing changes for kernels that write only their own arguments."""
    ref, cand, spec = units("cand")
    b = FakeGpu({"// reference": lambda a, n: silu(a) or 25.0, "// cand": lambda a, n: silu(a) or 20.0})
    p = profiler.profile(ref, cand, spec, b, seed=7)
    assert p.valid, p.sizes[0].output_failures + p.sizes[0].implausible


# ---- the GPU backend's own code: the reference's module loaded afresh for each launch ------------

REF_SOURCE = "__device__ int table = 3;\n__global__ void lookup(int* y) { y[0] = table; }\n"
CAND_SOURCE = "__global__ void rewrite(int* y) { /* finds `table` of every other module */ y[0] = 1; }\n"


def _table_kernels() -> None:
    """The reference reads its `__device__` table; the candidate, wrong (1), writes 1 into the
    table of every other module loaded in the context — the reference's, found by address."""
    from . import cupy_stand_in as fake

    def lookup(globals_, args):
        args[0][0] = globals_["table"]

    def rewrite(globals_, args):
        for m in list(fake.LIVE):
            if m.globals is not globals_ and "table" in m.globals:
                m.globals["table"] = 1
        args[0][0] = 1
    fake.KERNELS.update({"lookup": lookup, "rewrite": rewrite, "_Z6lookupPi": lookup, "_Z7rewritePi": rewrite})


def test_guessed_global_rewrites_reference_module(monkeypatch, tmp_path):
    """The GpuBackend's own compile, launch and timing loop on a stand-in CuPy whose loaded modules
    share one address space: a candidate launch between two reference launches sets the reference
    module's `__device__` table to its own (wrong) value. The reference's module was its own but
    loaded once per worker (own_module), so its next launch computed with the candidate's table and
    the wrong candidate matched; now every reference launch (and timing loop) loads the module
    afresh from its compiled image — no recompile — and unloads the one before."""
    import gc

    from astra_cuda.backends.base import Launch, TimedLaunch
    from astra_cuda.backends.gpu_buffer import GpuBuffer
    from . import cupy_stand_in as fake
    b = fake.backend(monkeypatch)
    _table_kernels()
    ref = b.compile(REF_SOURCE, ["lookup"], filename=str(tmp_path / "k.cu"), role="reference")
    cand = b.compile(CAND_SOURCE, ["rewrite"], filename=str(tmp_path / "k.cu"), role="candidate")
    y = GpuBuffer(np.zeros(1, np.int32), np.dtype(np.int32), (1,))
    one = Launch((1, 1, 1), (1, 1, 1))
    seen, loads = [], fake.LOADS[0]
    for _ in range(50):   # interleaved, as the gate runs them case after case
        b.launch(ref, "lookup", one, [y])
        seen.append(int(y.array[0]))
        b.launch(cand, "rewrite", one, [y])
    assert seen == [3] * 50, seen      # main: [3, 1, 1, …]
    assert fake.LOADS[0] - loads == 50   # a load per reference launch, from the image: no compile
    times = b.time(ref, "lookup", one, [TimedLaunch([y]) for _ in range(3)], flush_l2=False)
    assert len(times.times_us) == 3 and int(y.array[0]) == 3 and fake.LOADS[0] - loads == 51   # one per loop
    gc.collect()
    live = [m for m in fake.LIVE if "table" in m.globals]
    assert len(live) <= 3, len(live)   # compiled (never launched), the candidate's, the last fresh load
    assert b.compile(REF_SOURCE, ["lookup"], filename=str(tmp_path / "k.cu"), role="reference") is ref
    b.launch(cand, "rewrite", one, [y])
    assert b.read_global(ref, "table", 4) == np.int32(3).tobytes()   # its globals as loaded, never as launches left them
    assert fake._MEMO and len([k for k in fake._MEMO if isinstance(k, str)]) == 2   # compiled once each


def test_guessed_global_rewrites_reference_module_nvcc(monkeypatch, tmp_path):
    """The same with a CUDA toolkit: the whole file's cubin made by nvcc, the reference's launches
    each from a load of that cubin's bytes (by the kernel's mangled name), the candidate's from its
    own module."""
    from astra_cuda.backends.base import Launch
    from astra_cuda.backends.gpu_buffer import GpuBuffer
    from astra_cuda.compile import extract, toolkit
    from . import cupy_stand_in as fake
    if toolkit.find() is None:
        pytest.skip("no CUDA toolkit (nvcc) here")
    b = fake.backend(monkeypatch)
    _table_kernels()
    f = tmp_path / "proj" / "k.cu"
    f.parent.mkdir()
    f.write_text(REF_SOURCE + CAND_SOURCE)
    ref = b.compile_unit(extract.unit(f.read_text(), str(f), "lookup"), role="reference")
    cand = b.compile_unit(extract.unit(f.read_text(), str(f), "rewrite"), role="candidate")
    y = GpuBuffer(np.zeros(1, np.int32), np.dtype(np.int32), (1,))
    seen = []
    for _ in range(5):
        b.launch(ref, "lookup", Launch((1, 1, 1), (1, 1, 1)), [y])
        seen.append(int(y.array[0]))
        b.launch(cand, "rewrite", Launch((1, 1, 1), (1, 1, 1)), [y])
    assert seen == [3] * 5, seen   # main: [3, 1, 1, 1, 1]
    assert ref.lowered["lookup"] == "_Z6lookupPi" and ref.image is not None and cand.image is None


def test_a_reference_without_its_image_is_refused(monkeypatch, tmp_path):
    """Where CuPy hands over no image (a CuPy whose compiler loads otherwise), the reference cannot
    be loaded afresh: a clear compile error, never a reference launched from a module a candidate
    could have written."""
    from astra_cuda.backends import own_module
    from astra_cuda.backends.base import CompileError
    from . import cupy_stand_in as fake
    b = fake.backend(monkeypatch)
    _table_kernels()
    monkeypatch.setattr(own_module, "image_of", lambda raw: None)
    with pytest.raises(CompileError, match="loads afresh"):
        b.compile(REF_SOURCE, ["lookup"], filename=str(tmp_path / "k.cu"), role="reference")
    assert b.compile(CAND_SOURCE, ["rewrite"], filename=str(tmp_path / "k.cu"), role="candidate")  # no image needed


# ---- the CPU backend: a launch's process maps its own arguments only --------------------------

SCRIBBLES = PAYLOAD_HEADERS + ORIGINAL + "__device__ int mapped;\n" + SPEC + r"""__global__ void scale_fast(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i == 0) {   // in the launch itself: 0x41 into every buffer of its process but its input
    FILE* m = fopen("/proc/self/maps", "r");
    char line[512];
    mapped = 0;
    while (m && fgets(line, sizeof line, m)) {
      unsigned long lo, hi;
      if (strstr(line, "astra-buf") && strstr(line, "rw") && sscanf(line, "%lx-%lx", &lo, &hi) == 2) {
        ++mapped;
        // its own output up to its end only: past it lies the guard, which would name the write
        unsigned long end = (unsigned long)y >= lo && (unsigned long)y < hi ? (unsigned long)(y + n) : hi;
        if ((unsigned long)x < lo || (unsigned long)x >= hi) memset((void*)lo, 0x41, end - lo);
      }
    }
    if (m) fclose(m);
  }
  __syncthreads();
  if (i < n) y[i] = (float)mapped;   // wrong: how many buffers it reached
}
"""


def test_scribbling_every_mapping_reaches_no_reference_output(cpu, tmp_path, monkeypatch):  # noqa: F811
    """Host code in the candidate (the screens and the GPU-first compile off: the executor alone
    stands) writes 0x41 into every buffer mapped in its launch's process but its input, then
    outputs how many it found: its own two arguments and its module's `__device__` variables —
    never the reference's outputs (nor inputs), so the wrong rewrite fails the comparison."""
    from astra_cuda.gate import screen
    from .reference_files import units as file_units
    _no_screen(monkeypatch)
    monkeypatch.setattr(screen, "screen", lambda *a, **k: screen.ScreenResult())
    monkeypatch.setattr(Building, "device_compile", lambda self: True)
    monkeypatch.setattr(Building, "cut_check", lambda self: True)
    ref, cand, spec = file_units(SCRIBBLES, tmp_path)
    cand = dataclasses.replace(cand, source=SCRIBBLES)   # the file as written: host code kept
    v = gate.check(ref, cand, spec, cpu, quick=True)
    assert v.status == "failed", v.human()
    f = v.failures[0]
    assert f.check in ("compare", "not_constant") and "constant (3 everywhere)" in f.message, v.human()


def test_every_truth_entry_has_a_test():
    tested = {n[len("test_"):] for n in globals() if n.startswith("test_")}
    assert EXPECTED and EXPECTED <= tested, EXPECTED - tested
