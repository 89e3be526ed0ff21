"""The only entry point of the worker process (`astra_cuda.execution.worker`): every job it runs is here.

Each job is a `Job[T]` (`astra_cuda.execution.worker.Job`): a typed, picklable frozen dataclass whose `run()`
is called in the worker and returns a picklable `T`. The parent builds the job and calls
`worker.run(CheckJob(...))` (or an executor's `run`), typed as `T`; this module is the only place
that picks a backend — the gate, the profiler and the evaluator receive one. Backends are created
once per worker process and reused, so compiled modules and the GPU context stay warm between
jobs; a job that crashes the process takes only the worker with it.

Heavy modules (CuPy, the gate, the profiler) are imported inside `run`: the parent imports
this module for the job types only.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Literal

from ..contract import DEFAULT_ARCH
from ..compile.extract import CompileUnit
from ..compile.project import ProjectContext
from ..model.file_model import SourceModel
from ..model.spec import Spec
from .worker import Job

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..evaluation import Evaluation
    from ..gate import Verdict
    from ..profiler import Profile
    from ..compile.static import StaticResult

__all__ = ["BackendStatus", "BackendsJob", "CheckJob", "DeviceJob", "EvaluateJob", "FidelityJob", "GpuFactsJob",
           "ProfileJob", "RunsKernels", "StaticJob", "backend", "rounding_backend"]

RunsKernels = Literal["gpu", "cpu"]


# ---- payloads -----------------------------------------------------------------------------

@dataclass(frozen=True)
class BackendStatus:
    """Whether a backend can run kernels here, and why not."""

    available: bool
    reason: str = ""
    fix: str = ""     # one command that makes it available (the GPU: the right CuPy for the driver)
    arch: str = ""    # the device's architecture when available ('sm_90')
    setup_needed: bool = False   # the hardware is there; something must be installed or updated


@dataclass(frozen=True)
class BackendsJob(Job[dict[str, BackendStatus]]):
    """Which backends can run here, and why not."""

    def run(self) -> dict[str, BackendStatus]:
        out = {}
        try:
            from ..backends.gpu import GpuBackend
            ok, why = GpuBackend.probe()
        except Exception as e:  # noqa: BLE001 - any import/driver problem means "no GPU here"
            ok, why = False, f"CuPy/GPU unavailable ({e.__class__.__name__}: {e})"
        if ok:
            info = backend("gpu").device_info()
            out["gpu"] = BackendStatus(True, why, arch=f"sm_{info['major']}{info['minor']}")
        else:
            out["gpu"] = _gpu_unavailable(why)
        cxx = shutil.which("g++") or shutil.which("clang++")
        from ..compile import sandbox
        why = "" if cxx else "no C++ compiler (g++ or clang++) on PATH"
        why = why or sandbox.unavailable_reason() or ""
        out["cpu"] = BackendStatus(not why, why)
        return out


def _owner(backend: str, path: str) -> str | None:
    """The document a job runs kernel code of inside its worker (`Job.owner`): on the GPU its
    launches share the worker's CUDA context, so the pool keeps that worker to the document; on
    the CPU every launch runs in a fresh sandboxed process of its own (backends/cpu/isolation)."""
    return path if backend == "gpu" else None


def _gpu_unavailable(why: str) -> BackendStatus:
    """No usable GPU backend: when a GPU is visible, what is wrong and the one step that fixes it."""
    from .. import gpu_setup
    advice = gpu_setup.advise(gpu_setup.driver(), gpu_setup.installed_cupy(), why)
    if advice is None:
        return BackendStatus(False, why)
    return BackendStatus(False, advice.problem, fix=advice.fix, setup_needed=True)


@dataclass(frozen=True)
class StaticJob(Job["list[StaticResult]"]):
    """nvcc on the file, or NVRTC on each unit where no toolkit exists (no GPU needed): each
    unit's diagnostics at the user's lines and its resources."""

    units: tuple[CompileUnit, ...]
    arch: str = DEFAULT_ARCH

    def run(self) -> list[StaticResult]:
        from ..compile import static
        return static.compile_units(self.units, arch=self.arch)


@dataclass(frozen=True)
class CheckJob(Job["Verdict"]):
    """The gate on one candidate. `reference` None: no pinned baseline yet (self-consistency
    only). `reference_spec` launches the reference when a rewrite changed the launch."""

    backend: RunsKernels
    reference: CompileUnit | None
    candidate: CompileUnit
    spec: Spec
    reference_spec: Spec | None = None
    quick: bool = False
    seed: int | None = None          # reproduce an earlier verdict (its nonce)
    sanitizer: bool | None = None    # False: skip compute-sanitizer on the GPU
    bounds: bool = False             # quick, but with the address-sanitizer build (inference's trial runs)

    @property
    def owner(self) -> str | None:
        return _owner(self.backend, self.candidate.path)

    def run(self) -> Verdict:
        from .. import gate
        return gate.check(self.reference, self.candidate, self.spec, backend(self.backend), quick=self.quick,
                          seed=self.seed, sanitizer=self.sanitizer, reference_spec=self.reference_spec,
                          bounds=self.bounds, rounding=rounding_backend(self.backend))


@dataclass(frozen=True)
class ProfileJob(Job["Profile"]):
    """The profiler on one candidate; backend 'static' runs no kernel (resources only)."""

    backend: Literal["gpu", "cpu", "static"]
    reference: CompileUnit | None
    candidate: CompileUnit
    spec: Spec
    reference_spec: Spec | None = None
    arch: str = DEFAULT_ARCH
    ncu: bool = False
    sizes: Literal["ladder", "bench"] = "ladder"   # the size ladder, or the spec's bench sizes alone

    @property
    def owner(self) -> str | None:
        return _owner(self.backend, self.candidate.path)

    def run(self) -> Profile:
        from .. import profiler
        b = backend(self.backend) if self.backend != "static" else None
        return profiler.profile(self.reference, self.candidate, self.spec, b, ncu=self.ncu, arch=self.arch,
                                reference_spec=self.reference_spec, sizes=self.sizes)


@dataclass(frozen=True)
class EvaluateJob(Job["Evaluation"]):
    """One candidate file text for the orchestrator: the gate against the reference cut from
    `reference_text`, then the profiler. The evaluator — with its reference — is kept per worker,
    so later rounds reuse its compiled modules."""

    backend: RunsKernels
    path: str
    kernel: str
    spec: Spec
    reference_text: str
    reference_kernel: str
    text: str = ""
    arch: str = DEFAULT_ARCH
    quick: bool = False
    context: ProjectContext | None = None   # include paths, defines, standard of the project
    sizes: Literal["ladder", "bench"] = "ladder"   # where candidates are timed (astra_cuda.model.ladder)
    # the spec that launches `text`, resolved by the caller (`model.launch_change.launch`);
    # None: resolved here, from the text
    launch: Spec | None = None
    # `text`'s source model as the caller read it (`Candidate.model`: plain values, pickled with
    # the job), so the worker cuts its unit without parsing the candidate again; None: parsed here
    model: SourceModel | None = None
    with_original: bool = False   # the original not gated alone in this run: checked in the same gate (a rerun's)
    # the final verdict (agents.final_gate): the whole file compiled by nvcc, never the search's fast path
    final: bool = False

    @property
    def owner(self) -> str | None:
        return _owner(self.backend, self.path)

    def run(self) -> Evaluation:
        from .evaluator import local_evaluator
        key = (self.backend, self.path, self.kernel, self.reference_kernel, hash(self.reference_text), self.quick,
               self.context, self.sizes)
        evaluate = _evaluators.get(key)
        if evaluate is None:
            _evaluators.clear()  # one kernel at a time per worker keeps memory bounded
            be = backend(self.backend)
            # The search's fast path is the GPU's (issue 24: a candidate's latency there is its
            # compile). On the CPU backend a candidate's host build and runs dominate, and the
            # proof's extra whole-file compile of a torch extension costs minutes on two cores.
            evaluate = _evaluators[key] = local_evaluator(
                self.path, self.kernel, self.spec, be, self.reference_text, quick=self.quick,
                arch=self.arch, reference_kernel=self.reference_kernel, context=self.context,
                rounding=rounding_backend(self.backend), sizes=self.sizes, search=be.name == "gpu")
        return evaluate(self.text, self.launch, self.with_original, self.final, self.model)


_evaluators: dict[tuple[Any, ...], Callable[[str, Spec | None, bool, bool, SourceModel | None], Evaluation]] = {}


@dataclass(frozen=True)
class GpuFactsJob(Job[str]):
    """One line of facts about the GPU for the planning agent."""

    def run(self) -> str:
        info = backend("gpu").device_info()
        return ", ".join(f"{k}: {v}" for k, v in info.items())


@dataclass(frozen=True)
class DeviceJob(Job[dict[str, Any]]):
    """The GPU's properties (name, SMs, memory...): what a result records as the GPU that ran it."""

    def run(self) -> dict[str, Any]:
        return backend("gpu").device_info()


