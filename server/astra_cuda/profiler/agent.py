"""The profiling agent's entry point: static resources everywhere, measured times where the
backend measures time, Nsight Compute on request."""
from __future__ import annotations

import hashlib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict

import numpy as np

from ..model import ladder as ladder_mod
from ..compile import static
from .. import gate
from ..backends.base import BackendUnavailable, CompileError, LaunchError, Unsupported
from ..gate import checks
from ..contract import DEFAULT_ARCH
from . import model, timing
from .ncu import NcuUnavailable, run_ncu
from .results import Profile, size_label


def _static_resources(unit, arch: str) -> tuple[dict, list[str]]:
    r = static.compile_unit(unit, arch)
    res = r.resources.get(unit.name_expression) or next(iter(r.resources.values()), None)
    errs = [d.message for d in r.diagnostics if d.severity == "error"]
    return (asdict(res) if res else {}), errs


def _rounding_of(unit, rspec, backend, params):
    """gate.measure_rounding for the timed sets, the reference compiled on `backend` when first
    needed (once; a reference that does not compile there measures nothing)."""
    compiled: list = []

    def measure(sets) -> bool:
        if not compiled:
            try:
                compiled.append(checks.Compiled(backend.compile_unit(unit, role="reference"), unit.name_expression,
                                                "reference"))
            except (CompileError, Unsupported, BackendUnavailable):
                compiled.append(None)
        if compiled[0] is None:
            return False
        return gate.measure_rounding(rspec, backend, compiled[0], sets, checks.arg_types(rspec, backend, compiled[0], params))
    return measure


def profile(reference_unit, candidate_unit, spec, backend, *, ncu: bool = False, arch: str = DEFAULT_ARCH,
            reps: int = 100, warmup: int = 20, seed: int | None = None, reference_spec=None,
            sizes: str = "bench", rounding=None) -> Profile:
    """Profile `candidate_unit` on the spec's bench sizes, and with `sizes="ladder"` on the size
    ladder around them (`astra_cuda.model.ladder`: decode-like and prefill-like points; see the package
    docstring). `backend` is a Backend instance, or None for static data only. `reps` timed
    launches per size after `warmup` (profiler.timing says what surrounds them). `spec` launches
    the candidate, `reference_spec` (default `spec`) the reference. `rounding`: a backend with
    rounding modes (the CPU) that measures the reference's own rounding error at a size where a
    timed output differs from the reference's beyond the tolerance (gate.measure_rounding)."""
    kernel = candidate_unit.kernel
    prof = Profile(kernel=kernel, backend=backend.name if backend is not None else "static", measured=False,
                   path=candidate_unit.path)
    resources, errs = _static_resources(candidate_unit, arch)
    prof.resources = resources
    rungs = ladder_mod.ladder(spec) if sizes == "ladder" else ladder_mod.bench(spec)
    cases = [r.sizes for r in rungs if r.role == "bench"] or [r.sizes for r in rungs]
    block = spec.launch_dims(cases[0])[1] if cases else (1, 1, 1)
    smem = (resources.get("shared_static_bytes") or 0) + (spec.launch_dims(cases[0])[2] if cases else 0)
    prof.occupancy = model.theoretical_occupancy(block[0] * block[1] * block[2], resources.get("registers"), smem)
    timed = backend is not None and backend.caps.timing
    if errs and not timed:
        prof.errors.append(f"the candidate does not compile: {errs[0]}")
        return prof
    if not timed:
        prof.note = ("speed is not measured on the CPU backend (it checks correctness only); "
                     "static resource data from NVRTC for " + arch) if backend is not None else \
                    f"no backend can run kernels here; static resource data from NVRTC for {arch}"
        return prof
    # The kernel runs as the backend compiles it (its compiler, include paths and CCCL), so the
    # backend's compile decides; the static one only adds spill counts.
    return _profile_measured(prof, reference_unit, candidate_unit, spec, backend, rungs, ncu=ncu, reps=reps,
                             warmup=warmup, seed=seed, rspec=reference_spec or spec, static_error=errs[0] if errs else "",
                             rounding=rounding)


