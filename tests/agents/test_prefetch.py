"""`prefetch`: a row norm that reads its weights only in a second loop after the block reduction's
barrier (exllamav2's rms_norm_kernel and layer_norm_kernel) gets those reads moved into the first
loop, which has the same header, index and guard. The rewrite passes the real gate on the CPU
backend (a variant prefetching the wrong element does not), the planner has the idea, and what it
cannot move exactly is left alone."""
import pathlib

import pytest

from agent_helpers import cpu_evaluator, loaded_kernel
from astra_cuda.agents import Check, Evaluation, ProfileSummary, SizeTiming
from astra_cuda.agents.offline import TRANSFORMS, context_from_spec, context_from_text
from astra_cuda.agents.planner import ranked_ideas
from astra_cuda.agents.situation import Situation

KERNEL, PATH = "row_norm_weights_late", pathlib.Path(__file__).parent / "kernels" / "row_norm_weights_late.cu"


def rewritten(text=None):
    text, sp = loaded_kernel(PATH, KERNEL, text)
    return TRANSFORMS["prefetch"].apply(text, context_from_text(KERNEL, text, sp))


def test_the_weights_are_read_with_the_row_and_the_result_passes_the_gate():
    rw = rewritten()
    assert rw is not None and len(rw.changes) == 2
    t = rw.text
    assert "float astra_pre0[steps];" in t and "float astra_pre1[steps];" in t
    # both reads sit in the first loop, right after its guard, the bias under its own condition
    assert "if (column >= dim) break;\n    astra_pre0[i] = w[column];\n    if (add_bias) astra_pre1[i] = b[column];" in t
    assert t.index("astra_pre0[i] = w[column]") < t.index("__syncthreads()")
    assert "float n = items[i] * r * astra_pre0[i];" in t and "if (add_bias) n += astra_pre1[i];" in t
    assert "#pragma unroll\n  for (int i = 0; i < steps; i++) {\n    int column" in t   # the pragma stays on its loop
    assert rewritten(t) is None      # nothing is left to move: the second loop reads registers
    evaluate = cpu_evaluator(PATH, KERNEL)
    ev = evaluate(t)
    assert ev.passed, ev.check.summary + ev.check.feedback
    broken = t.replace("astra_pre0[i] = w[column];", "astra_pre0[i] = w[lane_id];")   # the wrong element
    assert broken != t and not evaluate(broken).passed


def test_reads_in_both_branches_of_an_if_are_one_read_without_its_condition():
    text = PATH.read_text()
    loop = text[text.rindex("  #pragma unroll"):text.rindex("}")]
    two = text.replace(loop, "  if (add_bias) {\n" + loop + "  } else {\n" + loop.replace(
        "    if (add_bias) n += b[column];\n", "") + "  }\n")
    rw = rewritten(two)
    assert rw is not None
    assert rw.text.count("astra_pre0[i] = w[column];") == 1 and "if (add_bias) astra_pre0" not in rw.text
    assert rw.text.count("* astra_pre0[i];") == 2 and "if (add_bias) astra_pre1[i] = b[column];" in rw.text


def test_the_planner_has_the_idea():
    text, sp = loaded_kernel(PATH, KERNEL)
    slow = Evaluation(Check(True, "passed", "", 10, "passed"), ProfileSummary(
        (SizeTiming({"rows": 4096, "dim": 512}, 20.0, 20.0, 0.6),), "latency"), gpu="Fake GPU")
    s = Situation(KERNEL, str(PATH), text, text, slow, slow, context_from_spec(KERNEL, sp))
    assert "prefetch" in [idea for idea, why in ranked_ideas(s) if not why.startswith("skipped:")]


SECOND = "    float n = items[i] * r * w[column];\n"


@pytest.mark.parametrize("change, moved", [
    ((SECOND, SECOND + "    ((float*)w)[column] = n;\n"), {"b[column]"}),                   # the weight is written
    (("i < steps", "i < (dim + THREADS - 1) / THREADS"), set()),                         # a count only known at run time
    (("  __syncthreads();\n", "  __syncthreads();\n  lane_id ^= 1;\n"), set()),           # the index changes in between
    ((SECOND, "    column += 1;\n" + SECOND), set()),                                       # the second loop moves its index
    (("if (column >= dim) return;", "if (column >= dim - 1) return;"), set()),            # another guard
    (("if (column >= dim) break;", "if (column >= dim) return;"), set()),                 # the first loop may end the thread
    (("  __syncthreads();\n", "  __syncthreads();\n  if (sums[0] > 1e30f) return;\n"), set()),   # a return in between
    ((SECOND, "    float n = items[i] * r * (add_bias ? w[column] : 1.0f);\n"), {"b[column]"}),   # under a `?:`
    (("if (add_bias) n += b[column];", "if (sum > 0.0f) n += b[column];"), {"w[column]"}),   # a condition that changes
    (("if (add_bias) n += b[column];", "if (add_bias) n += b[column]; else return;"), set()),   # another way out
    (("if (add_bias) n += b[column];", "if (b) n += b[column];"), {"w[column]", "b[column]"}),   # a null test reads nothing
    (("if (add_bias) n += b[column];", "if (b != nullptr) n += b[column];"), {"w[column]", "b[column]"}),
    (("const float* __restrict__ w", "const float* w"), {"b[column]"}),                  # may alias `y`, which is written
])
def test_what_it_cannot_move_exactly_is_left_alone(change, moved):
    text = PATH.read_text()
    changed = text.replace(*change)
    assert changed != text
    rw = rewritten(changed)
    assert (set() if rw is None else {c.split("`")[1] for c in rw.changes}) == moved
