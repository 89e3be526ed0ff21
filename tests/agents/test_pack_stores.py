"""`pack_stores`: a fixed-count loop writing one 1- or 2-byte element a trip to consecutive places
(a quantizer's bytes, a dequantizer's halves) keeps the run in an aligned private buffer and writes
it after the loop as one wide store where the address is aligned, one element at a time where it
is not. The rewrite passes the real gate on the CPU backend in both cases (a start one byte past
alignment takes the fallback), a cheating variant does not, and loops whose reads could see the
moved stores are left alone."""
import pathlib

import pytest

from agent_helpers import cpu_evaluator, loaded_kernel
from astra_cuda.agents import Check, Evaluation, ProfileSummary, SizeTiming
from astra_cuda.agents.offline import TRANSFORMS, context_from_spec, context_from_text
from astra_cuda.agents.planner import OfflinePlanner, ranked_ideas
from astra_cuda.agents.records import Plan, Round
from astra_cuda.agents.situation import Situation

PATH = pathlib.Path(__file__).parent / "kernels" / "chunk_quant_stores.cu"


def rewritten(kernel, text=None):
    text, sp = loaded_kernel(PATH, kernel, text)
    return TRANSFORMS["pack_stores"].apply(text, context_from_text(kernel, text, sp))


def test_a_run_of_byte_stores_becomes_one_store_and_passes_the_gate():
    rw = rewritten("chunk_quant_int8")
    assert rw is not None and "`out`" in rw.changes[0]
    assert "alignas(16) int8_t astra_run0[kPer];" in rw.text
    assert "astra_run0[j] = (int8_t)__float2int_rn(r);" in rw.text
    assert "astra_store_run<kPer>(out, astra_run0);" in rw.text
    assert "out[j] =" not in rw.text
    evaluate = cpu_evaluator(PATH, "chunk_quant_int8")
    ev = evaluate(rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback
    # a run written one element short is caught
    short = rw.text.replace("astra_store_run<kPer>(out, astra_run0);", "astra_store_run<kPer - 1>(out, astra_run0);")
    assert short != rw.text and not evaluate(short).passed


def test_a_misaligned_run_takes_the_element_by_element_path():
    rw = rewritten("chunk_quant_shifted")
    assert rw is not None and "astra_store_run<8>(q + (1 + (c * 8)), astra_run0);" in rw.text
    evaluate = cpu_evaluator(PATH, "chunk_quant_shifted")
    ev = evaluate(rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback
    # without the fallback a misaligned run is never written: the gate sees the poison
    cheat = rw.text.replace("for (int k = 0; k < N; ++k) dst[k] = src[k];", "")
    assert cheat != rw.text and not evaluate(cheat).passed


def test_halves_from_a_local_array_through_a_pointer_sum():
    rw = rewritten("chunk_dequant_half")
    assert rw is not None
    assert "astra_run0[i] = staged[i];" in rw.text and "astra_store_run<8>(dst, astra_run0);" in rw.text
    ev = cpu_evaluator(PATH, "chunk_dequant_half")(rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback
    assert TRANSFORMS["pack_stores"].apply(rw.text, context_from_text("chunk_dequant_half", rw.text)) is None


LOOP = "    out[j] = (int8_t)__float2int_rn(r);\n"


@pytest.mark.parametrize("body", [
    "    out[j] = (int8_t)__float2int_rn(r + x[j]);\n",           # reads global memory: may see the stores
    "    out[j] = (int8_t)__float2int_rn(r);\n    if (r > 1e30f) break;\n",   # may leave early
    "    out[j] = (int8_t)__float2int_rn(r);\n    s[j] = r;\n",    # another store to global memory
    "    out[j + j] = (int8_t)__float2int_rn(r);\n",              # not consecutive
    "    out[j] = (int8_t)__float2int_rn(r + out[0]);\n",         # reads the run itself
])
def test_loops_whose_reads_or_exits_could_see_the_stores_are_left_alone(body):
    text = PATH.read_text()
    assert LOOP in text
    assert rewritten("chunk_quant_int8", text.replace(LOOP, body)) is None


def test_a_pointer_into_a_local_array_or_a_runtime_count_is_left_alone():
    text = PATH.read_text()
    local = text.replace("int8_t* out = q + (long long)c * kPer;", "int8_t mine[kPer];\n  int8_t* out = mine;")
    assert rewritten("chunk_quant_int8", local) is None
    runtime = text.replace("for (int j = 0; j < kPer; ++j) {\n    const float r", "for (int j = 0; j < chunks; ++j) {\n    const float r")
    assert runtime != text and rewritten("chunk_quant_int8", runtime) is None


def test_the_planner_offers_it_for_a_memory_bound_kernel_after_the_ideas_before_it():
    text, sp = loaded_kernel(PATH, "chunk_quant_int8")
    at = Evaluation(Check(True, "passed", "", 10, "passed"), ProfileSummary(
        (SizeTiming({"chunks": 1048576}, 100.0, 100.0, 0.4),), "memory"), gpu="Fake GPU")
    s = Situation("chunk_quant_int8", str(PATH), text, text, at, at, context_from_spec("chunk_quant_int8", sp))
    order = [i for i, _ in ranked_ideas(s)]
    s.history = [Round(n + 1, Plan(i, i, ""), s.best_hash) for n, i in enumerate(order[:order.index("pack_stores")])]
    plan, _ = OfflinePlanner().plan(s)
    assert plan is not None and plan.idea == "pack_stores" and "memory-bound at 40%" in plan.why


SHIFTED = "  for (int j = 0; j < 8; ++j) q[1 + c * 8 + j] = (int8_t)__float2int_rn(v[j] * (127.0f / amax));\n"


@pytest.mark.parametrize("inner", [
    # the offset's name is the loop's own: after the loop it is out of scope ...
    "  for (int j = 0; j < 8; ++j) { const int at = 1 + c * 8; q[at + j] = (int8_t)__float2int_rn(v[j] * (127.0f / amax)); }\n",
    # ... or, shadowing an outer one, another value
    "  const int at = 0;\n  for (int j = 0; j < 8; ++j) { const int at = 1 + c * 8; q[at + j] = (int8_t)__float2int_rn(v[j] * (127.0f / amax)); }\n",
])
def test_an_offset_named_inside_the_loop_is_left_alone(inner):
    text = PATH.read_text()
    assert SHIFTED in text
    assert rewritten("chunk_quant_shifted", text.replace(SHIFTED, inner)) is None
