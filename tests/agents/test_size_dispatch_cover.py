"""A coarsening kept beside the original by size, each body where it is faster (issue 29, "no
adopted rewrite slower at any size; or dispatch"; agents/dispatch.py, offline/coarsen.grid_cover).

On an H200 cuda-samples' vectorAdd coarsened won 1.24x at the bench size and lost 4.6% at 6,250
elements. Its size dispatch launched the original grid there but ran the vectorized grid-stride
body on it (coarsening changes only the grid, so the kernel could not tell the launches apart),
still 3.6% slower: refused. The original's one-element-per-thread body is right under any grid
whose threads reach every element, so the dispatched kernel runs it wherever they do — at the
original's grid — and the vectorized body elsewhere. Minimal kernel of our own:
kernels/add_vectors.cu; timings are stand-ins shaped like the H200's."""
import pathlib
import threading

import pytest

from astra_cuda.agents import Check, Evaluation, Limits, ProfileSummary, SizeTiming
from astra_cuda.agents import dispatch, tuning
from astra_cuda.agents.coder import Attempt
from astra_cuda.agents.offline import TRANSFORMS, Context, context_from_text
from astra_cuda.agents.offline.coarsen import grid_cover
from astra_cuda.agents.verdicts import judge as _judge
from astra_cuda.agents.records import Plan, Round
from astra_cuda.agents.situation import Situation
from astra_cuda.execution.evaluator import local_evaluator
from astra_cuda.model import source
from astra_cuda.model.launch_change import spec_in

OK = Check(True, "passed", "", 10, "passed")
PATH = str(pathlib.Path(__file__).parent / "kernels" / "add_vectors.cu")
KERNEL = "add_vectors"
N = (6250, 200000, 25600000)     # the H200 ladder: decode, decode, bench (25, 782 and 100,000 blocks)
COVER = "if ((long long)gridDim.x * blockDim.x >= (long long)(n)) {"


def _profile(us, original=(3.0, 5.0, 96.3)):
    return ProfileSummary(tuple(SizeTiming({"n": n}, o, u, 0.5, "bench" if n == N[-1] else "decode", 0.0)
                                for n, o, u in zip(N, original, us)), "memory")


BEST = _profile((3.0, 5.0, 96.3))
COARSENED = _profile((3.14, 5.2, 77.7))     # 4.6% slower at 6,250 elements, 1.24x at the bench size
ONE_BODY = _profile((3.11, 5.15, 77.7))     # the vectorized body on the original grid: still 3.6% slower
TWO_BODIES = _profile((3.0, 5.0, 77.7))     # the original's body on its grid


def _text():
    return pathlib.Path(PATH).read_text()


def _spec():
    return spec_in(source.parse(_text()), KERNEL)


def _coarsened():
    rw = TRANSFORMS["coarsen"].apply(_text(), context_from_text(KERNEL, _text()))
    assert rw is not None
    return rw.text


def test_the_original_body_runs_wherever_the_grid_covers_its_elements():
    """Fails before the change: the dispatched kernel kept the vectorized body alone."""
    sp = dispatch.split(_spec(), BEST, COARSENED)
    assert sp == dispatch.Split(783, "rewrite", (100000,), (25, 782))
    new, why = dispatch.build(_text(), _coarsened(), KERNEL, sp, _spec().cases(), [{"n": n} for n in N], any_grid=True)
    assert new is not None, why
    k = source.parse(new).kernel(KERNEL).text
    first, second = k.split("} else {")
    assert COVER in first and "c[i] = a[i] + b[i];" in first and "astra_vec" not in first
    assert "astra_vec_end" in second                          # the vectorized grid-stride body
    spec = spec_in(source.parse(new), KERNEL)
    assert spec.sizes["n"] == [1, 100, 4096, 25600000]        # the gate launches the coarsened grid too
    for n, original in ((6250, True), (200000, True), (25600000, False)):
        grid, block, _ = spec.launch_dims({"n": n})
        assert (grid[0] * block[0] >= n) is original          # which body each ladder size runs


def test_a_body_of_another_form_keeps_one_body_and_two_grids():
    """A grid-stride loop (not the one-element form) has no element count its grid must reach:
    the rewrite's body alone, each size on its own grid, as before."""
    strided = _text().replace(
        "  int i = blockDim.x * blockIdx.x + threadIdx.x;\n  if (i < n) {\n    c[i] = a[i] + b[i];\n  }",
        "  for (int i = blockDim.x * blockIdx.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {\n"
        "    c[i] = a[i] + b[i];\n  }")
    assert strided != _text() and grid_cover(_text(), KERNEL) == ("n", "x") and grid_cover(strided, KERNEL) is None
    rw = TRANSFORMS["coarsen"].apply(strided, context_from_text(KERNEL, strided))
    assert rw is not None
    new, why = dispatch.build(strided, rw.text, KERNEL, dispatch.Split(17, "rewrite", (256,), (16,)),
                              _spec().cases(), [{"n": 65536}], any_grid=True)
    assert new is not None, why
    assert "two grids selected by size" in new and "} else {" not in source.parse(new).kernel(KERNEL).text
    # a bound the kernel changes, or one it reads from a local, is no element count the grid reaches
    changed = _text().replace("  if (i < n) {", "  n = n - 1;\n  if (i < n) {")
    local = _text().replace("  if (i < n) {", "  int m = n;\n  if (i < m) {")
    assert grid_cover(changed, KERNEL) is None and grid_cover(local, KERNEL) is None


