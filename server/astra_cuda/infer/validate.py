"""Proposed only after it runs: each draft (best first) is run — the original kernel on the
draft's own test cases, through the worker as `astra check` runs it — and the first one under
which the kernel runs cleanly is proposed. A fault, an output left unwritten, an input written,
an out-of-bounds access or a constant output says the draft is wrong: the next alternative is
tried, and the evidence stays with the proposal. Pure: the run itself is injected (`Trial`), so
this module never starts a worker.
"""
from __future__ import annotations

import dataclasses
import re
import time
from dataclasses import dataclass
from typing import Callable, Iterator

from .draft import Proposal

MAX_TRIALS = 3      # drafts run before the best is proposed with what was seen
BUDGET_S = 90.0     # no further alternative is started this long after the first draft's run ended
                    # (that run pays for the compile, which may take minutes; the others reuse it)


@dataclass(frozen=True)
class Trial:
    """What running the kernel under one draft showed."""
    ran: bool            # it compiled and launched (False: nothing about the draft was learned)
    passed: bool
    evidence: str        # the first failure, or why it did not run, or what passed
    failed_checks: tuple[str, ...] = ()   # the gate's checks that failed ('poison', 'launch', ...)
    case: tuple[tuple[str, int], ...] = ()  # the sizes of the first failing case


def alternatives(first: Proposal, trial: Trial, redo: Callable[[dict[str, str]], Proposal | None]) -> list[Proposal]:
    """The drafts worth running after `first` failed as `trial` says: an output left partly
    unwritten or an input the kernel writes is taken as read-modify-write (`inout`); any of these
    failures, with the pointers the kernel tests against null passed as null; a constant output
    with the project's instance of the largest numbers where the numbers were guessed; a fault or
    an out-of-bounds access is tried with two sizes taken equal where only then the accesses fit
    a shape (a rotation over the first `rot_dim` of each `head_size` row), and, with a guessed
    grid, with one block per row, and with sizes that are whole tiles of the block (a kernel that
    handles no tail); a constant output with its one-value inputs (a bound) drawn far above the
    data; two runs that disagree are taken as such an access that did not fault. `redo(changes)`
    infers again with those decisions fixed (None when they change nothing)."""
    return list(_alternatives(first, trial, redo))


def _alternatives(first: Proposal, trial: Trial, redo: Callable[[dict[str, str]], Proposal | None],
                  last: Callable[[], Trial] | None = None) -> Iterator[Proposal]:
    """`alternatives`, each inferred only when asked for: a draft inference takes seconds (tens on
    a loaded machine), and the one after a draft that runs is never needed. `last`: the run of the
    alternative yielded last, where the caller ran it."""
    checks = set(trial.failed_checks)
    # two runs that disagree read memory the draft did not give the kernel (past a buffer, or
    # before it was written): an out-of-bounds access that did not fault
    if "determinism" in checks:
        checks |= {"sanitize"}
    # a constant output under the project's instance of guessed numbers (one expert: every top-k
    # index the same): its instance with the largest numbers (none chosen that way: no new draft)
    if "not_constant" in checks:
        alt = redo({"instance": "largest"})
        if alt is not None and alt.comment != first.comment:
            yield alt
    # a pointer the kernel tests against null, given a buffer of random values (a table of offsets,
    # flags, per-row counts), takes the path built for it and leaves its outputs unwritten or
    # reaches past them: the caller's usual call leaves it out (no such pointer: no new draft)
    if checks & {"launch", "sanitize", "poison", "not_constant", "inputs_unchanged"}:
        # with sizes taken equal (or one the product of two) where only then the accesses fit: the
        # table's offsets out, a count of tokens is batch times sequence (FasterTransformer's padding_offset)
        alt = redo({"optional": "null", "sizes": "equal"})
        if alt is not None and alt.comment != first.comment:
            yield alt
            # ... which then faults on a partial tile (exllamav2's reconstruct_kernel: its permutation
            # left out, its rows walked in whole steps of 32 past the last one): both
            # (two runs that disagree count as such a fault, as above: TGI's column_remap on an H200)
            if last is not None and set(last().failed_checks) & {"launch", "sanitize", "determinism"}:
                both = redo({"optional": "null", "sizes": "equal", "tiles": "block"})
                if both is not None and both.comment not in (first.comment, alt.comment):
                    yield both
    if checks & {"poison", "inputs_unchanged"}:
        alt = redo({"roles": "inout"})
        if alt is not None and alt.comment != first.comment:
            yield alt
    # a fault or an out-of-bounds access (on a GPU, a write past one buffer lands in the next and
    # shows as an input modified): sizes the shapes fit only equal
    if checks & {"launch", "sanitize", "inputs_unchanged"}:
        alt = redo({"sizes": "equal"})
        if alt is not None and alt.comment != first.comment:
            yield alt
    if checks & {"launch", "sanitize", "poison", "not_constant"}:
        alt = redo({"grid": "rows"})
        if alt is not None and alt.comment != first.comment:
            yield alt
    if checks & {"launch", "sanitize"}:   # a fault on a partial tile: sizes that are whole tiles of the block
        alt = redo({"tiles": "block"})
        if alt is not None and alt.comment != first.comment:
            yield alt
    if "not_constant" in checks:   # a one-value input (a bound) drawn like the data clamps every output
        alt = redo({"bounds": "large"})
        if alt is not None and alt.comment != first.comment:
            yield alt
    if "not_constant" in checks and trial.case:   # no work at the smallest sizes: test larger ones
        alt = redo({"drop": ",".join(f"{n}={v}" for n, v in trial.case)})
        if alt is not None and alt.comment != first.comment:
            yield alt


