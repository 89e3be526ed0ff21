"""Vectorized loads and stores for strided element loops.

Recognises the block-stride loop `for (T i = threadIdx.x; i < N; i += blockDim.x)` (and the
grid-stride loop `for (T i = blockIdx.x * blockDim.x + threadIdx.x; i < N; i += blockDim.x * gridDim.x)`)
whose element accesses are `P[base + i]` (directly or through a `const` alias such as
`idx = row * n + i`) with loop-invariant `base`. Each thread then moves VEC consecutive
elements per step with one 16-byte (or 8/4-byte) load per array, runs the original body on
registers for each element (unrolled), and stores whole vectors. Rows whose base is not aligned
take the original scalar loop; the remainder of aligned rows runs in a scalar tail loop.
"""
from __future__ import annotations

from dataclasses import dataclass

from tree_sitter import Node

from . import base
from .base import ELEM_SIZES, Context, Edit, Rewrite, body, pointer_params
from .tree import apply_edits, assigned_names, declared_name, declared_names, line_indent, preceded_by_marker, txt, walk

CHUNK = {16: "uint4", 8: "uint2", 4: "unsigned int"}
FORBIDDEN = {"break_statement", "continue_statement", "return_statement", "goto_statement",
             "for_statement", "while_statement", "do_statement"}


@dataclass
class Access:
    node: Node
    array: str
    base: str          # offset of element i, minus i: '(token * 2 * d)' or '0'
    store: bool


def _strip(n: Node) -> Node:
    while n.type == "parenthesized_expression" and n.named_children:
        n = n.named_children[0]
    return n


class _Loop:
    """One matched loop and what its body accesses."""

    def __init__(self, loop: Node, var: str, var_type: str, bound: Node):
        self.loop, self.var, self.var_type, self.bound = loop, var, var_type, bound
        self.body = loop.child_by_field_name("body")
        self.variant = assigned_names(self.body) | declared_names(self.body) | {var}
        self.aliases: dict[str, str] = {}  # const local -> base
        self.start, self.stride = "threadIdx.x", "blockDim.x"

    def offset_base(self, expr: Node) -> str | None:
        """`base` when expr == base + i with loop-invariant base, else None."""
        e = _strip(expr)
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


def _at(array: str, base_: str) -> str:
    return array if base_ == "0" else f"{array} + ({base_})"


def _paren(e: str) -> str:
    return e if e in ("threadIdx.x", "blockDim.x") else f"({e})"


def _plus(a: str, b: str) -> str:
    return b if a == "0" else f"{a} + {b}"


# (first index, accepted strides) of the loops we vectorize, compared without spaces.
STRIDES = [("threadIdx.x", ("blockDim.x",)),
           ("blockIdx.x*blockDim.x+threadIdx.x", ("blockDim.x*gridDim.x", "gridDim.x*blockDim.x")),
           ("threadIdx.x+blockIdx.x*blockDim.x", ("blockDim.x*gridDim.x", "gridDim.x*blockDim.x")),
           ("blockDim.x*blockIdx.x+threadIdx.x", ("blockDim.x*gridDim.x", "gridDim.x*blockDim.x"))]


def _squash(n: Node | None) -> str:
    """The expression's tokens without spaces (leaves of the tree, so comments drop out)."""
    if n is None:
        return ""
    return "".join(txt(c) for c in walk(n) if c.child_count == 0 and c.type != "comment")


def match_loop(loop: Node) -> _Loop | None:
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
    start = _squash(decls[0].child_by_field_name("value"))
    stride = next((st for s0, st in STRIDES if s0 == start), None)
    if stride is None:
        return None
    var = txt(decls[0].child_by_field_name("declarator"))
    if cond.type != "binary_expression" or txt(cond.child_by_field_name("operator")) != "<" or \
            txt(cond.child_by_field_name("left")) != var:
        return None
    if upd.type != "assignment_expression" or txt(upd.child_by_field_name("operator")) != "+=" or \
            txt(upd.child_by_field_name("left")) != var or _squash(upd.child_by_field_name("right")) not in stride:
        return None
    if any(n.type in FORBIDDEN for n in walk(b) if n != b) or \
            any(n.type == "call_expression" and "sync" in txt(n.child_by_field_name("function")) for n in walk(b)):
        return None
    m = _Loop(loop, var, txt(init.child_by_field_name("type")), cond.child_by_field_name("right"))
    m.start, m.stride = txt(decls[0].child_by_field_name("value")), txt(upd.child_by_field_name("right"))
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


