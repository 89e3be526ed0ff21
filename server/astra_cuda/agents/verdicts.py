"""How one round is judged against the best so far — adopted (faster at the bench sizes by
`Limits.min_gain` and slower at no size of the ladder beyond `Limits.size_tolerance`), slower at a
size (where a size dispatch may keep both versions), not faster, failed, not compared across GPU
models — and the run's limits (`Limits`, `over_limits`)."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from ..evaluation import Evaluation
from .coder import Attempt
from .records import Round, Usage
from .situation import Situation
from .sizes import slower_at_a_size


@dataclass(frozen=True)
class Limits:
    max_seconds: float | None = None      # wall time for the whole run
    max_tokens: int | None = None         # LLM tokens (prompt + completion), as the endpoint reports them
    patience: int = 3                     # LLM mode: stop after this many rounds in a row without adoption
    min_gain: float = 0.01                # measured: must beat the best by 1%
    size_tolerance: float = 0.03          # measured: slower than the best (or the original) at no size of the
                                          # ladder by more than this (timing one kernel twice differs by <0.4%
                                          # at bench sizes on an H100; the µs-scale decode points need more room)
    tune_points: int = 8                  # the tuning stage's budget of parameter points (0: no tuning)


def _reordered_sums_note(r: Round, e: Evaluation) -> str:
    """A rewrite that sums floats in another order can miss the spec's tolerance by rounding
    alone. The gate keeps the tolerance (only the user can say what "the same result" means):
    the reason says how to accept such differences."""
    from .offline import TRANSFORMS
    t = TRANSFORMS.get(r.plan.idea) if r.plan is not None and r.plan.source == "offline" else None
    if t is None or not t.reorders_sums or "differ beyond atol" not in e.check.summary:
        return ""
    return (" — this rewrite sums in another order than the original, so float results differ by rounding; "
            "the spec's tolerance was kept: where such differences are acceptable, state atol/rtol for the "
            "output in the spec")


def judge(r: Round, att: Attempt, s: Situation, limits: Limits, cancel: threading.Event) -> None:
    if att.candidate is None or att.evaluation is None:
        r.outcome = "cancelled" if cancel.is_set() else "no candidate"
        r.reason = att.problem or "no usable code"
        return
    e = att.evaluation
    if not e.passed and cancel.is_set():
        r.outcome, r.reason = "cancelled", "cancelled while the candidate was being evaluated"
        return
    if not e.passed:
        r.outcome = "failed"
        r.reason = e.check.summary + _reordered_sums_note(r, e)
        return
    if att.candidate == s.best:
        r.outcome, r.reason = "not faster", "the rewrite is identical to the current best"
        return
    if e.measured and s.best_eval.measured and e.gpu and s.best_eval.gpu and e.gpu != s.best_eval.gpu:
        r.outcome = "not compared"
        r.reason = (f"timed on {e.gpu}, the best on {s.best_eval.gpu}: speedups are never compared across "
                    f"GPU models")
        return
    new, best = e.speedup, s.best_eval.speedup
    if new is not None and best is not None:   # both measured
        gain = new / best
        slower = slower_at_a_size(e, s.rival, limits.size_tolerance)
        if gain >= 1.0 + limits.min_gain and slower:
            r.outcome = "slower at a size"
            r.reason = f"{new:.3f}× vs the original at the bench sizes, but {slower}"
        elif gain >= 1.0 + limits.min_gain:
            r.outcome = "adopted"
            r.reason = f"{new:.3f}× vs the original ({gain:.3f}× vs the previous best)"
        else:
            r.outcome = "not faster"
            r.reason = f"{new:.3f}× vs the original, not better than the best ({best:.3f}×)"
        return
    r.outcome = "adopted"
    r.reason = f"verified on {e.check.cases} cases; {e.speed_note or 'speed not measured'}"


def over_limits(limits: Limits, t0: float, usage: Usage) -> str:
    if limits.max_seconds is not None and time.monotonic() - t0 > limits.max_seconds:
        return f"time limit ({limits.max_seconds:g} s) reached"
    if limits.max_tokens is not None and usage.tokens >= limits.max_tokens:
        return f"token limit ({limits.max_tokens}) reached"
    return ""