@dataclass(frozen=True)
class FidelityJob(Job[dict[str, Any]]):
    """The CPU-vs-GPU numerics comparison (`backends.cpu.fidelity`) in a worker process (it creates
    the CUDA context); `npz`: a saved CPU run."""

    npz: str | None = None

    def run(self) -> dict[str, Any]:
        from pathlib import Path

        from ..backends.cpu import fidelity
        return fidelity.fidelity(Path(self.npz) if self.npz else None)


# ---- the backends of this worker ----------------------------------------------------------

_backends: dict[str, Backend] = {}


def backend(name: RunsKernels) -> Backend:
    if name not in _backends:
        if name == "gpu":
            from ..backends.gpu import GpuBackend
            _backends[name] = GpuBackend()
        elif name == "cpu":
            from ..backends.cpu import CpuBackend
            _backends[name] = CpuBackend()
        else:
            raise ValueError(f"unknown backend {name!r}")
    return _backends[name]


def rounding_backend(name: RunsKernels) -> Backend | None:
    """The backend that measures the reference's own rounding error for a check on `name` (the
    gate's rounding allowance): None on the CPU (it does so itself); on the GPU the CPU backend
    when it can run here, else None (the tolerance alone)."""
    if name != "gpu":
        return None
    if "cpu" not in _backends:
        from ..compile import sandbox
        if not (shutil.which("g++") or shutil.which("clang++")) or sandbox.unavailable_reason():
            return None
    try:
        return backend("cpu")
    except Exception:  # noqa: BLE001 - no CPU backend here: the tolerance alone
        return None
