"""A step another idea needs, judged together with that idea (issue 29 item 3: the silu baseline's
missing vectorization).

Some offline transformations gain little by themselves but are what another one needs: `unit_stride`
gives a kernel that takes its element strides at run time a contiguous path (on an H100 the Astra
paper's silu baseline ran 1.00–1.03× faster with it: the same scalar accesses, one multiply
fewer), and only that path can be vectorized (1.47× on top of it). Judged alone, such a step is
"not faster", is not adopted, and the idea that needs it never finds its pattern: the silu baseline
ended at 65–69% of the copy ceiling after launch shape, unit stride and fast math when unit stride
was refused on the timer's noise and the rounds ran out before it was taken.

So where an offline round's rewrite is judged not faster and its transformation names the ideas it
`enables`, the first of them whose pattern is in that rewrite is coded on top of it, in the same
round, and judged like any candidate against the best so far (gated, timed at every size of the
ladder). If it is adopted, the step under it is adopted with it (its reason says why) and both
stay, in order, in the chain of adopted rounds: the tuning stage and the remembered tuning replay
them as they were found. Where speed is not measured (the CPU backend) a verified step is adopted
anyway and the next round plans the idea it enables, so nothing is followed here.
"""
from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Callable

from ..evaluation import Evaluation, InfrastructureError, source_hash
from ..model.candidate import Candidate
from .coder import Attempt, OfflineCoder
from .offline import TRANSFORMS, context_from_spec
from .records import Plan, Round
from .situation import Situation

Judge = Callable[[Round, Attempt], None]


def follow_ups(batch: list[Round], s: Situation, coder: OfflineCoder, evaluate: Callable[[Candidate], Evaluation],
               judge: Judge, cancel: threading.Event) -> list[tuple[Round, Round]]:
    """(step, follow-up) for each offline round of `batch` judged not faster whose transformation
    enables another idea: that idea coded on the step's rewrite and judged against the best `s`
    holds (`judge`), as a new round of the same batch based on the step's version."""
    pairs: list[tuple[Round, Round]] = []
    index = max((r.index for r in batch), default=0) + 1
    for step in list(batch):
        if cancel.is_set():
            break
        found = _follow_plan(step, s)
        if found is None:
            continue
        plan, read = found
        t0 = time.monotonic()
        on = replace(s, best=read.text, _read=read, history=[])   # the step's version, the base of what it enables
        try:
            att = coder.code(plan, on, evaluate, cancel)
        except InfrastructureError:   # the place that evaluates is gone: the next round says so
            break
        f = Round(index, plan, plan.rewrite_base, batch=step.batch)
        f.take(att)
        judge(f, att)
        f.seconds = time.monotonic() - t0
        pairs.append((step, f))
        index += 1
    return pairs


def _follow_plan(step: Round, s: Situation) -> tuple[Plan, Candidate] | None:
    """The plan of the first idea `step`'s transformation enables whose pattern is in its rewrite,
    and that rewrite read."""
    if step.outcome != "not faster" or step.plan is None or step.plan.source != "offline" or step.candidate is None:
        return None
    t = TRANSFORMS.get(step.plan.idea)
    if t is None or not t.enables:
        return None
    c = step.read if step.read is not None and step.read.text == step.candidate else Candidate.of(step.candidate, s.kernel)
    # the step's own launch (a step may change it), else the best's hints
    ctx = context_from_spec(s.kernel, c.spec, s.context.headers) if c.spec is not None else s.context
    for idea in t.enables:
        nxt = TRANSFORMS[idea]
        rw = nxt.apply(c, ctx)
        if rw is not None:
            return Plan(idea, nxt.title, "; ".join(rw.changes), expected=nxt.expected, params=dict(rw.params),
                        why=f"on top of {step.plan.idea} (candidate {step.index}), which it needs: "
                            f"{step.plan.idea} was not faster alone", rewrite=rw,
                        rewrite_base=source_hash(step.candidate)), c
    return None


def adopt_steps(pairs: list[tuple[Round, Round]], winner: Round | None) -> None:
    """The step under an adopted follow-up is adopted with it (before it in the chain)."""
    for step, f in pairs:
        if f is winner and f.adopted and f.evaluation is not None:
            together = f.evaluation.speedup
            with_it = f"{together:.3f}× vs the original" if together is not None else "verified"
            step.outcome = "adopted"
            step.reason = (f"{step.reason}; kept as the step {f.plan.idea if f.plan else 'the next idea'} needs "
                           f"(candidate {f.index}, on top of it: {with_it})")
