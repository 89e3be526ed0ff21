"""compute-sanitizer on the GPU: memcheck (out-of-bounds and misaligned accesses) and racecheck
(shared-memory hazards) on small cases, with exact-size allocations.

Each tool runs in its own worker process started under `compute-sanitizer --tool TOOL`
(`astra.backends.gpu.sanitizer_pool`); the GPU backend turns every report into a LaunchError,
which comes back here as a Failure with the case that triggered it.
"""
from __future__ import annotations

from typing import Any, Sequence

from ..backends.base import BackendUnavailable, CompileError, LaunchError
from ..spec import Spec
from . import suite as suites
from .checks import Compiled, prepare, scalar_ctypes
from .verdict import CaseInfo, Failure

TOOLS = ("memcheck", "racecheck")


def small_cases(spec: Spec, limit: int = 2) -> list[dict[str, int]]:
    """The smallest spec case and the smallest edge size that is not a multiple of 32."""
    cases = sorted(spec.cases(), key=spec.elements)[:1]
    odd = [e for e in suites.edge_sizes(spec, 1 << 22) if any(v % 32 for v in e.values()) and
           any(v > 1 for v in e.values())]
    cases += sorted(odd, key=spec.elements)[:1]
    return cases[:limit]


def compute_sanitizer(candidate: Any, spec: Spec, *, tools: Sequence[str] = TOOLS,
                      sizes: Sequence[dict[str, int]] | None = None, seed: int = 1,
                      timeout: float = 600.0, cancel=None) -> list[Failure] | None:
    """Run the candidate unit on small cases under each sanitizer tool. Returns the failures
    (empty: clean), or None when compute-sanitizer or a GPU is not available here."""
    from ..backends import gpu
    try:
        pools = [(tool, gpu.sanitizer_pool(tool)) for tool in tools]
    except BackendUnavailable:
        return None
    payload = {"unit": candidate, "spec": spec, "sizes": list(sizes or small_cases(spec)), "seed": seed}
    failures: list[Failure] = []
    for tool, pool in pools:
        try:
            found = pool.run("astra.gate.sanitizer:sanitize_job", payload, timeout=timeout, cancel=cancel)
        except BackendUnavailable:
            return None
        for item in found:
            failures.append(Failure("compute_sanitizer", f"compute-sanitizer {tool}: {item['message']}",
                                    CaseInfo(item["sizes"], "spec", seed, True, "sanitize")))
    return failures


def sanitize_job(payload: dict) -> list[dict]:
    """Worker job (runs under compute-sanitizer): compile, launch each case once on fresh inputs."""
    from ..backends.gpu import GpuBackend
    unit, spec = payload["unit"], payload["spec"]
    backend = GpuBackend(exact_alloc=True)
    try:
        mod = backend.compile(unit.source, [unit.name_expression], filename=unit.path,
                              options=unit.options())
    except CompileError as e:
        return [{"sizes": {}, "message": f"does not compile: {e}"}]
    kernel = Compiled(mod, unit.name_expression, "candidate")
    from .. import source
    k = source.parse(unit.source).kernel(unit.kernel)
    ctypes = scalar_ctypes(spec, {p.name: p.type for p in k.params} if k else {})
    found = []
    for sizes in payload["sizes"]:
        host = suites.inputs(spec, sizes, suites.SPEC_DIST, payload["seed"])
        run = prepare(spec, backend, sizes, host, ctypes, 0xFF)
        try:
            from .checks import launch_of
            backend.launch(kernel.module, kernel.name, launch_of(spec, sizes), run.args)
        except LaunchError as e:
            found.append({"sizes": dict(sizes), "message": str(e)})
            break  # the context may be gone after a fault
    return found
