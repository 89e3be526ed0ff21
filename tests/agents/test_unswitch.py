"""`unswitch`: an unrolled loop whose every step loads under a bounds guard linear in the loop
variable (the warp-per-row softmax kernels of apex and TransformerEngine: a register array of
WARP_ITERATIONS elements filled under `if (element_index < element_count)`) gets one check before
it — the guard at the first and the last step — and a copy without the guard, so the compiler
issues the steps' loads together instead of one round trip a step. The rewrite passes the real
gate on the CPU at row lengths that take both paths (a broken check does not), the planner picks
it, and it leaves alone what the check could not decide exactly."""
import pathlib

import pytest

from agent_helpers import cpu_evaluator, loaded_kernel
from astra_cuda.agents import Check, Evaluation, ProfileSummary, SizeTiming
from astra_cuda.agents.offline import TRANSFORMS, context_from_spec, context_from_text
from astra_cuda.agents.planner import OfflinePlanner
from astra_cuda.agents.situation import Situation

KERNELS = pathlib.Path(__file__).parent / "kernels"
NAME, PATH = "warp_softmax_masked", KERNELS / "warp_softmax_masked.cu"


def rewritten(text=None):
    text, sp = loaded_kernel(PATH, NAME, text)
    return TRANSFORMS["unswitch"].apply(text, context_from_text(NAME, text, sp))


def test_both_guarded_loops_get_one_check_and_a_copy_without_the_guard():
    rw = rewritten()
    assert rw is not None and len(rw.changes) == 2          # the loading loop and the storing loop
    assert "&& (VEC * lane + (astra_last) * LANES) < cols" in rw.text     # the guard at the last step
    assert "&& (VEC * lane + (0LL) * LANES) < cols" in rw.text            # and at the first
    fast = rw.text[rw.text.index("const long long astra_last ="):rw.text.index("} else {")]
    assert "if (col < cols)" not in fast and "x[k] = in[it * LANES + k];" in fast
    assert rw.text.count("if (col < cols) {") == 2           # the loops as written, for the other rows


