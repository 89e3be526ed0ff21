"""Structs passed by value and tables of device pointers on a real GPU (issue 25, item 6): the
layout probe read back from the module (nvcc's cubin and NVRTC's alike), the struct's bytes with
device addresses passed by value, the table in device memory — through the gate (a kernel that
ignores a field is caught) and the timing loop."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from astra_cuda.compile import extract
from astra_cuda.execution import jobs, worker
from astra_cuda.model import source, spec as spec_mod

pytestmark = pytest.mark.gpu

FILE = """\
struct Dims { int n; float scale; };
struct Params { char tag; const float* x; float* y; Dims d; long long pad[3]; };

/* @astra
grid = ["cdiv(n, 256)"]
block = [256]
[sizes]
n = [1, 300, 5000]
[bench]
n = [16777216]
[args]
p.x = { type = "float", shape = ["n"] }
p.y = { type = "float", shape = ["n"], output = true }
p.d.n = "n"
p.d.scale = 2.5
p."pad[1]" = 7
t = { type = "float", shape = ["n"], table = 3 }
*/
__global__ void k(Params p, const float* const* t) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p.d.n) p.y[i] = p.d.scale * p.x[i] + t[0][i] + t[2][i] + (float)p.pad[1];
}
"""


@pytest.fixture(scope="module")
def pool():
    p = worker.Pool(1, name="gpu-packed-test")
    yield p
    p.close()


def _unit(tmp_path: Path, text: str, nvrtc: bool):
    path = tmp_path / "packed.cu"
    path.write_text(FILE)
    m = source.parse(text)
    spec = spec_mod.load(m.kernel("k"), m)
    u = extract.spec_unit(m, str(path), "k", spec)
    return (dataclasses.replace(u, file_text="") if nvrtc else u), spec


@pytest.mark.parametrize("nvrtc", [False, pytest.param(True, marks=pytest.mark.xfail(
    strict=True, reason="issue 25: through CuPy's NVRTC on an H200 the layout probe fails to compile ('type name "
                        "is not allowed' at its line 35) though the PyPI NVRTC compiles it here; nvcc's cubin passes"))])
def test_a_struct_and_a_table_pass_the_gate_and_are_timed(pool, tmp_path, nvrtc):
    ref, spec = _unit(tmp_path, FILE, nvrtc)
    v = pool.run(jobs.CheckJob("gpu", ref, ref, spec, quick=True), timeout=300)
    assert v.passed and v.compared, v.human()
    p = pool.run(jobs.ProfileJob("gpu", ref, ref, spec), timeout=300)
    assert p.measured and p.valid, p.to_json()
    print(p.summary_line(), "|", v.compiler)


@pytest.mark.parametrize("old,new", [("p.d.scale * p.x[i]", "2.0f * p.x[i]"), ("t[2][i]", "t[1][i]"),
                                     ("(float)p.pad[1]", "(float)p.pad[0]")])
def test_a_kernel_that_misreads_its_struct_or_table_is_caught(pool, tmp_path, old, new):
    ref, spec = _unit(tmp_path, FILE, False)
    cand, _ = _unit(tmp_path, FILE.replace(old, new), False)
    v = pool.run(jobs.CheckJob("gpu", ref, cand, spec, quick=True), timeout=300)
    assert v.status == "failed" and v.failures[0].check == "compare", v.human()


NULLABLE = """\
/* @astra
grid = ["cdiv(n, 256)"]
block = [256]
[sizes]
n = [1, 300, 5000]
[args]
out = { type = "float", shape = ["n"], output = true }
x = { type = "float", shape = ["n"] }
bias = "null"
n = "n"
*/
__global__ void k(float* out, const float* x, const float* bias, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.0f * x[i] + (bias != nullptr ? bias[i] : 1.0f);
}
"""


def test_a_null_pointer_argument_passes_the_gate(pool, tmp_path):
    """The spec's `bias = "null"` (issue 25): an 8-byte zero where the pointer goes; a kernel that
    takes the other path (reads `bias` as if given) faults or differs."""
    path = tmp_path / "nullable.cu"
    path.write_text(NULLABLE)
    m = source.parse(NULLABLE)
    spec = spec_mod.load(m.kernel("k"), m)
    ref = extract.spec_unit(m, str(path), "k", spec)
    v = pool.run(jobs.CheckJob("gpu", ref, ref, spec, quick=True), timeout=300)
    assert v.passed and v.compared, v.human()
    bad = NULLABLE.replace("(bias != nullptr ? bias[i] : 1.0f)", "0.5f")
    mb = source.parse(bad)
    cand = extract.spec_unit(mb, str(path), "k", spec)
    v = pool.run(jobs.CheckJob("gpu", ref, cand, spec, quick=True), timeout=300)
    assert v.status == "failed", v.human()


RECORDS = """\
struct Batch { int n_tokens; int n_seqs; };
struct __align__(16) Seq { int start; int len; int seen; int pad; };
struct Wrap { const Batch* batch; const Seq* seqs; };
/* @astra
grid = ["seqs"]
block = [64]
[sizes]
seqs = [1, 7, 300]
tokens = [50, 4096]
d = [64, 1000]
[args]
out = { type = "float", shape = ["seqs", "d"], output = true }
acts = { type = "float", shape = ["tokens", "d"] }
batch = { records = 1, n_seqs = "seqs", n_tokens = "tokens" }
seqs_ = { records = "seqs", start = { init = "randint(0, tokens)" }, len = 1, seen = "d" }
w.batch = { records = 1, n_seqs = "seqs" }
w.seqs = { records = "seqs", start = { init = "randint(0, tokens)" }, len = 1 }
d = "d"
*/
__global__ void k(float* out, const float* acts, const Batch* batch, const Seq* seqs_, Wrap w, int d) {
    const int s = blockIdx.x;
    if (s >= batch->n_seqs || s >= w.batch->n_seqs) return;
    const Seq q = seqs_[s];
    const int row = q.start + q.len - 1, other = w.seqs[s].start;
    for (int i = threadIdx.x; i < d; i += blockDim.x)
        out[s * d + i] = acts[row * d + i] + 0.5f * acts[other * d + i] + (float)(q.seen - d);
}
"""


@pytest.mark.parametrize("old,new,verdict", [
    ("", "", "passed"),
    ("const Seq q = seqs_[s];", "const Seq q = seqs_[0];", "compare"),
    ("other = w.seqs[s].start", "other = w.seqs[s].len", "compare")])
def test_pointers_to_records_pass_the_gate_and_a_misread_is_caught(pool, tmp_path, old, new, verdict):
    """DeepSpeed's ragged descriptors (issue 25, item 6): records in device memory, given as a
    parameter and through a struct's field (held alive by the backend until the launch), laid out
    as nvcc lays them out (Seq is 16-byte aligned)."""
    path = tmp_path / "records.cu"
    path.write_text(RECORDS)

    def unit_of(text):
        m = source.parse(text)
        s = spec_mod.load(m.kernel("k"), m)
        return extract.spec_unit(m, str(path), "k", s), s

    ref, spec = unit_of(RECORDS)
    cand, _ = unit_of(RECORDS.replace(old, new) if old else RECORDS)
    v = pool.run(jobs.CheckJob("gpu", ref, cand, spec, quick=True), timeout=300)
    if verdict == "passed":
        assert v.passed and v.compared, v.human()
        p = pool.run(jobs.ProfileJob("gpu", ref, ref, spec), timeout=300)
        assert p.measured and p.valid, p.to_json()
    else:
        assert v.status == "failed" and v.failures[0].check == verdict, v.human()


POINTER_TABLE = """\
template <int n> struct Lists { void* addresses[n][4]; long long sizes[4]; int start; };
/* @astra
grid = ["cdiv(m, 128)", 2]
block = [128]
instantiate = "<2>"
[sizes]
m = [1, 300, 100000]
[args]
tl."addresses[0][0]" = { type = "float", shape = ["m"] }
tl."addresses[0][1]" = { type = "float", shape = ["2 * m"] }
tl."addresses[1][0]" = { type = "float", shape = ["m"], output = true }
tl."addresses[1][1]" = { type = "float", shape = ["2 * m"], output = true }
tl."sizes[0]" = "m"
tl."sizes[1]" = "2 * m"
*/
template <int n>
__global__ void k(Lists<n> tl) {
    const int t = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    const float* x = (const float*)tl.addresses[0][t];
    float* y = (float*)tl.addresses[1][t];
    for (int j = i; j < tl.sizes[t]; j += gridDim.x * blockDim.x) y[j] = 3.0f * x[j] + t;
}
"""


@pytest.mark.parametrize("old,new,verdict", [("", "", "passed"),
                                             ("tl.addresses[0][t]", "tl.addresses[0][0]", "compare")])
def test_a_struct_holding_a_table_of_pointers_passes_the_gate(pool, tmp_path, old, new, verdict):
    """apex's TensorListMetadata (issue 25, item 6): `void* addresses[2][4]` held by value, each
    entry a field (`tl."addresses[1][0]"`) whose offset nvcc's layout gives."""
    path = tmp_path / "lists.cu"
    path.write_text(POINTER_TABLE)

    def unit_of(text):
        m = source.parse(text)
        s = spec_mod.load(m.kernel("k"), m)
        return extract.spec_unit(m, str(path), "k", s), s

    ref, spec = unit_of(POINTER_TABLE)
    cand, _ = unit_of(POINTER_TABLE.replace(old, new) if old else POINTER_TABLE)
    v = pool.run(jobs.CheckJob("gpu", ref, cand, spec, quick=True), timeout=300)
    if verdict == "passed":
        assert v.passed and v.compared, v.human()
    else:
        assert v.status == "failed" and v.failures[0].check == verdict, v.human()


