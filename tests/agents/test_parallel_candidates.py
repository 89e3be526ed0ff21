"""Several candidates per round (`candidates=k`): the offline team proposes its next k ideas, they
are evaluated at once, at most one — the best verified — is adopted; k=1 is the loop as before;
speedups timed on different GPU models are never compared; a lost evaluator stops the run,
resumable, keeping what was measured. The evaluator is a fake (deterministic, from the text)."""
import threading
import time

import pytest

from astra_cuda.agents import Check, Evaluation, ProfileSummary, SizeTiming, optimize
from astra_cuda.agents.runlog import RunLog, read_run
from astra_cuda.agents.offline import style
from astra_cuda.evaluation import InfrastructureError

from agent_helpers import example


class Fake:
    """Every candidate passes; a rewrite is faster by 10% per line it adds (counted in its readable
    form, so a rewrite and its readable form time alike)."""

    def __init__(self, original: str, gpu: str = "GPU-A", delay: float = 0.0):
        self.original = original
        self.gpu = gpu
        self.delay = delay
        self.calls: list[str] = []
        self.active = 0
        self.most = 0
        self.lock = threading.Lock()
        self.fail_after: int | None = None

    def __call__(self, text: str) -> Evaluation:
        with self.lock:
            if self.fail_after is not None and len(self.calls) >= self.fail_after:
                raise InfrastructureError("infrastructure error: the Ray worker was lost twice; not a verdict")
            self.calls.append(text)
            self.active += 1
            self.most = max(self.most, self.active)
        time.sleep(self.delay)
        with self.lock:
            self.active -= 1
        # the readable form of a rewrite times as the rewrite (it only renames and rewords comments);
        # one at a time: the evaluations run in threads, and a parser is not shared across threads
        with self.lock:
            timed = text if text == self.original else style.polish(text, self.original)
        new_lines = len(set(timed.splitlines()) - set(self.original.splitlines()))
        us = 100.0 / (1.0 + 0.1 * new_lines)
        return Evaluation(Check(True, "passed", "", 10, "passed"),
                          ProfileSummary((SizeTiming({"n": 1}, 100.0, us),), device=self.gpu), gpu=self.gpu, node="n1")


def run(fake, text, path, kernel, tmp_path, **kw):
    return optimize(text, path, kernel, fake, rounds=kw.pop("rounds", 3), runs_dir=tmp_path / "runs", **kw)


def test_k_candidates_are_evaluated_at_once_and_one_is_adopted(tmp_path):
    text, path, kernel = example("silu_and_mul")
    fake = Fake(text, delay=0.3)
    res = run(fake, text, path, kernel, tmp_path, candidates=3, rounds=1)
    first = [r for r in res.rounds if r.batch == 1]
    assert len(first) == 3 and len({r.plan.idea for r in first}) == 3   # three different ideas
    assert fake.most == 3                                                   # at once
    adopted = [r for r in first if r.adopted]
    assert len(adopted) == 1
    best = max(first, key=lambda r: r.evaluation.speedup)
    assert adopted[0] is best
    assert res.best == style.polish(best.candidate, text, str(path))   # offered in its readable form
    for r in first:
        if r is not best:
            assert r.outcome == "not faster" and f"candidate {best.index}" in r.reason
    assert [r.index for r in res.rounds] == [1, 2, 3]
    assert read_run(tmp_path / "runs" / res.run_id).rounds_done == 1   # rounds, not candidates


def test_one_candidate_per_round_is_the_loop_as_before(tmp_path):
    text, path, kernel = example("silu_and_mul")
    a = run(Fake(text), text, path, kernel, tmp_path / "a")
    b = run(Fake(text), text, path, kernel, tmp_path / "b", candidates=1)
    assert [(r.index, r.batch, r.plan.idea, r.outcome) for r in a.rounds] == \
        [(r.index, r.batch, r.plan.idea, r.outcome) for r in b.rounds]
    assert all(r.index == r.batch for r in a.rounds) and a.best == b.best


def test_speedups_across_gpu_models_are_not_compared(tmp_path):
    text, path, kernel = example("silu_and_mul")
    fake = Fake(text)
    calls = []

    def evaluate(t):
        ev = fake(t)
        calls.append(t)
        if len(calls) == 1:
            return ev                                       # the baseline on GPU-A
        import dataclasses
        return dataclasses.replace(ev, gpu="GPU-B", profile=dataclasses.replace(ev.profile, device="GPU-B"))
    res = optimize(text, path, kernel, evaluate, rounds=1, runs_dir=tmp_path / "runs")
    assert res.rounds[0].outcome == "not compared" and "GPU-B" in res.rounds[0].reason
    assert not res.improved


def test_lost_evaluator_stops_the_run_resumable_and_keeps_measurements(tmp_path):
    text, path, kernel = example("silu_and_mul")
    fake = Fake(text)
    fake.fail_after = 2          # the baseline and round 1 are measured, round 2 is lost
    res = run(fake, text, path, kernel, tmp_path, rounds=3)
    assert res.interrupted and res.error.startswith("infrastructure error")
    assert [r.batch for r in res.rounds] == [1]
    log = RunLog(tmp_path / "runs" / res.run_id)
    assert log.meta()["status"] == "interrupted"
    assert len(log.read_measured()) == 2
    fake.fail_after = None
    again = optimize(text, path, kernel, fake, rounds=3, runs_dir=tmp_path / "runs", resume=res.run_id)
    assert not again.interrupted and [r.batch for r in again.rounds] == [1, 2, 3]
    assert len(fake.calls) == 2 + 2 + 1  # only rounds 2 and 3 were evaluated again, then the readable form
    whole = run(Fake(text), text, path, kernel, tmp_path / "whole", rounds=3)
    assert again.best == whole.best


@pytest.mark.parametrize("k", [2, 4])
def test_parallel_runs_are_deterministic(tmp_path, k):
    text, path, kernel = example("silu_and_mul")
    a = run(Fake(text, delay=0.05), text, path, kernel, tmp_path / "a", candidates=k)
    b = run(Fake(text), text, path, kernel, tmp_path / "b", candidates=k)
    assert [(r.plan.idea, r.outcome) for r in a.rounds] == [(r.plan.idea, r.outcome) for r in b.rounds]
    assert a.best == b.best
