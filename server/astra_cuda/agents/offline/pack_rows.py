"""Several short rows per block: a launch-configuration change, made together with the launch site.

Recognises a kernel launched with one small block per row, where a grid dimension counts rows
up to a kernel parameter (spec `grid = ["num_tokens", "num_heads"]` with `num_heads` passed to the
kernel) and the threads of the block stride over the row (`for (i = threadIdx.x; i < n; i +=
blockDim.x)`). With rows of a few hundred elements each block does almost nothing and the GPU
spends its time starting blocks. The rewrite gives each row W threads (`blockDim.x`) and puts R
rows in one block (`threadIdx.y` picks the row), so the grid shrinks R times along that dimension:

    kernel:  blockIdx.y  ->  astra_row = blockIdx.y * blockDim.y + threadIdx.y  (rows past the end return)
    spec:    grid  y: num_heads -> cdiv(num_heads, R);   block: [min(x, W), R]
    launch:  <<<grid, block>>> -> the same, packed, at every launch site in the file

Only kernels without barriers, shared memory or warp collectives qualify (a returned thread
must not be awaited, and a warp may now span rows), and `blockDim.x` must appear only as the
stride of those loops. The spec and every launch site change together; the gate then runs the
candidate with its launch and the original with its own.
"""
from __future__ import annotations

import ast

from tree_sitter import Node

from ...model import exprs
from ...model.launch_change import relaunch
from . import base, style
from .base import Context, Edit, Rewrite, body
from .tree import callee, calls, line_indent, txt, walk

DIMS = "xyz"
THREADS = 128              # threads per packed block (4 warps: little waste when rows do not divide)
MAX_ROW = 1024             # rows longer than this keep their own block
UNSAFE_CALLS = {"__syncthreads", "__syncwarp", "__syncthreads_count", "__syncthreads_and", "__syncthreads_or",
                "__ballot_sync", "__any_sync", "__all_sync", "__activemask", "__match_any_sync",
                "__match_all_sync", "__reduce_add_sync", "__reduce_min_sync", "__reduce_max_sync",
                "__reduce_and_sync", "__reduce_or_sync", "__reduce_xor_sync", "__shfl_sync", "__shfl_up_sync",
                "__shfl_down_sync", "__shfl_xor_sync", "this_thread_block", "tiled_partition", "grid_group"}


def _builtin(n: Node) -> tuple[str, str] | None:
    """('blockIdx', 'y') for a `blockIdx.y` field expression."""
    if n.type != "field_expression":
        return None
    arg, field = n.child_by_field_name("argument"), n.child_by_field_name("field")
    if arg is None or field is None or txt(arg) not in ("threadIdx", "blockIdx", "blockDim", "gridDim"):
        return None
    return txt(arg), txt(field)


def _is_stride(n: Node) -> bool:
    """`blockDim.x` as the step of a block-stride loop `for (... = threadIdx.x ...; ...; v += blockDim.x)`."""
    p = n.parent
    if p is None or p.type != "assignment_expression" or txt(p.child_by_field_name("operator")) != "+=" \
            or p.child_by_field_name("right") != n:
        return False
    loop = p.parent
    if loop is None or loop.type != "for_statement" or loop.child_by_field_name("update") != p:
        return False
    init = loop.child_by_field_name("initializer")
    return init is not None and "threadIdx.x" in txt(init)


def _loop_bounds(fn: Node) -> list[str]:
    out = []
    for n in walk(body(fn)):
        if n.type == "for_statement":
            upd = n.child_by_field_name("update")
            cond = n.child_by_field_name("condition")
            if upd is not None and "blockDim.x" in txt(upd) and cond is not None and cond.type == "binary_expression":
                out.append(txt(cond.child_by_field_name("right")).strip())
    return out


def _row_threads(n: int) -> int:
    """Threads per row: enough for one 16-byte vector of halves each (8 elements), 8 to 32."""
    w = 8
    while w < 32 and w * 8 < n:
        w *= 2
    return w


def _min_expr(expr: str, w: int) -> str:
    """`min(expr, w)`, folded into an existing `min(a, c)` with a constant c."""
    try:
        t = exprs.parse(expr).body
    except exprs.ExprError:
        return f"min({expr}, {w})"
    if isinstance(t, ast.Call) and t.func.id == "min" and len(t.args) == 2 and \
            isinstance(t.args[1], ast.Constant) and isinstance(t.args[1].value, int):
        return f"min({ast.unparse(t.args[0])}, {min(w, t.args[1].value)})"
    if isinstance(t, ast.Constant) and isinstance(t.value, int):
        return str(min(w, t.value))
    return f"min({expr}, {w})"