def test_the_rewrite_passes_the_gate_at_full_and_partial_rows_and_a_broken_check_does_not():
    rw = rewritten()
    evaluate = cpu_evaluator(PATH, NAME)
    ev = evaluate(rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback
    # checking only the first step lets a lane past the end of a short row take the unguarded copy
    broken = rw.text.replace("(VEC * lane + (astra_last) * LANES) < cols", "(VEC * lane + (0LL) * LANES) < cols")
    assert broken != rw.text and not evaluate(broken).passed


def test_the_planner_picks_it_for_a_latency_bound_softmax():
    text, sp = loaded_kernel(PATH, NAME)
    slow = Evaluation(Check(True, "passed", "", 10, "passed"), ProfileSummary(
        (SizeTiming({"rows": 16384, "cols": 512}, 90.0, 90.0, 0.16),), "latency"), gpu="Fake GPU")
    plan, _ = OfflinePlanner().plan(Situation(NAME, str(PATH), text, text, slow, slow, context_from_spec(NAME, sp)))
    assert plan is not None and plan.idea == "unswitch" and "latency-bound" in plan.why


LOAD_GUARD = "    if (col < cols) {\n      __half x[VEC];"


@pytest.mark.parametrize("change", [
    (LOAD_GUARD, LOAD_GUARD.replace("col < cols", "col * col < cols")),            # not linear in the step
    (LOAD_GUARD, LOAD_GUARD.replace("col < cols", "col != cols")),                  # not a bound
    (LOAD_GUARD, LOAD_GUARD.replace("col < cols", "col < cols && in[0] != 0")),     # reads memory
    (LOAD_GUARD, LOAD_GUARD.replace("col < cols", "threadIdx.x * 4 + it * 32 < cols")),   # unsigned arithmetic
    (LOAD_GUARD, LOAD_GUARD + "\n      cols -= 1;"),                                 # the bound changes in the loop
    (LOAD_GUARD, LOAD_GUARD + "\n      __syncwarp();"),                              # a collective under the check
    ("    int col = VEC * lane + it * LANES;\n    if (col < cols) {\n      __half",
     "    int col = VEC * lane + it * LANES;\n    col += 1;\n    if (col < cols) {\n      __half"),   # not a declaration
    ("  int lane = threadIdx.x;", "  int lane = threadIdx.x;\n  int& alias = lane;"),   # a reference may change it
])
def test_what_the_check_cannot_decide_is_left_alone(change):
    text = PATH.read_text()
    changed = text.replace(*change, 1)
    assert changed != text
    rw = rewritten(changed)
    if rw is not None:      # the storing loop may still be unswitched, the loading loop is not
        assert len(rw.changes) == 1 and rw.text.index("astra_last") > rw.text.index("float mx = vals[0];")


def test_a_loop_that_is_not_unrolled_or_keeps_no_memory_access_is_left_alone():
    text = PATH.read_text().replace("#pragma unroll\n  for (int it", "for (int it")
    assert rewritten(text) is None
    only_registers = PATH.read_text().replace("x[k] = in[it * LANES + k];", "x[k] = __float2half(1.0f);") \
        .replace("keep[k] = m[it * LANES + k];", "keep[k] = 0;") \
        .replace("out[it * LANES + k] = __float2half(vals[it + k] / sum);", "vals[it + k] = 0.0f;")
    assert rewritten(only_registers) is None


def test_a_32_bit_local_computed_in_64_bits_must_fit_where_it_is_read():
    text = PATH.read_text().replace("  float vals[PER_LANE];", "  long wide = LANES;\n  float vals[PER_LANE];", 1)
    text = text.replace("int col = VEC * lane + it * LANES;", "int col = VEC * lane + it * wide;")
    rw = rewritten(text)
    assert rw is not None and "-2147483648LL <= VEC * lane + (astra_last) * wide" in rw.text
    assert "-2147483648LL" not in rewritten().text         # 32-bit names only: it fits or the original overflows


def test_one_check_every_few_steps_passes_the_gate_and_a_loop_with_a_break_keeps_one_check():
    text, sp = loaded_kernel(PATH, NAME)
    rw = TRANSFORMS["unswitch"].apply(text, context_from_text(NAME, text, sp), {"chunk": 2})
    assert rw is not None and rw.params == {"chunk": 2}
    assert "checked once every 2 steps" in rw.changes[0]          # the loading loop, in chunks of 2 of its 4 steps
    assert "once before it" in rw.changes[1]                        # the storing loop breaks out: whole
    assert "for (int it = astra_c; it < PER_LANE && it - astra_c < 2 * (VEC); it += VEC)" in rw.text
    evaluate = cpu_evaluator(PATH, NAME)
    ev = evaluate(rw.text)      # 260 columns: every lane's first chunk takes the copy, lane 0's second not
    assert ev.passed, ev.check.summary + ev.check.feedback
    broken = rw.text.replace("(VEC * lane + (astra_cl) * LANES) < cols", "(VEC * lane + ((long long)astra_c) * LANES) < cols")
    assert broken != rw.text and not evaluate(broken).passed
    assert {"chunk": 0} in TRANSFORMS["unswitch"].alternatives(rw, context_from_text(NAME, text, sp))


def test_a_row_length_set_from_the_block_index_is_checked_a_chunk_at_a_time():
    causal = PATH.read_text().replace("  int lane = threadIdx.x;", "  int lane = threadIdx.x;\n  int len = blockIdx.x + 1;", 1)
    causal = causal.replace("    if (col < cols) {\n      __half", "    if (col < len) {\n      __half", 1)
    rw = rewritten(causal)
    assert rw is not None and rw.params == {"chunk": 8} and "checked once every 8 steps" in rw.changes[0]
    assert rewritten().params == {"chunk": 0}       # one length for every row: one check


def test_a_collective_reached_through_two_helpers_is_a_collective_too():
    helpers = "__device__ void astra_t_inner() { __syncwarp(); }\n__device__ void astra_t_outer() { astra_t_inner(); }\n"
    text = PATH.read_text()
    changed = text.replace("/* @astra", helpers + "/* @astra", 1).replace(LOAD_GUARD, LOAD_GUARD + "\n      astra_t_outer();", 1)
    assert changed.count("astra_t_outer") == 2
    rw = rewritten(changed)
    if rw is not None:      # the storing loop may still be unswitched, the loading loop is not
        assert len(rw.changes) == 1 and rw.text.index("astra_last") > rw.text.index("float mx = vals[0];")


# exllamav2's norms' form: a lane's share of the row in an unrolled loop bounded by a lower-case
# template parameter, each step leaving the loop (`break`, or `return` in the storing loop) at the
# row's end instead of loading under an `if`
LEAVING = """#include <cuda_fp16.h>
#define THREADS 32

/* @astra
grid = ["rows"]
block = ["32"]
instantiate = "<4>"
require = ["cols <= 128", "cols >= 1"]

[sizes]
rows = [3]
cols = [128, 100, 2]

[bench]
rows = [4096]
cols = [128]

[args]
x    = { type = "float", shape = ["rows", "cols"] }
y    = { type = "float", shape = ["rows", "cols"], output = true }
rows = "rows"
cols = "cols"
*/
template <int per_lane>
__global__ void lane_rows(const float* __restrict__ x, float* __restrict__ y, const int rows, const int cols)
{
  int lane = threadIdx.x;
  const float* xr = x + blockIdx.x * cols;
  float* yr = y + blockIdx.x * cols;
  float v[per_lane];
  float s = 0.0f;
  #pragma unroll
  for (int i = 0; i < per_lane; i++)
  {
    int c = lane + THREADS * i;
    if (c >= cols) break;
    v[i] = xr[c];
    s += v[i] * v[i];
  }
  for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffff, s, o);
  #pragma unroll
  for (int i = 0; i < per_lane; i++)
  {
    int c = lane + THREADS * i;
    if (c >= cols) return;
    yr[c] = v[i] / (s + 1.0f);
  }
}
"""


def leaving(tmp_path, text=LEAVING):
    path = tmp_path / "lane_rows.cu"
    path.write_text(text)
    return path, TRANSFORMS["unswitch"].apply(text, context_from_text("lane_rows", text))


def test_a_guard_that_leaves_the_loop_is_checked_false_once_and_the_copy_passes_the_gate(tmp_path):
    path, rw = leaving(tmp_path)
    assert rw is not None and len(rw.changes) == 2 and rw.params == {"chunk": 0}    # both loops, whole
    assert "&& !((lane + THREADS * (astra_last)) >= cols)" in rw.text     # never leaves at the last step
    assert "&& !((lane + THREADS * (0LL)) >= cols)" in rw.text            # nor at the first
    fast = rw.text[rw.text.index("const long long astra_last ="):rw.text.index("} else {")]
    assert "break;" not in fast and "v[i] = xr[c];" in fast
    assert rw.text.count("if (c >= cols) break;") == 1 and rw.text.count("if (c >= cols) return;") == 1
    evaluate = cpu_evaluator(path, "lane_rows")
    ev = evaluate(rw.text)      # 100 columns: lanes 4.. leave at the last step and take the loop as written
    assert ev.passed, ev.check.summary + ev.check.feedback
    broken = rw.text.replace("!((lane + THREADS * (astra_last)) >= cols)", "!((lane + THREADS * (0LL)) >= cols)")
    assert broken != rw.text and not evaluate(broken).passed


@pytest.mark.parametrize("change", [
    ("if (c >= cols) break;", "if (c >= cols && lane > 0) break;"),    # "never leaves" is not convex in the step
    ("if (c >= cols) break;", "if (c >= cols) continue;"),             # skips a step, the rest still run
    ("if (c >= cols) break;", "if (c * c >= cols) break;"),            # not linear in the step
    ("if (c >= cols) break;", "if (c >= cols) { s = 0.0f; break; }"),  # does more than leave
])
def test_a_leaving_guard_the_check_cannot_decide_is_left_alone(tmp_path, change):
    changed = LEAVING.replace(*change, 1)
    assert changed != LEAVING
    _, rw = leaving(tmp_path, changed)
    # the storing loop is still unswitched; the loading loop stays as written, its guard once
    assert rw is not None and len(rw.changes) == 1 and rw.text.index("astra_last") > rw.text.index("for (int o = 16")
    assert rw.text.count(change[1]) == 1


def test_only_a_signed_template_parameter_bounds_the_loop(tmp_path):
    # an unsigned bound's last step `per_lane - 1` would wrap at 0 in the check's arithmetic
    _, rw = leaving(tmp_path, LEAVING.replace("template <int per_lane>", "template <unsigned per_lane>"))
    assert rw is None
