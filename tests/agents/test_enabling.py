"""Vectorizing after unit-stride specialization (issue 29 item 3; agents/enabling.py): the Astra
paper's silu baseline takes its element strides at run time, so only the contiguous path that
`unit_stride` adds can be vectorized. On the CPU: the chain unit_stride -> vectorize on an fp16
silu with runtime strides is verified by the whole gate, whose sizes reach misaligned rows (a row
length not a multiple of 8) — a vector path without its alignment check fails there. In the loop:
where unit_stride is not faster by itself (on an H100 it was 1.00–1.03×, within the timer's noise),
vectorize is judged on top of it in the same round and both are adopted, in the order the tuning
replays. The GPU measurement: `scripts/gpu-check families` (benchmarks/family_bench.py)."""
import dataclasses
import pathlib

import pytest

from astra_cuda.agents import Evaluation, Limits, ProfileSummary, SizeTiming, optimize, tuning
from astra_cuda.agents.offline import TRANSFORMS, context_from_text
from astra_cuda.evaluation import source_hash
from astra_cuda.execution.evaluator import local_evaluator
from astra_cuda.model import source, spec as spec_mod

PATH = pathlib.Path(__file__).parent / "kernels" / "silu_strided_half.cu"
KERNEL = "silu_mul_strided"


@pytest.fixture(scope="module")
def cpu():
    try:
        from astra_cuda.backends.cpu import CpuBackend
        return CpuBackend()
    except Exception as e:  # noqa: BLE001 - any reason means this machine cannot run it
        pytest.skip(f"CPU backend unavailable: {e}")


def _spec(text):
    m = source.parse(text)
    return spec_mod.load(m.kernel(KERNEL), m)


def _chain(text, ideas):
    for idea in ideas:
        rw = TRANSFORMS[idea].apply(text, context_from_text(KERNEL, text))
        assert rw is not None, f"{idea} does not apply"
        text = rw.text
    return text


def _contiguous_branch(text):
    body = source.parse(text).kernel(KERNEL).text
    return body[body.index("if (elem_stride == 1)"):body.index("} else {")]


def test_vectorize_applies_to_the_unit_stride_branch_only_after_unit_stride(cpu):
    text = PATH.read_text()
    assert TRANSFORMS["vectorize"].apply(text, context_from_text(KERNEL, text)) is None   # `i * elem_stride`
    sp = _spec(text)
    assert any(d % 8 for d in sp.sizes["d"]), "the gate's sizes include a row not a multiple of 8 halves"
    new = _chain(text, ["unit_stride", "vectorize"])
    fast = _contiguous_branch(new)
    assert "reinterpret_cast<const uint4*>(input" in fast and "reinterpret_cast<uint4*>(out" in fast
    assert "% 16 == 0" in fast and "vec_end + threadIdx.x" in fast   # aligned rows only; the scalar rest
    strided = new[new.index("} else {"):]
    assert "i * elem_stride" in strided and "uint4" not in strided   # other strides: the original
    full = local_evaluator(str(PATH), KERNEL, sp, cpu, text)
    ev = full(new)
    assert ev.passed, ev.check.feedback
    # the gate reaches the misaligned rows: without the alignment check the vector path crashes there
    broken = new.replace("astra_aligned ? astra_n", "true ? astra_n")
    assert broken != new
    bad = full(broken)
    assert not bad.passed and "alignment" in bad.check.feedback, bad.check.feedback


def _timed(e: Evaluation, text: str) -> Evaluation:
    """A stand-in for the GPU's timing of a version the CPU gate checked: the original's 700 µs at
    4096 x 11008, 13% of the copy ceiling; the contiguous path alone 0.4% faster (noise); 16-byte
    accesses 7.3x faster."""
    body = source.parse(text).kernel(KERNEL).text
    us = 96.0 if "uint4" in body else 697.0 if "elem_stride == 1" in body else 700.0
    prof = ProfileSummary((SizeTiming({"num_tokens": 4096, "d": 11008}, 700.0, us, 0.13 * 700.0 / us, "bench"),),
                          "memory")
    return dataclasses.replace(e, profile=prof, speed_note="", gpu="stand-in GPU")


def test_the_loop_vectorizes_on_top_of_a_unit_stride_that_is_not_faster_alone(cpu):
    text = PATH.read_text()
    sp = _spec(text)
    quick = local_evaluator(str(PATH), KERNEL, sp, cpu, text, quick=True)
    r = optimize(text, str(PATH), KERNEL, lambda t: _timed(quick(t), t), rounds=2, spec=sp,
                 limits=Limits(tune_points=0))
    seen = [(x.plan.idea if x.plan else None, x.outcome, x.reason) for x in r.rounds]
    step = next(x for x in r.rounds if x.plan is not None and x.plan.idea == "unit_stride")
    vec = next(x for x in r.rounds if x.plan is not None and x.plan.idea == "vectorize")
    assert step.adopted and "kept as the step vectorize needs" in step.reason, seen
    assert step.evaluation.speedup < 1.01                      # not faster by itself ...
    assert vec.adopted and vec.base_hash == source_hash(step.candidate) and vec.batch == step.batch, seen
    assert "on top of unit_stride" in vec.plan.why
    assert r.speedup > 7 and all(x.evaluation.passed for x in r.rounds if x.evaluation)
    # the adopted chain replays to the vectorized version (the tuning stage and the remembered
    # tuning start from it); the best offered is its readable form, which the whole gate passes
    chain = [(x.plan.idea, x.plan.params) for x in r.rounds if x.adopted]
    assert [i for i, _ in chain][-2:] == ["unit_stride", "vectorize"]
    assert tuning.replay(text, KERNEL, chain, sp) == vec.candidate
    assert "reinterpret_cast<uint4*>(out" in _contiguous_branch(r.best)
    ev = local_evaluator(str(PATH), KERNEL, sp, cpu, text)(r.best)
    assert ev.passed, ev.check.feedback


def test_a_step_whose_follow_up_is_not_faster_is_not_adopted(cpu):
    text = PATH.read_text()
    sp = _spec(text)
    quick = local_evaluator(str(PATH), KERNEL, sp, cpu, text, quick=True)

    def flat(t):   # nothing is faster: neither the step nor what it enables is kept
        e = quick(t)
        return dataclasses.replace(e, profile=ProfileSummary((SizeTiming({"num_tokens": 4096, "d": 11008}, 700.0, 699.0,
                                                                          0.13, "bench"),), "memory"), gpu="stand-in GPU")
    r = optimize(text, str(PATH), KERNEL, flat, rounds=2, spec=sp, limits=Limits(tune_points=0))
    ideas = {x.plan.idea: x for x in r.rounds if x.plan is not None}
    assert "vectorize" in ideas and ideas["vectorize"].outcome == "not faster"
    assert not ideas["unit_stride"].adopted and not r.improved
