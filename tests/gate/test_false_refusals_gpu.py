"""On a GPU (skipped elsewhere): the rounding allowance measured on the CPU beside the GPU
(issue 24, item 5) — the LayerNorm made warp-per-row passes the GPU's gate, the approximate
sigmoid does not. `scripts/gpu-check gather-floor` runs it."""
import pytest

from astra_cuda.execution import jobs, worker

from .test_false_refusals import LN_WARP_PER_ROW, SIGMOID_APPROX, units
from .test_catalogue_gpu import need_gpu  # noqa: F401 - fixture

pytestmark = pytest.mark.gpu


def gpu_check(name, kernel, body):
    ref, cand, spec = units(name, kernel, body)
    return worker.run(jobs.CheckJob("gpu", ref, cand, spec, quick=True, seed=5),
                      timeout=600)


def test_a_reordered_reduction_passes_the_gpu_gate():
    v = gpu_check("layernorm", "layernorm", LN_WARP_PER_ROW)
    print([n for n in v.coverage.notes if "rounding" in n] or "within the tolerance alone")
    assert v.passed, v.human()


def test_an_approximate_sigmoid_fails_the_gpu_gate():
    v = gpu_check("sigmoid", "sigmoid", SIGMOID_APPROX)
    assert v.status == "failed" and v.failures[0].check == "compare", v.human()
