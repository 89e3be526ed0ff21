"""Offline coder: deterministic source-to-source transformations on the tree-sitter tree."""
from __future__ import annotations

from .base import Context, Rewrite, Transform
from .fast_math import FastMath
from .hoist import Hoist
from .pack_rows import PackRows
from .restrict_ldg import RestrictLdg
from .unroll import Unroll, UnrollVectorLoop
from .vectorize import Vectorize
from .warp_reduce import WarpReduce

TRANSFORMS: dict[str, Transform] = {t.name: t for t in (
    PackRows(), Hoist(), Vectorize(16), Vectorize(8), Vectorize(4), WarpReduce(), FastMath(), UnrollVectorLoop(), RestrictLdg(), Unroll())}


def context_from_spec(kernel: str, spec) -> Context:
    """Vector-width hints from the spec: threads along x (the stride of block-stride loops) and
    each scalar size argument's value at the largest bench case (None-safe: no spec, no hints)."""
    if spec is None:
        return Context(kernel)
    try:
        cases = spec.bench_cases() or spec.cases()
        case = max(cases, key=spec.elements)
        _, block, _ = spec.launch_dims(case)
        rows = {}
        for a in spec.args.values():
            if not a.pointer and not a.dtype.is_float:
                rows[a.name] = int(spec.scalar(a.name, case))
        return Context(kernel, block[0], rows)
    except Exception:  # hints only: a spec problem is reported by the gate, not here
        return Context(kernel)


def context_from_text(kernel: str, text: str, fallback_spec=None) -> Context:
    """The hints for a version of the file: its own spec (a rewrite may have changed the launch)."""
    from ... import source
    from ...launch_change import spec_in
    return context_from_spec(kernel, spec_in(source.parse(text), kernel) or fallback_spec)


__all__ = ["TRANSFORMS", "Context", "Rewrite", "Transform", "context_from_spec", "context_from_text"]
