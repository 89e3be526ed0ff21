"""The atomic families of issue 29 item 3. Whole-array reductions (`block_atomic`): one atomic per
element becomes a grid-stride sum per thread, the block's sum in shared memory and one atomic
per block. Histograms (`privatize`): the bins counted in shared memory per block, added to the
global bins once per block. Both cap the grid at the launch site. Each rewrite goes through the
real gate on the CPU backend (and a broken variant of it does not); the planner puts it first for
a kernel far below the copy ceiling; each leaves alone what is not its pattern."""
import pathlib

import pytest

from agent_helpers import loaded_kernel, cpu_evaluator
from astra_cuda.agents import Check, Evaluation, ProfileSummary, SizeTiming
from astra_cuda.agents.offline import TRANSFORMS, context_from_spec, context_from_text
from astra_cuda.agents.planner import OfflinePlanner
from astra_cuda.agents.situation import Situation

KERNEL = "squared_norm_kernel"
PATH = pathlib.Path(__file__).parent / "kernels" / "sum_atomic.cu"


HIST = "histogram256_kernel"
HIST_PATH = pathlib.Path(__file__).parent / "kernels" / "histogram_atomic.cu"


def loaded(text=None, path=PATH, kernel=KERNEL):
    return loaded_kernel(path, kernel, text)


evaluator = cpu_evaluator


@pytest.fixture(scope="module")
def evaluate():
    return evaluator(PATH, KERNEL)


def test_the_rewrite_passes_the_gate_and_a_broken_one_does_not(evaluate):
    text, sp = loaded()
    rw = TRANSFORMS["block_atomic"].apply(text, context_from_text(KERNEL, text, sp))
    assert rw is not None and rw.params == {"blocks": 1024}
    assert rw.text.count("atomicAdd") == 1 and "if (threadIdx.x == 0) atomicAdd(out, astra_part[0]);" in rw.text
    assert 'grid = ["min(cdiv(n, 256), 1024)"]' in rw.text and "1024u" in rw.text   # spec and launch site
    ev = evaluate(rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback
    broken = rw.text.replace("atomicAdd(out, astra_part[0])", "atomicAdd(out, astra_sum)")   # thread 0's part only
    assert not evaluate(broken).passed
    own = TRANSFORMS["block_atomic"].apply(text, context_from_text(KERNEL, text, sp), {"blocks": None})
    assert 'grid = ["cdiv(n, 256)"]' in own.text and "astra_part" in own.text   # the file's own grid


@pytest.mark.parametrize("body", [
    "if (i < n) atomicAdd(&out[(int)x[i] & 0], 1.0f);",             # the address depends on the element
    "if (i < n) { atomicAdd(out, x[i]); out[1] = 0.0f; }",           # another store
    "if (i < n) { atomicAdd(out, x[i]); atomicAdd(out, 1.0f); }",    # two atomics
    "if (i < n) { __syncthreads(); atomicAdd(out, x[i]); }",         # a barrier
    "if (i < n) { float s = atomicAdd(out, x[i]); (void)s; }",       # the atomic's value is used
    "if (i < n) { const float o = out[0]; atomicAdd(out, x[i] + o); }",   # reads the sum while it grows
])
def test_what_is_not_a_sum_into_one_place_is_left_alone(body):
    text, sp = loaded()
    start = text.index("  if (i < n) {")
    end = text.index("\n}\n", start)
    changed = text[:start] + "  " + body + text[end:]
    assert TRANSFORMS["block_atomic"].apply(changed, context_from_text(KERNEL, changed, sp)) is None


def test_the_planner_puts_it_first_far_below_the_copy_ceiling():
    text, sp = loaded()
    slow = Evaluation(Check(True, "passed", "", 10, "passed"), ProfileSummary(
        (SizeTiming({"n": 1 << 24}, 5000.0, 5000.0, 0.004),), "latency"), gpu="Fake GPU")
    s = Situation(KERNEL, str(PATH), text, text, slow, slow, context_from_spec(KERNEL, sp))
    plan, _ = OfflinePlanner().plan(s)
    assert plan is not None and plan.idea == "block_atomic" and "latency-bound" in plan.why


def test_a_privatized_histogram_passes_the_gate_and_a_broken_one_does_not():
    evaluate = evaluator(HIST_PATH, HIST)
    text, sp = loaded(path=HIST_PATH, kernel=HIST)
    ctx = context_from_text(HIST, text, sp)
    assert TRANSFORMS["block_atomic"].apply(text, ctx) is None        # not a sum into one place
    rw = TRANSFORMS["privatize"].apply(text, ctx)
    assert rw is not None and "__shared__ unsigned int astra_bins[256];" in rw.text
    assert 'grid = ["min(cdiv(n, 256), 1024)"]' in rw.text
    ev = evaluate(rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback
    broken = rw.text.replace("if (astra_bins[astra_b] != 0)", "if (astra_b % 2 == 0)")   # odd bins never flushed
    assert not evaluate(broken).passed
    slow = Evaluation(Check(True, "passed", "", 10, "passed"), ProfileSummary(
        (SizeTiming({"n": 1 << 24}, 900.0, 900.0, 0.02),), "latency"), gpu="Fake GPU")
    plan, _ = OfflinePlanner().plan(Situation(HIST, str(HIST_PATH), text, text, slow, slow, context_from_spec(HIST, sp)))
    assert plan is not None and plan.idea == "privatize"


@pytest.mark.parametrize("change", [
    ('type = "uint32", shape = ["256"]', 'type = "uint32", shape = ["n"]'),          # bins not a fixed number
    ('type = "uint32", shape = ["256"]', 'type = "uint32", shape = ["65536"]'),      # too many for shared memory
    ("unsigned int* hist", "float* hist"),                                          # not counts: order matters
    ("atomicAdd(&hist[data[i]], 1u);", "{ atomicAdd(&hist[data[i]], 1u); hist[0] = 0; }"),   # another store
    ("atomicAdd(&hist[data[i]], 1u);", "{ const unsigned int h = hist[0]; atomicAdd(&hist[data[i]], h & 1u); }"),
])
def test_what_is_not_a_histogram_is_left_alone(change):
    text, _ = loaded(path=HIST_PATH, kernel=HIST)
    changed = text.replace(*change)
    assert changed != text
    if change[1].startswith("float"):
        changed = changed.replace('type = "uint32"', 'type = "float"').replace("1u)", "1.0f)")
    _, sp = loaded(changed, path=HIST_PATH, kernel=HIST)
    assert TRANSFORMS["privatize"].apply(changed, context_from_text(HIST, changed, sp)) is None
