"""Launch shape: lift a grid cap and give long rows more threads (the spec and every launch site
changed together).

For a kernel that loops over rows with a grid-stride loop (`for (r = blockIdx.x; r < R; r +=
gridDim.x)`) and over each row's elements with block-stride loops (`for (i = threadIdx.x; i < n;
i += blockDim.x)`), any grid and any block size computes the same result — so the launch is a free
choice, and a capped one (`min(num_tokens, 256)` blocks of 128 threads) leaves most of the GPU
idle. The rewrite launches one block per row (`grid = R`, the launch site passing the kernel's own
row-count argument) and up to `block` threads per row (`min(n, block)`).

Only kernels whose built-ins appear in exactly those roles qualify (no shared memory, barriers or
warp collectives: nothing may depend on the block size).

The grid alone is free in more kernels: where the only use of `blockIdx` and `gridDim` (the
kernel's and the device functions' it calls) is one row loop `for (r = blockIdx.A; r < R; r +=
gridDim.A)` along any axis A, each row is one block's work whatever the block does inside it
(shared memory, barriers: apex's two-pass Welford norms), so any grid along A computes the same.
A capped grid there (`min(rows, 4)` blocks) becomes one block per row up to the axis's limit,
with the block untouched. Blocks that meet through global atomics or a grid-wide sync are left
alone (their order, and so a float sum's rounding, would change).
"""
from __future__ import annotations

from tree_sitter import Node

from ...model.launch_change import relaunch, side_effect_free
from . import base
from .base import Context, Rewrite, body
from .pack_rows import UNSAFE_CALLS
from .tree import assigned_names, callee, calls, declared_name, function_name, functions, is_kernel, txt, walk
from .tree import params as fn_params, squashed

BLOCKS = (256, 512, 1024)
GRID_LIMITS = {"x": 2**31 - 1, "y": 65535, "z": 65535}   # the most blocks a launch may have along each axis
GRID_WIDE = ("this_grid", "grid_group", "__threadfence")    # calls by which blocks meet (with atomics)


def _loop_role(n: Node) -> tuple[str, Node] | None:
    """('rows', loop) / ('elements', loop) when built-in `n` is the start or step of a row loop
    (`r = blockIdx.x; ...; r += gridDim.x`) or an element loop (`i = threadIdx.x; ...; i += blockDim.x`)."""
    p = n.parent
    while p is not None and p.type not in ("for_statement", "compound_statement"):
        p = p.parent
    if p is None or p.type != "for_statement":
        return None
    init, upd = p.child_by_field_name("initializer"), p.child_by_field_name("update")
    if init is None or upd is None or not (init.start_byte <= n.start_byte < init.end_byte or
                                           upd.start_byte <= n.start_byte < upd.end_byte):
        return None
    ds = init.children_by_field_name("declarator") if init.type == "declaration" else []
    start = squashed(ds[0].child_by_field_name("value")) if len(ds) == 1 and ds[0].type == "init_declarator" else ""
    step = squashed(upd.child_by_field_name("right")) if upd.type == "assignment_expression" and \
        txt(upd.child_by_field_name("operator")) == "+=" else ""
    if (start, step) == ("blockIdx.x", "gridDim.x"):
        return "rows", p
    if (start, step) == ("threadIdx.x", "blockDim.x"):
        return "elements", p
    return None


def _bound(loop: Node) -> str | None:
    cond = loop.child_by_field_name("condition")
    if cond is None or cond.type != "binary_expression" or txt(cond.child_by_field_name("operator")) != "<":
        return None
    right = cond.child_by_field_name("right")
    return txt(right) if right is not None and right.type == "identifier" else None


def analyse(sc: base.Scope) -> tuple[str | None, list[str], bool, bool] | None:
    """(the row loops' bound, the element loops' bounds, whether any grid computes the same,
    whether any block size does) for a kernel with no shared memory, barriers or collectives."""
    for f in sc.functions:
        if "__shared__" in txt(f) or any(callee(c).split("::")[-1] in UNSAFE_CALLS for c in calls(f)):
            return None
    rows: set[str] = set()
    elems: list[str] = []
    grid_free = block_free = True
    for f in sc.functions:
        for n in walk(body(f)):
            if n.type != "field_expression" or txt(n.child_by_field_name("argument")) not in (
                    "threadIdx", "blockIdx", "blockDim", "gridDim"):
                continue
            if f is not sc.kernel or txt(n.child_by_field_name("field")) != "x":
                return None
            kind = txt(n.child_by_field_name("argument"))
            role = _loop_role(n)
            b = _bound(role[1]) if role is not None else None
            if role is not None and b is not None:
                (rows.add(b) if role[0] == "rows" else elems.append(b) if b not in elems else None)
            elif kind in ("blockIdx", "gridDim"):
                grid_free = False
            elif not (kind == "threadIdx" and _is_first_thread_test(n)):
                block_free = False
    if len(rows) > 1:
        return None
    return (next(iter(rows)) if rows else None), elems, grid_free, block_free


