"""Transposes: a tile in shared memory, padded by one column, so that both the reads and the
writes of a warp touch consecutive addresses.

Recognises the naive two-dimensional form

    T x = blockIdx.x * blockDim.x + threadIdx.x;
    T y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < W && y < H) OUT[E1] = IN[E2];        (either order in the condition)

where the read index E2 runs along `x` (`... + x`: a warp reads consecutive elements) and the
write index E1 along `y` (`... + y`: a warp writes with a stride — the slow part), both over
`x`, `y` and the kernel's parameters only. Each block then loads a 32 x 32 tile (the element at
(x, y) read as before, guarded by the same condition) into shared memory padded to 33 columns
(no bank conflicts when a column is read), waits, and writes each element (x, y) of the tile with
the threads of a warp along `y`. Every (x, y) the original handled is read from IN[E2] and
written to OUT[E1] exactly once, as before; only which thread moves it changes. The launch
becomes blocks of 32 x 8 threads over a grid of 32 x 32 tiles (the spec and every launch site).
"""
from __future__ import annotations

from tree_sitter import Node

from ...model import source
from ...model.launch_change import relaunch, spec_in
from . import base
from .base import Context, Rewrite, body, pointer_params
from .tree import calls, line_indent, txt, walk
from .vectorize import _squash

TILE = 32
ROWS = 8          # threads along y per block: each thread moves TILE / ROWS elements each way
STARTS = {"x": {"blockIdx.x*blockDim.x+threadIdx.x", "threadIdx.x+blockIdx.x*blockDim.x",
                "blockDim.x*blockIdx.x+threadIdx.x"},
          "y": {"blockIdx.y*blockDim.y+threadIdx.y", "threadIdx.y+blockIdx.y*blockDim.y",
                "blockDim.y*blockIdx.y+threadIdx.y"}}


def _index_decl(st: Node, axis: str) -> tuple[str, str] | None:
    """(name, type) of `T v = <axis's global index>;`."""
    if st.type != "declaration":
        return None
    ds = st.children_by_field_name("declarator")
    if len(ds) != 1 or ds[0].type != "init_declarator" or _squash(ds[0].child_by_field_name("value")) not in STARTS[axis]:
        return None
    vtype = " ".join(w for w in txt(st.child_by_field_name("type")).split() if w != "const")
    return txt(ds[0].child_by_field_name("declarator")), vtype


def _bounds(cond: Node | None, x: str, y: str) -> bool:
    """The condition is `x < A && y < B` (either order, A and B free of x and y)."""
    while cond is not None and cond.type in ("parenthesized_expression", "condition_clause") and cond.named_children:
        cond = cond.named_children[-1]
    if cond is None or cond.type != "binary_expression" or txt(cond.child_by_field_name("operator")) != "&&":
        return False
    seen = set()
    for side in (cond.child_by_field_name("left"), cond.child_by_field_name("right")):
        while side.type == "parenthesized_expression" and side.named_children:
            side = side.named_children[0]
        if side.type != "binary_expression" or txt(side.child_by_field_name("operator")) != "<":
            return False
        var, limit = txt(side.child_by_field_name("left")), side.child_by_field_name("right")
        if var not in (x, y) or {txt(n) for n in walk(limit) if n.type == "identifier"} & {x, y}:
            return False
        seen.add(var)
    return seen == {x, y}


def _along(index: str, var: str) -> bool:
    return index.endswith("+" + var) or index.startswith(var + "+")


