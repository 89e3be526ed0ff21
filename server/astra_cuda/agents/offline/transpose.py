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

A kernel that already moves the tile through shared memory but reads a column of an unpadded
`__shared__ T tile[R][C]` (4-byte elements, C a multiple of the 32 banks) with the threads of a warp
(`tile[threadIdx.x][...]`) has every thread of the warp in one bank: 32-way conflicts on each read
(cuda-samples' transposeCoalesced). The tile gets one column of padding (`[C + 1]`); each element
keeps its indices, so what the kernel computes is unchanged — only where the tile's rows start.

The tiled-loop form of NVIDIA's samples is recognised too, where the block already covers a tile
of T x T elements with T x R threads, each thread moving T / R elements down a loop:

    int x = blockIdx.x * T + threadIdx.x;   int y = blockIdx.y * T + threadIdx.y;
    int a = <index over x, y>;  ...                     (index helpers, none written again)
    for (int i = 0; i < T; i += R) OUT[E1] = IN[E2];

Each index is checked as a function (evaluated exactly at random points, not matched as text):
the loop variable only shifts `y` (E(x, y, i) == E(x, y + i, 0)), E2 steps by one along `x` and
E1 along `y`. The rewrite keeps the launch (it covers the same tile) and moves the tile through
shared memory as above.

A tile already padded but moved by one thread per element over T x T threads is handed to
`transpose_rows` (fewer threads, each moving several elements).
"""
from __future__ import annotations

import random

from tree_sitter import Node

from ...model.launch_change import relaunch
from . import base, types
from .base import Context, Rewrite, body, pointer_params
from .transpose_rows import tile_rows
from .tree import calls, line_indent, squashed, txt, walk

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
    if len(ds) != 1 or ds[0].type != "init_declarator" or squashed(ds[0].child_by_field_name("value")) not in STARTS[axis]:
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
        if "__shared__" in txt(sc.kernel):
            return _pad_tile(text, ctx, sc) or tile_rows(text, ctx, sc, _square_block(sc))
        spec = sc.spec
        if spec is None or len(spec.grid) != 2 or len(spec.block) != 2 or sc.helpers or \
                any(True for _ in calls(body(sc.kernel))):
            return None
        stmts = [c for c in body(sc.kernel).named_children if c.type != "comment"]
        if stmts and stmts[-1].type == "for_statement":
            return _tile_loop(text, ctx, sc, spec, stmts)
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
        copy = _element_copy(guard.child_by_field_name("consequence"), sc)
        if copy is None:
            return None
        pointers, out, inp, e1, e2 = copy
        scalars = {p for p in (n for n in _param_names(sc.kernel)) if p not in pointers}
        for e in (e1, e2):
            if e is None or {txt(n) for n in walk(e) if n.type == "identifier"} - ({x, y} | scalars):
                return None
        i1, i2 = squashed(e1).strip("[]"), squashed(e2).strip("[]")
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
        kernel = sc.model.kernel(ctx.kernel)
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
                       [(kernel.span.start_byte, kernel.span.end_byte, new_kernel)], base=sc.file)
        if new is None:
            return None
        return Rewrite(self.name, new.text, (
            f"`{out}[…] = {inp}[…]` through a padded {TILE} x {TILE} shared-memory tile: reads along `{x}`, "
            f"writes along `{y}`, both by consecutive threads",
            f"blocks of {TILE} x {ROWS} threads over {TILE} x {TILE} tiles in the spec and at every launch site"), {}, new)


def _element_copy(work: Node | None, sc: base.Scope):
    """The one statement `out[i] = in[j]` a body holds (braces around it allowed), between two
    different pointer parameters, the written one not const: (pointers, out, in, i, j), else None."""
    while work is not None and work.type == "compound_statement" and len(work.named_children) == 1:
        work = work.named_children[0]
    if work is None or work.type != "expression_statement" or work.named_children[0].type != "assignment_expression":
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
    return pointers, out, inp, left.child_by_field_name("indices"), right.child_by_field_name("indices")


def _param_names(fn: Node) -> list[str]:
    from .tree import declared_name, params
    return [n for n in (declared_name(p.child_by_field_name("declarator"))[0] for p in params(fn)) if n]


# ---- the tiled-loop form (NVIDIA's samples) ------------------------------------------------------

class _NotIndex(Exception):
    pass


def _value(n: Node, env: dict[str, int]) -> int:
    """An integer index expression evaluated exactly (C's truncating / and % on the non-negative
    values used here); _NotIndex for anything else."""
    t = n.type
    if t == "number_literal":
        v = txt(n).rstrip("uUlL")
        if not v.isdigit():
            raise _NotIndex(v)
        return int(v)
    if t in ("identifier", "field_expression"):
        if txt(n) not in env:
            raise _NotIndex(txt(n))
        return env[txt(n)]
    if t == "parenthesized_expression" and len(n.named_children) == 1:
        return _value(n.named_children[0], env)
    if t == "cast_expression":
        return _value(n.child_by_field_name("value"), env)
    if t == "binary_expression":
        a, b = _value(n.child_by_field_name("left"), env), _value(n.child_by_field_name("right"), env)
        op = txt(n.child_by_field_name("operator"))
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op in ("/", "%") and b > 0 and a >= 0:
            return a // b if op == "/" else a % b
    raise _NotIndex(txt(n))


def _constants(root_node: Node) -> dict[str, int]:
    """`#define NAME <integer>` of the file."""
    out = {}
    for n in walk(root_node):
        if n.type == "preproc_def":
            name, value = n.child_by_field_name("name"), n.child_by_field_name("value")
            v = txt(value).strip().strip("()").rstrip("uU") if value is not None else ""
            if name is not None and v.isdigit():
                out[txt(name)] = int(v)
    return out


def _number(n: Node | None, consts: dict[str, int]) -> int | None:
    if n is None:
        return None
    t = txt(n).strip()
    return int(t) if t.isdigit() else consts.get(t)


def _tile_loop(text: str, ctx: Context, sc: base.Scope, spec, stmts: list[Node]) -> Rewrite | None:
    consts = _constants(sc.root)
    bx, by = (b.strip() for b in spec.block)
    if not (bx.isdigit() and by.isdigit()):
        return None
    tile, rows = int(bx), int(by)
    if tile > 64 or rows < 1 or tile % rows:
        return None
    loop, head = stmts[-1], stmts[:-1]
    if len(head) < 2:
        return None
    axes = {}
    for st, axis, along in ((head[0], "x", "blockIdx.x"), (head[1], "y", "blockIdx.y")):
        if st.type != "declaration" or len(st.children_by_field_name("declarator")) != 1:
            return None
        d = st.children_by_field_name("declarator")[0]
        v = d.child_by_field_name("value") if d.type == "init_declarator" else None
        if v is None or v.type != "binary_expression" or txt(v.child_by_field_name("operator")) != "+":
            return None
        prod, tid = v.child_by_field_name("left"), v.child_by_field_name("right")
        if txt(tid).replace(" ", "") != f"threadIdx.{axis}":
            prod, tid = tid, prod
        if txt(tid).replace(" ", "") != f"threadIdx.{axis}" or prod.type != "binary_expression" or \
                txt(prod.child_by_field_name("operator")) != "*":
            return None
        factors = {txt(prod.child_by_field_name("left")).replace(" ", ""), txt(prod.child_by_field_name("right")).replace(" ", "")}
        if along not in factors:
            return None
        (k,) = factors - {along} or {along}
        if _number_text(k, consts) != tile and not (axis == "x" and k == "blockDim.x"):
            return None
        vtype = " ".join(w for w in txt(st.child_by_field_name("type")).split() if w != "const")
        axes[axis] = (txt(d.child_by_field_name("declarator")), vtype)
    (x, xtype), (y, ytype) = axes["x"], axes["y"]
    mids = head[2:]
    written = tree_assigned(body(sc.kernel))
    mid_names = []
    for st in mids:   # index helpers: declared once, never written again
        if st.type != "declaration" or "__shared__" in txt(st):
            return None
        for d in st.children_by_field_name("declarator"):
            if d.type != "init_declarator" or d.child_by_field_name("declarator").type != "identifier":
                return None
            mid_names.append(txt(d.child_by_field_name("declarator")))
    if ({x, y} | set(mid_names)) & written:
        return None
    # for (int i = 0; i < T; i += R) OUT[E1] = IN[E2];
    init, cond, upd = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update"))
    if init is None or init.type != "declaration" or cond is None or upd is None:
        return None
    ds = init.children_by_field_name("declarator")
    if len(ds) != 1 or ds[0].type != "init_declarator" or txt(ds[0].child_by_field_name("value")).strip() != "0":
        return None
    i = txt(ds[0].child_by_field_name("declarator"))
    if cond.type != "binary_expression" or txt(cond.child_by_field_name("operator")) != "<" or \
            txt(cond.child_by_field_name("left")) != i or _number(cond.child_by_field_name("right"), consts) != tile:
        return None
    if upd.type != "assignment_expression" or txt(upd.child_by_field_name("operator")) != "+=" or \
            txt(upd.child_by_field_name("left")) != i or \
            (_number(upd.child_by_field_name("right"), consts) != rows and txt(upd.child_by_field_name("right")) != "blockDim.y"):
        return None
    copy = _element_copy(loop.child_by_field_name("body"), sc)
    if copy is None:
        return None
    pointers, out, inp, e1, e2 = copy
    scalars = [p for p in _param_names(sc.kernel) if p not in pointers]
    e1 = e1.named_children[0] if e1 is not None and e1.named_children else None
    e2 = e2.named_children[0] if e2 is not None and e2.named_children else None
    if e1 is None or e2 is None:
        return None
    mid_values = [(txt(d.child_by_field_name("declarator")), d.child_by_field_name("value"))
                  for st in mids for d in st.children_by_field_name("declarator")]

    def index(e: Node, xv: int, yv: int, iv: int, ps: dict[str, int]) -> int:
        env = {**ps, **{k: v for k, v in consts.items()}, x: xv, y: yv, i: iv}
        for name, v in mid_values:
            env[name] = _value(v, env)
        return _value(e, env)

    rng = random.Random(29)
    try:
        for _ in range(12):
            ps = {p: rng.randint(1, 5000) for p in scalars}
            xv, yv, iv = rng.randint(0, 5000), rng.randint(0, 5000), rng.randint(0, 64)
            for e in (e1, e2):
                if index(e, xv, yv, iv, ps) != index(e, xv, yv + iv, 0, ps):
                    return None
            if index(e2, xv + 1, yv, 0, ps) - index(e2, xv, yv, 0, ps) != 1 or \
                    index(e1, xv, yv + 1, 0, ps) - index(e1, xv, yv, 0, ps) != 1:
                return None
    except _NotIndex:
        return None
    elem = pointers[inp].elem
    data = text.encode("utf-8")
    ind = line_indent(data, stmts[0].start_byte)
    inner = ind + "  "
    helpers = "".join(f"{inner}{txt(st)}\n" for st in mids)
    itype = txt(init.child_by_field_name("type"))

    def fixed(xv: str, yv: str) -> str:
        return (f"{inner}const {xtype} {x} = {xv};\n{inner}const {ytype} {y} = {yv};\n{helpers}"
                f"{inner}const {itype} {i} = 0;   // each element at its own row of the tile\n")
    new_body = (
        f"{{\n{ind}// astra: through a {tile} x {tile} tile in shared memory, padded by one column (no bank "
        f"conflicts):\n{ind}// a warp reads `{inp}` along `{x}` and writes `{out}` along `{y}`, both consecutive\n"
        f"{ind}__shared__ {elem} astra_tile[{tile}][{tile + 1}];\n"
        f"{ind}for (int astra_r = threadIdx.y; astra_r < {tile}; astra_r += blockDim.y) {{\n"
        + fixed(f"blockIdx.x * {tile} + threadIdx.x", f"blockIdx.y * {tile} + astra_r") +
        f"{inner}astra_tile[astra_r][threadIdx.x] = {inp}[{txt(e2)}];\n"
        f"{ind}}}\n"
        f"{ind}__syncthreads();\n"
        f"{ind}for (int astra_r = threadIdx.y; astra_r < {tile}; astra_r += blockDim.y) {{\n"
        + fixed(f"blockIdx.x * {tile} + astra_r", f"blockIdx.y * {tile} + threadIdx.x") +
        f"{inner}{out}[{txt(e1)}] = astra_tile[threadIdx.x][astra_r];\n"
        f"{ind}}}\n}}")
    b = body(sc.kernel)
    new = (data[:b.start_byte] + new_body.encode("utf-8") + data[b.end_byte:]).decode("utf-8")
    return Rewrite("transpose", new, (
        f"`{out}[…] = {inp}[…]` through a padded {tile} x {tile} shared-memory tile: reads along `{x}`, writes "
        f"along `{y}`, both by consecutive threads (the launch, {tile} x {rows} threads per tile, is kept)",), {})


def _square_block(sc: base.Scope) -> int | None:
    """T where the spec launches blocks of T x T threads (T a literal or a `#define`), else None."""
    spec = sc.spec
    if spec is None or len(spec.block) != 2:
        return None
    consts = _constants(sc.root)
    bx, by = (_number_text(v.strip(), consts) for v in spec.block)
    return bx if bx is not None and bx == by else None


def _number_text(t: str, consts: dict[str, int]) -> int | None:
    return int(t) if t.isdigit() else consts.get(t)


def tree_assigned(n: Node) -> set[str]:
    from .tree import assigned_names
    return assigned_names(n)


# ---- a tile already in shared memory, read down its columns without padding ----------------------

BANKS = 32


def _pad_tile(text: str, ctx: Context, sc: base.Scope) -> Rewrite | None:
    """`__shared__ T tile[R][C]` -> `[C + 1]` where T has 4 bytes, C is a multiple of the banks, every
    use of `tile` is a whole element `tile[i][j]`, and some use has the warp's threads along its rows
    (`i` depends on threadIdx.x, `j` does not); no element's address is taken."""
    kb = body(sc.kernel)
    consts = _constants(sc.root)
    lane = {"threadIdx.x"} | {k for k, v in base.index_aliases(kb).items() if "threadIdx.x" in v}
    edits = []
    for decl in (n for n in walk(kb) if n.type == "declaration" and "__shared__" in txt(n) and "extern" not in txt(n)):
        ds = decl.children_by_field_name("declarator")
        if len(ds) != 1 or ds[0].type != "array_declarator":
            continue
        inner, outer = ds[0], ds[0].child_by_field_name("declarator")
        if outer is None or outer.type != "array_declarator" or outer.child_by_field_name("declarator").type != "identifier":
            continue
        name = txt(outer.child_by_field_name("declarator"))
        cols = _number(inner.child_by_field_name("size"), consts)
        elem = " ".join(w for w in txt(decl.child_by_field_name("type")).split() if w not in ("__shared__", "volatile"))
        if cols is None or cols % BANKS or types.element_bytes(elem, types.aliases(sc.root), ctx.template_args, None) != 4:
            continue
        uses = [n for n in walk(kb) if n.type == "identifier" and txt(n) == name and n.parent != outer]
        column_read = False
        for u in uses:
            row = u.parent
            if row.type != "subscript_expression" or row.child_by_field_name("argument") != u or \
                    row.parent.type != "subscript_expression" or row.parent.child_by_field_name("argument") != row or \
                    (row.parent.parent.type == "pointer_expression" and txt(row.parent.parent).lstrip().startswith("&")):
                break   # the tile as memory (a row, an element's address): padding would move what it reaches
            i, j = _lanes(row.child_by_field_name("indices"), lane), _lanes(row.parent.child_by_field_name("indices"), lane)
            column_read = column_read or (i and not j)
        else:
            if column_read:
                size = inner.child_by_field_name("size")
                edits.append((size.start_byte, size.end_byte, f"{txt(size)} + 1", name))
    if not edits:
        return None
    data = text.encode("utf-8")
    for start, end, new, _ in sorted(edits, reverse=True):
        data = data[:start] + new.encode("utf-8") + data[end:]
    names = ", ".join(f"`{e[3]}`" for e in edits)
    return Rewrite("transpose", data.decode("utf-8"), (
        f"shared tile {names} padded by one column: a warp reading down a column touches {BANKS} different banks "
        f"(it was one, {BANKS}-way conflicts on every read); each element keeps its indices",), {})


def _lanes(n: Node | None, lane: set[str]) -> bool:
    """Whether index expression `n` varies across a warp's threads (reads threadIdx.x or an alias)."""
    return n is not None and any(txt(c).replace(" ", "") in lane for c in walk(n)
                                 if c.type in ("identifier", "field_expression"))