def row_grid(sc: base.Scope) -> tuple[str, str] | None:
    """(axis, the kernel parameter bounding the rows) when the grid is free along that axis: the
    only uses of `blockIdx`/`gridDim` anywhere in `sc` are the start and step of one row loop
    `for (r = blockIdx.A; r < R; r += gridDim.A)` whose `r` and `R` nothing writes, and no block
    meets another (atomics, grid-wide sync). `R` is a parameter of the kernel, or of a device
    function the kernel calls once, passing it a parameter of its own."""
    loops: dict[int, tuple[Node, Node, str]] = {}
    reached = _every_overload(sc)
    for f in reached:
        if any(callee(c).split("::")[-1].startswith("atomic") or callee(c).split("::")[-1] in GRID_WIDE
               for c in calls(f)):
            return None
        for n in walk(body(f)):
            if n.type != "field_expression" or txt(n.child_by_field_name("argument")) not in ("blockIdx", "gridDim"):
                continue
            loop = _grid_loop(n)
            if loop is None:
                return None
            loops[loop[0].start_byte] = (f, *loop)
    if len(loops) != 1:
        return None
    ((f, loop, axis),) = loops.values()
    var = txt(loop.child_by_field_name("initializer").children_by_field_name("declarator")[0]
              .child_by_field_name("declarator"))
    bound = _bound(loop)
    if bound is None or var in assigned_names(loop.child_by_field_name("body")) or bound in assigned_names(body(f)):
        return None
    names = [declared_name(p.child_by_field_name("declarator"))[0] for p in fn_params(f)]
    if bound not in names:
        return None
    if f is not sc.kernel:   # a device function's parameter: what the kernel's one call passes it
        kernel_names = [declared_name(p.child_by_field_name("declarator"))[0] for p in fn_params(sc.kernel)]
        fname = function_name(f)
        sites = [c for g in reached for c in calls(g) if callee(c).split("::")[-1] == fname]
        if len(sites) != 1 or not any(c.start_byte == sites[0].start_byte for c in calls(sc.kernel)):
            return None
        args = [a for a in sites[0].child_by_field_name("arguments").named_children if a.type != "comment"]
        k = names.index(bound)
        if k >= len(args) or txt(args[k]) not in kernel_names or \
                txt(args[k]) in assigned_names(body(sc.kernel)):
            return None
        bound = txt(args[k])
    return axis, bound


def _every_overload(sc: base.Scope) -> list[Node]:
    """The kernel and every device function of the file it may reach by name, each overload of a
    name included (which one a call picks is the compiler's choice: apex's `cuWelfordMuSigma2` has
    a template and an `at::Half` one)."""
    by_name: dict[str, list[Node]] = {}
    for f in functions(sc.root):
        if not is_kernel(f):
            by_name.setdefault(function_name(f) or "", []).append(f)
    out, todo, seen = [sc.kernel], [sc.kernel], set()
    while todo:
        for c in calls(todo.pop()):
            name = callee(c).split("::")[-1]
            if name not in seen:
                seen.add(name)
                out += by_name.get(name, [])
                todo += by_name.get(name, [])
    return out


def _grid_loop(n: Node) -> tuple[Node, str] | None:
    """(loop, axis) when `n` (blockIdx.A or gridDim.A) is the start or the step of a row loop
    `for (r = blockIdx.A; ...; r += gridDim.A)`."""
    p = n.parent
    while p is not None and p.type not in ("for_statement", "compound_statement"):
        p = p.parent
    if p is None or p.type != "for_statement":
        return None
    init, upd = p.child_by_field_name("initializer"), p.child_by_field_name("update")
    if init is None or upd is None or init.type != "declaration" or upd.type != "assignment_expression" or \
            not (init.start_byte <= n.start_byte < init.end_byte or upd.start_byte <= n.start_byte < upd.end_byte):
        return None
    ds = init.children_by_field_name("declarator")
    if len(ds) != 1 or ds[0].type != "init_declarator" or txt(upd.child_by_field_name("operator")) != "+=" or \
            txt(upd.child_by_field_name("left")) != txt(ds[0].child_by_field_name("declarator")):
        return None
    start, step = squashed(ds[0].child_by_field_name("value")), squashed(upd.child_by_field_name("right"))
    axis = start[-1:]
    return (p, axis) if axis in GRID_LIMITS and (start, step) == (f"blockIdx.{axis}", f"gridDim.{axis}") else None


def _is_first_thread_test(n: Node) -> bool:
    """`threadIdx.x == 0` (true for one thread whatever the block size)."""
    p = n.parent
    return p is not None and p.type == "binary_expression" and txt(p.child_by_field_name("operator")) == "==" and \
        "0" in (txt(p.child_by_field_name("left")).strip(), txt(p.child_by_field_name("right")).strip())


