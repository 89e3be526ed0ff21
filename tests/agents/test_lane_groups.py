"""`lane_groups`: a rotate-half rotary embedding (one thread an index i, loading x[i] and its
partner x[i ± rot/2] one element at a time) → V consecutive i a thread, each run read with one
wide load, behind a check of the index's unit stride before the loop and, a group at a time, of
the lanes' bound, the partner's side, the runs' alignment and the stores' distance from the runs.
The rewrite passes the real gate on the CPU backend at odd and padded sizes (rot 6 and 10: half
no multiple of 4; pad 1: misaligned rows) and at stride 2 (the loop as written), and variants
that skip a check or read the wrong lane do not."""
import pathlib

import pytest

from agent_helpers import cpu_evaluator, loaded_kernel
from astra_cuda.agents import Check, Evaluation, ProfileSummary, SizeTiming
from astra_cuda.agents.offline import TRANSFORMS, context_from_spec, context_from_text
from astra_cuda.agents.planner import OfflinePlanner, ranked_ideas
from astra_cuda.agents.records import Plan, Round
from astra_cuda.agents.situation import Situation

PATH = pathlib.Path(__file__).parent / "kernels" / "rope_half_rows.cu"


def rewritten(kernel, text=None, params=None):
    text, sp = loaded_kernel(PATH, kernel, text)
    return TRANSFORMS["lane_groups"].apply(text, context_from_text(kernel, text, sp), params)


def test_the_loop_takes_four_consecutive_indices_and_reads_each_run_once():
    rw = rewritten("rope_rows")
    assert rw is not None and "3 run(s) of `x`" in rw.changes[0]
    t = rw.text
    assert "struct alignas(sizeof(T) * N) astra_lane_run" in t
    assert "// astra: 4 consecutive `i` a thread" in t and "if (((1) * (in_elem)) == 1) {" in t
    assert "astra_d0 += (long long)blockDim.x * 4)" in t     # the step grows by V: every i once
    assert "float a = (float)astra_run0.v[astra_j];" in t
    assert "-(float)astra_run1.v[astra_j] : (float)astra_run2.v[astra_j]" in t
    assert "if (astra_when1) astra_run1 = *reinterpret_cast<const astra_lane_run<T, 4>*>(astra_at1);" in t
    # the loop as written stays for what the checks refuse
    assert t.count("for (int i = threadIdx.x; i < rot; i += blockDim.x)") == 1
    # rewritten once: its own fallback is not rewritten again
    assert TRANSFORMS["lane_groups"].apply(t, context_from_text("rope_rows", t)) is None


def test_the_rewrite_passes_the_gate_and_a_wrong_lane_or_a_missing_check_does_not():
    rw = rewritten("rope_rows")
    evaluate = cpu_evaluator(PATH, "rope_rows")
    ev = evaluate(rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback
    # the wide path runs: a lane reading its neighbour's element is caught
    wrong = rw.text.replace("float a = (float)astra_run0.v[astra_j];", "float a = (float)astra_run0.v[0];")
    assert wrong != rw.text and not evaluate(wrong).passed
    # a group straddling rot / 2 (rot 10) must take the lanes one by one
    straddle = rw.text.replace("(( (astra_dg + 3) < rot / 2 ))) == astra_when1 &&", "true &&")
    assert straddle != rw.text and not evaluate(straddle).passed


@pytest.mark.parametrize("lanes", [2, 8])
def test_other_group_sizes_pass_the_gate(lanes):
    rw = rewritten("rope_rows", params={"lanes": lanes})
    assert rw is not None and f"astra_lane_run<T, {lanes}>" in rw.text
    ev = cpu_evaluator(PATH, "rope_rows")(rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback


def test_a_strided_index_keeps_the_loop_as_written_and_the_check_is_needed():
    rw = rewritten("rope_rows_every_other")
    assert rw is not None
    evaluate = cpu_evaluator(PATH, "rope_rows_every_other")
    ev = evaluate(rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback
    cheat = rw.text.replace("if (((1) * (in_elem)) == 1) {", "if (true) {")
    assert cheat != rw.text and not evaluate(cheat).passed


LOAD = "      float a = (float)x[at];\n"


@pytest.mark.parametrize("change", [
    (LOAD, LOAD + "      if (a > 1e30f) break;\n"),                          # leaves early
    (LOAD, LOAD + "      __syncthreads();\n"),                               # a barrier in the loop
    ("const T* x, const float* theta, T* y, int in_base", "T* x, const float* theta, T* y, int in_base"),  # x not const
    ("      y[to] = (T)(a * c + b * s);\n", "      y[to * to] = (T)(a * c + b * s);\n"),   # a store not affine
    ("    sincosf(theta[t * rot + i], &s, &c);\n", "    sincosf(theta[t * rot + i], &s, &c);\n    y[i] = 0;\n"),  # per-i work writes memory
    (LOAD, LOAD + "      c *= 0.5f;\n"),                                    # the inner loop changes a per-i local
])
def test_what_the_checks_cannot_decide_is_left_alone(change):
    text = PATH.read_text()
    assert change[0] in text
    assert rewritten("rope_rows", text.replace(change[0], change[1])) is None


def test_a_load_whose_index_is_not_affine_in_i_stays_as_written():
    text = PATH.read_text().replace(LOAD, "      float a = (float)x[at * at];\n")
    rw = rewritten("rope_rows", text)
    assert rw is not None and "2 run(s) of `x`" in rw.changes[0]
    assert rw.text.count("float a = (float)x[at * at];") == 3    # fast lanes, slow lanes, the loop as written


def test_the_planner_offers_it_for_a_memory_bound_kernel_after_the_ideas_before_it():
    text, sp = loaded_kernel(PATH, "rope_rows")
    at = Evaluation(Check(True, "passed", "", 10, "passed"), ProfileSummary(
        (SizeTiming({"tokens": 4096, "heads": 32, "rot": 128, "pad": 0}, 100.0, 100.0, 0.4),), "memory"),
        gpu="Fake GPU")
    s = Situation("rope_rows", str(PATH), text, text, at, at, context_from_spec("rope_rows", sp))
    order = [i for i, _ in ranked_ideas(s)]
    s.history = [Round(n + 1, Plan(i, i, ""), s.best_hash) for n, i in enumerate(order[:order.index("lane_groups")])]
    plan, _ = OfflinePlanner().plan(s)
    assert plan is not None and plan.idea == "lane_groups"
