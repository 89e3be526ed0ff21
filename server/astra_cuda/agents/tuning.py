"""The tuning stage: after the transformations, a small search over the adopted rewrites'
parameters (threads per row, vector width, vector steps per thread, block size, rows per block).

The adopted rounds form a chain `original -> t1(p1) -> t2(p2) -> ...`; each transformation is
deterministic, so changing one step's parameters and replaying the chain from the original gives
a new candidate (later steps re-size themselves to it). Each point goes through the same
`evaluate` as every round — the gate, then timing side by side with the original — and is kept
only when verified, faster than the best by `min_gain` at the bench sizes and slower at no size
of the ladder by more than `size_tolerance`. The search is greedy, one step at a
time in the order the steps were adopted, each step's alternatives tried around its current
point; it stops when the point budget, the time limit or a cancel says so. Speed must be
measured for any of this to mean something: without a GPU the stage does not run.
"""
from __future__ import annotations

import contextvars
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Callable

from ..evaluation import Evaluation, source_hash
from . import dispatch
from ..model.candidate import Candidate
from .offline import TRANSFORMS, context_from_spec
from .sizes import slower_at_a_size


@dataclass
class TunePoint:
    step: int                  # the adopted round whose parameters changed
    idea: str
    params: dict
    outcome: str               # 'adopted' | 'not faster' | 'failed' | 'not applicable'
    speedup: float | None = None   # vs the original (geomean over the bench sizes)
    reason: str = ""
    candidate_hash: str | None = None
    seconds: float = 0.0

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "TunePoint":
        return cls(**d)


def replay(original: str | Candidate, kernel: str, chain: list[tuple[str, dict]], spec=None,
           headers: tuple[str, ...] = ()) -> str | None:
    """The file after applying `chain` [(idea, params)] to `original` (a text, or read) in order
    (None when a step no longer applies); `headers`: the texts of the project headers the file includes."""
    c = replay_read(original if isinstance(original, Candidate) else Candidate.of(original, kernel), chain, spec,
                    headers)
    return c.text if c is not None else None


def replay_read(original: Candidate, chain: list[tuple[str, dict]], spec=None,
                headers: tuple[str, ...] = ()) -> Candidate | None:
    """`replay` from a version read, each step's version read once (where its rewrite is made)."""
    c, kernel = original, original.kernel
    for idea, params in chain:
        t = TRANSFORMS.get(idea)
        if t is None:
            return None
        own = dict(params)
        how = own.pop(dispatch.KEY, None)   # the step was kept beside the version before it, by size
        rw = t.apply(c, context_from_spec(kernel, c.spec or spec, headers), own)
        if rw is None:
            return None
        if how is None:
            c = rw.candidate or Candidate.of(rw.text, kernel)
            continue
        text = dispatch.rebuild(c.text, rw.text, kernel, how)
        if text is None:
            return None
        c = Candidate.of(text, kernel)
    return c


def _neighbours(original: str | Candidate, kernel: str, chain: list[tuple[str, dict]], j: int, spec,
                headers: tuple[str, ...] = ()) -> list[dict]:
    """Step j's alternative parameter points, as its transformation proposes them."""
    start = original if isinstance(original, Candidate) else Candidate.of(original, kernel)
    before = replay_read(start, chain[:j], spec, headers)
    if before is None:
        return []
    idea, params = chain[j]
    ctx = context_from_spec(kernel, before.spec or spec, headers)
    own = dict(params)
    how = own.pop(dispatch.KEY, None)
    rw = TRANSFORMS[idea].apply(before, ctx, own)
    if rw is None:
        return []
    seen, out = [dict(rw.params)], []
    for alt in TRANSFORMS[idea].alternatives(rw, ctx):
        if not any(_same(alt, x) for x in seen):
            seen.append(alt)
            out.append(alt if how is None else {**alt, dispatch.KEY: how})   # dispatched at the same size
    return out


