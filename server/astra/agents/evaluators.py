"""Glue from the testing and profiling agents to the agents' Evaluation.

`to_check(verdict)` and `to_profile(profile)` convert the gate's Verdict and the profiler's
Profile; `local_evaluator(...)` builds an `evaluate(file_text)` that runs both in this process
on a given backend (the CPU backend isolates kernel execution itself). `astra.api` may build its
own on top of the worker pool; the conversions are the shared part.
"""
from __future__ import annotations

import time
from typing import Any, Callable

from .evaluation import NOT_MEASURED, Check, Evaluation, Profile, SizeTiming


def to_check(verdict: Any) -> Check:
    cases = getattr(getattr(verdict, "coverage", None), "cases", 0) or 0
    if verdict.passed:
        stage = "passed"
    elif verdict.status == "error" and getattr(verdict, "log", ""):
        stage = "compile"
    elif any(f.check in ("screen", "signature", "static") for f in verdict.failures):
        stage = "static"
    else:
        stage = "check" if verdict.status == "failed" else verdict.status
    return Check(verdict.passed, verdict.summary, verdict.visible_feedback(), cases if verdict.passed else 0, stage)


def to_profile(prof: Any) -> Profile | None:
    """From astra.profiler's Profile (duck-typed: per-size entries with reference and candidate
    times). None when nothing was measured."""
    if prof is None or not getattr(prof, "measured", True):
        return None
    sizes = []
    for s in getattr(prof, "sizes", []) or []:
        base = getattr(s, "reference_us", None) or getattr(s, "baseline_us", None)
        cand = getattr(s, "candidate_us", None) or getattr(s, "median_us", None)
        if base is None or cand is None:
            continue
        sizes.append(SizeTiming(dict(getattr(s, "sizes", {})), float(base), float(cand),
                                getattr(s, "copy_share", None) or getattr(s, "ceiling_share", None)))
    if not sizes:
        return None
    return Profile(tuple(sizes), getattr(prof, "bottleneck", None), getattr(prof, "registers", None),
                   getattr(prof, "occupancy", None), getattr(prof, "device", "") or "",
                   getattr(prof, "notes", "") if isinstance(getattr(prof, "notes", ""), str) else "")


def local_evaluator(path: str, kernel: str, spec: Any, backend: Any, reference_text: str, *,
                    quick: bool = False, profiler: Callable | None = None) -> Callable[[str], Evaluation]:
    """evaluate(file_text) against the kernel cut from `reference_text`, on `backend`.
    `profiler(reference_unit, candidate_unit, spec, backend)` -> profiler Profile, used only
    when the backend measures time and the candidate passed."""
    from .. import extract, gate
    from ..errors import AstraError

    ref_unit = extract.unit(reference_text, path, kernel, instantiate=spec.instantiate)

    def evaluate(text: str) -> Evaluation:
        t0 = time.perf_counter()
        try:
            cand = extract.unit(text, path, kernel, instantiate=spec.instantiate)
        except AstraError as e:
            return Evaluation(Check(False, f"the candidate cannot be cut out: {e.message}", e.message, 0, "static"))
        verdict = gate.check(ref_unit, cand, spec, backend, quick=quick)
        check = to_check(verdict)
        prof = None
        note = ""
        if check.passed and getattr(backend, "measures_time", False) and profiler is not None:
            prof = to_profile(profiler(ref_unit, cand, spec, backend))
        if prof is None:
            note = NOT_MEASURED if not getattr(backend, "measures_time", False) else "not profiled"
        return Evaluation(check, prof, note, seconds=time.perf_counter() - t0)

    return evaluate
