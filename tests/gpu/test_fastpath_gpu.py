"""Issue 24's fast path on a real GPU: during the search a candidate that rewrites the kernel (and
adds a helper of a new name) is compiled from the reference's proven cut by CuPy's NVRTC, both
sides alike, and passes the gate; the same candidate as a final verdict compiles its whole file
with nvcc (the cubin path) and passes too."""
from __future__ import annotations

from pathlib import Path

import pytest

from astra_cuda.compile import extract, fastpath, static, toolkit
from astra_cuda.execution import jobs, worker
from astra_cuda.model import source, spec as spec_mod

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(toolkit.find() is None or static.available() is None,
                                                  reason="needs a CUDA toolkit (nvcc) and NVRTC")]
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "silu_and_mul.cu"


@pytest.fixture(scope="module")
def pool():
    p = worker.Pool(1, name="gpu-fastpath-test")
    yield p
    p.close()


def test_the_search_runs_the_proven_cut_and_the_final_verdict_the_whole_file(pool, tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_CACHE_DIR", str(tmp_path / "cache"))
    text = EXAMPLE.read_text()
    path = tmp_path / "silu_and_mul.cu"
    path.write_text(text)
    m = source.parse(text)
    spec = spec_mod.load(m.kernel("silu_and_mul"), m)
    ref = extract.spec_unit(m, str(path), "silu_and_mul", spec)
    proof = fastpath.prove(ref)   # compilers only: no CUDA context in the test process
    assert proof.ok, proof.reason
    helper = "__device__ __forceinline__ float gated(float x, float y) { return silu(x) * y; }\n\n"
    cand_text = text.replace("/* @astra", helper + "/* @astra", 1).replace("__float2half(silu(x) * y)",
                                                                          "__float2half(gated(x, y))")
    cand, why = fastpath.search_unit(ref, proof, m, source.parse(cand_text), "silu_and_mul")
    assert cand is not None, why
    v = pool.run(jobs.CheckJob("gpu", fastpath.reference_unit(ref, proof), cand, spec, quick=True), timeout=300)
    assert v.passed, v.human()
    assert v.compiler.startswith("NVRTC") and "proven" in v.compiler, v.compiler
    whole = extract.spec_unit(source.parse(cand_text), str(path), "silu_and_mul", spec)
    assert not whole.search_cut
    f = pool.run(jobs.CheckJob("gpu", ref, whole, spec, quick=True), timeout=300)
    assert f.passed and f.compiler.startswith("nvcc "), (f.compiler, f.human())


def test_a_torch_extensions_search_compiles_the_proven_cut_not_its_whole_file(pool, tmp_path, monkeypatch):
    """The torch example: its whole file takes ~20 s under nvcc (torch's headers), so its search
    must compile the proven cut — with NVRTC where NVRTC's code is the file's, else with nvcc (on
    the GPU machine at 9749af4 NVRTC's register counts differed from nvcc's)."""
    monkeypatch.setenv("ASTRA_CACHE_DIR", str(tmp_path / "cache"))
    example = EXAMPLE.with_name("fused_add_rmsnorm.cu")
    text = example.read_text()
    path = tmp_path / example.name
    path.write_text(text)
    m = source.parse(text)
    spec = spec_mod.load(m.kernel("fused_add_rmsnorm_kernel"), m)
    ref = extract.spec_unit(m, str(path), "fused_add_rmsnorm_kernel", spec)
    proof = fastpath.prove(ref)
    assert proof.ok, proof.reason
    cand_text = text.replace("inv_rms = rsqrtf(total / hidden_size + epsilon);",
                             "inv_rms = rsqrtf(total / (float)hidden_size + epsilon);")
    assert cand_text != text
    cand, why = fastpath.search_unit(ref, proof, m, source.parse(cand_text), "fused_add_rmsnorm_kernel")
    assert cand is not None and cand.search_cut == proof.compiler, why
    v = pool.run(jobs.CheckJob("gpu", fastpath.reference_unit(ref, proof), cand, spec, quick=True), timeout=300)
    assert v.passed, v.human()
    assert v.compiler.startswith(("NVRTC", fastpath.SEARCH_NVCC)) and "proven" in v.compiler, v.compiler
