"""Thread coarsening: one element per thread -> several elements per thread in 16-byte vectors,
with a grid that shrinks to match (the spec and every launch site changed together).

Recognises the most common elementwise form,

    T i = blockIdx.x * blockDim.x + threadIdx.x;        T i = ...;
    if (i < N) { body }                           or    if (i >= N) return;  body

(with a flat index split into row and column by `/` and `%`: split_index.py; or the column of a
row taken from the grid's y axis, `T c = blockIdx.y * blockDim.x + threadIdx.x` with a row per
`blockIdx.x`: the loop then strides by `blockDim.x * gridDim.y` and the grid's y shrinks), and a
grid-stride loop launched with a grid that covers every element once. The first becomes a
grid-stride loop (`for (T i = ...; i < N; i += blockDim.x * gridDim.x) { body }`: the same work
for any launch), which is then vectorized (see vectorize.py: aligned vectors, overlap checks where
no `__restrict__` promises it, a scalar tail); the grid then shrinks by the elements each thread
takes. Correctness never depends on the launch: a grid-stride loop covers N whatever the grid.

Parameters (the tuning stage's points): `width` (bytes per access: 16 or 8), `steps` (vector steps
per thread: the grid shrinks by width/element size × steps), `block` (threads per block; None
keeps the file's).
"""
from __future__ import annotations

from tree_sitter import Node

from ...model import source
from ...model.launch_change import relaunch, side_effect_free
from . import base, split_index, style
from .base import Context, Rewrite, body
from .tree import apply_edits, assigned_names, callee, calls, declared_names, line_indent, txt, walk
from .tree import Edit
from .loops import STRIDES, index_form, match_loop
from .vectorize import Vectorize

BUILTINS = {"threadIdx", "blockIdx", "blockDim", "gridDim"}
BARRIERS = ("sync", "__shfl", "__ballot", "__any", "__all", "__activemask", "__match", "__reduce", "atomic")
STARTS = {s0 for s0, _ in STRIDES if "blockIdx.x" in s0}
AXIS_STARTS = {"x": STARTS, "y": {s0 for s0, _ in STRIDES if "blockIdx.y" in s0}}
# Built-ins an element's work may read when its index runs along `axis`: those of the other grid
# axes, the same for every element a thread takes once the loop strides along `axis` only.
STEADY = {"x": frozenset(), "y": frozenset({"blockIdx.x", "gridDim.x", "blockIdx.z", "gridDim.z"})}


def _index_axis(value: Node | None, block_names: frozenset[str], axes: tuple[str, ...]) -> str | None:
    form = index_form(value, block_names) if value is not None else ""
    return next((a for a in axes if form in AXIS_STARTS[a]), None)


def fixed_block_names(root_node: Node, spec) -> frozenset[str]:
    """Spellings of the launch's threads per block where the spec fixes them to one number K for
    every case: the literal K and the file's `#define NAME K` (a kernel indexing with
    `blockIdx.x * NUM_THREADS + threadIdx.x` launched with NUM_THREADS threads)."""
    b = spec.block[0].strip() if spec is not None and spec.block else ""
    if not b.isdigit():
        return frozenset()
    names = {b}
    for n in walk(root_node):
        if n.type == "preproc_def":
            name, value = n.child_by_field_name("name"), n.child_by_field_name("value")
            if name is not None and value is not None and txt(value).strip().strip("()u").strip() == b:
                names.add(txt(name))
    return frozenset(names)


def _start_text(value: Node, block_names: frozenset[str]) -> str:
    """The index expression as written, the names of the block size spelled `blockDim.x` (a
    grid-stride loop must step by the launch it runs under, whatever tuning makes it)."""
    edits = [Edit(n.start_byte - value.start_byte, n.end_byte - value.start_byte, "blockDim.x")
             for n in walk(value) if n.type in ("identifier", "number_literal") and txt(n) in block_names]
    return apply_edits(txt(value), edits) if edits else txt(value)


