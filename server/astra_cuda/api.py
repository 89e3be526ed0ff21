"""The core's one facade: what the CLI and the language server call.

Pure orchestration on a document snapshot (`snapshot(text, path)` or `open_file(path)`: parsed
once, kernels and specs loaded): cut compilation units and send the work that runs kernel code
(compile, check, time) to a worker process where `astra_cuda.execution.jobs` drives the gate, the profiler and
the backends: through the executor of the caller's session (`astra_cuda.session.Session`: this machine's
workers, or a Ray cluster), which also says where each job ran; the session also says whether kernel code may
run at all (Workspace Trust). Nothing here holds a CUDA context or runs user code.
Long because it is the one facade: every verb the CLI and the server share is here, each a short
function over the snapshot, so both front ends look in one place.
"""
from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .execution import jobs
from . import config, files, infer, workspace
from .model import launch_change
from .compile import extract, project
from . import snapshot as snapshot_mod
from .model import spec as spec_mod
from .contract import DEFAULT_ARCH
from .diagnostics import Diagnostic
from .errors import AstraError, NoSuchKernel
from .progress import Progress, ProgressEvent
from .compile.project import ProjectContext
from .session import Session
from .snapshot import KernelInfo, Snapshot

if TYPE_CHECKING:
    from .agents import LLMConfig, OptimizeResult
    from .agents.runlog import RunInfo
    from .backends.base import ResourceUsage
    from .evaluation import Evaluation
    from .gate import Verdict
    from .profiler import Profile


# Worker time limits (seconds). A kernel that runs longer than this is treated as hung.
CHECK_TIMEOUT = 600.0
PROFILE_TIMEOUT = 600.0
STATIC_TIMEOUT = 15.0  # beyond the compiler's own limit (confine.compiler_seconds(): 45 s, 240 s for torch)


def read(path: str) -> str:
    return files.read_source(path)


def project_context(path: str, *, cli: ProjectContext | None = None, settings: ProjectContext | None = None,
                    compile_commands: str | None = None) -> ProjectContext:
    """Include paths, macros and standard for `path`: the command line's, then the editor
    settings', then the project's configuration files (astra.toml / [tool.astra], compile_flags.txt,
    .clangd), then the configured or nearest compile_commands.json up to the workspace root."""
    cfg = project_config(path)
    return project.resolve(path, cli=cli, settings=settings, compile_commands=compile_commands or cfg.compile_commands(),
                           root=str(workspace.root_for(path)), files=tuple(cfg.contexts(path)))


def project_config(path: str) -> config.ProjectConfig:
    """The project's configuration for the source file `path` (astra_cuda.config)."""
    return config.load(path)


def snapshot(text: str, path: str, context: ProjectContext | None = None) -> Snapshot:
    """The document as the facade takes it: parsed once, with its kernels and their specs.
    `context`: the project context its units are cut with (None: discovered from `path` when
    a unit is first needed)."""
    return snapshot_mod.of(text, path, context)


def open_file(path: str, context: ProjectContext | None = None) -> Snapshot:
    """Read `path` safely (`files.read_source`) and take its snapshot."""
    return snapshot(read(path), path, context)


def _with_context(snap: Snapshot) -> Snapshot:
    return snap if snap.context is not None else snap.with_context(project_context(snap.path))


# ---- kernels ------------------------------------------------------------------------------

def kernels(snap: Snapshot, *, require_some: bool = True) -> list[KernelInfo]:
    if not snap.kernels and require_some:
        raise AstraError(f"{snap.path}: no __global__ kernels found" +
                         (" (the file does not parse as CUDA C++)" if snap.model.syntax_errors else ""))
    return list(snap.kernels)


def _kernel_info(snap: Snapshot, name: str) -> KernelInfo:
    kernels(snap)  # a file without kernels says so
    return snap.kernel(name)


def _selected(snap: Snapshot, name: str | None, *, need_spec: bool = True) -> list[KernelInfo]:
    infos = [_kernel_info(snap, name)] if name else kernels(snap)
    for k in infos:
        if k.spec_errors:
            raise spec_mod.SpecErrors(list(k.spec_errors))
    if need_spec:
        if name and infos[0].spec is None:
            raise AstraError(f"kernel {name!r} has no harness spec (a /* @astra ... */ comment above it); "
                             f"`astra spec {snap.path} --kernel {name}` proposes one")
        with_spec = [k for k in infos if k.spec is not None]
        if not with_spec:
            raise AstraError(f"{snap.path}: no kernel has a harness spec; `astra spec {snap.path} --kernel "
                             f"{infos[0].name}` proposes one")
        infos = with_spec
    return infos


