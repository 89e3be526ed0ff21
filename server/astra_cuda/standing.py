"""What is known about a kernel, in words that claim only what was measured: the one vocabulary
the editor's lens, hover and status, and the report, share.

A kernel's check stands at one of these levels, weakest first:

- `unknown`: nothing ran yet (no spec, a spec with errors, or not checked yet);
- `compiled`: the compiler accepted it; no kernel code ran (untrusted folder, no backend that
  runs kernels here, checks turned off);
- `failed`: a check ran and failed, or could not run;
- `self_consistent`: it ran cleanly on N cases but there was nothing to compare it with;
- `matches`: it matches the reference on N cases.

A rewrite is either `faster` (X× measured on GPU G, verified against the original) or
`unmeasured` (verified correct, speed unknown: offered only behind an explicit command).
Pure: reads the core's result objects by their attributes, imports none of them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from astra_cuda.agents.result import OptimizeResult
    from astra_cuda.gate.verdict import Verdict

LEVELS = ("unknown", "compiled", "failed", "self_consistent", "matches")


@dataclass(frozen=True)
class Standing:
    level: str      # one of LEVELS
    short: str      # a lens title: a few words
    detail: str     # a sentence for the hover and the report

    @property
    def ran(self) -> bool:
        return self.level in ("self_consistent", "matches")


def _cases(n: int) -> str:
    return f"{n} case{'s' if n != 1 else ''}"


def of_check(verdict: Verdict | None, *, has_spec: bool = True, spec_ok: bool = True, error: str = "",
             compiled: bool = False, why_not_run: str = "") -> Standing:
    """The standing of a kernel's latest check. `compiled`: the static check found no error in
    it; `why_not_run`: why no kernel code ran (an untrusted folder, checks off, no backend)."""
    if not has_spec:
        return Standing("unknown", "no harness spec — not checked",
                        "Not checked: without a harness spec Astra cannot run the kernel. Add one with "
                        "**Add harness spec**.")
    if not spec_ok:
        return Standing("unknown", "spec has errors — not checked",
                        "Not checked: the harness spec has errors (see the diagnostics in the comment).")
    if verdict is None:
        if error:
            return Standing("failed", "✗ check could not run", f"The check could not run: {error}")
        if compiled:
            why = f" ({why_not_run})" if why_not_run else ""
            return Standing("compiled", "compiled only — not run",
                            f"Compiled only: the compiler accepts it, but no kernel code ran{why}.")
        return Standing("unknown", "not checked yet", "Not checked yet: save the file or run **Astra: Check file**.")
    n, where = verdict.coverage.cases, verdict.backend
    on = f", ran {verdict.ran_on}" if verdict.ran_on else ""
    if verdict.status == "passed" and verdict.compared:
        return Standing("matches", f"✓ matches the reference on {_cases(n)} ({where})",
                        f"Matches the reference on {_cases(n)} ({where} backend{on}).")
    if verdict.status == "passed":
        return Standing("self_consistent", f"✓ self-consistent on {_cases(n)} (no reference)",
                        f"Ran cleanly on {_cases(n)} ({where} backend{on}), but there was no reference to "
                        f"compare with: this says nothing about correctness yet. Pin a known-good version or "
                        f"name a `reference` kernel.")
    if verdict.status == "unsupported":
        return Standing("compiled", "compiled only — needs a GPU to run",
                        f"Compiled only: this kernel needs a GPU to run ({where} backend).")
    if verdict.status == "error":
        return Standing("failed", "✗ check could not run", "The check could not run.")
    reference = "the reference" if verdict.compared else "its own rules"
    return Standing("failed", f"✗ differs from {reference} ({where})" if verdict.compared
                    else f"✗ check failed ({where})", f"Failed the check against {reference} ({where} backend{on}).")


@dataclass(frozen=True)
class RewriteStanding:
    measured: bool
    short: str      # '1.42× faster on NVIDIA H100, matches on 14 cases'
    detail: str


def of_rewrite(result: OptimizeResult) -> RewriteStanding:
    """A finished optimization's best rewrite: faster by a measured factor on a named GPU, or
    verified correct with its speed unknown."""
    ev = result.best_eval
    n = ev.check.cases
    speed = result.speedup
    if result.measured and speed is not None:
        gpu = (ev.profile.device if ev.profile is not None else "") or ev.gpu or "the GPU"
        return RewriteStanding(True, f"{speed:.2f}× faster on {gpu}, matches the original on {_cases(n)}",
                               f"{speed:.2f}× faster (geometric mean over the timed sizes) measured on {gpu}; "
                               f"matches the original on {_cases(n)}.")
    return RewriteStanding(False, f"verified correct on {_cases(n)}, speed unknown — measure on a GPU",
                           f"Matches the original on {_cases(n)}, but its speed was not measured "
                           f"({ev.speed_note or 'no GPU'}): profile it on a GPU before you take it.")


def summary(levels: list[str], failing: int = 0) -> tuple[str, str]:
    """(status-bar words, tooltip) for the kernels of one file. Never '0 verified'."""
    if failing:
        return f"{failing} failing", f"{failing} kernel(s) failed the check or could not be checked"
    matches = levels.count("matches")
    own = levels.count("self_consistent")
    compiled = levels.count("compiled")
    parts = []
    if matches:
        parts.append(f"{matches} match{'es' if matches == 1 else ''} reference")
    if own:
        parts.append(f"{own} self-consistent")
    if compiled:
        parts.append(f"{compiled} compiled only")
    if not parts:
        return "not checked", "No kernel of this file has been checked yet"
    tips = {"matches": "matched their reference", "self_consistent": "ran cleanly with no reference to compare with",
            "compiled": "compiled but did not run"}
    tip = "; ".join(f"{levels.count(k)} {v}" for k, v in tips.items() if levels.count(k))
    return " · ".join(parts), f"Kernels of this file: {tip}"
