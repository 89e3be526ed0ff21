"""A coarsening along the grid's y axis kept beside the original by size, the original's body
where the original's grid runs (issue 29; agents/dispatch.py, offline/coarsen.grid_cover).

On an H200 an elementwise kernel with a row per `blockIdx.x` and its columns over `blockIdx.y`
(one element per thread, 1,024-thread blocks) coarsened won 1.54x at 4,096 rows of 11,008 and
lost 9.5% at one row. Its size dispatch launched the original grid at one row (11 blocks, below
the threshold of 12) but still lost 8.6% there: `grid_cover` knew only 1-D grids, so the
dispatched kernel kept the vectorized grid-stride body alone, and on the original's 11 blocks it
works in the first two (1,376 vectors of 8 halves), as the coarsened launch does. The original
body is right under any launch whose threads along y reach every column, so the kernel now runs it
wherever they do, and the vectorized body elsewhere. Minimal kernel of our own:
kernels/bias_rows_2d.cu; timings are stand-ins shaped like the H200's."""
import pathlib

from agent_helpers import cpu_evaluator, loaded_kernel
from astra_cuda.agents import ProfileSummary, SizeTiming, dispatch
from astra_cuda.agents.offline import TRANSFORMS, context_from_text
from astra_cuda.agents.offline.coarsen import grid_cover
from astra_cuda.model import source
from astra_cuda.model.launch_change import spec_in

PATH = pathlib.Path(__file__).parent / "kernels" / "bias_rows_2d.cu"
KERNEL = "bias_rows_kernel"
LADDER = ({"rows": 1, "cols": 11008}, {"rows": 32, "cols": 11008}, {"rows": 4096, "cols": 11008})
COVER = "if ((long long)gridDim.y * blockDim.x >= (long long)(cols)) {"
ORIGINAL_BODY = "out[blockIdx.x * cols + c] = x[blockIdx.x * cols + c] + bias[c];"


def _profile(us, original=(3.0, 5.0, 100.0)):
    return ProfileSummary(tuple(SizeTiming(s, o, u, 0.5, "bench" if s["rows"] == 4096 else "decode", 0.0)
                                for s, o, u in zip(LADDER, original, us)), "memory")


def _text():
    return PATH.read_text()


def _spec():
    return loaded_kernel(PATH, KERNEL)[1]


def _dispatched():
    text = _text()
    rw = TRANSFORMS["coarsen"].apply(text, context_from_text(KERNEL, text, _spec()))
    assert rw is not None
    sp = dispatch.split(_spec(), _profile((3.0, 5.0, 100.0)), _profile((3.3, 4.0, 65.0)))
    assert sp == dispatch.Split(44, "rewrite", (1376, 176128), (43,))   # one row: 43 blocks of the original grid
    new, why = dispatch.build(text, rw.text, KERNEL, sp, _spec().cases(), list(LADDER), any_grid=True)
    assert new is not None, why
    return new


def test_the_columns_a_2d_grid_must_cover():
    """Fails before the change: grid_cover knew only 1-D grids."""
    assert grid_cover(_text(), KERNEL) == ("cols", "y")
    # the work reads its own block along y, or the block is 2-D: no count of columns makes it right
    assert grid_cover(_text().replace("+ bias[c];", "+ bias[c] + blockIdx.y;"), KERNEL) is None
    assert grid_cover(_text().replace('block = ["256"]', 'block = ["256", "2"]'), KERNEL) is None


def test_below_the_threshold_the_original_body_runs_under_the_original_launch():
    """Fails before the change: at one row the dispatched kernel ran the vectorized body on the
    original grid (one body, two grids), where its threads work in a few blocks only."""
    new = _dispatched()
    k = source.parse(new).kernel(KERNEL).text
    first, second = k.split("} else {")
    assert COVER in first and ORIGINAL_BODY in first and "astra_vec" not in first
    assert "astra_vec_end" in second and "blockDim.x * gridDim.y" in second
    original, spec = _spec(), spec_in(source.parse(new), KERNEL)
    for sizes, runs_original in zip(LADDER, (True, False, False)):
        grid, block, shared = spec.launch_dims(sizes)
        assert (grid[1] * block[0] >= sizes["cols"]) is runs_original
        if runs_original:     # the original's launch, to the block and byte
            assert (grid, block, shared) == original.launch_dims(sizes)


def test_the_gate_checks_both_bodies():
    new = _dispatched()
    evaluate = cpu_evaluator(PATH, KERNEL)
    ev = evaluate(new)
    assert ev.passed, ev.check.summary + ev.check.feedback
    k = source.parse(new).kernel(KERNEL)

    def broken(old, bad):
        out = new[:k.span.start_byte] + k.text.replace(old, bad, 1) + new[k.span.end_byte:]
        assert out != new
        return out
    assert not evaluate(broken("+ bias[c];", "- bias[c];")).passed                       # the original's body
    assert not evaluate(broken("astra_v0[astra_k] + astra_v1[astra_k]", "astra_v0[astra_k] - astra_v1[astra_k]")).passed
