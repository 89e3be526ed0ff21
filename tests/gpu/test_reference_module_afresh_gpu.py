"""Issue 30 on the GPU: the reference's module is its own (own_module), but it was loaded once per
worker and the gate runs the reference and the candidate in turn in one CUDA context; a candidate
that finds the address of the reference module's `__device__` variables (kept, guessed, scanned
for) changed what the reference computed next. Every launch (and timing loop) of the reference now
runs from a module loaded afresh from its compiled image. The catalogue's
`guessed_global_rewrites_reference_module`; the stand-in proof is tests/security/test_ground_truth.py.
Run: `PYTEST_GPU_FILES=tests/gpu/test_reference_module_afresh_gpu.py scripts/gpu-check pytest-gpu`
(or `pytest -m gpu tests/gpu/test_reference_module_afresh_gpu.py` on a GPU machine)."""
from __future__ import annotations

import pytest

from astra_cuda.execution import worker

import gpu_jobs
from gpu_jobs import Call

pytestmark = pytest.mark.gpu   # `scripts/gpu-check pytest-gpu` selects by this mark


@pytest.fixture()
def pool():
    p = worker.Pool(1, name="reference-afresh")
    yield p
    p.close()


def test_candidate_writing_the_reference_table_reaches_no_reference_launch(pool):
    """On main the reference read the candidate's 1s from its second launch on. Fresh loads cost
    a fraction of a millisecond and leave no module behind."""
    r = pool.run(Call(gpu_jobs.reference_module_afresh), timeout=300)
    print({k: v for k, v in r.items() if k != "seen"})
    assert r["seen"] == [[3, 3, 3, 3]] * 20, r["seen"]
    assert r["timed"] == [3, 3, 3, 3], r["timed"]
    assert r["reference_launch_ms"] < r["candidate_launch_ms"] + 5.0, r   # a load, never a compile
    assert r["freed_bytes_lost"] < 64 << 20, r   # 500 loads: unloaded as replaced


def test_gate_twice_in_one_worker_with_the_reference_gain_rewritten(pool, tmp_path):
    """The whole gate, checked twice in one worker (the editor checks on every save): the wrong
    rewrite writes 1 into the reference's `gain` at each launch; on main the second check passed
    (the reference's module kept the 1), now both fail the comparison."""
    from tests.security.reference_files import ORIGINAL, SPEC, units
    ref, cand, spec = units(ORIGINAL + gpu_jobs.GAIN_TARGET + SPEC + gpu_jobs.GAIN_BY_ADDRESS, tmp_path)
    verdicts = pool.run(Call(gpu_jobs.gate_with_reference_table_rewritten, {"ref": ref, "cand": cand, "spec": spec}),
                        timeout=600)
    for v in verdicts:
        assert v["status"] == "failed" and "compare" in v["checks"], v["human"]
