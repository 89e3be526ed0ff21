"""`batch_loads` (issue 29 item 3): a strided loop on a grid the program fixes keeps one load in
flight per thread; K steps a trip with the K loads issued first keeps K. Histograms with per-warp
sub-histograms (the CUDA samples' histogram256Kernel) and whole-array sums' first pass on a capped
grid (the samples' reduce6) have it. The rewrite goes through the real gate on the CPU backend (a
broken variant does not), the planner picks it for a latency-bound kernel, and it leaves alone
what it cannot move safely."""
import pathlib

import pytest

from agent_helpers import loaded_kernel, cpu_evaluator
from astra_cuda.agents import Check, Evaluation, ProfileSummary, SizeTiming
from astra_cuda.agents.offline import TRANSFORMS, context_from_spec, context_from_text
from astra_cuda.agents.planner import OfflinePlanner
from astra_cuda.agents.situation import Situation

KERNELS = pathlib.Path(__file__).parent / "kernels"
HIST, HIST_PATH = "histogram_words", KERNELS / "histogram_words.cu"
SUMS, SUMS_PATH = "block_partial_sums", KERNELS / "block_partial_sums.cu"


loaded = loaded_kernel


def rewritten(path, kernel, text=None, params=None):
    text, sp = loaded(path, kernel, text)
    return TRANSFORMS["batch_loads"].apply(text, context_from_text(kernel, text, sp), params)


evaluator = cpu_evaluator


