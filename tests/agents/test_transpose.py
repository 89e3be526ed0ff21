"""Transposes (issue 29 item 3): the naive two-dimensional transpose goes through a 32 x 32
shared-memory tile padded by one column, launched as 32 x 8 threads per tile. The rewrite passes
the real gate on the CPU backend (a tile read back the wrong way round does not); the planner
chooses it for a memory-bound transpose; a copy (writes already consecutive) or a kernel with more
in it is left alone."""
import pathlib

import pytest

from agent_helpers import loaded_kernel
from astra_cuda.model import source, spec as spec_mod
from astra_cuda.agents import Check, Evaluation, ProfileSummary, SizeTiming
from astra_cuda.agents.offline import TRANSFORMS, context_from_spec, context_from_text
from astra_cuda.agents.planner import OfflinePlanner
from astra_cuda.agents.situation import Situation

KERNEL = "transpose_naive_kernel"
PATH = pathlib.Path(__file__).parent / "kernels" / "transpose_naive.cu"


def loaded(text=None):
    return loaded_kernel(PATH, KERNEL, text)


def test_the_tiled_transpose_passes_the_gate_and_a_wrong_one_does_not():
    from astra_cuda.execution.evaluator import local_evaluator
    try:
        from astra_cuda.backends.cpu import CpuBackend
        backend = CpuBackend()
    except Exception as e:  # noqa: BLE001 - any reason means this machine cannot run it
        pytest.skip(f"CPU backend unavailable: {e}")
    text, sp = loaded()
    evaluate = local_evaluator(str(PATH), KERNEL, sp, backend, text, quick=True)
    rw = TRANSFORMS["transpose"].apply(text, context_from_text(KERNEL, text, sp))
    assert rw is not None and "__shared__ float astra_tile[32][33];" in rw.text
    assert 'block = ["32", "8"]' in rw.text and "dim3(32, 8)>>>" in rw.text      # spec and launch site
    ev = evaluate(rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback
    wrong = rw.text.replace("= astra_tile[threadIdx.x][astra_r];", "= astra_tile[astra_r][threadIdx.x];")
    assert wrong != rw.text and not evaluate(wrong).passed


def test_the_planner_chooses_it_for_a_memory_bound_transpose():
    text, sp = loaded()
    slow = Evaluation(Check(True, "passed", "", 10, "passed"), ProfileSummary(
        (SizeTiming({"rows": 8192, "cols": 8192}, 900.0, 900.0, 0.3),), "memory"), gpu="Fake GPU")
    plan, _ = OfflinePlanner().plan(Situation(KERNEL, str(PATH), text, text, slow, slow, context_from_spec(KERNEL, sp)))
    assert plan is not None and plan.idea == "transpose"


@pytest.mark.parametrize("change", [
    ("out[x * rows + y] = in[y * cols + x];", "out[y * cols + x] = in[y * cols + x];"),          # a copy
    ("out[x * rows + y] = in[y * cols + x];", "out[x * rows + y] = 2.0f * in[y * cols + x];"),   # not a move
    ("out[x * rows + y] = in[y * cols + x];", "{ out[x * rows + y] = in[y * cols + x]; out[0] = 0.0f; }"),
    ("const int y = blockIdx.y * blockDim.y + threadIdx.y;", "const int y = blockIdx.y;"),
])
def test_what_is_not_a_naive_transpose_is_left_alone(change):
    text, sp = loaded()
    changed = text.replace(*change)
    assert changed != text
    assert TRANSFORMS["transpose"].apply(changed, context_from_text(KERNEL, changed, sp)) is None


# ---- a tile already in shared memory, read down its columns unpadded (cuda-samples transposeCoalesced) ----

TILED = "transpose_tile_kernel"
TILED_PATH = pathlib.Path(__file__).parent / "kernels" / "transpose_tile_unpadded.cu"


def test_an_unpadded_tile_read_down_its_columns_gets_a_column_of_padding():
    from astra_cuda.execution.evaluator import local_evaluator
    try:
        from astra_cuda.backends.cpu import CpuBackend
        backend = CpuBackend()
    except Exception as e:  # noqa: BLE001 - any reason means this machine cannot run it
        pytest.skip(f"CPU backend unavailable: {e}")
    text = TILED_PATH.read_text()
    m = source.parse(text)
    sp = spec_mod.load(m.kernel(TILED), m)
    rw = TRANSFORMS["transpose"].apply(text, context_from_text(TILED, text, sp))
    assert rw is not None and "__shared__ float tile[TILE][TILE + 1];" in rw.text
    assert rw.text.replace("[TILE + 1]", "[TILE]").replace(
        "// astra-note: " + TRANSFORMS["transpose"].note + "\n  ", "") == text   # nothing else changed
    ev = local_evaluator(str(TILED_PATH), TILED, sp, backend, text, quick=True)(rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback


@pytest.mark.parametrize("change", [
    ("__shared__ float tile[TILE][TILE];", "__shared__ float tile[TILE][TILE + 1];"),         # padded already
    ("= tile[lane][threadIdx.y + j];", "= tile[threadIdx.y + j][lane];"),                    # rows only: no conflict
    ("__syncthreads();", "__syncthreads();\n  float* flat = &tile[0][0];"),                  # the tile as memory
    ("__shared__ float tile[TILE][TILE];", "__shared__ double tile[TILE][TILE];"),           # not one bank a word
])
def test_a_tile_padding_cannot_help_or_would_change_is_left_alone(change):
    text = TILED_PATH.read_text()
    changed = text.replace(*change)
    assert changed != text
    m = source.parse(changed)
    sp = spec_mod.load(m.kernel(TILED), m)
    assert TRANSFORMS["transpose"].apply(changed, context_from_text(TILED, changed, sp)) is None