class PackRows(base.Transform):
    name = "pack_rows"
    title = "several rows per block (grid and block resized at the launch site)"
    note = "several rows per block, so short rows do not each pay for a block"
    expected = "fewer, fuller blocks: short rows no longer pay for a block start each"

    def rewrite(self, text: str, ctx: Context, sc: base.Scope, params: dict) -> Rewrite | None:
        model, spec = sc.model, sc.spec
        if spec is None:
            return None
        kernel = model.kernel(ctx.kernel)
        sites = model.launches_of(ctx.kernel)
        if kernel is None or kernel.launch_bounds or not sites or any(s.template_args for s in sites):
            return None
        if len(spec.block) > 1 and any(b.strip() != "1" for b in spec.block[1:]):
            return None  # already a 2-D or 3-D block
        fn = sc.kernel
        # What the kernel does with the built-ins and synchronisation.
        for f in sc.functions:
            if "__shared__" in txt(f) or any(callee(c).split("::")[-1] in UNSAFE_CALLS for c in calls(f)):
                return None
        used = set()
        for f in sc.functions:
            for n in walk(body(f)):
                b = _builtin(n)
                if b is None:
                    continue
                if f is not fn and b[0] in ("blockIdx", "blockDim", "gridDim"):
                    return None  # a helper that depends on the block layout
                if b[0] == "gridDim" or (b[0] in ("threadIdx", "blockDim") and b[1] != "x"):
                    return None
                if b == ("blockDim", "x") and not _is_stride(n):
                    return None
                used.add(b)
        # A grid dimension that counts rows up to a kernel parameter.
        by_value = {a.value: a.name for a in spec.args.values() if a.is_scalar and a.param and isinstance(a.value, str)}
        dim = next((d for d in range(len(spec.grid) - 1, -1, -1)
                    if spec.grid[d].strip() in by_value and ("blockIdx", DIMS[d]) in used), None)
        if dim is None:
            return None
        bounds = [ctx.row_elements.get(b) for b in _loop_bounds(fn)]
        if not bounds or None in bounds or max(bounds) > MAX_ROW:  # type: ignore[type-var]
            return None
        params = params or {}
        w = int(params.get("row_threads", _row_threads(max(bounds))))  # type: ignore[type-var]
        threads = int(params.get("block_threads", THREADS))
        if w not in (4, 8, 16, 32) or threads not in (64, 128, 256, 512) or threads < w:
            return None
        if ctx.block_threads is not None and ctx.block_threads <= w:
            return None  # the block is no wider than a packed row already
        rows = threads // w
        g = DIMS[dim]
        limit = by_value[spec.grid[dim].strip()]

        data = text.encode("utf-8")
        edits: list[Edit] = []
        # The kernel: the row index comes from the block and threadIdx.y.
        var = f"astra_row_{g}"
        for n in walk(body(fn)):
            if _builtin(n) == ("blockIdx", g):
                edits.append(Edit(n.start_byte, n.end_byte, var))
        brace = body(fn).children[0]
        first = next((c for c in body(fn).named_children if c.type != "comment"), None)
        indent = line_indent(data, first.start_byte) if first is not None else "  "
        edits.append(Edit(brace.end_byte, brace.end_byte,
                          f"\n{indent}// astra: {rows} rows per block along {g} (threadIdx.y picks the row); "
                          f"rows past the end leave at once\n"
                          f"{indent}const unsigned int {var} = blockIdx.{g} * blockDim.y + threadIdx.y;\n"
                          f"{indent}if ({var} >= static_cast<unsigned int>({limit})) return;"))
        # The spec: the grid shrinks along that dimension, the block becomes (W, R); every launch
        # site the same way.
        grid = list(spec.grid)
        grid[dim] = style.spec_div_up(grid[dim].strip(), rows)
        block = [_min_expr(spec.block[0], w), str(rows)]

        def host(site):
            G, B = f"dim3({site.grid})", f"dim3({site.block})"
            parts = [f"{G}.x", f"{G}.y", f"{G}.z"]
            parts[dim] = f"({G}.{g} + {rows - 1}) / {rows}"
            return f"dim3({', '.join(parts)})", f"dim3({B}.x < {w} ? {B}.x : {w}, {rows})"

        new = relaunch(text, ctx.kernel, grid, block, host, f"{rows} rows per block ({w} threads each): grid.{g} / {rows}",
                       [(e.start, e.end, e.text) for e in edits], base=sc.file)
        if new is None:
            return None
        return Rewrite(self.name, new.text, (f"{rows} rows per block along {g}, {w} threads per row "
                                        f"(block {w}×{rows}); grid.{g} divided by {rows} in the spec and at "
                                        f"{len(sites)} launch site(s)",), {"row_threads": w, "block_threads": threads}, new)

    def alternatives(self, rw: Rewrite, ctx: Context) -> list[dict]:
        w, t = rw.params["row_threads"], rw.params["block_threads"]
        out = [{"row_threads": x, "block_threads": t} for x in (w // 2, w * 2) if 4 <= x <= 32]
        return out + [{"row_threads": w, "block_threads": x} for x in (t // 2, t * 2) if 64 <= x <= 512 and x >= w]

