"""`row_cache` (issue 29): a row norm that reads its row from global memory in a first pass (sum
of squares) and again in a second (scale and write) keeps the row in shared memory between them.
The rewrite is recognised in both forms — a row only read, and a row the first pass writes (a
residual add), where the value kept must be the value written —, passes the real gate on the CPU
backend, also with a buffer shorter than the row (the rest read from global memory), and a cheating
variant does not. It leaves alone kernels where the row may change between the passes."""
import pathlib

import pytest

from agent_helpers import loaded_kernel, cpu_evaluator
from astra_cuda.agents import Check, Evaluation, ProfileSummary, SizeTiming
from astra_cuda.agents.offline import TRANSFORMS, context_from_spec, context_from_text
from astra_cuda.agents.planner import OfflinePlanner
from astra_cuda.agents.situation import Situation

KERNELS = pathlib.Path(__file__).parent / "kernels"
SCALE, SCALE_PATH = "row_rms_scale", KERNELS / "row_rms_scale.cu"
ADD, ADD_PATH = "add_rms_rows", KERNELS / "add_rms_rows.cu"


def rewritten(path, kernel, text=None, params=None):
    text, sp = loaded_kernel(path, kernel, text)
    return TRANSFORMS["row_cache"].apply(text, context_from_text(kernel, text, sp), params)


evaluator = cpu_evaluator