def plan_accesses(m: _Loop, ptrs: dict) -> list[Access] | None:
    accesses: list[Access] = []
    touched: dict[str, list[Node]] = {}
    for n in walk(m.body):
        if n.type != "subscript_expression":
            continue
        arr = txt(n.child_by_field_name("argument"))
        if arr not in ptrs:
            continue
        touched.setdefault(arr, []).append(n)
        idx = n.child_by_field_name("indices") or n.child_by_field_name("index")
        if idx is None:
            for c in n.named_children[1:]:
                idx = c
        if idx is not None and idx.type == "subscript_argument_list":
            idx = idx.named_children[0] if len(idx.named_children) == 1 else None
        ob = m.offset_base(idx) if idx is not None else None
        from .tree import is_lvalue
        accesses.append(Access(n, arr, ob if ob is not None else "", is_lvalue(n)))
    chosen: list[Access] = []
    for arr, nodes in touched.items():
        acc = [a for a in accesses if a.array == arr]
        p = ptrs[arr]
        if p.elem not in ELEM_SIZES:
            continue
        written = any(a.store for a in acc)
        if any(a.base == "" for a in acc):
            if written:
                return None  # a scalar write we cannot place relative to vector loads
            continue        # irregular reads only: stay scalar
        if written:
            if not p.restrict or len({a.base for a in acc}) != 1:
                return None
            stores = [a for a in acc if a.store]
            if len(stores) != 1:
                return None
            stmt = stores[0].node.parent
            if stmt.type != "assignment_expression" or txt(stmt.child_by_field_name("operator")) != "=" or \
                    stmt.parent is None or stmt.parent.type != "expression_statement" or \
                    stmt.parent.parent != m.body:
                return None
            if any(a.node.start_byte > stores[0].node.start_byte for a in acc if not a.store):
                return None  # a read after the write would see the stale vector
        chosen.extend(acc)
    # Any pointer written in the loop must be restrict (loads are hoisted above stores).
    for arr, nodes in touched.items():
        if any(a.store for a in accesses if a.array == arr) and not ptrs[arr].restrict:
            return None
    return chosen if any(True for _ in chosen) else None