def _unbraced(stmt: Node) -> list[Node]:
    if stmt.type == "compound_statement":
        return [c for c in stmt.named_children]
    return [stmt]


def _guard(cond: Node | None, var: str) -> tuple[str, str] | None:
    """('<', N) for `var < N` / `N > var`; ('>=', N) for `var >= N` / `N <= var`."""
    while cond is not None and cond.type in ("parenthesized_expression", "condition_clause") and cond.named_children:
        cond = cond.named_children[-1]
    if cond is None or cond.type != "binary_expression":
        return None
    op = txt(cond.child_by_field_name("operator"))
    left, right = cond.child_by_field_name("left"), cond.child_by_field_name("right")
    flip = {"<": ">", ">": "<", ">=": "<=", "<=": ">="}
    if txt(right) == var and op in flip:
        left, right, op = right, left, flip[op]
    if txt(left) != var or op not in ("<", ">="):
        return None
    return op, txt(right)


def _is_return(stmt: Node | None) -> bool:
    if stmt is None:
        return False
    if stmt.type == "compound_statement":
        inner = [c for c in stmt.named_children if c.type != "comment"]
        return len(inner) == 1 and _is_return(inner[0])
    return stmt.type == "return_statement" and not stmt.named_children


class Elementwise:
    """A kernel body `pre; T i = index; mid; guard; work` rewritten as a grid-stride loop."""

    def __init__(self, pre: list[Node], decl: Node, mid: list[Node], guard: Node, work: list[Node], var: str,
                 var_type: str, bound: str, start: str, axis: str = "x"):
        self.pre, self.decl, self.mid, self.guard, self.work = pre, decl, mid, guard, work
        self.var, self.var_type, self.bound, self.start = var, var_type, bound, start
        self.axis = axis   # the grid axis the index runs along (its block axis is always x)


def match_elementwise(fn: Node, block_names: frozenset[str] = frozenset(),
                      axes: tuple[str, ...] = ("x",)) -> Elementwise | None:
    """`pre; T i = <global index>; mid; guard; work`. The index may cast (`(uint64_t)blockIdx.x *
    ...`), spell the block size as one of `block_names` (see fixed_block_names) and run along
    one of the grid's `axes` (`blockIdx.y * blockDim.x + threadIdx.x` for 'y')."""
    stmts = [c for c in body(fn).named_children if c.type != "comment"]
    for k, st in enumerate(stmts):
        if st.type != "declaration":
            continue
        ds = st.children_by_field_name("declarator")
        axis = _index_axis(ds[0].child_by_field_name("value"), block_names, axes) \
            if len(ds) == 1 and ds[0].type == "init_declarator" else None
        if axis is None:
            continue
        var = txt(ds[0].child_by_field_name("declarator"))
        vtype = " ".join(w for w in txt(st.child_by_field_name("type")).split() if w != "const")
        pre, rest = stmts[:k], stmts[k + 1:]
        mid: list[Node] = []
        while rest and rest[0].type == "declaration" and var not in _idents(rest[0]):
            mid.append(rest.pop(0))
        if not rest or rest[0].type != "if_statement" or rest[0].child_by_field_name("alternative") is not None:
            return None
        g = _guard(rest[0].child_by_field_name("condition"), var)
        if g is None:
            return None
        op, bound = g
        if op == "<" and len(rest) == 1:
            work = _unbraced(rest[0].child_by_field_name("consequence"))
        elif op == ">=" and _is_return(rest[0].child_by_field_name("consequence")):
            work = rest[1:]
        else:
            return None
        start = _start_text(ds[0].child_by_field_name("value"), block_names)
        return Elementwise(pre, st, mid, rest[0], work, var, vtype, bound, start, axis)
    return None


def _idents(n: Node) -> set[str]:
    return {txt(c) for c in walk(n) if c.type == "identifier"}


