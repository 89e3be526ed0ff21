"""compute-sanitizer on the GPU: memcheck (out-of-bounds and misaligned accesses) and racecheck
(shared-memory hazards) on small cases, with exact-size allocations.

Each tool runs in its own worker process started under `compute-sanitizer --tool TOOL`
(`astra_cuda.backends.gpu_sanitizer.sanitizer_pool`); the GPU backend turns every report into a LaunchError,
which comes back here as a Failure with the case that triggered it.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Sequence

from ..backends.base import Backend, BackendUnavailable, CompileError, LaunchError
from ..compile.extract import CompileUnit
from ..model.spec import Spec
from ..execution.worker import Job
from . import suite as suites
from .checks import Compiled, arg_types, launch_of, prepare
from .verdict import CaseInfo, Failure

TOOLS = ("memcheck", "racecheck")


def small_cases(spec: Spec, limit: int = 2) -> list[dict[str, int]]:
    """The smallest spec case and the smallest edge size that is not a multiple of 32."""
    cases = sorted(spec.cases(), key=spec.elements)[:1]
    odd = [e for e in suites.edge_sizes(spec, 1 << 22) if any(v % 32 for v in e.values()) and
           any(v > 1 for v in e.values())]
    cases += sorted(odd, key=spec.elements)[:1]
    return cases[:limit]


@dataclass(frozen=True)
class Report:
    """One finding of a sanitizer worker: the case that triggered it and what the tool said."""

    sizes: dict[str, int]
    message: str


@dataclass(frozen=True)
class SanitizeJob(Job[list[Report]]):
    """compute-sanitizer's findings on the unit, in a worker started under it by the backend's
    `sanitizer_pool`. `backend` is the class of the backend the gate was given (no choice is made
    here): made fresh in that worker, it uses exact-size allocations, so small out-of-bounds
    accesses are not hidden by a pool."""

    unit: CompileUnit
    spec: Spec
    sizes: tuple[dict[str, int], ...]
    seed: int
    backend: type[Backend]

    @property
    def owner(self) -> str | None:
        """Its launches run in the sanitizer worker's own CUDA context: that worker is this document's."""
        return self.unit.path

    def run(self) -> list[Report]:
        return run_cases(self, self.backend())


def compute_sanitizer(candidate: CompileUnit, spec: Spec, backend: Backend, *, tools: Sequence[str] = TOOLS,
                      sizes: Sequence[dict[str, int]] | None = None, seed: int = 1,
                      timeout: float = 600.0, cancel: threading.Event | None = None) -> list[Failure] | None:
    """Run the candidate unit on small cases under each sanitizer tool (`backend` has
    caps.compute_sanitizer). Returns the failures (empty: clean), or None when compute-sanitizer
    or a GPU is not available here."""
    try:
        pools = [(tool, backend.sanitizer_pool(tool)) for tool in tools]
    except BackendUnavailable:
        return None
    job = SanitizeJob(candidate, spec, tuple(sizes or small_cases(spec)), seed, type(backend))
    failures: list[Failure] = []
    for tool, pool in pools:
        try:
            found = pool.run(job, timeout=timeout, cancel=cancel)
        except BackendUnavailable:
            return None
        for item in found:
            failures.append(Failure("compute_sanitizer", f"compute-sanitizer {tool}: {item.message}",
                                    CaseInfo(item.sizes, "spec", seed, True, "sanitize")))
    return failures


def run_cases(job: SanitizeJob, backend: Backend) -> list[Report]:
    """Inside the sanitizer worker: compile, launch each case once on fresh inputs."""
    unit, spec = job.unit, job.spec
    try:
        mod = backend.compile_unit(unit)
    except CompileError as e:
        return [Report({}, f"does not compile: {e}")]
    kernel = Compiled(mod, unit.name_expression, "candidate")
    try:
        ctypes = arg_types(spec, backend, kernel, unit.param_types)
    except LaunchError as e:
        return [Report({}, str(e))]
    found = []
    for case in job.sizes:
        host = suites.inputs(spec, case, suites.SPEC_DIST, job.seed)
        run = prepare(spec, backend, case, host, ctypes, 0xFF)
        try:
            backend.launch(kernel.module, kernel.name, launch_of(spec, case), run.args)
        except LaunchError as e:
            found.append(Report(dict(case), str(e)))
            break  # the context may be gone after a fault
    return found