TRIAL_TIMEOUT = 75.0    # one run of the kernel under a draft spec (compile included)


def _trial_timeout(unit: extract.CompileUnit) -> float:
    """A PyTorch extension's compile alone may take minutes on a loaded machine (nvcc reads all of
    torch's headers): its trial gets that compile's own limit on top (later drafts reuse it)."""
    from .compile import confine, nvcc
    flags = nvcc.project_flags(unit.context, unit.file_text or unit.source, unit.path)
    return TRIAL_TIMEOUT + (confine.compiler_seconds(True) if confine.heavy(flags) else 0.0)


def infer_spec(snap: Snapshot, kernel: str, *, run: bool = True, backend: str = "auto",
               cancel: threading.Event | None = None, session: Session | None = None) -> infer.Proposal:
    """A proposed spec for `kernel`. With `run` (and a backend that runs kernels here), the
    original kernel is run under each draft before one is proposed (`infer.validate`)."""
    k = snap.model.kernel(kernel)
    if k is None:
        raise NoSuchKernel(f"no __global__ kernel named {kernel!r} in {snap.path} "
                           f"(kernels: {', '.join(x.name for x in snap.model.kernels) or 'none'})")
    snap = _with_context(snap)

    def draft(decide: dict[str, str] | None = None) -> infer.Proposal:
        return infer.infer(k, snap.model, path=snap.path, context=snap.context, decide=decide)
    first = draft()
    session = session or Session()
    chosen = session.resolve_backend(backend) if run else "static"
    if chosen == "static" or not first.valid:
        if run and first.valid:
            first.notes.insert(0, "NOT RUN before it was proposed: no backend runs kernels here")
        return first
    return infer.validate.first_that_runs(first, lambda p: _trial(snap, k.qualified_name, p, chosen, cancel, session),
                                          lambda decide: draft(decide), chosen)


def _trial(snap: Snapshot, kernel: str, proposal: infer.Proposal, backend: Literal["gpu", "cpu"],
           cancel: threading.Event | None, session: Session) -> infer.validate.Trial:
    """The kernel run under one draft: the gate on its own test cases with no reference (every
    output written, inputs untouched, no fault, no out-of-bounds access, no constant output)."""
    from .execution import worker
    k = snap.model.kernel(kernel)
    assert k is not None
    data = snap.text.encode("utf-8")
    text = (data[:k.span.start_byte] + proposal.comment.encode("utf-8") + data[k.span.start_byte:]).decode("utf-8")
    trial_snap = snapshot(text, snap.path, snap.context)
    info = trial_snap.kernel(kernel)
    if info is None or info.spec is None:
        return infer.validate.Trial(False, False, "the draft is not read as the kernel's spec")
    try:
        # The file as the user has it, the draft beside it: every draft compiles the same text, so
        # only the first pays for the compile (a PyTorch extension's nvcc run takes 20-40 s).
        unit = snap.unit(info.kernel.name, info.spec)
        ran = session.executor.run(jobs.CheckJob(backend, None, unit, info.spec, quick=True, bounds=True),
                                   backend=backend, timeout=_trial_timeout(unit), cancel=cancel)
    except AstraError as e:
        return infer.validate.Trial(False, False, f"could not run: {e.message}")
    except worker.WorkerCancelled:
        raise
    except worker.WorkerError as e:   # the run hung or died (a loaded machine's timeout too): a draft not run
        return infer.validate.Trial(False, False, f"could not run: {e}")
    v: Verdict = ran.value
    if v.passed:
        return infer.validate.Trial(True, True, f"the kernel ran on {v.coverage.cases} cases: every output written, "
                                                f"inputs untouched, no fault" +
                                    (", no out-of-bounds access (AddressSanitizer)" if "sanitize" in v.timings and not any(
                                        c.name == "sanitize" and c.skipped for c in v.checks) else ""))
    compiled = not any(f.check in ("compile", "screen") for f in v.failures) and v.status not in ("error", "unsupported")
    first = v.failures[0] if v.failures else None
    said = f"{first.check}: {first.message}" if first is not None else (v.log or v.status)[:300]
    case = tuple(sorted(first.case.sizes.items())) if first is not None and first.case is not None else ()
    return infer.validate.Trial(compiled, False, said[:400], tuple(dict.fromkeys(f.check for f in v.failures)), case)


