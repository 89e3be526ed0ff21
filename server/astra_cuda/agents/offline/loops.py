"""Strided element loops, as the offline transformations find them: the block-stride loop
`for (T i = threadIdx.x; i < N; i += blockDim.x)`, the grid-stride loop and a cooperative group's
(`g.thread_rank()` by `g.size()`), with a loop-invariant bound and a body free of jumps, nested
loops and barriers (`match_loop` → `StridedLoop`); which of its index expressions are an invariant
base plus the loop variable (`offset_base`, through `const` aliases at the top of the body); and
index expressions compared by their tokens (`index_form`). Shared by vectorize, coarsen, rows and
the others that rewrite such loops."""
from __future__ import annotations

from tree_sitter import Node

from .tree import (assigned_names, declared_name, declared_names, preceded_by_marker, squashed, txt,
                   unparenthesized, walk)

FORBIDDEN = {"break_statement", "continue_statement", "return_statement", "goto_statement",
             "for_statement", "while_statement", "do_statement"}


class StridedLoop:
    """One matched loop and what its body accesses."""

    def __init__(self, loop: Node, var: str, var_type: str, bound: Node):
        self.loop, self.var, self.var_type, self.bound = loop, var, var_type, bound
        self.body = loop.child_by_field_name("body")
        self.variant = assigned_names(self.body) | declared_names(self.body) | {var}
        self.aliases: dict[str, str] = {}  # const local -> base
        self.start, self.stride = "threadIdx.x", "blockDim.x"

    def offset_base(self, expr: Node) -> str | None:
        """`base` when expr == base + i with loop-invariant base, else None."""
        e = unparenthesized(expr)
        if e.type == "identifier":
            name = txt(e)
            if name == self.var:
                return "0"
            return self.aliases.get(name)
        if e.type == "binary_expression" and txt(e.child_by_field_name("operator")) == "+":
            left, right = e.child_by_field_name("left"), e.child_by_field_name("right")
            lb = self.offset_base(left)
            if lb is not None and self.invariant(right):
                return _plus(lb, txt(right))
            rb = self.offset_base(right)
            if rb is not None and self.invariant(left):
                return _plus(rb, txt(left))
        return None

    def invariant(self, n: Node) -> bool:
        return all(not (c.type == "identifier" and txt(c) in self.variant) and c.type != "call_expression"
                   and c.type != "subscript_expression" for c in walk(n))


def _plus(a: str, b: str) -> str:
    return b if a == "0" else f"{a} + {b}"


# (first index, accepted strides) of the loops we vectorize, compared without spaces.
STRIDES = [("threadIdx.x", ("blockDim.x",)),
           ("blockIdx.x*blockDim.x+threadIdx.x", ("blockDim.x*gridDim.x", "gridDim.x*blockDim.x")),
           ("threadIdx.x+blockIdx.x*blockDim.x", ("blockDim.x*gridDim.x", "gridDim.x*blockDim.x")),
           ("blockDim.x*blockIdx.x+threadIdx.x", ("blockDim.x*gridDim.x", "gridDim.x*blockDim.x")),
           # the same along the grid's y axis (a row per blockIdx.x, its columns over blockIdx.y):
           # the threads of one blockIdx.x cover the elements once, whatever else the grid holds
           ("blockIdx.y*blockDim.x+threadIdx.x", ("blockDim.x*gridDim.y", "gridDim.y*blockDim.x")),
           ("threadIdx.x+blockIdx.y*blockDim.x", ("blockDim.x*gridDim.y", "gridDim.y*blockDim.x")),
           ("blockDim.x*blockIdx.y+threadIdx.x", ("blockDim.x*gridDim.y", "gridDim.y*blockDim.x"))]


def index_form(n: Node | None, block_names: frozenset[str] = frozenset()) -> str:
    """`squashed` of an index expression with the types of its casts left out (`(uint64_t)blockIdx.x
    * blockDim.x` reads as `blockIdx.x*blockDim.x`: the cast only widens the arithmetic) and the
    names or literals in `block_names` (known to equal blockDim.x at every launch) read as
    `blockDim.x`."""
    if n is None:
        return ""
    out = []

    def visit(m: Node) -> None:
        if m.type == "comment":
            return
        if m.type == "cast_expression":
            visit(m.child_by_field_name("value"))
            return
        if m.child_count == 0 or m.type == "number_literal":
            out.append("blockDim.x" if txt(m) in block_names else txt(m))
            return
        for c in m.children:
            visit(c)
    visit(n)
    return "".join(out)


def match_loop(loop: Node, aliases: dict[str, str] | None = None) -> StridedLoop | None:
    """The loop, when it is a block- or grid-stride element loop. `aliases`: locals holding a
    thread index (`tid` for `threadIdx.x`), see base.index_aliases."""
    if loop.type != "for_statement" or preceded_by_marker(loop):
        return None
    init, cond, upd = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update"))
    b = loop.child_by_field_name("body")
    if init is None or cond is None or upd is None or b is None or b.type != "compound_statement":
        return None
    if init.type != "declaration":
        return None
    decls = init.children_by_field_name("declarator")
    if len(decls) != 1 or decls[0].type != "init_declarator":
        return None
    start = index_form(decls[0].child_by_field_name("value"))
    start = (aliases or {}).get(start, start)
    stride = next((st for s0, st in STRIDES if s0 == start), None)
    if stride is None and start.endswith(".thread_rank()"):   # a cooperative-groups tile or block
        group = start[:-len(".thread_rank()")]
        stride = (f"{group}.size()", f"{group}.num_threads()")
    if stride is None:
        return None
    var = txt(decls[0].child_by_field_name("declarator"))
    if cond.type != "binary_expression" or txt(cond.child_by_field_name("operator")) != "<" or \
            txt(cond.child_by_field_name("left")) != var:
        return None
    step = squashed(upd.child_by_field_name("right"))
    aliased = (aliases or {}).get(step)      # `i += stride` with `const int stride = blockDim.x;`
    step = aliased or step
    if upd.type != "assignment_expression" or txt(upd.child_by_field_name("operator")) != "+=" or \
            txt(upd.child_by_field_name("left")) != var or step not in stride:
        return None
    if any(n.type in FORBIDDEN for n in walk(b) if n != b) or \
            any(n.type == "call_expression" and "sync" in txt(n.child_by_field_name("function")) for n in walk(b)):
        return None
    m = StridedLoop(loop, var, txt(init.child_by_field_name("type")), cond.child_by_field_name("right"))
    # the step as the built-ins spell it (a rewrite reads `gridDim` in it), the start as written
    m.start, m.stride = txt(decls[0].child_by_field_name("value")), aliased or txt(upd.child_by_field_name("right"))
    if not m.invariant(m.bound) or var in assigned_names(b):
        return None
    # const aliases `const T idx = base + i;` at the top level of the body
    for stmt in b.named_children:
        if stmt.type == "declaration" and any(c.type == "type_qualifier" and txt(c) == "const" for c in stmt.children):
            for d in stmt.children_by_field_name("declarator"):
                name, _ = declared_name(d)
                v = d.child_by_field_name("value")
                if name and v is not None and name not in assigned_names(b):
                    ob = m.offset_base(v)
                    if ob is not None:
                        m.aliases[name] = ob
    return m