class LaunchShape(base.Transform):
    name = "launch_shape"
    title = "launch shape: one block per row, more threads per row (grid cap lifted at the launch site)"
    note = "one block per row and more threads per row, so more of the GPU is busy"
    expected = ("a capped grid or narrow blocks leave most SMs idle (latency-bound): more rows and more bytes in "
                "flight at once")

    def rewrite(self, text: str, ctx: Context, sc: base.Scope, params: dict) -> Rewrite | None:
        params = params or {}
        spec = sc.spec
        if spec is None:
            return None
        roles = analyse(sc) if len(spec.grid) == 1 and len(spec.block) == 1 else None
        if roles is None:
            return _lift_row_grid(text, ctx, sc, spec)
        kernel = sc.model.kernel(ctx.kernel)
        if kernel is None or kernel.launch_bounds:
            return None
        row_bound, elem_bounds, grid_free, block_free = roles
        names = [declared_name(p.child_by_field_name("declarator"))[0] for p in fn_params(sc.kernel)]
        # Lift the cap: one block per row when the grid covers fewer blocks than rows.
        lift = bool(grid_free and row_bound and row_bound in names and ctx.scalar_exprs.get(row_bound) and ctx.grid_blocks
                    and ctx.row_elements.get(row_bound, 0) > ctx.grid_blocks)
        lift = bool(params.get("rows", lift)) and lift
        # More threads per row: long rows each thread walks many times.
        block = params.get("block")
        n = max((ctx.row_elements.get(b, 0) for b in elem_bounds), default=0)
        if block is None and ctx.block_threads and ctx.block_threads < 512 and n >= 4 * ctx.block_threads:
            block = 1024
        if block is not None and (not block_free or int(block) not in BLOCKS or len(elem_bounds) != 1
                                  or elem_bounds[0] not in names
                                  or not ctx.scalar_exprs.get(elem_bounds[0]) or int(block) == ctx.block_threads):
            block = None
        if not lift and block is None:
            return None
        grid = [ctx.scalar_exprs[row_bound]] if lift else list(spec.grid)
        blk = [f"min({ctx.scalar_exprs[elem_bounds[0]]}, {block})"] if block else list(spec.block)

        def host(site):
            args = dict(zip(names, site.args))
            g, b = site.grid, site.block
            if lift:
                g = args.get(row_bound)
                if g is None or not side_effect_free(g):
                    return None
                g = f"dim3({g})"
            if block:
                a = args.get(elem_bounds[0])
                if a is None or not side_effect_free(a):
                    return None
                b = f"dim3(({a}) < {block} ? ({a}) : {block})"
            return g, b

        what = (["one block per row (grid = " + grid[0] + ")"] if lift else []) + \
               ([f"up to {block} threads per row (block = {blk[0]})"] if block else [])
        new = relaunch(text, ctx.kernel, grid, blk, host, "; ".join(what), base=sc.file)
        if new is None:
            return None
        return Rewrite(self.name, new.text, ("; ".join(what) + " in the spec and at every launch site (the kernel "
                                        "computes the same for any launch: grid- and block-stride loops)",),
                       {"rows": lift, "block": block}, new)

    def alternatives(self, rw: Rewrite, ctx: Context) -> list[dict]:
        if "grid_axis" in rw.params:   # the grid alone changed: no block to tune
            return []
        return [{**rw.params, "block": b} for b in BLOCKS if b != rw.params.get("block") and b != ctx.block_threads]


def _lift_row_grid(text: str, ctx: Context, sc: base.Scope, spec) -> Rewrite | None:
    """One block per row along the axis of a free grid (`row_grid`), up to the axis's limit, when the
    bench launch has fewer blocks than rows; the block and everything in the kernel unchanged."""
    found = row_grid(sc)
    if found is None:
        return None
    axis, rows = found
    expr, at_bench = ctx.scalar_exprs.get(rows), ctx.row_elements.get(rows, 0)
    if not expr or not ctx.grid_blocks or at_bench <= ctx.grid_blocks:
        return None
    k, limit = "xyz".index(axis), GRID_LIMITS[axis]
    grid = (list(spec.grid) + ["1"] * 3)[:max(len(spec.grid), k + 1)]
    grid[k] = f"min({expr}, {limit})"
    names = [declared_name(p.child_by_field_name("declarator"))[0] for p in fn_params(sc.kernel)]

    def host(site):
        a = dict(zip(names, site.args)).get(rows)
        if a is None or not side_effect_free(a):
            return None
        dims = [f"dim3({site.grid}).{d}" for d in "xyz"]
        dims[k] = f"(({a}) < {limit} ? ({a}) : {limit})"
        return f"dim3({', '.join(dims)})", site.block

    what = f"one block per row along {axis} (grid.{axis} = {grid[k]})"
    new = relaunch(text, ctx.kernel, grid, list(spec.block), host, what, base=sc.file)
    if new is None:
        return None
    return Rewrite("launch_shape", new.text, (
        f"{what} in the spec and at every launch site, the block unchanged (each row is one block's work "
        f"in a grid-stride row loop: any grid computes the same)",), {"grid_axis": axis}, new)
