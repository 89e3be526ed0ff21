"""Offline coder: deterministic source-to-source transformations on the tree-sitter tree."""
from __future__ import annotations

from .base import Context, Rewrite, Transform
from .fast_math import FastMath
from .hoist import Hoist
from .restrict_ldg import RestrictLdg
from .unroll import Unroll, UnrollVectorLoop
from .vectorize import Vectorize
from .warp_reduce import WarpReduce

TRANSFORMS: dict[str, Transform] = {t.name: t for t in (
    Hoist(), Vectorize(16), Vectorize(8), Vectorize(4), WarpReduce(), FastMath(), UnrollVectorLoop(), RestrictLdg(), Unroll())}


def context_from_spec(kernel: str, spec) -> Context:
    """Vector-width hints from the spec: threads per block and each scalar size argument's value
    at the largest bench case (None-safe: no spec, no hints)."""
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
        return Context(kernel, block[0] * block[1] * block[2], rows)
    except Exception:  # hints only: a spec problem is reported by the gate, not here
        return Context(kernel)


__all__ = ["TRANSFORMS", "Context", "Rewrite", "Transform", "context_from_spec"]
