"""Elementwise kernels over a 2-D launch (issue 29): a row per `blockIdx.x` with its columns over
`blockIdx.y` (`c = blockIdx.y * blockDim.x + threadIdx.x`) is coarsened along y, the grid's y
shrinking; a row loop over `threadIdx.x` whose step a local holds (`const int step = blockDim.x`)
in a 2-D block is vectorized. Both pass the real gate on the CPU backend (a broken variant does
not) and compile; what would change an element's meaning is left alone."""
import pathlib

import pytest

from agent_helpers import loaded_kernel, cpu_evaluator
from astra_cuda.agents.offline import TRANSFORMS, context_from_text
from astra_cuda.compile import extract, static
from astra_cuda.model import launch_change, source

KERNELS = pathlib.Path(__file__).parent / "kernels"
ROWS, ROWS_PATH = "bias_rows_kernel", KERNELS / "bias_rows_2d.cu"
GATHER, GATHER_PATH = "gather_rows_kernel", KERNELS / "gather_rows_2d.cu"


def rewritten(name, path, kernel, text=None, params=None):
    text, sp = loaded_kernel(path, kernel, text)
    return TRANSFORMS[name].apply(text, context_from_text(kernel, text, sp), params)


evaluator = cpu_evaluator


def compiles(text, path, kernel):
    if static.available() is None:
        pytest.skip("no CUDA compiler (NVRTC or nvcc) here")
    r = static.compile_unit(extract.unit(text, str(path), kernel))
    assert r.ok, r.log[-2000:]
    assert not [d for d in r.diagnostics if d.severity == "error"]


