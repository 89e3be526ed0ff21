"""Wider blocks (issue 29): a one-index-per-thread kernel launched with blocks of one warp gets
blocks of 256 threads over the same threads (grid divided to match, in the spec and at the launch
site). The rewrite passes the real gate on the CPU backend (a widened launch that drops the
guard does not); the planner chooses it for a latency-bound kernel; kernels whose result may
depend on the block (shared memory, a thread index outside the flat index, no guard before the
first access, an index that falls as the thread index grows, a block size spelled as a literal)
are left alone."""
import pathlib

import pytest

from agent_helpers import loaded_kernel
from astra_cuda.agents import Check, Evaluation, ProfileSummary, SizeTiming
from astra_cuda.agents.offline import TRANSFORMS, context_from_spec, context_from_text
from astra_cuda.agents.planner import OfflinePlanner
from astra_cuda.agents.situation import Situation

KERNEL = "pack_bytes_kernel"
PATH = pathlib.Path(__file__).parent / "kernels" / "pack_bytes_small_blocks.cu"
GUARD = "  if (c >= cols) return;\n"


def loaded(text=None):
    return loaded_kernel(PATH, KERNEL, text)


def test_blocks_of_a_warp_become_blocks_of_256_and_pass_the_gate():
    from astra_cuda.execution.evaluator import local_evaluator
    try:
        from astra_cuda.backends.cpu import CpuBackend
        backend = CpuBackend()
    except Exception as e:  # noqa: BLE001 - any reason means this machine cannot run it
        pytest.skip(f"CPU backend unavailable: {e}")
    text, sp = loaded()
    evaluate = local_evaluator(str(PATH), KERNEL, sp, backend, text, quick=True)
    rw = TRANSFORMS["widen_block"].apply(text, context_from_text(KERNEL, text, sp))
    assert rw is not None and rw.params == {"block": 256}
    assert 'block = ["256"]' in rw.text and 'grid = ["cdiv(((cols / 4 + 31) / 32) * 32, 256)", "rows"]' in rw.text
    assert "dim3(grid).y, dim3(grid).z), 256>>>" in rw.text
    ev = evaluate(rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback
    unguarded = rw.text.replace(GUARD, "")    # the extra threads then write past the rows' ends
    assert unguarded != rw.text and not evaluate(unguarded).passed


def test_the_planner_chooses_it_for_a_latency_bound_kernel():
    text, sp = loaded()
    slow = Evaluation(Check(True, "passed", "", 10, "passed"), ProfileSummary(
        (SizeTiming({"rows": 16384, "cols": 4096}, 300.0, 300.0, 0.4),), "latency"), gpu="Fake GPU")
    plan, _ = OfflinePlanner().plan(Situation(KERNEL, str(PATH), text, text, slow, slow, context_from_spec(KERNEL, sp)))
    assert plan is not None and plan.idea == "widen_block"


@pytest.mark.parametrize("change", [
    (GUARD, GUARD + "  __shared__ float s[32];\n  s[threadIdx.x % 32] = 0.0f;\n"),        # shared memory
    ("int r = blockIdx.y;", "int r = blockIdx.y + threadIdx.x % 2;"),                     # thread index alone
    (GUARD, ""),                                                                           # no guard
    ("int c = (blockIdx.x * blockDim.x + threadIdx.x) * 4;",
     "int c = cols - 4 - (blockIdx.x * blockDim.x + threadIdx.x) * 4;"),                  # falls as it grows
    ("int c = (blockIdx.x * blockDim.x + threadIdx.x) * 4;\n  int r = blockIdx.y;",
     "int r = blockIdx.y;\n  int c = r * cols + (blockIdx.x * blockDim.x + threadIdx.x) * 4;"),  # another axis in it
    (GUARD, "  if (c >= *(&cols)) return;\n"),                                                     # bound through memory
    ("blockIdx.x * blockDim.x + threadIdx.x", "blockIdx.x * 64 + threadIdx.x"),            # not the block's size
    ("int r = blockIdx.y;", "int r = gridDim.x;"),                                         # the grid's x extent
    ('block = ["32"]', 'block = ["256"]'),                                                 # wide already
    ("__global__ void pack_bytes_kernel(", "__global__ void __launch_bounds__(32) pack_bytes_kernel("),
    ("void pack_bytes(", "__global__ void pack_bytes_kernel(unsigned char* out, const double* in, int rows, "
     "int cols) {\n  out[threadIdx.x] = 0;\n}\n\nvoid pack_bytes("),                            # an overload that is not
])
def test_what_may_depend_on_the_block_is_left_alone(change):
    text, sp = loaded()
    changed = text.replace(*change)
    assert changed != text
    assert TRANSFORMS["widen_block"].apply(changed, context_from_text(KERNEL, changed, sp)) is None


# A flat index that names the block size through the #define the spec's block equals, scaled by a
# pair of elements per thread (issue 29: exllamav2's half2 vector add at 30% of the copy ceiling).
PAIRS_KERNEL = "row_bias_pairs_kernel"
PAIRS = pathlib.Path(__file__).parent / "kernels" / "row_bias_pairs_small_blocks.cu"
PAIRS_INDEX = "int col = blockIdx.x * THREADS_X * 2 + threadIdx.x * 2;"


def test_a_flat_index_naming_the_block_size_is_respelled_and_widened_and_passes_the_gate():
    from astra_cuda.execution.evaluator import local_evaluator
    try:
        from astra_cuda.backends.cpu import CpuBackend
        backend = CpuBackend()
    except Exception as e:  # noqa: BLE001 - any reason means this machine cannot run it
        pytest.skip(f"CPU backend unavailable: {e}")
    text, sp = loaded_kernel(PAIRS, PAIRS_KERNEL)
    rw = TRANSFORMS["widen_block"].apply(text, context_from_text(PAIRS_KERNEL, text, sp))
    assert rw is not None and rw.params == {"block": 256}
    assert "int col = (blockIdx.x * blockDim.x + threadIdx.x) * 2;" in rw.text and PAIRS_INDEX not in rw.text
    assert 'block = ["256"]' in rw.text and ", 256>>>" in rw.text
    evaluate = local_evaluator(str(PAIRS), PAIRS_KERNEL, sp, backend, text, quick=True)
    ev = evaluate(rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback
    stale = rw.text.replace("int col = (blockIdx.x * blockDim.x + threadIdx.x) * 2;", PAIRS_INDEX)
    assert stale != rw.text and not evaluate(stale).passed   # widened, the #define would skip columns


@pytest.mark.parametrize("index", [
    "int col = blockIdx.x * THREADS_X * 2 + threadIdx.x * 4;",        # the two terms scaled apart
    "int col = blockIdx.x * ROWS_PER_BLOCK * 2 + threadIdx.x * 2;",   # not the block's size
    "int col = blockIdx.x * THREADS_X * 2L + threadIdx.x * 2L;",      # a wider literal
    "int col = blockIdx.x * THREADS_X * width + threadIdx.x * width;",  # a scale that is no literal
    "int col = blockIdx.x * THREADS_X * 2 + threadIdx.y * 2;",        # another thread axis
])
def test_a_scaled_index_that_is_not_the_flat_index_is_left_alone(index):
    text, sp = loaded_kernel(PAIRS, PAIRS_KERNEL)
    changed = text.replace(PAIRS_INDEX, index)
    assert changed != text
    assert TRANSFORMS["widen_block"].apply(changed, context_from_text(PAIRS_KERNEL, changed, sp)) is None