def _profile_measured(prof: Profile, reference_unit, candidate_unit, spec, backend, rungs, *, ncu: bool, reps: int,
                      warmup: int, seed: int | None, rspec, static_error: str = "", rounding=None) -> Profile:
    prof.measured = True
    cases = [r.sizes for r in rungs if r.role == "bench"] or [r.sizes for r in rungs]
    info = backend.device_info() if backend.caps.device_info else {}
    prof.device = info.get("name")
    try:
        cand = timing.compile_on(backend, candidate_unit, "candidate")
        ref = timing.compile_on(backend, reference_unit, "reference") if reference_unit is not None else None
    except CompileError as e:
        prof.errors.append(f"does not compile for the GPU: {e}")
        prof.measured = False
        return prof
    if static_error:
        prof.note = f"static resource data unavailable (the static compile failed: {static_error[:200]})"
    live = backend.resources(cand, candidate_unit.name_expression)
    prof.resources.update({k: v for k, v in asdict(live).items() if v is not None and k != "spills_bytes"})
    if info and cases:
        block = spec.launch_dims(cases[0])[1]
        smem = (prof.resources.get("shared_static_bytes") or 0) + spec.launch_dims(cases[0])[2]
        prof.occupancy = model.theoretical_occupancy(
            block[0] * block[1] * block[2], prof.resources.get("registers"), smem,
            {k: info.get(k) for k in ("regs_per_sm", "smem_per_sm", "threads_per_sm", "blocks_per_sm")})
    ceiling = backend.copy_ceiling() if backend.caps.copy_ceiling else None
    prof.ceiling_gbps = ceiling / 1e9 if ceiling else None
    params = candidate_unit.param_types
    c = (cand, candidate_unit.name_expression)
    r = (ref, reference_unit.name_expression) if ref is not None else None
    rng = np.random.default_rng(seed)
    # The original timed against itself (the optimizer's baseline): the same code on both sides —
    # the search cuts its candidate from the proven cut, so the original's text arrives as another unit.
    original = reference_unit is not None and reference_unit.same_code(candidate_unit) and (rspec is spec or rspec == spec)
    allowances = _rounding_of(reference_unit, rspec, rounding, params) if rounding is not None and r is not None else None
    ref_code = hashlib.sha256("\0".join((reference_unit.file_text, reference_unit.source, reference_unit.appendix,
                                         reference_unit.name_expression, repr(getattr(reference_unit, "context", None))))
                              .encode()).hexdigest() if r is not None else ""
    seeds = [(int(rng.integers(1, 2**31 - 1)), int(rng.integers(1, 2**31 - 1))) for _ in rungs]
    # The next rung's inputs are drawn while this one is timed (a timed size's ~10^8 values are
    # most of its time otherwise): one thread, one rung ahead.
    drawer = ThreadPoolExecutor(1, thread_name_prefix="astra-timed-inputs")

    def draw(k: int) -> Future | None:
        return drawer.submit(gate.timed_host, spec, rungs[k].sizes, timing.ahead_seed(seeds[k][0])) \
            if k < len(rungs) else None
    ahead = draw(0)
    try:
        for k, rung in enumerate(rungs):
            sizes, mine, ahead = rung.sizes, ahead, draw(k + 1)
            try:
                timed = timing.measure_confirmed(backend, spec, rspec, sizes, c, r, params=params, reps=reps,
                                                 warmup=warmup, seeds=seeds[k], ceiling=ceiling, original=original,
                                                 rounding=allowances, ref_code=ref_code, ahead=mine)
                timed.role = rung.role
                prof.sizes.append(timed)
            except LaunchError as e:
                prof.errors.append(f"at {size_label(sizes)}: {e}")
                break
            except Exception as e:  # out of device memory and the like: report, never crash the job
                prof.errors.append(f"at {size_label(sizes)}: {e.__class__.__name__}: {e}")
                break
    finally:
        drawer.shutdown(wait=False, cancel_futures=True)
    if ncu:
        try:
            # The smallest bench size: ncu replays the kernel many times, saving memory each time.
            smallest = min(cases, key=spec.elements) if cases else None
            prof.ncu, prof.hot_lines, prof.ncu_report = run_ncu(candidate_unit, spec, smallest, type(backend))
        except NcuUnavailable as e:
            prof.ncu = {"error": str(e)}
    return prof
