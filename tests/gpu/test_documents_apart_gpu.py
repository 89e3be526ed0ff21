"""Issue 30 on the GPU: launches of different documents never share a process (a CUDA context).
The pool's rule is tests/security/test_execution.py::test_gpu_context_shared_across_documents
(every machine); here real GPU checks of two documents, through one pool of one worker and of
two: each document's launches run in a process that never ran the other's."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from astra_cuda.compile import extract
from astra_cuda.execution import worker
from astra_cuda.model import source, spec as spec_mod

from gpu_jobs import PidCheck

pytestmark = pytest.mark.gpu   # `scripts/gpu-check pytest-gpu` selects by this mark
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("size", [1, 2])
def test_two_documents_never_share_a_worker(size, tmp_path):
    text = (ROOT / "examples" / "silu_and_mul.cu").read_text()
    docs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        path = tmp_path / name / "silu_and_mul.cu"
        shutil.copy(ROOT / "examples" / "silu_and_mul.cu", path)
        docs.append(extract.unit(text, str(path), "silu_and_mul"))
    model = source.parse(text)
    spec = spec_mod.load(model.kernel("silu_and_mul"), model)
    pool = worker.Pool(size, name=f"documents-{size}")
    try:
        ran = [pool.run(PidCheck("gpu", u, u, spec, quick=True), timeout=300) for u in (docs[0], docs[1], docs[0])]
    finally:
        pool.close()
    (a1, va1), (b1, vb1), (a2, va2) = ran
    assert va1.passed and vb1.passed and va2.passed, [v.human() for _, v in ran]
    assert b1 not in (a1, a2), (a1, b1, a2)
    assert (a2 == a1) if size == 2 else (a2 != a1), (a1, b1, a2)