def first_that_runs(first: Proposal, trial: Callable[[Proposal], Trial],
                    redo: Callable[[dict[str, str]], Proposal | None], backend: str) -> Proposal:
    """The first draft under which the kernel runs cleanly; else the best-ranked one, with every
    run's evidence in its notes (what inference is least sure of first)."""
    if not first.valid:
        return first
    tried: list[tuple[Proposal, Trial]] = []
    queue = iter([first])
    start = time.monotonic()
    while len(tried) < MAX_TRIALS and (not tried or time.monotonic() - start < BUDGET_S):
        draft = next(queue, None)
        if draft is None:
            break
        if not draft.valid or any(draft.comment == p.comment for p, _ in tried):
            continue
        t = trial(draft)
        tried.append((draft, t))
        if len(tried) == 1:
            start = time.monotonic()
        if t.passed:
            break
        if not t.ran:   # it did not compile or cannot run here: no alternative runs differently
            break
        if len(tried) == 1:
            queue = _alternatives(draft, t, redo, lambda: tried[-1][1])
    chosen, result = next(((p, t) for p, t in tried if t.passed), tried[0])
    lines = []
    if result.passed:
        lines.append(f"ran before it was proposed ({backend} backend): {result.evidence}")
    elif not result.ran:
        lines.append(f"NOT RUN before it was proposed: {result.evidence}")
        why = unnamed_instantiation(result.evidence, chosen.notes)
        if why:
            lines.append(why)
    else:
        lines.append(f"RAN and FAILED under this spec ({backend} backend): {result.evidence} — the spec or "
                     f"the kernel is wrong; check the notes below first")
    for p, t in tried:
        if p is not chosen:
            lines.append(f"alternative tried and set aside: {t.evidence}")
    return dataclasses.replace(chosen, notes=lines + chosen.notes)


_GUESSED = re.compile(r"template parameter `(\w+)`: no launch gives it; took `?([^`—]+?)`?(?:,|$| \()")


def unnamed_instantiation(evidence: str, notes: list[str]) -> str | None:
    """Why Astra could not name an instantiation nvcc accepts, where that is why the draft did
    not compile: the template parameters no launch, explicit instantiation or default gave, and
    what each was taken as."""
    if "Astra's instantiation of" not in evidence:
        return None
    guessed = [m.groups() for n in notes for m in [_GUESSED.match(n)] if m]
    if not guessed:
        return ("Astra could not name an instantiation nvcc accepts although every template argument came "
                "from the program: set `instantiate` to arguments the project launches the kernel with")
    return ("Astra could not name an instantiation nvcc accepts: no launch, explicit instantiation or default "
            "gives " + ", ".join(f"`{n}` (taken as {v.strip()})" for n, v in guessed)
            + " — set `instantiate` to arguments the project launches the kernel with")