def pin(snap: Snapshot, kernel: str) -> workspace.Pin:
    return workspace.pin(snap.path, _kernel_info(snap, kernel).kernel.name, snap.text)


# ---- static diagnostics -------------------------------------------------------------------

@dataclass
class StaticReport:
    diagnostics: list[Diagnostic]
    resources: dict[str, ResourceUsage]  # kernel name
    context: ProjectContext = ProjectContext()
    compiler: str = ""  # what judged: 'nvcc 13.0, flags …' / 'NVRTC 13.5: no CUDA toolkit found' ('' not compiled)

    def to_json(self) -> dict[str, Any]:
        from dataclasses import asdict
        return {"diagnostics": [d.to_json() for d in self.diagnostics],
                "resources": {k: asdict(v) for k, v in self.resources.items()},
                "project": self.context.describe(), "compiler": self.compiler}


def static_check(snap: Snapshot, *, arch: str = DEFAULT_ARCH, compile: bool = True) -> StaticReport:
    """Everything that can be said without running code: parse problems, spec errors, and the
    compiler's errors and warnings for each kernel at their lines (nvcc on the file where a CUDA
    toolkit is installed, else NVRTC on each kernel's unit), with each kernel's registers, spills
    and shared memory."""
    context = _with_context(snap).context if compile else ProjectContext()
    assert context is not None
    m = snap.model
    out: list[Diagnostic] = []
    for span in m.syntax_errors[:20]:
        out.append(Diagnostic(span.start_line, span.start_col, span.end_line, max(span.end_col, span.start_col + 1),
                              "warning", "Astra's parser could not read this (check the syntax)", code="parse"))
    units = []
    for info in snap.kernels:
        out.extend(info.spec_errors)
        instantiate = info.spec.instantiate if info.spec is not None else None
        if info.kernel.is_template and not instantiate:
            continue  # nothing to compile without template arguments
        units.append(extract.unit_from_model(m, snap.path, info.name, instantiate=instantiate, context=context))
    resources: dict[str, ResourceUsage] = {}
    compiler = ""
    for unit in units[:1]:  # what a user should know about how units were cut (same for each)
        out.extend(Diagnostic(0, 0, 0, 1, "info", n, code="unit") for n in unit.notes if "not found" in n)
    if compile and units:
        from .compile import confine
        from .execution import worker
        try:
            results = worker.run(jobs.StaticJob(tuple(units), arch),
                                 timeout=STATIC_TIMEOUT + confine.compiler_seconds(heavy=True))
        except worker.WorkerCancelled:
            raise
        except worker.WorkerError as e:  # the compiler crashed its worker (a fault deep in a parser) or hung
            out.append(Diagnostic(0, 0, 0, 1, "error", f"the compiler could not finish on this file ({e}): an "
                                  "expression or macro expansion nested too deeply?", code="compile"))
            return StaticReport(out, {}, context)
        seen = set()
        compiler = next((r.compiler for r in results if r.compiler and r.compiler != "none"), "")
        for unit, r in zip(units, results):
            for d in r.diagnostics:
                key = (d.line, d.col, d.message)
                if key not in seen:  # helpers shared by several kernels report once
                    seen.add(key)
                    out.append(d)
            res = r.resources.get(unit.name_expression) or next(iter(r.resources.values()), None)
            if res is not None:
                resources[unit.kernel] = res
    return StaticReport(out, resources, context, compiler)


def diagnostics(snap: Snapshot, *, arch: str = DEFAULT_ARCH, compile: bool = True) -> list[Diagnostic]:
    return static_check(snap, arch=arch, compile=compile).diagnostics


# ---- running kernels ----------------------------------------------------------------------

def resolve_backend(name: str, session: Session | None = None) -> Literal["gpu", "cpu", "static"]:
    """'auto' -> the best backend available where `session` runs kernels; an explicit unavailable
    one is an error (`Session.resolve_backend`). Without a session, a fresh one probes."""
    return (session or Session()).resolve_backend(name)


def device_arch(default: str = DEFAULT_ARCH, session: Session | None = None) -> str:
    """The GPU's own architecture when the GPU backend can run here, else `default`."""
    return (session or Session()).device_arch(default)