def no_exit_nor_builtin(el: Elementwise) -> bool:
    """The element's work leaves it only by its end (a break or continue only of a loop inside it)
    and reads the built-ins (threadIdx, blockIdx...) nowhere, directly or through a name declared
    from them before the index (those of the other grid axes excepted, see STEADY): it may run
    several times per thread."""
    steady = STEADY[el.axis]
    moving = set().union(*(declared_names(st) for st in el.pre if any(
        n.type == "field_expression" and txt(n.child_by_field_name("argument")) in BUILTINS
        and txt(n) not in steady for n in walk(st)))) if el.pre else set()
    for st in el.work + el.mid:
        for n in walk(st):
            if n.type in ("return_statement", "goto_statement", "break_statement", "continue_statement"):
                if n.type in ("break_statement", "continue_statement") and _inside_loop(n, st):
                    continue
                return False
            if n.type == "field_expression" and txt(n.child_by_field_name("argument")) in BUILTINS \
                    and txt(n) not in steady:
                return False
            if n.type == "identifier" and txt(n) in moving:
                return False
    return True


def may_repeat(el: Elementwise, sc: base.Scope) -> bool:
    """The work of one element may run several times per thread: no returns, barriers, warp
    collectives, atomics or shared memory; the built-ins only in the index; no state carried in
    variables declared before the guard; the index and bound not changed."""
    if not no_exit_nor_builtin(el) or idents_text(el.bound) & BUILTINS:
        return False
    for f in sc.functions:
        if "__shared__" in txt(f) or any(any(b in callee(c) for b in BARRIERS) for c in calls(f)):
            return False
        if f is not sc.kernel and any(n.type == "identifier" and txt(n) in BUILTINS for n in walk(body(f))):
            return False
    for st in el.pre:
        if st.type != "declaration":
            return False
    changed = set().union(*(assigned_names(st) for st in el.work + el.mid)) if el.work else set()
    before = set().union(*(declared_names(st) for st in el.pre)) if el.pre else set()
    bound_names = {c for c in idents_text(el.bound)}
    return not (changed & (before | {el.var} | bound_names))


def _inside_loop(n: Node, stop: Node) -> bool:
    p = n.parent
    while p is not None and p != stop.parent:
        if p.type in ("for_statement", "while_statement", "do_statement", "switch_statement"):
            return True
        p = p.parent
    return False


def idents_text(expr: str) -> set[str]:
    """The names a C++ expression, given as text, reads."""
    r = source.parser().parse(f"int _ = {expr};".encode()).root_node
    return {txt(c) for c in walk(r) if c.type == "identifier"} - {"_"}


def as_grid_stride(text: str, fn: Node, el: Elementwise) -> str:
    """The kernel with `T i = index; mid; guard; work` as one grid-stride loop over the work."""
    data = text.encode("utf-8")
    ind = line_indent(data, el.decl.start_byte)
    inner = ind + "  "
    lines = []
    for st in el.mid + el.work:
        s = txt(st).replace("\n" + line_indent(data, st.start_byte), "\n" + inner)
        lines.append(inner + s)
    loop = (f"for ({el.var_type} {el.var} = {el.start}; {el.var} < {el.bound}; "
            f"{el.var} += blockDim.x * gridDim.{el.axis}) {{\n" + "\n".join(lines) + f"\n{ind}}}")
    end = max([el.guard.end_byte] + [st.end_byte for st in el.work])
    return apply_edits(text, [Edit(el.decl.start_byte, end, loop)])