class Vectorize(base.Transform):
    def __init__(self, width: int = 16):
        self.width = width
        self.name = "vectorize" if width == 16 else f"vectorize{width * 8}"
        self.title = f"{width * 8}-bit vectorized loads/stores in strided element loops"
        self.expected = (f"{width}-byte memory transactions: fewer load/store instructions and more bytes in "
                         f"flight per thread (memory-bound kernels)")

    def apply(self, text: str, ctx: Context) -> Rewrite | None:
        sc = base.scope(text, ctx.kernel)
        if sc is None:
            return None
        fn = sc.kernel
        ptrs = pointer_params(fn)
        data = text.encode("utf-8")
        edits, changes = [], []
        counter = [0]
        for loop in [n for n in walk(body(fn)) if n.type == "for_statement"]:
            m = match_loop(loop)
            if m is None:
                continue
            acc = plan_accesses(m, ptrs)
            if not acc:
                continue
            sizes = {ELEM_SIZES[ptrs[a.array].elem] for a in acc}
            if max(sizes) > self.width or self.width % min(sizes):
                continue
            vec = self.width // min(sizes)
            if vec < 2:
                continue
            if ctx.block_threads and ctx.row_elements.get(txt(m.bound)):
                # Keep at least an eighth of the block's threads busy at the timed sizes.
                n = ctx.row_elements[txt(m.bound)]
                if n // vec < ctx.block_threads // 8 and vec > 2:
                    continue
            code = self._emit(m, acc, ptrs, vec, data, counter)
            edits.append(Edit(loop.start_byte, loop.end_byte, code))
            arrays = sorted({a.array for a in acc})
            changes.append(f"loop over `{txt(m.bound)}`: {vec} elements per step via {self.width}-byte "
                           f"accesses to {', '.join(f'`{a}`' for a in arrays)}; scalar tail and misaligned rows")
        if not edits:
            return None
        return Rewrite(self.name, apply_edits(text, edits), tuple(changes))

    def _emit(self, m: _Loop, acc: list[Access], ptrs, vec: int, data: bytes, counter: list[int]) -> str:
        ind = line_indent(data, m.loop.start_byte)
        i1, i2, i3 = ind + "  ", ind + "    ", ind + "      "
        u = counter[0]
        counter[0] += 1
        sfx = f"_{u}" if u else ""
        chunk = CHUNK[self.width]
        T = m.var_type
        loads: dict[tuple[str, str], str] = {}
        stores: dict[str, str] = {}
        lines_load, lines_store, decls = [], [], []
        body_edits = []
        for a in acc:
            elem = ptrs[a.array].elem
            nbytes = vec * ELEM_SIZES[elem]
            nchunks = nbytes // self.width
            if a.store:
                if a.array not in stores:
                    v = f"astra_s{len(stores)}{sfx}"
                    stores[a.array] = v
                    decls.append(f"{i2}alignas(16) {elem} {v}[astra_vec{sfx}];")
                    for c in range(nchunks):
                        lines_store.append(f"{i2}reinterpret_cast<{chunk}*>({_at(a.array, a.base)} + astra_i0{sfx})"
                                           f"[{c}] = reinterpret_cast<const {chunk}*>({v})[{c}];")
                body_edits.append(Edit(a.node.start_byte, a.node.end_byte, f"{stores[a.array]}[astra_k{sfx}]"))
            else:
                key = (a.array, a.base)
                if key not in loads:
                    v = f"astra_v{len(loads)}{sfx}"
                    loads[key] = v
                    decls.append(f"{i2}alignas(16) {elem} {v}[astra_vec{sfx}];")
                    for c in range(nchunks):
                        lines_load.append(f"{i2}reinterpret_cast<{chunk}*>({v})[{c}] = reinterpret_cast<const "
                                          f"{chunk}*>({_at(a.array, a.base)} + astra_i0{sfx})[{c}];")
                body_edits.append(Edit(a.node.start_byte, a.node.end_byte, f"{loads[key]}[astra_k{sfx}]"))
        bases = sorted({(a.array, a.base) for a in acc})
        aligned = " &&\n".join(f"{i1}    reinterpret_cast<size_t>({_at(arr, b)}) % {self.width} == 0"
                               for arr, b in bases)
        # The body, with vectorized accesses replaced, re-indented under the unrolled loop.
        b = m.body
        # Aliases (`idx = base + i`) and `i` itself may be left unused once accesses are vectors.
        replaced = [(a.node.start_byte, a.node.end_byte) for a in acc]
        def live(name: str, skip: Node | None = None) -> bool:
            return any(n.type == "identifier" and txt(n) == name and
                       not any(s <= n.start_byte < e for s, e in replaced) and
                       not (skip is not None and skip.start_byte <= n.start_byte < skip.end_byte)
                       for n in walk(b))
        for stmt in b.named_children:
            if stmt.type == "declaration":
                names = [declared_name(d)[0] for d in stmt.children_by_field_name("declarator")]
                if names and all(n in m.aliases and not live(n, stmt) for n in names):
                    body_edits.append(Edit(stmt.start_byte, stmt.end_byte, ""))
                    replaced.append((stmt.start_byte, stmt.end_byte))
        need_var = live(m.var)
        rel = [Edit(e.start - b.start_byte, e.end - b.start_byte, e.text) for e in body_edits]
        inner = apply_edits(txt(b), rel).replace("\n" + ind, "\n" + i3)
        inner = "\n".join(line for line in inner.split("\n") if line.strip())
        tail_body = txt(b)
        var = m.var
        return (
            f"// astra: vectorized ({vec} elements per step, {self.width}-byte accesses); scalar tail\n"
            f"{ind}{{\n"
            f"{i1}constexpr int astra_vec{sfx} = {vec};\n"
            f"{i1}const {T} astra_n{sfx} = {txt(m.bound)};\n"
            f"{i1}const bool astra_aligned{sfx} =\n{aligned};\n"
            f"{i1}const {T} astra_vec_end{sfx} = astra_aligned{sfx} ? astra_n{sfx} / astra_vec{sfx} * astra_vec{sfx} : 0;\n"
            f"{i1}for ({T} astra_i0{sfx} = {_paren(m.start)} * astra_vec{sfx}; astra_i0{sfx} < astra_vec_end{sfx};\n"
            f"{i1}     astra_i0{sfx} += {_paren(m.stride)} * astra_vec{sfx}) {{\n"
            + "\n".join(decls) + "\n"
            + "\n".join(lines_load) + ("\n" if lines_load else "")
            + f"{i2}#pragma unroll\n"
            f"{i2}for (int astra_k{sfx} = 0; astra_k{sfx} < astra_vec{sfx}; ++astra_k{sfx}) {{\n"
            + (f"{i3}const {T} {var} = astra_i0{sfx} + astra_k{sfx};\n" if need_var else "") +
            f"{i3}{inner}\n"
            f"{i2}}}\n"
            + "\n".join(lines_store) + ("\n" if lines_store else "")
            + f"{i1}}}\n"
            f"{i1}// astra: scalar tail (and whole rows that are not aligned)\n"
            f"{i1}for ({T} {var} = astra_vec_end{sfx} + {_paren(m.start)}; {var} < astra_n{sfx}; {var} += {m.stride}) "
            + tail_body.replace("\n" + ind, "\n" + i1) + "\n"
            f"{ind}}}"
        )
