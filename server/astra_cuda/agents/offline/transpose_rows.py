"""A shared-memory tile moved by one thread per element: T x T threads a block, each loading one
element into the tile, waiting, and storing one (FasterTransformer's matrix transpose has this
shape). Both global sides are coalesced already; what is slow is one load in flight per thread
and a barrier over 1024 threads. The block becomes T x ROWS threads, each playing the part of
T / ROWS of the old threads, one after another, in each phase:

    <declarations>                                    __shared__ ... (kept once)
    P1                                                for (r = threadIdx.y; r < T; r += blockDim.y) { <declarations>; P1 }
    __syncthreads();                          ->      __syncthreads();
    P2                                                for (r = threadIdx.y; r < T; r += blockDim.y) { <declarations>; P2 }

with `threadIdx.y` read as `r` inside (a declaration that neither reads it nor is written later is
made once, before the loops). Running the old threads of a phase one after another is
one of the orders the original already allowed between its two barriers, so a kernel free of
races computes what it did. The match asks for what that argument needs: one barrier, no other
call (no warp-level operation, no atomic), no `blockDim.y` (its value changes), no `return`,
`goto`, `break` or `continue`, no `volatile` shared memory, the leading declarations free of side
effects (they run once per old thread in each phase) and not written by the first phase (the
second phase starts from them again), no parameter written, and nothing the first phase declares
read by the second.
The step is `blockDim.y`, so a launch left at T x T threads still runs every old thread once.
"""
from __future__ import annotations

from tree_sitter import Node

from ...model.launch_change import relaunch
from .base import Context, Rewrite, Scope, body
from .tree import assigned_names, callee, calls, declared_names, is_lvalue, line_indent, txt, walk

ROWS = 8
LOOP = "astra_r"


def _is_barrier(st: Node) -> bool:
    if st.type != "expression_statement" or not st.named_children:
        return False
    c = st.named_children[0]
    return c.type == "call_expression" and callee(c) == "__syncthreads"


def _with_rows(st: Node, data: bytes) -> str:
    """The statement's text with every `threadIdx.y` read as the loop variable."""
    edits = sorted(((n.start_byte, n.end_byte) for n in walk(st)
                    if n.type == "field_expression" and txt(n).replace(" ", "") == "threadIdx.y"), reverse=True)
    out = data[st.start_byte:st.end_byte]
    for s, e in edits:
        out = out[:s - st.start_byte] + LOOP.encode() + out[e - st.start_byte:]
    return out.decode("utf-8")


def tile_rows(text: str, ctx: Context, sc: Scope, tile: int | None) -> Rewrite | None:
    """The rewrite above, or None where the kernel is not of that shape. `tile`: the block's
    literal T where the spec launches T x T threads."""
    spec = sc.spec
    if spec is None or tile is None or tile % ROWS or tile < 2 * ROWS or sc.helpers:
        return None
    b = body(sc.kernel)
    stmts = [c for c in b.named_children if c.type != "comment"]
    barriers = [i for i, st in enumerate(stmts) if _is_barrier(st)]
    if len(barriers) != 1 or sum(1 for c in calls(b) if callee(c) == "__syncthreads") != 1:
        return None
    if any(callee(c) != "__syncthreads" for c in calls(b)) or LOOP in txt(b):
        return None
    if any(n.type in ("return_statement", "goto_statement", "break_statement", "continue_statement")
           for n in walk(b)):
        return None
    if any(n.type == "field_expression" and txt(n).replace(" ", "") == "blockDim.y" for n in walk(b)) or \
            any(n.type == "identifier" and txt(n) == "blockDim" and n.parent.type != "field_expression" for n in walk(b)):
        return None
    cut = barriers[0]
    lead = 0
    while lead < cut and stmts[lead].type == "declaration":
        lead += 1
    decls, p1, p2 = stmts[:lead], stmts[lead:cut], stmts[cut + 1:]
    if not p1 or not p2:
        return None
    shared = [d for d in decls if "__shared__" in txt(d)]
    if not shared or any("volatile" in txt(d) or "extern" in txt(d) for d in shared):
        return None
    private = [d for d in decls if d not in shared]
    if any("__shared__" in txt(st) for st in p1 + p2):
        return None
    mine = set().union(*(declared_names(d) for d in private))
    written = {txt(n) for st in p1 for n in walk(st) if n.type == "identifier" and is_lvalue(n)}
    if mine & written or any(assigned_names(d) for d in private):
        return None
    own = set().union(*(declared_names(st) for st in p1 + p2))
    ever_written = {txt(n) for st in p1 + p2 for n in walk(st) if n.type == "identifier" and is_lvalue(n)}
    if ever_written - own - mine:
        return None     # a parameter written: it would be written again for each old thread
    first_own = set().union(*(declared_names(st) for st in p1 if st.type == "declaration"))
    if first_own & {txt(n) for st in p2 for n in walk(st) if n.type == "identifier"}:
        return None
    # Declarations the same for every old thread of a column (no `threadIdx.y`, never written) run
    # once, before the loops; the rest run again for each old thread.
    moving = {"threadIdx.y"}
    steady = []
    for d in private:
        uses = {txt(n).replace(" ", "") for n in walk(d) if n.type in ("identifier", "field_expression")}
        names = declared_names(d)
        if uses & moving or names & ever_written:
            moving |= names
        else:
            steady.append(d)
    private = [d for d in private if d not in steady]
    data = text.encode("utf-8")
    ind = line_indent(data, stmts[0].start_byte)
    inner = ind + "  "

    def phase(sts: list[Node]) -> str:
        lines = "".join(inner + _with_rows(st, data).replace("\n", "\n  ") + "\n" for st in private + sts)
        return (f"{ind}for (int {LOOP} = threadIdx.y; {LOOP} < {tile}; {LOOP} += blockDim.y) {{\n"
                f"{lines}{ind}}}\n")
    new_body = (
        "{\n" + "".join(f"{ind}{txt(d)}\n" for d in shared + steady) +
        f"{ind}// astra: {tile} x {ROWS} threads a tile, each moving the elements of {tile // ROWS} of the "
        f"old {tile} x {tile} threads in each phase\n" +
        phase(p1) + f"{ind}{txt(stmts[cut])}\n" + phase(p2) + "}")
    kernel = sc.model.kernel(ctx.kernel)
    if kernel is None:
        return None
    new_kernel = (data[kernel.span.start_byte:b.start_byte] + new_body.encode("utf-8") +
                  data[b.end_byte:kernel.span.end_byte]).decode("utf-8")
    new = relaunch(text, ctx.kernel, [g.strip() for g in spec.grid], [str(tile), str(ROWS)],
                   lambda site: (site.grid, f"dim3({tile}, {ROWS})"), f"{tile} x {ROWS} threads per {tile} x {tile} tile",
                   [(kernel.span.start_byte, kernel.span.end_byte, new_kernel)], base=sc.file)
    if new is None:
        return None
    return Rewrite("transpose", new.text, (
        f"the shared tile moved by {tile} x {ROWS} threads, each loading and storing {tile // ROWS} elements "
        f"(was one each, {tile} x {tile} threads): more loads in flight per thread, a barrier over fewer threads",
        f"blocks of {tile} x {ROWS} threads over the same grid in the spec and at every launch site"), {}, new)