def gpu_setup(session: Session | None = None) -> jobs.BackendStatus | None:
    """When a GPU is visible but the GPU backend cannot use it: the status saying why, with the
    one command that fixes it (`fix`). None otherwise."""
    return (session or Session()).gpu_setup()


def _units(snap: Snapshot, info: KernelInfo
           ) -> tuple[extract.CompileUnit | None, extract.CompileUnit, str, spec_mod.Spec | None]:
    """(reference unit or None, candidate unit, where the reference came from, the spec that
    launches the reference when it differs from the file's: a pinned baseline keeps its launch,
    and so does a reference kernel with a spec of its own). `snap` has its context."""
    spec = info.spec
    assert spec is not None
    cand = snap.unit(info.kernel.name, spec)
    if spec.reference:
        ref_spec = launch_change.reference_spec(spec, snap.model, spec.reference)
        own = " (launched as its own spec says)" if ref_spec is not spec else ""
        return snap.unit(spec.reference, spec), cand, \
            f"kernel {spec.reference}{own}", (ref_spec if ref_spec is not spec else None)
    pinned = workspace.pinned(snap.path, info.kernel.name)
    if pinned is None:
        return None, cand, "none pinned yet", None
    baseline = snapshot(pinned.text, snap.path, snap.context)
    try:
        ref = baseline.unit(info.kernel.name, spec)
    except AstraError:
        return None, cand, "pinned baseline unreadable", None
    return ref, cand, f"baseline pinned {pinned.digest[:12]}", \
        launch_change.reference_spec(spec, baseline.model, info.kernel.name)


def check(snap: Snapshot, kernel: str | None = None, *, backend: str = "auto", arch: str = DEFAULT_ARCH,
          cancel: threading.Event | None = None, progress: Progress | None = None, pin_first: bool = True,
          quick: bool = False, seed: int | None = None, session: Session | None = None) -> list[Verdict]:
    """Run the verification gate on each selected kernel that has a spec. Returns Verdicts.
    The first passing check of a kernel with no reference pins its current source. `seed`: the
    gate's input seed of an earlier verdict (its `nonce`), to replay it; default: fresh inputs."""
    from .execution import worker
    snap = _with_context(snap)
    assert snap.context is not None
    infos = _selected(snap, kernel)
    session = session or Session()
    chosen = session.resolve_backend(backend)
    session.refuse_if_off("static checks only (kernels are not run)")
    if chosen == "static":
        raise AstraError("no backend can run kernels here (no GPU with CuPy, no C++ compiler): "
                         "use --backend static for compile-only checks")
    verdicts = []
    for info in infos:
        assert info.spec is not None  # _selected keeps kernels with a spec
        ref, cand, ref_from, ref_spec = _units(snap, info)
        if progress:
            progress(ProgressEvent("check", f"checking {info.name} on the {chosen} backend (reference: {ref_from})",
                                   kernel=info.name))
        try:
            ran = session.executor.run(jobs.CheckJob(chosen, ref, cand, info.spec, ref_spec, quick=quick, seed=seed),
                                       backend=chosen, timeout=CHECK_TIMEOUT, cancel=cancel)
        except worker.WorkerCancelled:
            raise
        except worker.WorkerError as e:  # a compiler that crashed its worker, a hang: said, never a traceback
            raise AstraError(f"{info.name}: the check could not finish: {e}") from None
        v: Verdict = ran.value
        v.ran_on = ran.where.describe()
        v.reference = ref_from
        v.project = snap.context.describe()
        v.coverage.notes.extend(n for n in cand.notes if n not in v.coverage.notes)
        if v.passed and ref is None and pin_first:
            try:
                workspace.pin(snap.path, info.kernel.name, snap.text)
                v.reference = "none: this version is now pinned as the baseline"
            except AstraError as e:  # e.g. a `.astra` that is a link, a full disk: the check stands, nothing is written
                v.reference = f"none: not pinned ({e.message})"
                v.warnings.append(f"not pinned as the baseline: {e.message}")
        verdicts.append(v)
    return verdicts


@dataclasses.dataclass(frozen=True)
class Inferred:
    """A kernel checked under a proposed spec: the snapshot with the comment pasted above the
    kernel (line `at`, `lines` long), and the proposal with its notes."""

    snapshot: Snapshot
    proposal: infer.Proposal
    at: int
    lines: int

    def original_line(self, line: int) -> int:
        """A 0-based line of the pasted text as a line of the file."""
        return line - self.lines if line >= self.at + self.lines else min(line, self.at)


