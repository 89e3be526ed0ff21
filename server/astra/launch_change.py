"""Which launch configuration runs which version of a kernel.

The launch configuration (the spec's `grid`, `block`, `shared_mem`) belongs to a version of the
kernel: a rewrite that packs several rows into one block must be launched differently from the
original. Everything else in the spec (sizes, arguments, tolerances) is what "correct" means and
must not move with a rewrite. A candidate may change the launch only when the file launches the
kernel itself and the rewrite edits that launch site too — otherwise the user's own launch code
would run the new kernel the old way.

Every function takes parsed files (`source.SourceModel`, e.g. a snapshot's model): the file
texts are not parsed again here.
"""
from __future__ import annotations

from . import spec as spec_mod
from .errors import AstraError
from .source import SourceModel
from .spec import Spec


def spec_in(m: SourceModel, kernel: str) -> Spec | None:
    """The loaded spec above `kernel` in the file `m`, or None (no kernel, no spec, or it does not load)."""
    k = m.kernel(kernel)
    if k is None or k.spec is None:
        return None
    try:
        return spec_mod.load(k, m)
    except (spec_mod.SpecErrors, AstraError):
        return None


def reference_spec(spec: Spec, reference: SourceModel, reference_kernel: str) -> Spec:
    """`spec` launched the way the reference version (e.g. a pinned baseline) launches."""
    ref = spec_in(reference, reference_kernel)
    return spec.with_launch(ref) if ref is not None and ref.launch != spec.launch else spec


def _configs(m: SourceModel, kernel: str) -> list[tuple[str, str, str]]:
    return [(s.grid, s.block, s.shared_mem or "0") for s in m.launches_of(kernel)]


def candidate_spec(ref_spec: Spec, reference: SourceModel, candidate: SourceModel, kernel: str) -> tuple[Spec, str]:
    """(the spec that launches the candidate, '' or why the candidate's launch is not acceptable)."""
    m = candidate
    k = m.kernel(kernel)
    if k is None or k.spec is None:
        return ref_spec, ""  # no spec of its own: it runs as the reference does
    try:
        cand = spec_mod.load(k, m)
    except spec_mod.SpecErrors as e:
        return ref_spec, f"the rewrite's harness spec does not load: {e.diagnostics[0].message}"
    except AstraError as e:
        return ref_spec, f"the rewrite's harness spec does not load: {e.message}"
    changed = ref_spec.changed_beyond_launch(cand)
    if changed:
        return ref_spec, (f"the rewrite changed the harness spec's {', '.join(changed)}: only the launch "
                          f"configuration (grid, block, shared_mem) may change with a rewrite")
    if cand.launch == ref_spec.launch:
        return ref_spec, ""
    sites = _configs(candidate, kernel)
    if not sites:
        return ref_spec, (f"the rewrite changes the launch configuration, but this file has no launch of "
                          f"`{kernel}` to change with it (launch changes need the launch site in the same file)")
    before = _configs(reference, kernel)
    stale = [s for s in sites if s in before]
    if stale:
        return ref_spec, (f"the rewrite changes the launch configuration in the spec, but a launch site still "
                          f"uses the old one (<<<{', '.join(x for x in stale[0] if x != '0')}>>>)")
    return ref_spec.with_launch(cand), ""


__all__ = ["spec_in", "reference_spec", "candidate_spec"]
