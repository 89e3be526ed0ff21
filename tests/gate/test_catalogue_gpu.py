"""A representative part of the cheat catalogue on a real GPU (skipped elsewhere), each entry in
its own worker job (a fault loses only that worker's context), profiled when the gate passes it. The whole catalogue on the GPU:
`python -m tests.gate.run_catalogue --backend gpu --json OUT.json`."""
import functools

import pytest

from astra_cuda.execution import jobs, worker

from . import catalogue
from .run_catalogue import run

pytestmark = pytest.mark.gpu


@functools.lru_cache(maxsize=1)
def _gpu() -> tuple[bool, str]:
    try:
        info = worker.run(jobs.BackendsJob(), timeout=120)["gpu"]
        return info.available, info.reason
    except Exception as e:  # noqa: BLE001
        return False, str(e)


@pytest.fixture(scope="module", autouse=True)
def need_gpu():
    ok, why = _gpu()
    if not ok:
        pytest.skip(f"no GPU: {why}")


GPU_SUBSET = ("no_op", "zero_output", "remembers_it_ran", "mutates_const_input", "skips_if_output_looks_written",
              "out_of_bounds_write", "half2_with_tail", "warp_shuffle_rmsnorm", "half2_merge",
              "skips_rows_already_written", "counts_launches_per_pointer", "ticket_counter_reset")


@pytest.mark.parametrize("entry", [e for e in catalogue.ALL if e.name in GPU_SUBSET], ids=lambda e: e.name)
def test_catalogue_on_gpu(entry):
    row = run("gpu", [entry.name], None, 600, profile=True)[0]
    assert row["ok"], row
