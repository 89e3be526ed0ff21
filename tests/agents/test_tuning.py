"""The tuning stage: replaying the adopted chain with other parameters, the greedy search within
its budget, and its place in the loop. The search logic is tested with timings made up from the
candidate's launch (no GPU here); each point's correctness with the real gate on the CPU."""
import json
import pathlib

import pytest

from astra_cuda.model import launch_change, source, spec as spec_mod
from astra_cuda.agents import Check, Evaluation, Limits, ProfileSummary, SizeTiming, optimize
from astra_cuda.agents.offline import TRANSFORMS, context_from_text
from astra_cuda.agents.tuning import replay, tune

KERNELS = pathlib.Path(__file__).parent / "kernels"
GELU = "gelu_forward_kernel1"


def gelu():
    path = KERNELS / "gelu_bf16.cu"
    text = path.read_text()
    m = source.parse(text)
    return text, str(path), spec_mod.load(m.kernel(GELU), m)


def launch(text):
    """(elements per thread, threads per block) of a coarsened candidate, from its own spec."""
    sp = launch_change.spec_in(source.parse(text), GELU)
    grid, block, _ = sp.launch_dims({"N": 1 << 24})
    return round((1 << 24) / (grid[0] * block[0])), block[0]


def timed(best=(16, 512), fail=None):
    """A made-up GPU: fastest at `best` (elements per thread, block); `fail` points fail the gate."""
    calls = []

    def evaluate(text):
        calls.append(text)
        ept, block = launch(text)
        if (ept, block) == fail:
            return Evaluation(Check(False, "FAILED compare", "out[3]: 1.5 vs 2.0", 0, "check"))
        us = 100.0 if "astra" not in text else 40.0 + 5 * abs(ept - best[0]) / 8 + abs(block - best[1]) / 64
        return Evaluation(Check(True, "passed", "", 10, "passed"),
                          ProfileSummary((SizeTiming({"N": 1 << 24}, 100.0, us, 100.0 / us * 0.4),), "memory"))
    return evaluate, calls


def test_replay_reproduces_the_adopted_rewrite():
    text, _, sp = gelu()
    rw = TRANSFORMS["coarsen"].apply(text, context_from_text(GELU, text, sp))
    assert replay(text, GELU, [("coarsen", rw.params)], sp) == rw.text
    assert replay(text, GELU, [("coarsen", {**rw.params, "steps": 2})], sp) != rw.text
    assert replay(text, GELU, [("pack_rows", {})], sp) is None     # no longer applies: no candidate


def test_tune_finds_the_fastest_point_within_its_budget():
    text, _, sp = gelu()
    rw = TRANSFORMS["coarsen"].apply(text, context_from_text(GELU, text, sp))
    evaluate, calls = timed(best=(16, 512), fail=(32, 256))
    start = evaluate(rw.text)
    best, best_eval, points, chain = tune(text, GELU, [(1, "coarsen", rw.params)], evaluate, rw.text, start,
                                          spec=sp, points=8)
    assert launch(best) == (16, 512) and best_eval.speedup > start.speedup
    assert chain == [(1, "coarsen", {"width": 16, "steps": 2, "block": 512})]
    outcomes = {(p.params["steps"], p.params["block"]): p.outcome for p in points}
    assert outcomes[(4, None)] == "failed" and outcomes[(2, None)] == "adopted"
    failed = next(p for p in points if p.outcome == "failed")
    assert failed.reason == "FAILED compare: out[3]: 1.5 vs 2.0"     # the evidence, not only the verdict
    assert all(p.candidate_hash for p in points if p.outcome != "not applicable")
    assert len(calls) == 1 + len(points) <= 9
    # a budget of two points stops after two
    _, _, few, _ = tune(text, GELU, [(1, "coarsen", rw.params)], evaluate, rw.text, start, spec=sp, points=2)
    assert len(few) == 2


def test_no_tuning_where_speed_is_not_measured():
    text, _, sp = gelu()
    rw = TRANSFORMS["coarsen"].apply(text, context_from_text(GELU, text, sp))
    unmeasured = Evaluation(Check(True, "passed", "", 10, "passed"))
    best, _, points, _ = tune(text, GELU, [(1, "coarsen", rw.params)], lambda t: unmeasured, rw.text, unmeasured,
                              spec=sp)
    assert best == rw.text and points == []


