"""A capped grid over a grid-stride row loop (issue 29: apex's cuApplyLayerNorm/cuApplyRMSNorm
shape — rows visited along y inside a device function, shared memory and barriers per row):
launch_shape lifts the cap to one block per row, block unchanged, and the rewrite passes the real
gate on the CPU backend; kernels whose blocks meet or whose grid is used otherwise are left alone."""
import pathlib

import pytest

from agent_helpers import loaded_kernel
from astra_cuda.agents.offline import TRANSFORMS, context_from_text

KERNEL = "rownorm_kernel"
PATH = pathlib.Path(__file__).parent / "kernels" / "rownorm_capped_grid.cu"


def loaded(text=None):
    return loaded_kernel(PATH, KERNEL, text)


def lifted(text, sp):
    return TRANSFORMS["launch_shape"].apply(text, context_from_text(KERNEL, text, sp))


def test_the_capped_row_grid_is_lifted_and_passes_the_gate():
    from astra_cuda.execution.evaluator import local_evaluator
    try:
        from astra_cuda.backends.cpu import CpuBackend
        backend = CpuBackend()
    except Exception as e:  # noqa: BLE001 - any reason means this machine cannot run it
        pytest.skip(f"CPU backend unavailable: {e}")
    text, sp = loaded()
    rw = lifted(text, sp)
    assert rw is not None
    assert 'grid = ["1", "min(rows, 65535)", "1"]' in rw.text and 'block = ["32", "4", "1"]' in rw.text
    assert "((rows) < 65535 ? (rows) : 65535)" in rw.text        # the launch site too
    ev = local_evaluator(str(PATH), KERNEL, sp, backend, text, quick=True)(rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback


@pytest.mark.parametrize("change", [
    # blocks meet through a global atomic: another grid changes the order of its additions
    ("out[r * cols + i] = (x[i] - mean) * inv;", "atomicAdd(&out[i], (x[i] - mean) * inv);"),
    # the grid used beyond the row loop
    ("const int t = threadIdx.x", "const int t = blockIdx.y * 0 + threadIdx.x"),
    # the row variable moved inside the loop
    ("const float* x = in + r * cols;", "const float* x = in + r * cols; r += 0;"),
    # the rows visited along x by blocks of the other axis: not a row loop of one axis
    ("r += gridDim.y", "r += gridDim.x"),
    # an overload of the device function (the compiler picks one) uses the grid some other way
    ("/* @astra", "__device__ void normalize_rows(double* out, const double* in, int rows, int cols) {\n"
                  "  out[blockIdx.y] = in[0];\n}\n\n/* @astra"),
])
def test_what_does_not_leave_the_grid_free_is_left_alone(change):
    text, sp = loaded()
    changed = text.replace(*change)
    assert changed != text
    rw = lifted(changed, sp)
    assert rw is None or "65535" not in rw.text


def test_a_grid_already_covering_the_rows_is_left_alone():
    text, sp = loaded()
    uncapped = text.replace('grid = ["1", "min(rows, 4)", "1"]', 'grid = ["1", "rows", "1"]')
    assert uncapped != text and lifted(uncapped, loaded(uncapped)[1]) is None
