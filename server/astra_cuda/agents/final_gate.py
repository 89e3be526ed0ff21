"""The final gate: what the user is told is verified is decided by the whole file compiled by the
user's compiler (nvcc where a toolkit is installed), never by the search's fast path.

During the search a candidate may be compiled from the reference's proven cut by NVRTC
(`compile.fastpath`; its Evaluation's `search_cut` says so). Such an evaluation only ranks
candidates: before one becomes the best (`orchestrator._adopt`'s callers: a round's winner, the
tuning's best, a remembered rewrite, the readable form offered in the best's place), and for the
original's baseline, it is evaluated again with `final` — the gate and the timing
on the candidate's whole file — and is adopted with that evaluation, or refused where that one
fails. A search evaluation with no final verdict offered is refused too.

Also here: `keep_best_of`, at most one adopted candidate per round.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from ..evaluation import Check, Evaluation
from ..model.candidate import Candidate
from .records import Round

FinalVerdict = Callable[[Candidate], Evaluation]


def confirmed(final: FinalVerdict | None, candidate: str, kernel: str, e: Evaluation,
              read: Candidate | None = None) -> Evaluation:
    """The evaluation `candidate` may be adopted with: `e` where the whole file judged it already,
    else the final verdict on its whole file (a failed Check where that fails, or none is offered)."""
    if not e.search_cut or not e.passed:
        return e
    if final is None:
        msg = (f"passed the search's check ({e.search_cut}), but no final verdict on the whole file can be made "
               f"here: not adopted")
        return Evaluation(Check(False, msg, msg, 0, "compile"))
    c = read if read is not None and read.text == candidate else Candidate.of(candidate, kernel)
    f = final(c)
    if f.search_cut:   # a final verdict is never the fast path's (evaluator: final=True)
        raise AssertionError("the final verdict came from the search's fast path")
    if f.passed:
        return f
    msg = f"passed the search's check ({e.search_cut}), but not the final verdict on the whole file: {f.check.summary}"
    return dataclasses.replace(f, check=dataclasses.replace(f.check, summary=msg))


def settle(r: Round, final: FinalVerdict | None, kernel: str, judge: Callable[[Round, Evaluation], None]) -> bool:
    """An adopted round's final verdict: its evaluation becomes the whole file's, judged again
    (the timing is the whole file's build); False where it is no longer adopted."""
    assert r.candidate is not None and r.evaluation is not None
    e = confirmed(final, r.candidate, kernel, r.evaluation, r.read)
    if e is r.evaluation:
        return r.adopted
    r.evaluation = e
    if not e.passed:
        r.outcome, r.reason = "failed", e.check.summary
        return False
    judge(r, e)
    return r.adopted


def keep_best_of(batch: list[Round]) -> None:
    """At most one candidate of a round is adopted: the fastest measured one (on ties, or where
    speed is not measured, the first in the planner's order)."""
    adopted = [r for r in batch if r.adopted]
    if len(adopted) < 2:
        return
    best = max(adopted, key=lambda r: r.evaluation.speedup if r.evaluation is not None and r.evaluation.measured
               and r.evaluation.speedup is not None else float("-inf"))
    if not (best.evaluation is not None and best.evaluation.measured):
        best = adopted[0]
    for r in adopted:
        if r is best:
            continue
        r.outcome = "not faster"
        mine = r.evaluation.speedup if r.evaluation is not None else None
        theirs = best.evaluation.speedup if best.evaluation is not None else None
        if mine is not None and theirs is not None:   # both measured
            r.reason = (f"{mine:.3f}× vs the original, but candidate {best.index} of this round "
                        f"was faster ({theirs:.3f}×)")
        else:
            what = "passed the search's check" if r.evaluation is not None and r.evaluation.search_cut else "verified"
            r.reason = f"{what}, but candidate {best.index} of this round was adopted (one per round)"