def with_inferred_spec(snap: Snapshot, kernel: str, *, backend: str = "auto",
                       cancel: threading.Event | None = None, session: Session | None = None) -> Inferred:
    """`snap` with a proposed spec for `kernel` pasted above it (in memory only; nothing is
    written), for `astra check --infer`. AstraError when no valid spec can be proposed."""
    proposal = infer_spec(snap, kernel, backend=backend, cancel=cancel, session=session)
    if not proposal.valid:
        raise AstraError(f"no spec could be inferred for {kernel}: {'; '.join(proposal.problems) or 'invalid draft'}")
    k = snap.kernel(kernel).kernel
    comment = proposal.comment if proposal.comment.endswith("\n") else proposal.comment + "\n"
    start = k.span.start_byte
    data = snap.text.encode()
    line_start = data.rfind(b"\n", 0, start) + 1
    text = (data[:line_start] + comment.encode() + data[line_start:]).decode()
    pasted = snapshot(text, snap.path, snap.context)
    return Inferred(pasted, proposal, k.span.start_line, comment.count("\n"))


def profile(snap: Snapshot, kernel: str | None = None, *, backend: str = "auto", ncu: bool = False,
            arch: str = DEFAULT_ARCH, cancel: threading.Event | None = None,
            sizes: Literal["ladder", "bench"] = "ladder", session: Session | None = None) -> list[Profile]:
    """Time each selected kernel beside its reference at the size ladder (`astra_cuda.model.ladder`), or
    at the spec's bench sizes alone."""
    from .execution import worker
    snap = _with_context(snap)
    infos = _selected(snap, kernel)
    session = session or Session()
    chosen = session.resolve_backend(backend)
    out = []
    for info in infos:
        assert info.spec is not None  # _selected keeps kernels with a spec
        ref, cand, _, ref_spec = _units(snap, info)
        job = jobs.ProfileJob(chosen, ref, cand, info.spec, ref_spec, arch=arch, ncu=ncu, sizes=sizes)
        if chosen == "static":  # resources only (NVRTC): always on this machine
            out.append(worker.run(job, timeout=PROFILE_TIMEOUT, cancel=cancel))
            continue
        ran = session.executor.run(job, backend=chosen, timeout=PROFILE_TIMEOUT, cancel=cancel)
        p: Profile = ran.value
        p.ran_on = ran.where.describe()
        keep_ncu_report(p, snap.path)
        out.append(p)
    return out


def keep_ncu_report(p: Profile, path: str) -> None:
    """Nsight Compute's report, kept beside the file (`workspace.save_profile_report`); a folder
    Astra may not write leaves a warning, never a failure."""
    data, p.ncu_report = p.ncu_report, None
    if data:
        try:
            p.ncu_report_path = str(workspace.save_profile_report(path, p.kernel, data))
        except (AstraError, OSError) as e:
            p.errors.append(f"the Nsight Compute report was not kept: {getattr(e, 'message', e)}")


# ---- optimizing ---------------------------------------------------------------------------

def llm_config(mode: str | None = None, model: str | None = None, base_url: str | None = None,
               api_key: str | None = None, *, reasoning_effort: str | None = None, temperature: float | None = None,
               max_output_tokens: int | None = None, timeout_s: float | None = None) -> LLMConfig | None:
    """None for the offline team; else the endpoint's `LLMConfig` (`agents.llm.config_for`)."""
    from .agents.llm import config_for
    return config_for(mode, model, base_url, api_key, reasoning_effort=reasoning_effort, temperature=temperature,
                      max_output_tokens=max_output_tokens, timeout_s=timeout_s)


def _reference_for_optimize(snap: Snapshot, info: KernelInfo) -> tuple[str, str]:
    """(file text holding the reference, kernel name in it)."""
    spec = info.spec
    if spec is not None and spec.reference:
        return snap.text, spec.reference
    pinned = workspace.pinned(snap.path, info.kernel.name)
    return (pinned.text if pinned is not None else snap.text), info.kernel.name


