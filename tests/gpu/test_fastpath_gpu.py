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
    v = pool.run(jobs.CheckJob("gpu", fastpath.reference_unit(ref), cand, spec, quick=True), timeout=300)
    assert v.passed, v.human()
    assert v.compiler.startswith("NVRTC") and "proven" in v.compiler, v.compiler
    whole = extract.spec_unit(source.parse(cand_text), str(path), "silu_and_mul", spec)
    assert not whole.search_cut
    f = pool.run(jobs.CheckJob("gpu", ref, whole, spec, quick=True), timeout=300)
    assert f.passed and f.compiler.startswith("nvcc "), (f.compiler, f.human())