def tune(original: str | Candidate, kernel: str, chain: list[tuple[int, str, dict]], evaluate: Callable[[str], Evaluation],
         best: str, best_eval: Evaluation, *, spec=None, points: int = 8, min_gain: float = 0.01,
         size_tolerance: float = 0.03,
         deadline: float | None = None, cancel: threading.Event | None = None,
         tell: Callable[[str], None] | None = None,
         parallel: int = 1, headers: tuple[str, ...] = ()) -> tuple[str, Evaluation, list[TunePoint], list[tuple[int, str, dict]]]:
    """Search the parameters of `chain` [(round, idea, params)] around the adopted point.
    `parallel` points are evaluated at once (the executor spreads them over its GPUs); of a batch
    the fastest verified improvement is kept, so one point at a time is the plain greedy climb.
    Returns (best text, its evaluation, the points tried, the chain that produced the best)."""
    tried: list[TunePoint] = []
    steps = [(r, idea, dict(p)) for r, idea, p in chain]
    if not best_eval.measured or points <= 0:
        return best, best_eval, tried, steps
    parallel = max(1, int(parallel))
    plain = [(idea, p) for _, idea, p in steps]
    start = original if isinstance(original, Candidate) else Candidate.of(original, kernel)   # replayed from

    def stop() -> bool:
        return len(tried) >= points or (cancel is not None and cancel.is_set()) or \
            (deadline is not None and time.monotonic() > deadline)

    for j, (rnd, idea, _) in enumerate(steps):
        seen = [dict(plain[j][1])]
        moved = True
        while moved:   # climb: after a step's point improves, look around the new point
            moved = False
            fresh = [alt for alt in _neighbours(start, kernel, plain, j, spec, headers)]
            while fresh and not moved:
                batch: list[tuple[dict, str, TunePoint]] = []
                while fresh and len(batch) < parallel:
                    alt = fresh.pop(0)
                    if any(_same(alt, x) for x in seen):
                        continue
                    if stop() or len(tried) + len(batch) >= points:
                        fresh = []
                        break
                    seen.append(alt)
                    c = replay_read(start, plain[:j] + [(idea, alt)] + plain[j + 1:], spec, headers)
                    text = c.text if c is not None else None
                    pt = TunePoint(rnd, idea, alt, "not applicable")
                    if text is None or text == best:
                        pt.reason = "the chain no longer applies with these parameters" if text is None else \
                            "the same code as the best"
                        tried.append(pt)
                        continue
                    batch.append((alt, text, pt))
                if not batch:
                    if stop():
                        return best, best_eval, tried, steps
                    continue
                if tell is not None:
                    tell(f"tuning {idea} (round {rnd}): " + "; ".join(show(a) for a, _, _ in batch))
                evals = _evaluate_all(evaluate, [t for _, t, _ in batch])
                winner = None
                for (alt, text, pt), (ev, seconds) in zip(batch, evals):
                    pt.candidate_hash, pt.seconds = source_hash(text), seconds
                    if not ev.passed:
                        # the evidence with the verdict: which check, which numbers (the report shows it)
                        pt.outcome = "failed"
                        pt.reason = ev.check.summary + (f": {ev.check.feedback[:400]}" if ev.check.feedback and
                                                        ev.check.feedback not in ev.check.summary else "")
                    elif not ev.measured:
                        pt.outcome, pt.reason = "not faster", ev.speed_note or "speed not measured"
                    else:
                        pt.speedup = ev.speedup
                        slower = slower_at_a_size(ev, best_eval, size_tolerance)
                        if ev.speedup / best_eval.speedup >= 1.0 + min_gain and slower:
                            pt.outcome, pt.reason = "slower at a size", f"{ev.speedup:.3f}× at the bench sizes, but {slower}"
                        elif ev.speedup / best_eval.speedup >= 1.0 + min_gain and \
                                (winner is None or ev.speedup > winner[2].speedup):
                            winner = (alt, text, ev, pt)
                        else:
                            pt.outcome = "not faster"
                            pt.reason = f"{ev.speedup:.3f}×, not better than the best ({best_eval.speedup:.3f}×)"
                    tried.append(pt)
                if winner is not None:
                    alt, text, ev, pt = winner
                    for _, _, other in batch:   # the others of the batch lost to the winner
                        if other is not pt and other.outcome == "not applicable":
                            other.outcome = "not faster"
                            other.reason = f"{other.speedup:.3f}×, less than {ev.speedup:.3f}× in the same batch"
                    pt.outcome = "adopted"
                    pt.reason = f"{ev.speedup:.3f}× ({ev.speedup / best_eval.speedup:.3f}× vs the previous best)"
                    best, best_eval = text, ev
                    plain = plain[:j] + [(idea, alt)] + plain[j + 1:]
                    steps[j] = (rnd, idea, dict(alt))
                    moved = True
    return best, best_eval, tried, steps


def _evaluate_all(evaluate: Callable[[str], Evaluation], texts: list[str]) -> list[tuple[Evaluation, float]]:
    """Each text's evaluation and its seconds; several at once on threads (the evaluations run in
    worker processes, so the threads only wait)."""
    def one(text: str) -> tuple[Evaluation, float]:
        t0 = time.monotonic()
        ev = evaluate(text)
        return ev, time.monotonic() - t0
    if len(texts) == 1:
        return [one(texts[0])]
    contexts = [contextvars.copy_context() for _ in texts]   # each in a copy of this thread's (`parse_time.apart_first`)
    with ThreadPoolExecutor(len(texts), thread_name_prefix="astra-tune") as pool:
        return list(pool.map(lambda t, c: c.run(one, t), texts, contexts))


def _same(a: dict, b: dict) -> bool:
    keys = (set(a) | set(b)) - {"elements"}
    return all(a.get(k) == b.get(k) for k in keys)


def show(params: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items() if k != "elements")