# Failed on an H200 at df56d65 (the cubin variants passed): CuPy's NVRTC there is not the PyPI
# NVRTC that passes these here, and fails the layout probe of a struct (see the xfail above) —
# open in issue 25; a strict xfail, so that a fix shows.
NVRTC_RECORDS = ("issue 25: through CuPy's NVRTC on an H200 (df56d65) the typedef-named records are not laid out "
                 "or read as compiled, while nvcc's cubin of the same file passes")

# DeepSpeed's ragged logits_gather_kernel shape (issue 25): typedef-named anonymous descriptor
# structs of int32_t fields, each a kernel parameter of its own, the gathered row copied 16 bytes
# at a time. On the suite's GPU runs that kernel's two runs disagreed (one wrote nothing:
# `n_sequences` read as 0); the CPU gate passes this file (tests/cpu/test_records_typedef.py).
GATHER = (Path(__file__).parents[1] / "cpu" / "records_gather.cu").read_text()


def _gather_unit(tmp_path: Path, nvrtc: bool):
    path = tmp_path / "gather.cu"
    path.write_text(GATHER)
    m = source.parse(GATHER)
    spec = spec_mod.load(m.kernel("k"), m)
    u = extract.spec_unit(m, str(path), "k", spec)
    return (dataclasses.replace(u, file_text="") if nvrtc else u), spec