def test_the_gate_checks_both_bodies():
    from astra_cuda.model import spec as spec_mod
    try:
        from astra_cuda.backends.cpu import CpuBackend
        cpu = CpuBackend()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"CPU backend unavailable: {e}")
    text = _text()
    m = source.parse(text)
    evaluate = local_evaluator(PATH, KERNEL, spec_mod.load(m.kernel(KERNEL), m), cpu, text, quick=True)
    # 4,096 elements (16 blocks) below the threshold, 65,536 (256) above: joins [sizes] for the gate
    new, why = dispatch.build(text, _coarsened(), KERNEL, dispatch.Split(17, "rewrite", (256,), (16,)),
                              _spec().cases(), [{"n": 4096}, {"n": 65536}], any_grid=True)
    assert new is not None and COVER in new, why
    ev = evaluate(new)
    assert ev.passed, ev.check.feedback
    k = source.parse(new).kernel(KERNEL)

    def broken(old, bad):
        out = new[:k.span.start_byte] + k.text.replace(old, bad, 1) + new[k.span.end_byte:]
        assert out != new
        return out
    assert not evaluate(broken("c[i] = a[i] + b[i];", "c[i] = a[i] - b[i];")).passed     # the original's body
    assert not evaluate(broken("astra_v0[astra_k] + astra_v1[astra_k]", "astra_v0[astra_k] - astra_v1[astra_k]")).passed


def test_a_dispatch_still_slower_at_a_size_is_refused():
    text, coarse = _text(), _coarsened()
    base = Evaluation(OK, BEST)
    s = Situation(KERNEL, PATH, text, text, base, base, Context(KERNEL))
    for timing, outcome in ((TWO_BODIES, "adopted"), (ONE_BODY, "slower at a size")):
        r = Round(1, Plan("coarsen", "x", "x"), s.best_hash, coarse, "h", Evaluation(OK, COARSENED))
        _judge(r, Attempt(coarse, r.evaluation), s, Limits(), threading.Event())
        assert r.outcome == "slower at a size"
        dispatch.attempt(r, s.best, s.best_eval, KERNEL, lambda t, timing=timing: Evaluation(OK, timing),
                         lambda rr, aa: _judge(rr, aa, s, Limits(), threading.Event()), threading.Event())
        assert r.outcome == outcome, r.reason


def test_the_offline_loop_adopts_the_coarsening_as_a_dispatch_and_replays_it():
    """Fails before the change: the dispatched kernel ran the vectorized body at 6,250 elements,
    3.6% slower than the original, so the coarsening was refused."""
    from astra_cuda.agents.orchestrator import optimize
    text = _text()

    def evaluate(t):
        if COVER in t:
            return Evaluation(OK, TWO_BODIES)
        if "two grids selected by size" in t:
            return Evaluation(OK, ONE_BODY)
        if "astra_vec" in t and "grid / 4" in t:
            return Evaluation(OK, COARSENED)
        return Evaluation(OK, BEST)
    r = optimize(text, PATH, KERNEL, evaluate, rounds=8, spec=_spec(), limits=Limits(tune_points=0))
    rounds = [x for x in r.rounds if x.plan is not None and x.plan.idea == "coarsen"]
    assert rounds and rounds[0].adopted and rounds[0].reason.startswith("dispatched by size"), \
        [(x.plan.idea if x.plan else None, x.outcome, x.reason) for x in r.rounds]
    assert COVER in r.best and r.speedup > 1.2
    chain = [(x.plan.idea, x.plan.params) for x in r.rounds if x.adopted]
    j = next(i for i, (idea, _) in enumerate(chain) if idea == "coarsen")
    assert chain[j][1][dispatch.KEY] == {"threshold": 783, "upper": "rewrite", "gate_size": {"n": 25600000},
                                         "any_grid": True}
    assert tuning.replay(text, KERNEL, chain[:j + 1], _spec()) == rounds[0].candidate


def test_a_refused_one_body_dispatch_says_its_body_runs_on_both_grids():
    """The reason of a refused dispatch of grids alone names it so (it read as the previous version
    below the threshold, which hid why it lost there)."""
    strided = _text().replace(
        "  int i = blockDim.x * blockIdx.x + threadIdx.x;\n  if (i < n) {\n    c[i] = a[i] + b[i];\n  }",
        "  for (int i = blockDim.x * blockIdx.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {\n"
        "    c[i] = a[i] + b[i];\n  }")
    coarse = TRANSFORMS["coarsen"].apply(strided, context_from_text(KERNEL, strided)).text
    base = Evaluation(OK, BEST)
    s = Situation(KERNEL, PATH, strided, strided, base, base, Context(KERNEL))
    r = Round(1, Plan("coarsen", "x", "x"), s.best_hash, coarse, "h", Evaluation(OK, COARSENED))
    _judge(r, Attempt(coarse, r.evaluation), s, Limits(), threading.Event())
    dispatch.attempt(r, s.best, s.best_eval, KERNEL, lambda t: Evaluation(OK, ONE_BODY),
                     lambda rr, aa: _judge(rr, aa, s, Limits(), threading.Event()), threading.Event())
    assert r.outcome == "slower at a size"
    assert ("size dispatch (the rewrite's grid from 783 blocks on, the previous grid below, the rewrite's body on both) "
            "not adopted") in r.reason, r.reason
