"""How a candidate fares size by size on the ladder (`astra_cuda.model.ladder`): the rule that no
adopted rewrite is slower than the original, or than the best so far, at any size by more than
the tolerance. Pure: evaluations in, a reason out."""
from __future__ import annotations

from ..evaluation import Evaluation, SizeTiming
from ..model.ladder import describe


def slower_at_a_size(e: Evaluation, best: Evaluation | None, tolerance: float) -> str:
    """'' when candidate `e` is, at every size of the ladder, no slower than the original and than
    the best so far beyond `tolerance`; else where and by how much (a rewrite that wins at 4096 rows
    and loses at 1 is not adopted as it is: see `dispatch`). `best` None: the best so far is the
    original itself, whose own evaluation timed it beside itself — its ratio there is noise, and
    comparing with it would count that noise twice (a dispatched version running the original's
    code at 5 µs was refused as 1.032× slower than it on an H200); `e` was timed beside the
    original, which is the comparison."""
    if e.profile is None:
        return ""
    worst = e.profile.slowest_against()
    if worst is not None and worst[1] < 1.0 - tolerance:
        t, ratio = worst
        return f"{1 / ratio:.3f}× slower than the original at {_size(t)}"
    worst = e.profile.slowest_against(best.profile) if best is not None and best.profile is not None else None
    if worst is not None and worst[1] < 1.0 - tolerance:
        t, ratio = worst
        return f"{1 / ratio:.3f}× slower than the best so far at {_size(t)}"
    return ""


def _size(t: SizeTiming) -> str:
    return describe(t.sizes, t.role)
