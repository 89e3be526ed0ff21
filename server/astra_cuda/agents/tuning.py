"""The tuning stage: after the transformations, a small search over the adopted rewrites'
parameters (threads per row, vector width, vector steps per thread, block size, rows per block).

The adopted rounds form a chain `original -> t1(p1) -> t2(p2) -> ...`; each transformation is
deterministic, so changing one step's parameters and replaying the chain from the original gives
a new candidate (later steps re-size themselves to it). Each point goes through the same
`evaluate` as every round — the gate, then timing side by side with the original — and is kept
only when verified and faster than the best by `min_gain`. The search is greedy, one step at a
time in the order the steps were adopted, each step's alternatives tried around its current
point; it stops when the point budget, the time limit or a cancel says so. Speed must be
measured for any of this to mean something: without a GPU the stage does not run.
"""
from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass
from typing import Callable

from ..evaluation import Evaluation, source_hash
from .offline import TRANSFORMS, context_from_text


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


def replay(original: str, kernel: str, chain: list[tuple[str, dict]], spec=None) -> str | None:
    """The file after applying `chain` [(idea, params)] to `original` in order (None when a step
    no longer applies)."""
    text = original
    for idea, params in chain:
        t = TRANSFORMS.get(idea)
        if t is None:
            return None
        rw = t.apply(text, context_from_text(kernel, text, spec), dict(params))
        if rw is None:
            return None
        text = rw.text
    return text


def _neighbours(original: str, kernel: str, chain: list[tuple[str, dict]], j: int, spec) -> list[dict]:
    """Step j's alternative parameter points, as its transformation proposes them."""
    before = replay(original, kernel, chain[:j], spec)
    if before is None:
        return []
    idea, params = chain[j]
    ctx = context_from_text(kernel, before, spec)
    rw = TRANSFORMS[idea].apply(before, ctx, dict(params))
    if rw is None:
        return []
    seen, out = [dict(rw.params)], []
    for alt in TRANSFORMS[idea].alternatives(rw, ctx):
        if not any(_same(alt, x) for x in seen):
            seen.append(alt)
            out.append(alt)
    return out


def tune(original: str, kernel: str, chain: list[tuple[int, str, dict]], evaluate: Callable[[str], Evaluation],
         best: str, best_eval: Evaluation, *, spec=None, points: int = 8, min_gain: float = 0.01,
         deadline: float | None = None, cancel: threading.Event | None = None,
         tell: Callable[[str], None] | None = None) -> tuple[str, Evaluation, list[TunePoint], list[tuple[int, str, dict]]]:
    """Search the parameters of `chain` [(round, idea, params)] around the adopted point.
    Returns (best text, its evaluation, the points tried, the chain that produced the best)."""
    tried: list[TunePoint] = []
    steps = [(r, idea, dict(p)) for r, idea, p in chain]
    if not best_eval.measured or points <= 0:
        return best, best_eval, tried, steps
    plain = [(idea, p) for _, idea, p in steps]
    for j, (rnd, idea, _) in enumerate(steps):
        seen = [dict(plain[j][1])]
        moved = True
        while moved:   # climb: after a step's point improves, look around the new point
            moved = False
            for alt in _neighbours(original, kernel, plain, j, spec):
                if any(_same(alt, x) for x in seen):
                    continue
                seen.append(alt)
                if len(tried) >= points or (cancel is not None and cancel.is_set()) or \
                        (deadline is not None and time.monotonic() > deadline):
                    return best, best_eval, tried, steps
                t0 = time.monotonic()
                candidate_chain = plain[:j] + [(idea, alt)] + plain[j + 1:]
                text = replay(original, kernel, candidate_chain, spec)
                pt = TunePoint(rnd, idea, alt, "not applicable")
                if text is None or text == best:
                    pt.reason = "the chain no longer applies with these parameters" if text is None else \
                        "the same code as the best"
                    tried.append(pt)
                    continue
                if tell is not None:
                    tell(f"tuning {idea} (round {rnd}): {_show(alt)}")
                ev = evaluate(text)
                pt.candidate_hash, pt.seconds = source_hash(text), time.monotonic() - t0
                if not ev.passed:
                    pt.outcome, pt.reason = "failed", ev.check.summary
                elif not ev.measured:
                    pt.outcome, pt.reason = "not faster", ev.speed_note or "speed not measured"
                else:
                    pt.speedup = ev.speedup
                    gain = ev.speedup / best_eval.speedup
                    if gain >= 1.0 + min_gain:
                        pt.outcome, pt.reason = "adopted", f"{ev.speedup:.3f}× ({gain:.3f}× vs the previous best)"
                        best, best_eval, plain = text, ev, candidate_chain
                        steps[j] = (rnd, idea, dict(alt))
                        moved = True
                    else:
                        pt.outcome = "not faster"
                        pt.reason = f"{ev.speedup:.3f}×, not better than the best ({best_eval.speedup:.3f}×)"
                tried.append(pt)
                if moved:
                    break
    return best, best_eval, tried, steps


def _same(a: dict, b: dict) -> bool:
    keys = (set(a) | set(b)) - {"elements"}
    return all(a.get(k) == b.get(k) for k in keys)


def _show(params: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items() if k != "elements")