@pytest.mark.parametrize("size", [16384, 256])   # 256 bytes: 64 floats, most of each row from global memory
def test_a_row_only_read_is_kept_from_the_first_pass_and_passes_the_gate(size):
    rw = rewritten(SCALE_PATH, SCALE, params={"bytes": size})
    assert rw is not None and rw.params == {"bytes": size}
    assert "float astra_row_v = x[base + j];" in rw.text and "if (j < astra_row_cap) astra_row[j] = astra_row_v;" in rw.text
    assert "y[base + j] = (j < astra_row_cap ? astra_row[j] : x[base + j]) * scale * g[j];" in rw.text
    evaluate = evaluator(SCALE_PATH, SCALE)
    ev = evaluate(rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback
    broken = rw.text.replace("astra_row[j] : x[base + j]", "astra_row[j] : 0.0f")   # no fallback past the buffer
    assert not evaluate(broken).passed


@pytest.mark.parametrize("size", [16384, 256])
def test_a_row_the_first_pass_writes_keeps_the_value_written(size):
    rw = rewritten(ADD_PATH, ADD, params={"bytes": size})
    assert rw is not None
    assert "res[k] = s;\n    if (j < astra_row_cap) astra_row[j] = s;" in rw.text
    assert "h[k] = (j < astra_row_cap ? astra_row[j] : res[k]) * scale * g[j];" in rw.text
    assert "`res`" in rw.changes[0]      # `h` is written by the second pass: not the row kept
    evaluate = evaluator(ADD_PATH, ADD)
    ev = evaluate(rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback
    # keeping what `res` held before the add, not what was written to it, is caught by the gate
    stale = rw.text.replace("float s = h[k] + res[k];", "const float old = res[k];\n    float s = h[k] + old;") \
        .replace("astra_row[j] = s;", "astra_row[j] = old;")
    assert stale != rw.text and not evaluate(stale).passed


def test_it_is_made_once_and_offers_other_buffer_sizes():
    rw = rewritten(SCALE_PATH, SCALE)
    assert rw is not None and rw.params == {"bytes": 16384}
    assert TRANSFORMS["row_cache"].apply(rw.text, context_from_text(SCALE, rw.text)) is None
    assert TRANSFORMS["row_cache"].alternatives(rw, context_from_text(SCALE, rw.text)) == [{"bytes": 8192}, {"bytes": 32768}]
    assert rewritten(SCALE_PATH, SCALE, params={"bytes": 65536}) is None   # past the static shared-memory limit


def test_the_planner_offers_it_for_a_memory_bound_row_norm_once_wider_accesses_are_tried():
    from astra_cuda.agents.records import Plan, Round
    text, sp = loaded_kernel(SCALE_PATH, SCALE)
    at = Evaluation(Check(True, "passed", "", 10, "passed"), ProfileSummary(
        (SizeTiming({"rows": 4096, "cols": 4096}, 100.0, 100.0, 0.62),), "memory"), gpu="Fake GPU")
    s = Situation(SCALE, str(SCALE_PATH), text, text, at, at, context_from_spec(SCALE, sp))
    s.history = [Round(i + 1, Plan(idea, idea, ""), s.best_hash) for i, idea in
                 enumerate(("vectorize", "vectorize64", "vectorize32"))]   # a row norm already vectorized
    plan, _ = OfflinePlanner().plan(s)
    assert plan is not None and plan.idea == "row_cache" and "memory-bound at 62%" in plan.why


LOOP2 = "    y[base + j] = x[base + j] * scale * g[j];\n"
LOOP1 = "    const float v = x[base + j];\n"


@pytest.mark.parametrize("change", [
    (LOOP2, LOOP2 + "    ((float*)x)[base + j] = 0.0f;\n"),                      # the row written through a cast
    (LOOP2, "    y[base + j] = x[base + j + 1] * scale * g[j];\n"),              # another element in the second pass
    (LOOP1, "    const float v = j > 3 ? x[base + j] : 0.0f;\n"),                # read under a condition
    ("x[base + j]", "x[base + (long long)y[j]]"),                                  # an index read from memory
    ("float* __restrict__ y", "float* y"),                                         # y may be the row
    ("const float* __restrict__ x,", "const float* __restrict__ x0,"),               # x made from another pointer:
    ("  const long long base", "  const float* x = x0 + 1;\n  const long long base"),  # (together with the line above)
])
def test_it_leaves_alone_a_row_that_may_change_between_the_passes(change):
    text, _ = loaded_kernel(SCALE_PATH, SCALE)
    changed = text.replace(*change)
    assert changed != text
    assert TRANSFORMS["row_cache"].apply(changed, context_from_text(SCALE, changed)) is None


ADD1 = "    res[k] = s;\n"


@pytest.mark.parametrize("change", [
    (ADD1, "    if (s > 0.0f) res[k] = s;\n"),                  # stored under a condition: the row may keep its old value
    (ADD1, "    res[k] = s;\n    res[k + 1] = s;\n"),           # another element written
    (ADD1, "    res[k] = 2.0f * s;\n"),                          # an expression stored: not followed (evaluated once only)
    ("    h[k] = res[k]", "    res[k] = 0.0f;\n    h[k] = res[k]"),   # the second pass writes the row
    ("float* __restrict__ h", "float* h"),                     # h, written in the second pass, may be res
    ("  if (threadIdx.x == 0) scale", "  if (threadIdx.x == 0) res[row * cols] = 0.0f;\n  if (threadIdx.x == 0) scale"),
])
def test_it_leaves_alone_a_written_row_it_cannot_follow(change):
    text, _ = loaded_kernel(ADD_PATH, ADD)
    changed = text.replace(*change, 1)
    assert changed != text
    assert TRANSFORMS["row_cache"].apply(changed, context_from_text(ADD, changed)) is None


def test_an_index_local_is_followed_to_what_it_is_made_of():
    """`k` is declared alike in both passes, but `row` changes between them: another element."""
    text, _ = loaded_kernel(ADD_PATH, ADD)
    changed = text.replace("  const int row = blockIdx.x;", "  int row = blockIdx.x;").replace(
        "  if (threadIdx.x == 0) scale", "  row = (row + 1) % gridDim.x;\n  if (threadIdx.x == 0) scale")
    assert TRANSFORMS["row_cache"].apply(text, context_from_text(ADD, text)) is not None
    assert TRANSFORMS["row_cache"].apply(changed, context_from_text(ADD, changed)) is None


OVERLOADS = """#include <type_traits>
template <int W>
__global__ std::enable_if_t<(W > 0)> scale_rows(float* __restrict__ y, const float* __restrict__ x, int n) {
  __shared__ float s;
  float acc = 0.0f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    acc += x[blockIdx.x * n + j] * W;
  }
  if (threadIdx.x == 0) s = acc;
  __syncthreads();
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    y[blockIdx.x * n + j] = x[blockIdx.x * n + j] * s;
  }
}
template <int W>
__global__ std::enable_if_t<(W == 0)> scale_rows(float* __restrict__ y, const float* __restrict__ x, int n) {
  __shared__ float s;
  float acc = 0.0f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    const float v = x[blockIdx.x * n + j];
    acc += v;
  }
  if (threadIdx.x == 0) s = acc;
  __syncthreads();
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    y[blockIdx.x * n + j] = x[blockIdx.x * n + j] * s;
  }
}
"""


def test_every_overload_of_the_kernel_is_rewritten():
    """A spec may instantiate either `enable_if` variant of a kernel's name: both keep the row."""
    rw = TRANSFORMS["row_cache"].apply(OVERLOADS, context_from_text("scale_rows", OVERLOADS))
    assert rw is not None and len(rw.changes) == 2 and rw.text.count("float4 astra_row_words[1024];") == 2
    assert rw.text.count("(j < astra_row_cap ? astra_row[j] : x[blockIdx.x * n + j])") == 2