def test_a_column_over_the_grids_y_axis_is_coarsened_along_y():
    rw = rewritten("coarsen", ROWS_PATH, ROWS)
    assert rw is not None, "the 2-D elementwise kernel is not recognised"
    k = source.parse(rw.text).kernel(ROWS).text
    assert "astra_i0 += static_cast<long long>(blockDim.x * gridDim.y) * astra_vec" in k
    assert "reinterpret_cast<const uint4*>(x + (blockIdx.x * cols) + astra_i0)[0]" in k   # the row stays
    spec = launch_change.spec_in(source.parse(rw.text), ROWS)
    assert spec.grid == ("rows", "cdiv(cols, 1024)") and spec.block == ("256",)
    site = source.parse(rw.text).launches_of(ROWS)[0]
    assert site.grid == "dim3(dim3(grid).x, (dim3(grid).y + 3) / 4, dim3(grid).z)"
    assert any("grid.y divided by 4" in c for c in rw.changes)
    compiles(rw.text, ROWS_PATH, ROWS)
    evaluate = evaluator(ROWS_PATH, ROWS)
    ev = evaluate(rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback
    # a loop that strides along the wrong axis leaves columns out (or takes them twice)
    assert not evaluate(rw.text.replace("gridDim.y", "gridDim.x")).passed


def test_more_steps_and_another_block_size_shrink_y_to_match():
    rw = rewritten("coarsen", ROWS_PATH, ROWS, params={"width": 16, "steps": 2, "block": 512})
    spec = launch_change.spec_in(source.parse(rw.text), ROWS)
    assert spec.grid == ("rows", "cdiv(cols, 4096)") and spec.block == ("512",)
    site = source.parse(rw.text).launches_of(ROWS)[0]
    assert site.block == "512" and "dim3(grid).x" in site.grid and "dim3(grid).z" in site.grid
    ev = evaluator(ROWS_PATH, ROWS)(rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback


@pytest.mark.parametrize("change", [
    ("+ bias[c];", "+ bias[c] + blockIdx.y;"),                        # the element's own block along y
    ("+ bias[c];", "+ bias[c] + threadIdx.x;"),                       # its thread
    ("+ bias[c];", "+ bias[c] + gridDim.y;"),                         # the y grid, which shrinks
    ("  const int c =", "  const int t = threadIdx.x;\n  const int c ="),   # a name from the thread...
])
def test_what_depends_on_the_elements_position_is_left(change):
    text = ROWS_PATH.read_text().replace(*change)
    if change[1].startswith("  const int t"):
        text = text.replace("+ bias[c];", "+ bias[c] + t;")                  # ... read by the work
    assert text != ROWS_PATH.read_text()
    assert rewritten("coarsen", ROWS_PATH, ROWS, text) is None


def test_the_row_index_of_the_other_axes_may_be_read():
    text = ROWS_PATH.read_text().replace("+ bias[c];", "+ bias[c] * (blockIdx.x < gridDim.x);")
    assert rewritten("coarsen", ROWS_PATH, ROWS, text) is not None


def test_an_x_index_over_a_2d_grid_is_left():
    """Along x with a y axis in the grid, the grid-stride loop would need the y blocks' own
    reasoning; it stays as it was."""
    text = ROWS_PATH.read_text().replace("blockIdx.y * blockDim.x", "blockIdx.x * blockDim.x")
    assert rewritten("coarsen", ROWS_PATH, ROWS, text) is None


def test_a_row_loop_whose_step_a_local_holds_is_vectorized():
    rw = rewritten("vectorize", GATHER_PATH, GATHER)
    assert rw is not None, "`j += step` with `const int step = blockDim.x` is not taken for a block-stride loop"
    k = source.parse(rw.text).kernel(GATHER).text
    assert "astra_i0 += blockDim.x * astra_vec" in k
    assert "reinterpret_cast<const uint4*>(table + (src) + astra_i0)[0]" in k
    assert "for (int j = astra_vec_end + (lane); j < width; j += step)" in k    # the rest as written
    compiles(rw.text, GATHER_PATH, GATHER)
    evaluate = evaluator(GATHER_PATH, GATHER)
    ev = evaluate(rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback
    # a vector step that starts one lane late leaves each row's first elements unwritten
    assert not evaluate(rw.text.replace("astra_i0 = (lane) * astra_vec;", "astra_i0 = (lane + 1) * astra_vec;")).passed


def test_a_step_that_is_not_the_block_is_not_a_block_stride_loop():
    text = GATHER_PATH.read_text().replace("const int step = blockDim.x;", "const int step = blockDim.x / 2;")
    assert rewritten("vectorize", GATHER_PATH, GATHER, text) is None
    reassigned = GATHER_PATH.read_text().replace("const int step = blockDim.x;", "int step = blockDim.x;\n  step += r % 2;")
    assert rewritten("vectorize", GATHER_PATH, GATHER, reassigned) is None


MIX, MIX_PATH = "mix_rows_kernel", KERNELS / "mix_rows_2d.cu"


def test_writes_in_branches_of_a_constant_and_a_null_checked_read_keep_their_conditions():
    """A vector is loaded or stored only under the condition the elements were (never a load from
    a null `bias`), and another instantiation of the template (half: 2-byte elements where the
    step was sized for 4) takes the element-by-element loop."""
    rw = rewritten("coarsen", MIX_PATH, MIX)
    assert rw is not None, "writes under a template constant's branches are not vectorized"
    k = source.parse(rw.text).kernel(MIX).text
    load_bias = k.index("reinterpret_cast<const uint4*>(bias + astra_i0)")
    assert k.rindex("if (!(bias == nullptr)) {", 0, load_bias) > k.index("astra_i0 < astra_vec_end")
    assert "if (!(MODE == 0) && (MODE == 1)) {" in k                      # b: read in the second branch only
    store = k.index("reinterpret_cast<uint4*>(out + (blockIdx.x * cols) + astra_i0)[0] =")
    assert k.rindex("if (((MODE == 0)) || (!(MODE == 0) && (MODE == 1))) {", 0, store) > load_bias
    assert "sizeof(*out) == 4 &&" in k and "sizeof(*bias) == 4" in k
    compiles(rw.text, MIX_PATH, MIX)
    evaluate = evaluator(MIX_PATH, MIX)
    ev = evaluate(rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback
    # a store that no branch's condition allows leaves the vector path's outputs unwritten
    assert not evaluate(rw.text.replace("if (((MODE == 0)) || (!(MODE == 0) && (MODE == 1))) {", "if (MODE == 0) {")).passed


@pytest.mark.parametrize("change", [
    ("if (MODE == 0) {", "if (a[blockIdx.x * cols + c] > 0) {"),     # a condition that changes per element
    ("if (MODE == 0) {", "if (MODE == rows) {"),                      # ... fine: `rows` is steady (below)
    ("} else if (MODE == 1) {", "} else if (MODE == 1) {\n      out[blockIdx.x * cols + c] += 1;"),   # a compound write
])
def test_writes_under_other_conditions_are_left(change):
    text = MIX_PATH.read_text().replace(*change)
    rw = rewritten("coarsen", MIX_PATH, MIX, text)
    assert (rw is not None) == (change[1] == "if (MODE == rows) {")