class Transpose(base.Transform):
    name = "transpose"
    title = "transpose through a padded 32 x 32 tile in shared memory (both sides coalesced)"
    note = "through a padded 32 x 32 shared-memory tile, so reads and writes are both coalesced"
    expected = ("a naive transpose writes (or reads) with a stride, one transaction per element; through a "
                "shared-memory tile both the reads and the writes of a warp are consecutive")

    def rewrite(self, text: str, ctx: Context, sc: base.Scope, params: dict) -> Rewrite | None:
        spec = spec_in(source.parse(text), ctx.kernel)
        if spec is None or len(spec.grid) != 2 or len(spec.block) != 2 or sc.helpers or \
                "__shared__" in txt(sc.kernel) or any(True for _ in calls(body(sc.kernel))):
            return None
        stmts = [c for c in body(sc.kernel).named_children if c.type != "comment"]
        if len(stmts) != 3:
            return None
        dx, dy = _index_decl(stmts[0], "x"), _index_decl(stmts[1], "y")
        guard = stmts[2]
        if dx is None or dy is None or guard.type != "if_statement" or \
                guard.child_by_field_name("alternative") is not None:
            return None
        (x, xtype), (y, ytype) = dx, dy
        if not _bounds(guard.child_by_field_name("condition"), x, y):
            return None
        work = guard.child_by_field_name("consequence")
        while work.type == "compound_statement" and len(work.named_children) == 1:
            work = work.named_children[0]
        if work.type != "expression_statement" or work.named_children[0].type != "assignment_expression":
            return None
        assign = work.named_children[0]
        left, right = assign.child_by_field_name("left"), assign.child_by_field_name("right")
        if txt(assign.child_by_field_name("operator")) != "=" or left.type != "subscript_expression" or \
                right.type != "subscript_expression":
            return None
        pointers = pointer_params(sc.kernel)
        out, inp = txt(left.child_by_field_name("argument")), txt(right.child_by_field_name("argument"))
        if out not in pointers or inp not in pointers or out == inp or pointers[out].const:
            return None
        e1, e2 = left.child_by_field_name("indices"), right.child_by_field_name("indices")
        scalars = {p for p in (n for n in _param_names(sc.kernel)) if p not in pointers}
        for e in (e1, e2):
            if e is None or {txt(n) for n in walk(e) if n.type == "identifier"} - ({x, y} | scalars):
                return None
        i1, i2 = _squash(e1).strip("[]"), _squash(e2).strip("[]")
        if not (_along(i2, x) and _along(i1, y)):
            return None
        elem = pointers[inp].elem
        data = text.encode("utf-8")
        ind = line_indent(data, stmts[0].start_byte)
        inner = ind + "  "
        cond = txt(guard.child_by_field_name("condition"))
        cond = cond[1:-1] if cond.startswith("(") and cond.endswith(")") else cond
        new_body = (
            f"{{\n{ind}// astra: through a {TILE} x {TILE} tile in shared memory, padded by one column (no bank "
            f"conflicts):\n{ind}// a warp reads `{inp}` along `{x}` and writes `{out}` along `{y}`, both consecutive\n"
            f"{ind}__shared__ {elem} astra_tile[{TILE}][{TILE + 1}];\n"
            f"{ind}for (int astra_r = threadIdx.y; astra_r < {TILE}; astra_r += blockDim.y) {{\n"
            f"{inner}const {xtype} {x} = blockIdx.x * {TILE} + threadIdx.x;\n"
            f"{inner}const {ytype} {y} = blockIdx.y * {TILE} + astra_r;\n"
            f"{inner}if ({cond}) astra_tile[astra_r][threadIdx.x] = {inp}[{txt(e2).strip('[]')}];\n"
            f"{ind}}}\n"
            f"{ind}__syncthreads();\n"
            f"{ind}for (int astra_r = threadIdx.y; astra_r < {TILE}; astra_r += blockDim.y) {{\n"
            f"{inner}const {xtype} {x} = blockIdx.x * {TILE} + astra_r;\n"
            f"{inner}const {ytype} {y} = blockIdx.y * {TILE} + threadIdx.x;\n"
            f"{inner}if ({cond}) {out}[{txt(e1).strip('[]')}] = astra_tile[threadIdx.x][astra_r];\n"
            f"{ind}}}\n}}")
        kernel = source.parse(text).kernel(ctx.kernel)
        if kernel is None:
            return None
        b = body(sc.kernel)
        kb = text.encode("utf-8")
        new_kernel = (kb[kernel.span.start_byte:b.start_byte] + new_body.encode("utf-8") +
                      kb[b.end_byte:kernel.span.end_byte]).decode("utf-8")
        g0, g1 = (g.strip() for g in spec.grid)
        b0, b1 = (v.strip() for v in spec.block)

        def host(site):
            return (f"dim3((dim3({site.grid}).x * dim3({site.block}).x + {TILE - 1}) / {TILE}, "
                    f"(dim3({site.grid}).y * dim3({site.block}).y + {TILE - 1}) / {TILE})", f"dim3({TILE}, {ROWS})")
        new = relaunch(text, ctx.kernel, [f"cdiv(({g0}) * ({b0}), {TILE})", f"cdiv(({g1}) * ({b1}), {TILE})"],
                       [str(TILE), str(ROWS)], host, f"{TILE} x {ROWS} threads per {TILE} x {TILE} tile",
                       [(kernel.span.start_byte, kernel.span.end_byte, new_kernel)])
        if new is None:
            return None
        return Rewrite(self.name, new, (
            f"`{out}[…] = {inp}[…]` through a padded {TILE} x {TILE} shared-memory tile: reads along `{x}`, "
            f"writes along `{y}`, both by consecutive threads",
            f"blocks of {TILE} x {ROWS} threads over {TILE} x {TILE} tiles in the spec and at every launch site"), {})


def _param_names(fn: Node) -> list[str]:
    from .tree import declared_name, params
    return [n for n in (declared_name(p.child_by_field_name("declarator"))[0] for p in params(fn)) if n]
