"""Offline coder: deterministic source-to-source transformations on the tree-sitter tree."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Context, Rewrite, Transform
from .batch_loads import BatchLoads
from .block_atomic import BlockAtomic
from .coarsen import Coarsen
from .fast_math import FastMath
from .hoist import Hoist
from .lane_groups import LaneGroups
from .launch_shape import LaunchShape
from .pack_rows import PackRows
from .pack_stores import PackStores
from .privatize import Privatize
from .restrict_ldg import RestrictLdg
from .row_cache import RowCache
from .rows import Rows
from .strides import UnitStride
from .transpose import Transpose
from .unroll import Unroll, UnrollVectorLoop
from .unswitch import Unswitch
from .vectorize import Vectorize
from .warp_reduce import WarpReduce
from .widen_block import WidenBlock

if TYPE_CHECKING:
    from ...model.spec import Spec

TRANSFORMS: dict[str, Transform] = {t.name: t for t in (
    BlockAtomic(), Privatize(), Transpose(), PackRows(), Rows(), Coarsen(), LaunchShape(), WidenBlock(), UnitStride(), Hoist(), Vectorize(16), Vectorize(8), Vectorize(4), LaneGroups(), PackStores(), RowCache(), Unswitch(), WarpReduce(), FastMath(), UnrollVectorLoop(), BatchLoads(), RestrictLdg(), Unroll())}


def context_from_spec(kernel: str, spec: Spec | None, headers: tuple[str, ...] = ()) -> Context:
    """Hints from the spec: the launch at the largest bench case (threads along x are the stride
    of block-stride loops), each integer scalar's value there, the buffers' element sizes, the
    scalars' expressions and the template arguments (None-safe: no spec, no hints); `headers`:
    the texts of the project headers the file includes, whose helpers a rewrite may use."""
    if spec is None:
        return Context(kernel, headers=headers)
    try:
        arg_bytes = {a.name: a.dtype.itemsize for a in spec.args.values() if a.pointer and a.param}
        scalars = {a.name: str(a.value).strip() for a in spec.args.values() if a.is_scalar and a.param}
        targs = dict(spec.template_args or {})
    except Exception:  # hints only: a spec problem is reported by the gate, not here
        return Context(kernel, headers=headers)
    try:
        cases = spec.bench_cases() or spec.cases()
        case = max(cases, key=spec.elements)
        grid, block, _ = spec.launch_dims(case)
        rows = {}
        for a in spec.args.values():
            if a.is_scalar and a.param and not a.dtype.is_float:
                rows[a.name] = int(spec.scalar(a.name, case))
        return Context(kernel, block[0], rows, grid[0] * grid[1] * grid[2], targs, arg_bytes, scalars, headers)
    except Exception:
        return Context(kernel, template_args=targs, arg_bytes=arg_bytes, scalar_exprs=scalars, headers=headers)


def context_from_text(kernel: str, text: str, fallback_spec: Spec | None = None, headers: tuple[str, ...] = ()) -> Context:
    """The hints for a version of the file: its own spec (a rewrite may have changed the launch)."""
    from ...model import source
    from ...model.launch_change import spec_in
    return context_from_spec(kernel, spec_in(source.parse(text), kernel) or fallback_spec, headers)


__all__ = ["TRANSFORMS", "Context", "Rewrite", "Transform", "context_from_spec", "context_from_text"]
