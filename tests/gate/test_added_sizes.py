"""Sizes a rewrite adds to its spec's [sizes] (a size dispatch's other side) are run by the gate:
the cases come from the reference's spec, so the ones the candidate's spec adds must travel with it."""
import pytest

from astra_cuda.execution.evaluator import local_evaluator
from astra_cuda.model import source, spec as spec_mod

SPEC = """/* @astra
grid = ["(n + 255) / 256"]
block = ["256"]
[sizes]
n = {sizes}
[args]
o = {{ type = "float", shape = ["n"], output = true }}
x = {{ type = "float", shape = ["n"] }}
n = "n"
*/
"""
KERNEL = """__global__ void twice(float* o, const float* x, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) o[i] = {factor} * x[i];
}}
"""


def _file(sizes: str, factor: str) -> str:
    return SPEC.format(sizes=sizes) + KERNEL.format(factor=factor)


@pytest.fixture(scope="module")
def evaluate():
    try:
        from astra_cuda.backends.cpu import CpuBackend
        cpu = CpuBackend()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"CPU backend unavailable: {e}")
    text = _file("[1, 100, 1000]", "2.0f")
    m = source.parse(text)
    return local_evaluator("twice.cu", "twice", spec_mod.load(m.kernel("twice"), m), cpu, text, quick=True)


def test_a_branch_only_an_added_size_reaches_is_checked(evaluate):
    # Wrong only from 50,000 elements on: none of the reference's sizes (nor the edges around
    # them) get there, the size the rewrite added does.
    wrong_far = "(n >= 50000 ? 3.0f : 2.0f)"
    assert evaluate(_file("[1, 100, 1000]", wrong_far)).passed        # what the reference's sizes see
    ev = evaluate(_file("[1, 100, 1000, 60000]", wrong_far))
    assert not ev.passed
    assert "n=60000" in str(ev.check)          # the held-out case names its size in the report, not to the coder


def test_a_correct_rewrite_with_an_added_size_passes(evaluate):
    assert evaluate(_file("[1, 100, 1000, 60000]", "(n >= 50000 ? 2.0f : 2.0f)")).passed