def test_the_loop_tunes_after_its_rounds(tmp_path):
    text, path, sp = gelu()
    evaluate, _ = timed(best=(16, 512))
    r = optimize(text, path, GELU, evaluate, rounds=4, spec=sp, runs_dir=tmp_path, limits=Limits(tune_points=6))
    assert r.rounds[0].plan.idea == "coarsen" and r.rounds[0].adopted
    assert r.tuning and "tuning tried" in r.stopped
    assert launch(r.best) == (16, 512) and r.best_eval.speedup > r.rounds[0].evaluation.speedup
    md = r.summary_markdown()
    assert "### Tuning" in md and "| 1 | coarsen | width\\=16\\, steps\\=2\\, block\\=None | adopted" in md
    logged = json.loads((tmp_path / r.run_id / "tuning.json").read_text())
    assert len(logged) == len(r.tuning) and (tmp_path / r.run_id / "best.cu").read_text() == r.best
    assert r.to_json()["tuning"][0]["idea"] == "coarsen"


@pytest.mark.slow
def test_every_tuning_point_of_a_coarsened_kernel_passes_the_gate(tmp_path):
    """The alternatives the tuner would time are correct too (CPU backend, quick gate)."""
    from astra_cuda.execution.evaluator import local_evaluator
    from astra_cuda.agents.tuning import _neighbours
    try:
        from astra_cuda.backends.cpu import CpuBackend
        cpu = CpuBackend()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"CPU backend unavailable: {e}")
    text, path, sp = gelu()
    rw = TRANSFORMS["coarsen"].apply(text, context_from_text(GELU, text, sp))
    ev = local_evaluator(path, GELU, sp, cpu, text, quick=True)
    alts = _neighbours(text, GELU, [("coarsen", rw.params)], 0, sp)
    assert {(a["steps"], a["block"], a["width"]) for a in alts} >= {(2, None, 16), (1, 512, 16), (1, None, 8)}
    for a in alts:
        cand = replay(text, GELU, [("coarsen", a)], sp)
        e = ev(cand)
        assert e.passed, (a, e.check.feedback)


def test_parallel_tuning_evaluates_a_batch_at_once_and_keeps_the_fastest():
    """With room for several points at once, a batch is evaluated concurrently (the executor spreads
    it over its GPUs) and the fastest verified improvement of the batch is adopted."""
    import threading
    import time as _time
    text, _, sp = gelu()
    rw = TRANSFORMS["coarsen"].apply(text, context_from_text(GELU, text, sp))
    evaluate, calls = timed(best=(16, 512), fail=(32, 256))
    start = evaluate(rw.text)
    live, peak, lock = [0], [0], threading.Lock()

    def concurrent(t):
        with lock:
            live[0] += 1
            peak[0] = max(peak[0], live[0])
        _time.sleep(0.05)
        try:
            return evaluate(t)
        finally:
            with lock:
                live[0] -= 1
    best, best_eval, points, chain = tune(text, GELU, [(1, "coarsen", rw.params)], concurrent, rw.text, start,
                                          spec=sp, points=8, parallel=4)
    assert peak[0] > 1                                   # evaluated at once
    assert launch(best) == (16, 512) and best_eval.speedup > start.speedup
    assert sum(p.outcome == "adopted" for p in points) >= 1 and len(points) <= 8
    assert {p.outcome for p in points} <= {"adopted", "not faster", "failed", "not applicable"}
    assert all(p.reason for p in points)


def test_the_loop_tunes_k_points_at_once_with_k_candidates(tmp_path):
    text, path, sp = gelu()
    evaluate, _ = timed(best=(16, 512))
    seen: list[int] = []
    live = [0]
    import threading
    lock = threading.Lock()

    def counting(t):
        with lock:
            live[0] += 1
            seen.append(live[0])
        try:
            import time as _time
            _time.sleep(0.02)
            return evaluate(t)
        finally:
            with lock:
                live[0] -= 1
    r = optimize(text, path, GELU, counting, rounds=4, spec=sp, runs_dir=tmp_path, candidates=3,
                 limits=Limits(tune_points=6))
    assert r.tuning and len(r.tuning) <= 6 and launch(r.best) == (16, 512)
    assert max(seen) > 1
