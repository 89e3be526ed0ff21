"""Issue 30 on the GPU: a candidate and the reference it is judged against — two kernels of one
file (tests/security/reference_files.py) — in one worker, one CUDA context. The file is one cubin
(nvcc on the whole file), and the reference's module was the candidate's: a `__device__` variable
the rewrite wrote was the one the original read. The catalogue's CPU side and the backend's wiring
(CuPy stood in) are tests/security/test_reference_apart.py; here real launches:
`scripts/gpu-check pytest-gpu` (or `PYTEST_GPU_FILES=tests/gpu/test_reference_apart_gpu.py`)."""
from __future__ import annotations

import pytest

from astra_cuda.execution import jobs, worker

from tests.security.reference_files import REWRITES_GAIN, checked_twice_in_one_worker, slows_reference, units

pytestmark = pytest.mark.gpu   # `scripts/gpu-check pytest-gpu` selects by this mark


def test_device_global_rewrites_reference_gpu(tmp_path):
    """Checked twice in one worker (as the editor checks on every save): on main the second check
    passed the wrong rewrite — the reference read the `gain` the first check's rewrite set to 1."""
    for v in checked_twice_in_one_worker(REWRITES_GAIN, tmp_path, "gpu", "reference-apart"):
        assert v.status == "failed" and any(f.check == "compare" for f in v.failures), v.human()


def test_device_global_slows_reference_gpu(tmp_path):
    """A right rewrite that sets the original's work count to 4,096 passes: checked, then timed
    beside the original in the same worker. On main the original ran those passes in its timed
    launches (several times the rewrite's time); its own module keeps it at one pass, the time of
    the same memory traffic as the rewrite's."""
    ref, cand, spec = units(slows_reference(1 << 12), tmp_path)
    pool = worker.Pool(1, name="reference-apart-timing")
    try:
        v = pool.run(jobs.CheckJob("gpu", ref, cand, spec, quick=True), timeout=300)
        prof = pool.run(jobs.ProfileJob("gpu", ref, cand, spec, sizes="bench"), timeout=600)
    finally:
        pool.close()
    assert v.passed, v.human()
    timed = [s for s in prof.sizes if s.reference is not None]
    assert timed, prof.errors
    for s in timed:
        assert s.reference.median_us < 2 * s.candidate.median_us + 5, (s.label, s.reference.median_us,
                                                                         s.candidate.median_us)