def optimize(snap: Snapshot, kernel: str | None, *, rounds: int | None = 5, llm: LLMConfig | None = None,
             backend: str = "auto",
             arch: str = DEFAULT_ARCH, progress: Progress | None = None, cancel: threading.Event | None = None,
             write: bool = False, report: str | None = None, quick: bool = False,
             resume: str | None = None, candidates: int = 1, run_id: str | None = None,
             tune: int | None = None, seconds: float | None = None, tokens: int | None = None,
             sizes: Literal["ladder", "bench"] = "ladder", fresh: bool = False,
             session: Session | None = None) -> OptimizeResult:
    """Run the agent team on one kernel. Every candidate is judged in a worker process by the
    gate (and timed by the profiler where the backend measures time).
    resume: a run id under `.astra/runs/` (or 'last') to continue; `rounds` is then the total
    (None: an interrupted run's own total, or the rounds a finished run did: it is only reported).
    candidates: how many candidates each round proposes; they are evaluated at once where the
    executor has room (one GPU per evaluation), and the best verified one is kept.
    run_id: the id a new run gets (default: made from the time and the kernel).
    seconds: a wall-time limit for the run (no round or tuning point starts after it).
    tokens: the LLM tokens the run may use, as the endpoint reports them (no call starts after).
    sizes: candidates are timed at the size ladder (none may be slower than the best at any of
    its sizes) or at the spec's bench sizes alone.
    fresh: search even where `.astra/tuning/` remembers this kernel's tuning on this GPU model
    (what the search finds is remembered all the same)."""
    if rounds is not None and (isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= 1000):
        raise AstraError(f"rounds must be a whole number from 1 to 1000, got {rounds!r}")
    from . import agents
    from .execution import worker
    from .agents import runlog
    from .evaluation import Check, Evaluation, OnCandidates
    from .model.candidate import Candidate
    text, path = snap.text, snap.path
    if not kernel:
        names = [k.name for k in kernels(snap)]
        if len(names) != 1:
            raise AstraError(f"{path} has {len(names)} kernels: choose one with --kernel ({', '.join(names)})")
        kernel = names[0]
    info = _selected(snap, kernel)[0]
    assert info.spec is not None  # _selected keeps kernels with a spec
    runs_dir = workspace.astra_dir(path) / "runs"
    run = None
    if resume:
        workspace.refuse_links(path)  # never read through a link (nothing is created for a resume that fails)
        run = runlog.resolve_resume(text, path, info.kernel.name, resume, runs_dir, workspace.root_for(path))
        rounds = runlog.resume_rounds(run, rounds, "llm" if llm is not None else "offline")
    rounds = 5 if rounds is None else rounds
    session = session or Session()
    chosen = session.resolve_backend(backend)
    session.refuse_if_off("optimizing runs kernels, so it is off")
    if chosen == "static":
        raise AstraError("optimizing needs a backend that runs kernels (a GPU with CuPy, or a C++ compiler "
                         "for the CPU backend); none is available here")
    ref_text, ref_kernel = _reference_for_optimize(snap, info)
    job = jobs.EvaluateJob(chosen, path, info.kernel.name, info.spec, ref_text, ref_kernel, arch=arch, quick=quick,
                           context=_with_context(snap).context, sizes=sizes)
    # What launches each candidate is decided here, once, from the candidate read where its
    # rewrite was made; the worker is sent the text with it and the model read from it (not parsed again there).
    original = Candidate.of(text, info.kernel.name)
    reference = original if ref_text == text else Candidate.of(ref_text, info.kernel.name)
    ref_spec = launch_change.reference_spec(info.spec, reference.model, ref_kernel,
                                            (reference.spec,) if ref_kernel == info.kernel.name else None)

    ex = session.executor
    gpu, gpu_model = "", None
    if chosen == "gpu":  # the run's GPU model: every evaluation of the run is timed on one like it
        facts = ex.run(jobs.GpuFactsJob(), backend="gpu", timeout=60.0)
        gpu, gpu_model = facts.value, facts.where.gpu or None
        prior = runlog.RunLog(run.dir).read_baseline() if run is not None else None
        if prior is not None and prior.gpu:
            gpu_model = prior.gpu  # a resumed run goes on timing on its own GPU model

    def evaluate(candidate: Candidate, with_original: bool = False, final: bool = False) -> Evaluation:
        launch, problem = launch_change.launch(candidate, reference, ref_spec)
        if problem:   # a launch the rewrite may not make: judged without running anything
            return Evaluation(Check(False, problem, problem, 0, "static"))
        try:
            ran = ex.run(dataclasses.replace(job, text=candidate.text, model=candidate.model, launch=launch,
                                             with_original=with_original, final=final), backend=chosen,
                         timeout=CHECK_TIMEOUT + PROFILE_TIMEOUT, cancel=cancel, gpu_model=gpu_model)
        except worker.WorkerCancelled:
            raise
        except worker.WorkerError as e:  # a hang or a crash is this candidate's failure, not ours
            msg = f"the candidate could not be evaluated: {e}"
            return Evaluation(Check(False, msg, msg, 0, stage="error"))
        ev: Evaluation = dataclasses.replace(ran.value, node=ran.where.node, gpu=ran.where.gpu)
        return ev
    runs_dir = workspace.ensure_astra_dir(path, "runs")  # .astra/ with its .gitignore; never through a link
    if run is not None and rounds > run.rounds_done:
        runlog.RunLog(run.dir).update_meta(rounds=rounds)   # the total asked for is now this
    memory = None
    if gpu_model and llm is None:   # remembered per GPU model; an LLM's rewrites cannot be replayed
        from .model import ladder
        from .agents.memory import Memory
        rungs = ladder.ladder(info.spec) if sizes == "ladder" else ladder.bench(info.spec)
        content = (info.kernel.spec.text if info.kernel.spec else "") + "\n" + info.kernel.text
        memory = Memory(workspace.ensure_astra_dir(path, "tuning"), info.kernel.name, content,
                        [r.sizes for r in rungs], gpu_model, fresh=fresh)
    limits = agents.Limits(max_seconds=seconds, max_tokens=tokens, **({} if tune is None else {"tune_points": tune}))
    # the project headers' own helpers (element packs, load/store, ceil division) for the rewrites
    headers = extract.project_header_texts(snap.model, path, job.context or ProjectContext())
    # the search may compile a candidate from the proven cut (compile.fastpath); what is adopted
    # is compiled from its whole file again (`final`: agents.final_gate)
    on = OnCandidates(evaluate, lambda c: evaluate(c, with_original=True), lambda c: evaluate(c, final=True))
    result = agents.optimize(original, path, info.kernel.name, on, rounds=rounds, llm=llm, spec=info.spec,
                             gpu=gpu, runs_dir=runs_dir, cancel=cancel, progress=progress,
                             resume=run.id if run is not None else None, candidates=candidates, run_id=run_id,
                             limits=limits, memory=memory, headers=headers)
    from .storage import NoSpace
    if write and result.improved:
        try:
            write_result(path, text, result.best)
        except NoSpace as e:   # the file is as it was; the result is in the run log, or shown whole
            result.unsaved.append(e.message)
    if report:
        from .agents import report as report_mod
        try:
            result.report_path = str(report_mod.write(result, report))
        except NoSpace as e:
            result.unsaved.append(e.message)
    return result