def grid_cover(text: str, kernel: str) -> tuple[str, str] | None:
    """(N, axis): the element count a launch's threads along the grid's `axis` must reach for
    `kernel`'s body to be right, where the body is the one-element-per-thread form coarsen rewrites
    (`i = blockIdx.x * blockDim.x + threadIdx.x; if (i < N) ...` on a 1-D grid, axis 'x'; a row per
    `blockIdx.x` with its columns `c = blockIdx.y * blockDim.x + threadIdx.x` on a 2-D one, axis
    'y'), its work repeatable (may_repeat: free of the built-ins but the other axes' steady ones)
    and N read only from the kernel's parameters, never changed: under any launch of 1-D blocks
    whose `gridDim.<axis> * blockDim.x` reaches N (the other axes as the file launches them, which
    coarsening keeps), thread i does element i and the rest do nothing. A size dispatch
    (dispatch.py) uses it to run this body only where the grid covers it. None otherwise."""
    sc = base.scope(text, kernel)
    k = sc.model.kernel(kernel) if sc is not None else None
    if sc is None or k is None or sc.spec is None or any(d.strip() != "1" for d in sc.spec.block[1:]):
        return None
    flat = all(d.strip() == "1" for d in sc.spec.grid[1:])
    el = match_elementwise(sc.kernel, fixed_block_names(sc.root, sc.spec), ("x",) if flat else ("y",))
    if el is None or not may_repeat(el, sc) or any("gridDim" in txt(st) for st in el.pre):
        return None
    names = idents_text(el.bound)
    if not names <= {p.name for p in k.params} or names & assigned_names(body(sc.kernel)):
        return None
    return el.bound, el.axis