def test_the_histogram_loop_takes_four_steps_a_trip_and_passes_the_gate():
    rw = rewritten(HIST_PATH, HIST)
    assert rw is not None and rw.params == {"steps": 4}
    assert "const auto astra_ld0_3 = data[astra_s3];" in rw.text      # the fourth step's load, issued first
    assert rw.text.index("astra_ld0_3 = data") < rw.text.index("unsigned int word = astra_ld0_0;")
    assert "for (; pos < n; pos += UMUL(blockDim.x, gridDim.x))" in rw.text   # the rest as written
    evaluate = evaluator(HIST_PATH, HIST)
    ev = evaluate(rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback
    broken = rw.text.replace("data[astra_s3]", "data[astra_s2]")        # the fourth step counts the third's word
    assert not evaluate(broken).passed


@pytest.mark.parametrize("steps", [2, 8, 16])
def test_the_sum_is_exact_at_every_step_count(steps):
    rw = rewritten(SUMS_PATH, SUMS, params={"steps": steps})
    assert rw is not None and f"astra_s{steps - 1} < (n)" in rw.text
    assert "const unsigned int i = astra_s0;" not in rw.text     # the body no longer uses its index
    evaluate = evaluator(SUMS_PATH, SUMS)
    ev = evaluate(rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback
    last = f"in[astra_s{steps - 1}]"                 # the last step reading its neighbour's element
    assert not evaluate(rw.text.replace(last, f"in[astra_s{steps - 2}]")).passed


def test_the_planner_picks_it_for_a_latency_bound_histogram():
    text, sp = loaded(HIST_PATH, HIST)
    slow = Evaluation(Check(True, "passed", "", 10, "passed"), ProfileSummary(
        (SizeTiming({"n": 1 << 26}, 560.0, 560.0, 0.11),), "latency"), gpu="Fake GPU")
    plan, _ = OfflinePlanner().plan(Situation(HIST, str(HIST_PATH), text, text, slow, slow, context_from_spec(HIST, sp)))
    assert plan is not None and plan.idea == "batch_loads" and "latency-bound" in plan.why


@pytest.mark.parametrize("change", [
    ("unsigned int word = data[pos];", "unsigned int word = data[pos]; data[pos] = 0;"),          # the kernel writes it
    ("unsigned int word = data[pos];", "unsigned int word = pos < 7 ? data[pos] : 0u;"),          # read under a condition
    ("unsigned int word = data[pos];", "unsigned int word = data[pos]; partial[pos % 7680] = word;"),   # a global write
    ("unsigned int word = data[pos];", "unsigned int word = data[pos]; __syncthreads();"),        # a barrier
    ("unsigned int word = data[pos];", "unsigned int word = data[pos]; if (word == 0) break;"),   # a jump out
    ("unsigned int word = data[pos];", "unsigned int word = data[pos]; pos += 1;"),               # the body steps
    ("unsigned int word = data[pos];", "unsigned int word = data[warp_hist[0]];"),                # an index it changes
    ("unsigned int word = data[pos];", "unsigned int word = __shfl_sync(~0u, data[pos], 0);"),    # a warp collective
    ("unsigned int word = data[pos];", "__shared__ unsigned int w; w = data[pos]; unsigned int word = w;"),   # a block's local
    ("unsigned int word = data[pos];", "unsigned int word = data[pos]; asm volatile(\"\" ::: \"memory\");"),   # inline assembly
    ("  for (unsigned int pos = UMAD", "#pragma unroll 2\n  for (unsigned int pos = UMAD"),        # its own unrolling
    ("n = [67108864]", "n = [5760]"),        # one step a thread at the bench size: nothing to batch
])
def test_what_it_cannot_move_is_left_alone(change):
    text = HIST_PATH.read_text()
    changed = text.replace(*change, 1)
    assert changed != text
    assert rewritten(HIST_PATH, HIST, changed) is None


def test_a_global_write_is_fine_when_the_buffer_read_is_restrict():
    text = HIST_PATH.read_text().replace("unsigned int* data,", "const unsigned int* __restrict__ data,")
    text = text.replace("unsigned int word = data[pos];", "unsigned int word = data[pos]; partial[pos % 7680] = word;")
    rw = rewritten(HIST_PATH, HIST, text)
    assert rw is not None and "const auto astra_ld0_0 = data[astra_s0];" in rw.text


QUANT, QUANT_PATH = "row_int8_quant", KERNELS / "row_int8_quant.cu"


def test_both_passes_of_a_row_quantization_through_a_row_pointer_pass_the_gate():
    rw = rewritten(QUANT_PATH, QUANT, params={"steps": 2})
    assert rw is not None and len(rw.changes) == 2      # the absmax pass and the quantizing pass
    assert "const auto astra_ld0_1 = __ldcs(&(row_data[astra_s1]));" in rw.text
    evaluate = evaluator(QUANT_PATH, QUANT)
    ev = evaluate(rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback


@pytest.mark.parametrize("change, passes", [
    # `out` may alias a non-restrict input: the quantizing pass's stores could reach a later load,
    # so only the absmax pass (which writes nothing but a register) is batched
    (("float* __restrict__ A", "float* A"), 1),
    (("    m = fmaxf(m, a);\n", "    m = fmaxf(m, a);\n    ((float*)row_data)[i] = a;\n"), 0),   # the row is written
])
def test_a_row_that_may_be_written_is_not_read_ahead(change, passes):
    text = QUANT_PATH.read_text()
    changed = text.replace(*change)
    assert changed != text
    rw = rewritten(QUANT_PATH, QUANT, changed)
    assert (0 if rw is None else len(rw.changes)) == passes
    if passes:
        assert "fabsf(astra_ld0_0)" in rw.text and "out[blockIdx.x * cols + i] = (signed char)__float2int_rn(val" \
            in rw.text and "float val = astra_ld" not in rw.text


WHILE, WHILE_PATH = "grid_sum_while", KERNELS / "grid_sum_while.cu"


@pytest.mark.parametrize("steps", [4, 8])
def test_a_while_loop_stepping_a_local_takes_k_steps_a_trip_and_passes_the_gate(steps):
    rw = rewritten(WHILE_PATH, WHILE, params={"steps": steps})
    assert rw is not None
    assert f"const auto astra_ld0_{steps - 1} = in[astra_s{steps - 1}];" in rw.text
    assert f"i = astra_s{steps - 1} + (stride);" in rw.text           # the index stepped past the K steps
    assert "while (i < n) {" in rw.text                                # the rest as written
    evaluate = evaluator(WHILE_PATH, WHILE)
    ev = evaluate(rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback
    # the index left one step short after the batched trips: `last` and the sum tell
    broken = rw.text.replace(f"i = astra_s{steps - 1} + (stride);", f"i = astra_s{steps - 1};")
    assert not evaluate(broken).passed


@pytest.mark.parametrize("change", [
    ("      i += stride;\n", ""),                                                    # no step: not a strided loop
    ("      sum += in[i];\n      i += stride;", "      i += stride;\n      sum += in[i];"),   # the step is not last
    ("      sum += in[i];\n", "      sum += in[i];\n      i += 1;\n"),              # the body steps it too
    ("      sum += in[i];\n", "      sum += in[i];\n      stride += 1;\n"),         # the stride changes
    ("    unsigned int i = blockIdx", "    volatile unsigned int i = blockIdx"),      # a qualified index
    ("    unsigned int stride = blockDim.x * gridDim.x;\n",
     "    unsigned int stride = blockDim.x * gridDim.x;\n    unsigned int* pi = &i;\n"),  # its address escapes
    ("      sum += in[i];\n", "      sum += in[i];\n      if (sum < 0) break;\n"),   # a jump out
    ("      sum += in[i];\n", "      sum += in[i];\n      in[i] = 0;\n"),            # the kernel writes what it reads
    ("    while (i < n) {", "    while (i <= n) {"),                                   # not `<`
])
def test_a_while_loop_it_cannot_move_is_left_alone(change):
    text = WHILE_PATH.read_text()
    changed = text.replace(*change, 1)
    assert changed != text
    assert rewritten(WHILE_PATH, WHILE, changed) is None


# The block's tree reduction moved into helpers, as the samples' fp16ScalarProduct writes it: a
# barrier after the loop, in a function the loop never calls, does not stop the loop's rewrite.
TREE = """  for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sdata[threadIdx.x] += sdata[threadIdx.x + s];
    __syncthreads();
  }
"""
HELPERS = """__device__ void tree_step(int* sdata, unsigned int s) {
  if (threadIdx.x < s) sdata[threadIdx.x] += sdata[threadIdx.x + s];
  __syncthreads();
}
__device__ void block_tree(int* sdata) {
  for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) tree_step(sdata, s);
}
__device__ int pass(int v) { return v; }
__device__ int waits(int v) { block_tree(nullptr); return v; }
"""


def _with_helpers() -> str:
    text = WHILE_PATH.read_text()
    out = text.replace(TREE, "  block_tree(sdata);\n").replace("/* @astra", HELPERS + "/* @astra")
    assert out.count("block_tree(") == 3 and "__syncthreads();\n  for" not in out
    return out


def test_a_barrier_in_a_helper_the_loop_does_not_call_leaves_the_loop_free():
    text = _with_helpers().replace("sum += in[i];", "sum += pass(in[i]);")
    rw = rewritten(WHILE_PATH, WHILE, text)
    assert rw is not None and "const auto astra_ld0_3 = in[astra_s3];" in rw.text
    evaluate = evaluator(WHILE_PATH, WHILE)
    assert evaluate(text).passed                       # the helpers' version is the same kernel
    ev = evaluate(rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback


def test_a_loop_that_reaches_a_barrier_through_two_helpers_is_left_alone():
    text = _with_helpers().replace("sum += in[i];", "sum += waits(in[i]);")
    assert rewritten(WHILE_PATH, WHILE, text) is None


def test_the_tuner_is_offered_more_steps_first():
    rw = rewritten(SUMS_PATH, SUMS)
    t = TRANSFORMS["batch_loads"]
    assert [a["steps"] for a in t.alternatives(rw, context_from_text(SUMS, rw.text))] == [8, 16, 2]


# A penalty applied where either of two masks marks a token (vLLM's repetition penalties have this
# shape): the index is a local of the step, the first mask is the left operand of `||`.
PENALIZE = '''/* @astra
grid = ["rows", "1"]
block = ["64"]

[sizes]
rows = [3]
cols = [1000, 4099]

[bench]
rows = [3]
cols = [100000]

[args]
logits  = { type = "float", shape = ["rows", "cols"], inout = true }
seen_a  = { type = "bool", shape = ["rows", "cols"] }
seen_b  = { type = "bool", shape = ["rows", "cols"] }
penalty = { type = "float", shape = ["rows"] }
rows    = "rows"
cols    = "cols"
*/
__global__ void penalize(float* __restrict__ logits, const bool* __restrict__ seen_a,
                         const bool* __restrict__ seen_b, const float* __restrict__ penalty, int rows, int cols) {
  const int row = blockIdx.x;
  const float p = penalty[row];
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const int64_t idx = static_cast<int64_t>(row) * cols + c;
    const bool hit = seen_a[idx] || seen_b[idx];
    if (hit) {
      float v = logits[idx];
      logits[idx] = v > 0 ? v / p : v * p;
    }
  }
}
'''


def _hoisted_masks(rw):
    return set() if rw is None else {m for line in rw.text.splitlines() if "const auto astra_ld" in line
                                     for m in ("seen_a", "seen_b") if m in line}


def _penalize(tmp_path, text=PENALIZE):
    path = tmp_path / "penalize.cu"
    path.write_text(text)
    return path, rewritten(path, "penalize", text)


@pytest.mark.parametrize("change", [
    None,
    # the masks read in the `if`'s condition, which always runs
    ("    const bool hit = seen_a[idx] || seen_b[idx];\n    if (hit) {", "    if (seen_a[idx] || seen_b[idx]) {"),
])
def test_a_read_at_a_local_index_and_left_of_an_or_is_issued_first_and_passes_the_gate(tmp_path, change):
    path, rw = _penalize(tmp_path, PENALIZE if change is None else PENALIZE.replace(*change))
    assert rw is not None
    # the step's index spelled as the local holds it; the second mask, read only when the first is
    # false, is read ahead too: the step reads `seen_a` there, and the spec gives both one shape
    assert "const auto astra_ld0_3 = seen_a[((int64_t)(static_cast<int64_t>(row) * cols + astra_s3))];" in rw.text
    assert "const auto astra_ld1_3 = seen_b[((int64_t)(static_cast<int64_t>(row) * cols + astra_s3))];" in rw.text
    assert "astra_ld0_0 || astra_ld1_0" in rw.text and _hoisted_masks(rw) == {"seen_a", "seen_b"}
    evaluate = evaluator(path, "penalize")
    ev = evaluate(rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback
    broken = rw.text.replace("cols + astra_s3))]", "cols + astra_s2))]")   # the fourth step reads the third's mask
    assert not evaluate(broken).passed


@pytest.mark.parametrize("change", [
    # the local changes after its declaration: the read is not at its initializer's value
    ("const int64_t idx = static_cast<int64_t>(row) * cols + c;",
     "int64_t idx = static_cast<int64_t>(row) * cols; idx += c;"),
    # an index read from memory
    ("const int64_t idx = static_cast<int64_t>(row) * cols + c;",
     "const int64_t idx = static_cast<int64_t>(row) * cols + c + (int)penalty[0] * 0;"),
    # both masks under a condition: the right of `&&`, the right of `||`
    ("seen_a[idx] || seen_b[idx]", "(c > 0 && seen_a[idx]) || seen_b[idx]"),
    # a local of a floating type: converting to it may round the index
    ("const int64_t idx = static_cast<int64_t>(row) * cols + c;",
     "const float fi = static_cast<int64_t>(row) * cols + c; const int64_t idx = fi;"),
    # declared again in an inner block: the name may not be this local
    ("const bool hit = seen_a[idx] || seen_b[idx];",
     "bool hit; { const int64_t idx = 0; hit = seen_a[idx] || seen_b[idx]; }"),
])
def test_a_local_index_it_cannot_spell_or_a_conditional_read_is_left_alone(tmp_path, change):
    text = PENALIZE.replace(*change)
    assert text != PENALIZE
    rw = _penalize(tmp_path, text)[1]
    assert not _hoisted_masks(rw)      # (`penalty[0]`, the same every step, may move)


@pytest.mark.parametrize("change", [
    # a shape the spec does not give the first mask: the second may be shorter
    ('seen_b  = { type = "bool", shape = ["rows", "cols"] }', 'seen_b  = { type = "bool", shape = ["rows * cols"] }'),
    # an optional input: the program may pass none
    ("seen_a[idx] || seen_b[idx]", "seen_a[idx] || (seen_b != nullptr && seen_b[idx])"),
    # another index than the unconditional read's
    ("seen_a[idx] || seen_b[idx]", "seen_a[idx] || seen_b[idx / 2]"),
    # never evaluated
    ("seen_a[idx] || seen_b[idx]", "seen_a[idx] || sizeof(seen_b[idx]) == 0"),
])
def test_a_conditional_read_not_proved_in_bounds_stays_where_it_is(tmp_path, change):
    text = PENALIZE.replace(*change)
    assert text != PENALIZE
    rw = _penalize(tmp_path, text)[1]
    assert rw is not None and _hoisted_masks(rw) == {"seen_a"}
