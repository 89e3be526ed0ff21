"""The catalogue's `overrun` entries on a GPU (tests/security/test_overrun.py is the CPU side and
the GPU backend's upload and guard check on NumPy): a candidate writing past its output, checked
twice in one worker — before the guard its write landed in whatever CuPy's pool placed after the
output, so the check failed one way in one run and another (or passed) in the next. Run with
`scripts/gpu-check pytest-gpu` (or `PYTEST_GPU_FILES=tests/gpu/test_overrun_gpu.py`)."""
from __future__ import annotations

import pytest

from astra_cuda.execution import jobs, worker

from tests.security.reference_files import units
from tests.security.test_overrun import INTO_NEXT, ONE_PAST

pytestmark = pytest.mark.gpu   # `scripts/gpu-check pytest-gpu` selects by this mark


@pytest.mark.parametrize("text, said", [(ONE_PAST, "element 8 of a buffer of 8 (byte 0 past its end"),
                                        (INTO_NEXT, "element 72 of a buffer of 8 (byte 256 past its end")],
                         ids=["write_one_past_output", "write_into_next_buffer"])
def test_a_write_past_the_end_is_named_gpu(text, said, tmp_path):
    ref, cand, spec = units(text, tmp_path)
    pool = worker.Pool(1, name="overrun-gpu")
    try:
        verdicts = [pool.run(jobs.CheckJob("gpu", ref, cand, spec, quick=True), timeout=300) for _ in range(2)]
    finally:
        pool.close()
    for v in verdicts:
        assert v.status == "failed" and v.failures[0].check == "launch", v.human()
        assert f"`y`: the kernel wrote past its end: {said}" in v.failures[0].message, v.human()
    assert verdicts[0].failures[0].message == verdicts[1].failures[0].message