class Coarsen(base.Transform):
    any_grid = True   # a grid-stride loop: right for any grid (a size dispatch may choose the grid alone)
    name = "coarsen"
    title = "several elements per thread in 16-byte vectors (grid shrunk at the launch site)"
    note = "several elements per thread in 16-byte vectors, so fewer, longer threads and wider accesses"
    expected = ("one-element-per-thread kernels issue 2-4-byte accesses from many short threads: 16-byte vectors "
                "and fewer, longer threads move the same bytes with far fewer instructions")

    def rewrite(self, text: str, ctx: Context, sc: base.Scope, params: dict) -> Rewrite | None:
        params = params or {}
        width, steps, block = int(params.get("width", 16)), int(params.get("steps", 1)), params.get("block")
        if width not in (16, 8) or steps not in (1, 2, 4) or block not in (None, 128, 256, 512, 1024):
            return None
        spec = sc.spec
        if spec is None or len(spec.block) > 1 and any(b.strip() != "1" for b in spec.block[1:]):
            return None
        flat = all(g.strip() == "1" for g in spec.grid[1:])   # a 1-D grid
        model = sc.model
        kernel = model.kernel(ctx.kernel)
        if kernel is None or kernel.launch_bounds and block is not None:
            return None
        el = match_elementwise(sc.kernel, fixed_block_names(sc.root, spec), ("x",) if flat else ("y",))
        if el is None and not flat:
            return None
        ax = 1 if el is not None and el.axis == "y" else 0   # the grid axis that shrinks
        cover = None     # the element count, over the parameters, for a grid that must grow to it
        if el is not None:
            if not may_repeat(el, sc):
                return None
            canonical = as_grid_stride(text, sc.kernel, el)
            what = f"one element per thread (`{el.var} < {el.bound}`) became a grid-stride loop"
        else:
            loop = next((n for n in walk(body(sc.kernel)) if n.type == "for_statement" and match_loop(n) is not None
                         and "gridDim.x" in match_loop(n).stride), None)
            if loop is None:
                return None
            canonical = text
            if self._full_grid(loop, ctx):
                what = "the grid-stride loop's grid covered every element once"
            else:
                cover = txt(match_loop(loop).bound)
                names = [p.name for p in kernel.params]
                if cover not in names or not ctx.scalar_exprs.get(cover):
                    return None
                what = f"the grid-stride loop's grid was capped below `{cover}` elements"
        # One element per thread before: the elements cannot depend on each other (see plan_accesses).
        vec = Vectorize(width).apply(canonical, ctx, {"independent": el is not None})
        if vec is not None:
            vtext, vchanges, elements = vec.text, vec.changes, vec.params["elements"]
        elif el is not None and ax == 0 and (split := split_index.apply(text, ctx, sc, el, width)) is not None:
            (vtext, vchanges, elements), what = split, ""   # the index split by division (split_index.py)
        else:
            return None
        new_kernel = source.parse(vtext).kernel(ctx.kernel)
        if new_kernel is None:
            return None
        ept = elements * steps   # elements per thread: a vector's, times the steps
        g, b = spec.grid[ax].strip(), spec.block[0].strip()
        if cover is not None:
            names = [p.name for p in kernel.params]
            per = f"({block or b}) * {ept}"
            grid, blk = [f"cdiv({ctx.scalar_exprs[cover]}, {per})"], [str(block)] if block else list(spec.block)

            def host(site):
                n = dict(zip(names, site.args)).get(cover)
                if n is None or not side_effect_free(n):
                    return None
                threads = str(block) if block else f"dim3({site.block}).x"
                return (f"dim3(static_cast<unsigned int>((static_cast<size_t>({n}) + static_cast<size_t>({threads}) * "
                        f"{ept} - 1) / (static_cast<size_t>({threads}) * {ept})))", str(block) if block else site.block)
        elif ax == 1:   # the y axis shrinks; x (the rows) and z stay
            grid = list(spec.grid)
            grid[1], blk = (style.spec_div_up(g, ept), list(spec.block)) if block is None else \
                (style.spec_regrid(g, b, block * ept), [str(block)])

            def host(site):
                d = f"dim3({site.grid})"
                y = f"({d}.y + {ept - 1}) / {ept}" if block is None else \
                    f"static_cast<unsigned int>((static_cast<size_t>({d}.y) * dim3({site.block}).x + {block * ept - 1}) / " \
                    f"{block * ept})"
                return f"dim3({d}.x, {y}, {d}.z)", str(block) if block else site.block
        elif block is None:
            grid, blk = [style.spec_div_up(g, ept)], list(spec.block)

            def host(site):
                return style.div_up(site.grid, ept, text, ctx.headers), site.block
        else:
            per = block * ept
            grid, blk = [style.spec_regrid(g, b, per)], [str(block)]

            def host(site):
                return (f"dim3(static_cast<unsigned int>((static_cast<size_t>(dim3({site.grid}).x) * dim3({site.block}).x"
                        f" + {per - 1}) / {per}))", str(block))
        note = (f"{ept} elements per thread: grid" + (".y" if ax else "") + " " + (f"covers `{cover}`" if cover else f"/ {ept}")
                + (f", {block} threads per block" if block else ""))
        new = relaunch(text, ctx.kernel, grid, blk, host, note,
                       [(kernel.span.start_byte, kernel.span.end_byte, new_kernel.text)], base=sc.file)
        if new is None:
            return None
        changes = (*([what] if what else []), *vchanges,
                   (f"grid sized to cover `{cover}` with {ept} elements per thread" if cover else
                    f"grid{'.y' if ax else ''} divided by {ept} (each thread takes {ept} elements)") +
                   (f" and {block} threads per block" if block else "") + " in the spec and at every launch site")
        return Rewrite(self.name, new.text, changes, {"width": width, "steps": steps, "block": block}, new)

    def alternatives(self, rw: Rewrite, ctx: Context) -> list[dict]:
        p = rw.params
        out = [{**p, "steps": s} for s in (1, 2, 4) if s != p["steps"]]
        out += [{**p, "block": b} for b in (256, 512, 1024) if b != p["block"] and not
                (p["block"] is None and b == ctx.block_threads)]
        if p["width"] == 16:
            out.append({**p, "width": 8})
        return out

    @staticmethod
    def _full_grid(loop: Node, ctx: Context) -> bool:
        m = match_loop(loop)
        n = ctx.row_elements.get(txt(m.bound)) if m is not None else None
        if n is None or not ctx.grid_blocks or not ctx.block_threads:
            return False
        return ctx.grid_blocks * ctx.block_threads * 2 >= n