@pytest.mark.parametrize("nvrtc", [False, pytest.param(True, marks=pytest.mark.xfail(strict=True, reason=NVRTC_RECORDS))])
def test_typedef_named_records_as_parameters_pass_the_gate(pool, tmp_path, nvrtc):
    """Both ways the GPU backend builds a module: nvcc's cubin of the file, and NVRTC on the cut
    unit (what the suite's run used); with no reference the gate runs the kernel twice per case
    and the two runs must agree — as on the CPU."""
    u, spec = _gather_unit(tmp_path, nvrtc)
    v = pool.run(jobs.CheckJob("gpu", None, u, spec, quick=True), timeout=300)
    assert v.passed, v.human()
    v = pool.run(jobs.CheckJob("gpu", u, u, spec, quick=True), timeout=300)
    assert v.passed and v.compared, v.human()


@pytest.mark.parametrize("nvrtc", [False, pytest.param(True, marks=pytest.mark.xfail(strict=True, reason=NVRTC_RECORDS))])
def test_typedef_named_records_are_laid_out_and_read_as_compiled(pool, tmp_path, nvrtc):
    """Below the gate, each build: the probe's layouts (Batch 8 bytes, n_sequences at 4; Seq 16
    bytes, start_idx at 0, n_tokens at 4, as g++ and nvcc lay them out) and two launches whose
    gathered rows equal the host's gather — which of layout or launch is wrong, if either."""
    from gpu_jobs import Call, records_gather
    u, spec = _gather_unit(tmp_path, nvrtc)
    got = pool.run(Call(records_gather, {"unit": u, "spec": spec, "sizes": {"seqs": 130, "d": 256, "V": 1000}}),
                   timeout=300)
    assert got["layouts"] == {"batch": (8, {"n_sequences": (4, 4)}),
                              "seqs_": (16, {"start_idx": (0, 4), "n_tokens": (4, 4)})}, got
    assert got["match"] == [True, True], got
