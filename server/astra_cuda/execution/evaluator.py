"""The evaluate glue, beside `astra_cuda.execution.jobs` on the worker side: the testing agent (astra_cuda.gate) and
the profiling agent (astra_cuda.profiler) turned into the agents' Evaluation (astra_cuda.evaluation).

`to_check(verdict)` and `to_evaluation(check, profile)` are the conversions; `local_evaluator`
builds an `evaluate(file_text)` that runs both in this process on a given backend (the CPU
backend isolates kernel execution itself; on the GPU only NVRTC-compiled device code runs).
`astra_cuda.execution.jobs.EvaluateJob` keeps one per worker; `astra_cuda.api` sends candidates there.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Callable

from ..compile import extract, fastpath
from .. import gate, profiler
from ..model import launch_change, source
from ..backends.base import Backend
from ..contract import DEFAULT_ARCH
from ..errors import AstraError
from ..evaluation import NOT_MEASURED, Check, Evaluation, ProfileSummary, SizeTiming, Stage
from ..gate import Verdict
from ..compile.project import ProjectContext
from ..model.spec import Spec


def to_check(verdict: Verdict) -> Check:
    """From astra_cuda.gate's Verdict: what the agents may see (held-out failures only as counts)."""
    cases = verdict.coverage.cases if verdict.passed else 0
    stage: Stage
    if verdict.passed:
        stage = "passed"
    elif verdict.status == "error" and verdict.log:
        stage = "compile"
    elif verdict.status == "failed" and all(f.check in ("screen", "signature") for f in verdict.failures):
        stage = "static"
    else:
        stage = "unsupported" if verdict.status == "unsupported" else "failed" if verdict.status == "failed" else "error"
    return Check(verdict.passed, verdict.summary, verdict.visible_feedback(), cases, stage,
                 tuple(verdict.coverage.matrix))


def to_evaluation(check: Check, prof: profiler.Profile | None, seconds: float = 0.0) -> Evaluation:
    """Combine a passed check with astra_cuda.profiler's Profile. Timed runs whose outputs were wrong,
    or implausible timings, turn the evaluation into a failure (the gate's re-validation after
    timing is part of correctness)."""
    registers = (prof.resources or {}).get("registers") if prof is not None else None
    if prof is None or not prof.measured:
        note = NOT_MEASURED if prof is None else (prof.note or NOT_MEASURED)
        if prof is not None and prof.errors and not prof.note:
            note = f"not profiled: {prof.errors[0]}"
        return Evaluation(check, None, note, registers, seconds)
    wrong = [f"{s.label}: {msg}" for s in prof.sizes for msg in s.output_failures]
    if wrong:
        return Evaluation(Check(False, "the outputs of the timed launches were wrong",
                                "outputs written during timing were wrong: " + "; ".join(wrong[:3]), 0, "check"),
                          None, "", registers, seconds)
    odd = [f"{s.label}: {msg}" for s in prof.sizes for msg in s.implausible]
    if odd:
        # the first reason goes into the summary: a run's record and the editor show the summary alone
        return Evaluation(Check(False, f"implausible timing (flagged for audit, not accepted): {odd[0]}",
                                "; ".join(odd[:3]), 0, "check"), None, "", registers, seconds)
    sizes = tuple(SizeTiming(dict(s.sizes), s.reference.median_us, s.candidate.median_us, s.candidate.ceiling_share,
                             s.role, max(s.reference.step_us, s.candidate.step_us))
                  for s in prof.sizes if s.reference is not None)
    if not sizes:
        return Evaluation(check, None, "not profiled: " + (prof.errors[0] if prof.errors else "no timed size"),
                          registers, seconds)
    # The kernel's bottleneck: the class of the largest size.
    largest = max(prof.bench_sizes, key=lambda s: s.bytes_moved)
    bottleneck = (largest.bottleneck or "").split("-")[0] or None
    occ = (prof.occupancy or {}).get("theoretical")
    notes = largest.bottleneck_why or ""
    model_notes = list(dict.fromkeys(n for s in prof.sizes for n in s.notes))  # the byte model refuted
    if model_notes:
        notes += ("\n" if notes else "") + model_notes[0]
    if prof.ncu:
        notes += ("\n" if notes else "") + "Nsight Compute: " + ", ".join(f"{k}={v}" for k, v in list(prof.ncu.items())[:8])
    return Evaluation(check, ProfileSummary(sizes, bottleneck, registers, occ, prof.device or "", notes), "", registers,
                      seconds, reference=_reference_summary(prof))


def _reference_summary(prof: profiler.Profile) -> ProfileSummary | None:
    """The reference's side of the timing, as its own baseline evaluation would read it: its time
    on both sides at each size, its share of the copy ceiling, the class of its largest size."""
    timed = [s for s in prof.sizes if s.reference is not None]
    if not timed:
        return None
    sizes = tuple(SizeTiming(dict(s.sizes), s.reference.median_us, s.reference.median_us,  # type: ignore[union-attr]
                             s.reference.ceiling_share, s.role, s.reference.step_us)  # type: ignore[union-attr]
                  for s in timed)
    largest = max(timed, key=lambda s: s.bytes_moved)
    if largest.bottleneck == "unknown":   # the byte model refuted: no class for either
        bottleneck = "unknown"
    else:
        bottleneck = profiler.classify(largest.reference, largest.bytes_moved, largest.flops)[0]  # type: ignore[arg-type]
    return ProfileSummary(sizes, bottleneck.split("-")[0] or None, device=prof.device or "")