def runs(snap: Snapshot, kernel: str | None = None) -> list[RunInfo]:
    """The logged optimize runs of this file (and kernel), oldest first: `runlog.RunInfo`s."""
    from .agents import runlog
    name = _kernel_info(snap, kernel).kernel.name if kernel else None
    own = workspace.readable_astra_dir(snap.path)  # never through a link (a committed `.astra -> elsewhere`)
    return runlog.runs_of(snap.text, snap.path, own / "runs", workspace.root_for(snap.path), name) if own else []


def write_result(path: str, original: str, new_text: str) -> None:
    """Put the optimized text into the file, keeping the original in `.astra/originals/`.
    Refuses when the file changed on disk since it was read: nothing the user typed is lost."""
    current = files.read_source(path)
    if current != original:
        raise AstraError(f"{path} changed while optimizing; not writing (the result is in the run log)")
    workspace.save_original(path, original)
    workspace.replace_if_unchanged(path, original, new_text)


def command_line(verb: str, snap: Snapshot, kernel: str | None = None, **options: str | int | None) -> str:
    """The `astra` command that repeats a step from a terminal (what the editor logs beside each
    step): the file, the kernel, the options that decide the result, the project's include paths,
    macros and standard."""
    import shlex
    parts = ["astra", verb, snap.path]
    if kernel:
        parts += ["--kernel", kernel]
    for name, value in options.items():
        if value not in (None, "", "auto"):
            parts += [f"--{name.replace('_', '-')}", str(value)]
    ctx = snap.context
    if ctx is not None:
        parts += [f"-I{d}" for d in ctx.include_dirs]
        parts += [f"-D{n}" if v is None else f"-D{n}={v}" for n, v in ctx.defines]
        if ctx.std:
            parts += ["--std", ctx.std]
    return shlex.join(parts)