def local_evaluator(path: str, kernel: str, spec: Spec, backend: Backend, reference_text: str, *,
                    quick: bool = False, arch: str = DEFAULT_ARCH, reference_kernel: str | None = None,
                    context: ProjectContext | None = None,
                    rounding: Backend | None = None, sizes: str = "ladder",
                    search: bool = False) -> Callable[..., Evaluation]:
    """evaluate(file_text, launch=None, with_original=False, final=False, model=None): the gate against the kernel cut from `reference_text`
    (the kernel itself, or the spec's `reference` kernel), then (if it passed) the profiler, on
    `backend`, timed at the size ladder (`sizes="ladder"`) or the bench sizes alone (`"bench"`).
    `launch`: the spec that launches the candidate, as its caller resolved it (`api` does, from
    the candidate it read: `launch_change.launch`); None: resolved here. `with_original`: the
    reference has not passed the gate on its own in this run (a rerun's original): the same gate
    checks it too, in the candidate's suite (`gate.check`'s `verify_reference`), before the two are
    timed side by side. Each text is parsed once, the reference once per evaluator.
    `rounding`: see `gate.check`.
    `search`: the optimizer's search — a candidate that only rewrites the kernel (and adds helpers
    of new names) is compiled from the reference's proven cut by NVRTC or nvcc (`compile.fastpath`), both
    sides alike; its Evaluation says so (`search_cut`). `evaluate(..., final=True)` and every
    candidate the proof does not cover compile the whole file, as a final verdict must.
    `model`: the text's source model as the caller read it (`Candidate.model`, sent whole with the
    job): the candidate is then not parsed here at all; None, or a model of another text: parsed."""
    ref_model = source.parse(reference_text)
    ref_unit = extract.spec_unit(ref_model, path, reference_kernel or kernel, spec, context=context)
    ref_spec = launch_change.reference_spec(spec, ref_model, reference_kernel or kernel)
    proof: list[fastpath.Proof] = []   # made at the first candidate, once per reference

    def fast_unit(model: source.SourceModel) -> extract.CompileUnit | None:
        if not search or (reference_kernel or kernel) != kernel:
            return None
        if not proof:
            proof.append(fastpath.prove(ref_unit, arch))
        unit, _why = fastpath.search_unit(ref_unit, proof[0], ref_model, model, kernel)
        return unit

    def evaluate(text: str, launch: Spec | None = None, with_original: bool = False,
                 final: bool = False, model: source.SourceModel | None = None) -> Evaluation:
        t0 = time.perf_counter()
        if model is None or model.text != text:   # the caller's read of this very text, else ours
            model = source.parse(text)
        cand = None if final or with_original else fast_unit(model)
        if cand is not None:
            e, built = judged(t0, text, model, cand, fastpath.reference_unit(ref_unit, proof[0]), launch,
                              with_original)
            if built:   # NVRTC may refuse what nvcc takes: such a candidate goes the whole-file way
                return dataclasses.replace(e, search_cut=cand.search_cut)
        try:
            cand = extract.spec_unit(model, path, kernel, spec, context=context)
        except AstraError as e:
            return Evaluation(Check(False, f"the candidate cannot be cut out: {e.message}", e.message, 0,
                                    stage="static"))
        return judged(t0, text, model, cand, ref_unit, launch, with_original)[0]

    def judged(t0: float, text: str, model: source.SourceModel, cand: extract.CompileUnit,
               ref: extract.CompileUnit, launch: Spec | None, with_original: bool) -> tuple[Evaluation, bool]:
        """The evaluation, and whether both units compiled."""
        cand_spec, problem = (launch, "") if launch is not None else \
            launch_change.candidate_spec(ref_spec, ref_model, model, kernel)
        if problem:
            return Evaluation(Check(False, problem, problem, 0, "static"), seconds=time.perf_counter() - t0), True
        verdict = gate.check(ref, cand, cand_spec, backend, quick=quick, reference_spec=ref_spec,
                             rounding=rounding, verify_reference=with_original)
        check, steps = to_check(verdict), dict(verdict.timings)
        gate_s = time.perf_counter() - t0
        built = verdict.status != "error" and not any(f.check == "compile" for f in verdict.failures)
        if not check.passed:
            return Evaluation(check, seconds=gate_s, gate_seconds=gate_s, gate_timings=steps), built
        prof = profiler.profile(ref, cand, cand_spec, backend, arch=arch, reference_spec=ref_spec, sizes=sizes,
                                rounding=rounding)
        return dataclasses.replace(to_evaluation(check, prof, time.perf_counter() - t0), gate_seconds=gate_s,
                                   gate_timings=steps), built

    return evaluate
