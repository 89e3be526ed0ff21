"""Strided loops that keep too few loads in flight: K steps of the loop at a time, the loads of
all K issued before the first step's work (`batch_loads`).

A grid- or block-stride loop on a grid the program fixes (a histogram's 240 blocks, a reduction's
64) gives each thread many steps, and each step's load waits for memory before the step's work
(shared-memory atomics, a running sum) can start: with few threads resident the kernel is bound by
latency far below the copy ceiling. Recognises

    for (T v = S; v < N; v += ST) BODY            (any invariant S, N, ST; BODY free of jumps,
                                                   nested loops, barriers and warp collectives)
    T v = S; ... while (v < N) { BODY v += ST; }   (the same loop as real reductions write it:
                                                   the samples' reduce6 and cg_reduce)

and reads `X[e]` (or `__ldg(&X[e])` and the other load intrinsics) at the top level of BODY (not
under a condition) where `X` is memory the kernel never writes and `e` depends only on `v` and
invariants. The rewrite runs K steps per trip while all K would run — each step's own condition
checked in `T`, as the original checks it — with the K steps' reads first and then the K bodies in
their original order; what is left runs in the original loop. Every statement runs in the same
order with the same values: only reads of memory nothing writes move earlier, so the result is
exact (no float sum is reordered). Where the body writes memory other than shared memory or the
thread's own arrays, every hoisted buffer must be `__restrict__` (the programmer's promise that
no such write reaches it); otherwise the loop is left alone.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tree_sitter import Node

from . import base, writes
from .base import Context, Rewrite, body, pointer_params
from .tree import (Edit, apply_edits, assigned_names, callee, declared_name, declared_names, is_lvalue, line_indent,
                   preceded_by_marker, squashed, txt, unparenthesized, walk)
from .writes import LOADS

if TYPE_CHECKING:
    from ...model.spec import Spec

STEPS = (2, 4, 8, 16)   # 16: a grid the program fixes small (128 blocks of 128) needs that many loads in flight
PURE_CALLS = {"min", "max", "umin", "umax", "llmin", "llmax", "__umul24", "__mul24"}
COLLECTIVE = ("sync", "shfl", "ballot", "activemask", "__match", "__reduce", "barrier", "fence", "tiled_partition")
JUMPS = {"break_statement", "continue_statement", "return_statement", "goto_statement", "for_statement",
         "while_statement", "do_statement", "for_range_loop", "labeled_statement"}
CONDITIONAL = {"conditional_expression", "if_statement", "switch_statement", "lambda_expression",
               "sizeof_expression"}
UNEVALUATED = {"decltype", "alignof_expression", "typeid_expression", "template_argument_list"}
MAX_BODY = 2000          # characters of a body copied K times: a long one is not a loop of loads


def _pure_macros(sc: base.Scope, ctx: Context) -> set[str]:
    """Function-like macros of the file and its project headers that compute a value (no
    assignment in their body): `UMAD(a, b, c)` in a loop's start or stride is arithmetic."""
    from .tree import root
    out = set()
    for r in [sc.root] + [root(h) for h in ctx.headers]:
        for n in walk(r):
            if n.type != "preproc_function_def":
                continue
            name, value = n.child_by_field_name("name"), n.child_by_field_name("value")
            v = txt(value) if value is not None else ""
            flat = v.replace("==", "").replace("<=", "").replace(">=", "").replace("!=", "")
            if name is not None and "=" not in flat and "++" not in v and "--" not in v and ";" not in v:
                out.add(txt(name))
    return out


def _invariant(n: Node, variant: set[str], pure: set[str]) -> bool:
    """No name the loop changes, no memory read, no call but arithmetic macros and min/max."""
    for c in walk(n):
        if c.type == "identifier" and txt(c) in variant:
            return False
        if c.type in ("subscript_expression", "assignment_expression", "update_expression") or \
                (c.type == "pointer_expression" and txt(c.child(0)) == "*"):
            return False
        if c.type == "call_expression" and callee(c) not in pure | PURE_CALLS and not _integer_cast(c):
            return False
    return True


def _integer_cast(call: Node) -> bool:
    """`static_cast<T>(x)` with T an integer type: a conversion, which runs no code of its own."""
    f = call.child_by_field_name("function")
    if f is None or f.type != "template_function" or txt(f.child_by_field_name("name")) != "static_cast":
        return False
    targs = f.child_by_field_name("arguments")
    return targs is not None and len(targs.named_children) == 1 and txt(targs.named_children[0]) in base.INT_TYPES


class _Loop:
    def __init__(self, loop: Node, var: str, typ: str, bound: Node, stride: Node, stmts: list[Node]):
        self.loop, self.var, self.typ, self.bound, self.stride, self.stmts = loop, var, typ, bound, stride, stmts
        self.body = loop.child_by_field_name("body")
        init = loop.child_by_field_name("initializer")
        # a `for` declares its variable; a `while` steps one declared before it
        self.start = None if init is None else \
            txt(init.children_by_field_name("declarator")[0].child_by_field_name("value"))


def _variant(b: Node) -> set[str]:
    """The names the body may change: assigned, declared, or with their address taken."""
    taken = {txt(n.child_by_field_name("argument")) for n in walk(b)
             if n.type == "pointer_expression" and txt(n.child(0)) == "&" and
             n.child_by_field_name("argument") is not None and n.child_by_field_name("argument").type == "identifier"}
    return assigned_names(b) | declared_names(b) | taken


def _rewritten_before(loop: Node) -> bool:
    """Astra's marker or a `#pragma unroll` (which belongs to this loop) just before it."""
    prev = loop.prev_sibling
    return preceded_by_marker(loop) or (prev is not None and prev.type == "preproc_call")


def _match(loop: Node, pure: set[str]) -> _Loop | None:
    if _rewritten_before(loop):
        return None
    init, cond, upd, b = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update", "body"))
    if init is None or cond is None or upd is None or b is None or init.type != "declaration":
        return None
    decls = init.children_by_field_name("declarator")
    if len(decls) != 1 or decls[0].type != "init_declarator" or decls[0].child_by_field_name("declarator").type != \
            "identifier":
        return None
    var, typ = txt(decls[0].child_by_field_name("declarator")), txt(init.child_by_field_name("type"))
    if any(c.type == "type_qualifier" for c in init.children) or typ == "auto":
        return None   # `auto` steps would take the type of `v + ST`, not the loop's
    stmts = [c for c in b.named_children if c.type != "comment"] if b.type == "compound_statement" else [b]
    return _checked(loop, var, typ, cond, upd, b, stmts, pure)


def _match_while(loop: Node, kb: Node, pure: set[str]) -> _Loop | None:
    """`while (v < N) { BODY v += ST; }` with `v` a plain local declared before it."""
    if _rewritten_before(loop):
        return None
    clause, b = loop.child_by_field_name("condition"), loop.child_by_field_name("body")
    if clause is None or b is None or b.type != "compound_statement":
        return None
    inner = [c for c in clause.named_children if c.type != "comment"]
    stmts = [c for c in b.named_children if c.type != "comment"]
    if len(inner) != 1 or not stmts or stmts[-1].type != "expression_statement" or not stmts[-1].named_children:
        return None
    cond, upd = inner[0], stmts[-1].named_children[0]
    left = unparenthesized(cond).child_by_field_name("left") if unparenthesized(cond).type == "binary_expression" \
        else None
    if left is None or unparenthesized(left).type != "identifier":
        return None
    var = txt(unparenthesized(left))
    typ = _local_type(loop, var, kb)
    if typ is None:
        return None
    return _checked(loop, var, typ, cond, upd, b, stmts[:-1], pure)


def _local_type(loop: Node, var: str, kb: Node) -> str | None:
    """The type of `var` where it is a plain local (no qualifier, no storage class, not a pointer,
    array or reference) declared before `loop` in a block around it, and nothing in the kernel
    takes its address or binds a reference to it (so only the loop itself may change it)."""
    for n in walk(kb):
        if n.type == "pointer_expression" and txt(n.child(0)) == "&" and \
                txt(unparenthesized(n.child_by_field_name("argument"))) == var:
            return None
        if n.type == "reference_declarator" and any(c.type == "identifier" and txt(c) == var for c in walk(n.parent)):
            return None
    found = None
    p = loop.parent
    while p is not None and found is None:
        if p.type == "compound_statement":
            for st in p.named_children:
                if st.start_byte >= loop.start_byte or st.type != "declaration":
                    continue
                for d in st.children_by_field_name("declarator"):
                    core = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
                    if core is not None and core.type == "identifier" and txt(core) == var:
                        found = st
        if p == kb:
            break
        p = p.parent
    if found is None or any(c.type in ("type_qualifier", "storage_class_specifier", "attribute_specifier")
                            for c in found.children):
        return None
    typ = txt(found.child_by_field_name("type"))
    return None if typ == "auto" or "__shared__" in txt(found) else typ


def _checked(loop: Node, var: str, typ: str, cond: Node, upd: Node, b: Node, stmts: list[Node],
             pure: set[str]) -> _Loop | None:
    """The loop `v < N`, `v += ST` over `stmts`, where nothing in them changes `v`, N or ST."""
    cond = unparenthesized(cond)
    if cond.type != "binary_expression" or txt(cond.child_by_field_name("operator")) != "<" or \
            txt(unparenthesized(cond.child_by_field_name("left"))) != var:
        return None
    if upd.type != "assignment_expression" or txt(upd.child_by_field_name("operator")) != "+=" or \
            txt(upd.child_by_field_name("left")) != var:
        return None
    if len(txt(b)) > MAX_BODY or any(n.type in JUMPS for s in stmts for n in walk(s)):
        return None
    if any("asm" in n.type for s in stmts for n in walk(s)) or \
            any(n.type in ("type_qualifier", "storage_class_specifier") and txt(n) in ("__shared__", "static")
                for s in stmts for n in walk(s)):
        return None   # inline assembly may write anything; a copied `__shared__`/`static` local is another one
    if var in _changed(stmts) or \
            any(n.type == "identifier" and txt(n) == var and is_lvalue(n) for s in stmts for n in walk(s)):
        return None   # the body steps the loop itself, or hands its index out to be written
    variant = _variant(b) | {var}
    bound, stride = cond.child_by_field_name("right"), upd.child_by_field_name("right")
    if not _invariant(bound, variant, pure) or not _invariant(stride, variant, pure):
        return None
    return _Loop(loop, var, typ, bound, stride, stmts)


def _changed(stmts: list[Node]) -> set[str]:
    return set().union(*(assigned_names(s) | declared_names(s) for s in stmts))


# a local of the body naming a value of the step: (its statement's place, the type it converts to —
# None for `auto` —, its initializer)
Aliases = dict[str, tuple[int, str | None, Node]]


def _aliases(m: _Loop, pure: set[str]) -> Aliases:
    """Locals the body declares once, at its top level, of an integer type, from the loop variable,
    invariants and earlier such locals, and never changes (`const int64_t idx = (int64_t)row * n +
    v;`): in the statements after its own, the local is its initializer's value converted to its
    type, so a read indexed by it is the same read at that expression."""
    variant = set().union(*(_variant(s) for s in m.stmts))
    declared = [declared_name(d)[0] for n in walk(m.body)
                if n.type in ("declaration", "parameter_declaration", "optional_parameter_declaration")
                for d in n.children_by_field_name("declarator")]   # once: no inner block hides it
    changed = _changed_after_declaration(m.body)
    out: Aliases = {}
    for si, st in enumerate(m.stmts):
        if st.type != "declaration" or \
                any(c.type in ("storage_class_specifier", "attribute_specifier") for c in st.children) or \
                any(c.type == "type_qualifier" and txt(c) != "const" for c in st.children):
            continue
        typ = txt(st.child_by_field_name("type"))
        if typ not in base.INT_TYPES and typ != "auto":
            continue
        for d in st.children_by_field_name("declarator"):
            core = d.child_by_field_name("declarator") if d.type == "init_declarator" else None
            value = d.child_by_field_name("value") if d.type == "init_declarator" else None
            if core is None or core.type != "identifier" or value is None or value.type == "initializer_list":
                continue
            name = txt(core)
            if name == m.var or name in changed or declared.count(name) != 1:
                continue
            if _invariant(value, variant - set(out), pure):
                out[name] = (si, None if typ == "auto" else typ, value)
    return out


def _changed_after_declaration(b: Node) -> set[str]:
    """Names the body assigns, steps or takes the address of (a declaration's own value is none of these)."""
    taken = {txt(unparenthesized(n.child_by_field_name("argument"))) for n in walk(b)
             if n.type == "pointer_expression" and txt(n.child(0)) == "&" and n.child_by_field_name("argument") is not None}
    bound = {txt(c) for n in walk(b) if n.type == "reference_declarator" for c in walk(n.parent)
             if c.type == "identifier"}   # a reference bound to a local may change it
    return assigned_names(b) | taken | bound


def _reads(m: _Loop, read_only: set[str], pure: set[str], aliases: Aliases | None = None,
           same_extent: Callable[[str, str], bool] | None = None) -> list[Node]:
    """The reads of never-written memory that every step makes: at the top level of the body,
    under no condition, at an index of the loop variable, invariants and `aliases` declared in an
    earlier statement. A read under a condition of the step (`a[idx] || b[idx]`'s `b[idx]`) is one
    too where it is safe to make in every step: the step reads another buffer unconditionally at
    the same index and `same_extent` says the two hold as many elements (so both are in bounds)."""
    variant = set().union(*(_variant(s) for s in m.stmts))   # a `while`'s own step is not among them
    aliases = aliases or {}
    out: list[Node] = []
    maybe: list[Node] = []     # plain reads under a condition of the step
    for si, st in enumerate(m.stmts):
        known = {a for a, (at, _, _) in aliases.items() if at < si}
        for n in walk(st):
            if n.type != "subscript_expression":
                continue
            arr = n.child_by_field_name("argument")
            idx = n.child_by_field_name("indices") or n.child_by_field_name("index")
            if arr is None or arr.type != "identifier" or txt(arr) not in read_only or idx is None:
                continue
            node = n
            p = n.parent
            while p is not None and p.type == "parenthesized_expression":
                p = p.parent
            if p is not None and p.type == "pointer_expression" and txt(p.child(0)) == "&":
                call = p.parent.parent if p.parent is not None and p.parent.type == "argument_list" else None
                if call is None or call.type != "call_expression" or callee(call) not in LOADS or \
                        len(p.parent.named_children) != 1:
                    continue
                node = call
            elif writes.written(n) or (p is not None and p.type in ("field_expression", "subscript_expression")):
                continue
            if not _invariant(idx, variant - known, pure):
                continue
            if not _unconditional(node, st):
                if node is n and _evaluated(node, st):
                    maybe.append(node)
                continue
            if not any(o.start_byte <= node.start_byte and node.end_byte <= o.end_byte for o in out):
                out.append(node)
    if same_extent is not None:
        for n in maybe:
            arr, at = txt(n.child_by_field_name("argument")), squashed(_index(n))
            if any(o.type == "subscript_expression" and squashed(_index(o)) == at and
                   same_extent(txt(o.child_by_field_name("argument")), arr) for o in out) and \
                    not any(o.start_byte <= n.start_byte and n.end_byte <= o.end_byte for o in out):
                out.append(n)
    return out


def _index(sub: Node) -> Node | None:
    return sub.child_by_field_name("indices") or sub.child_by_field_name("index")


def _evaluated(node: Node, top: Node) -> bool:
    """`node` is evaluated, when it is, as the step runs: under `&&`, `||`, `?:` and `if` only,
    nothing that runs it elsewhere or never (a lambda, `sizeof`, `decltype`)."""
    p = node.parent
    while p is not None and p != top.parent:
        if p.type in CONDITIONAL - {"conditional_expression", "if_statement"} or p.type in UNEVALUATED:
            return False
        p = p.parent
    return True


def _same_extent(spec: Spec | None, params: set[str], kb: Node) -> Callable[[str, str], bool]:
    """Whether two pointer parameters hold as many elements at every size: the spec gives both
    buffers the same shape. Only parameters the kernel uses as nothing but the array of a subscript
    (no null test, no pointer arithmetic, not handed on: an optional input is not taken)."""
    plain = set(params)
    for n in walk(kb):
        if n.type == "identifier" and txt(n) in plain and not (
                n.parent is not None and n.parent.type == "subscript_expression" and
                n.parent.child_by_field_name("argument") == n):
            plain.discard(txt(n))

    def shape(name: str) -> tuple[str, ...] | None:
        a = spec.args.get(name) if spec is not None and name in plain else None
        if a is None or not a.pointer or a.null or a.table or a.struct or a.member_of or not a.shape:
            return None
        return tuple("".join(d.split()) for d in a.shape)
    return lambda a, b: a != b and shape(a) is not None and shape(a) == shape(b)


def _unconditional(node: Node, top: Node) -> bool:
    """`node` is evaluated whenever `top` runs: under no branch of it. The left operand of `&&`
    and `||` and the condition of `?:` or `if` are always evaluated; only the other parts are
    conditional (`mask_a[i] || mask_b[i]` always reads `mask_a[i]`)."""
    child, p = node, node.parent
    while p is not None and p != top.parent:
        first = None
        if p.type == "binary_expression" and txt(p.child_by_field_name("operator")) in ("&&", "||"):
            first = p.child_by_field_name("left")
        elif p.type in ("conditional_expression", "if_statement"):
            first = p.child_by_field_name("condition")
        elif p.type in CONDITIONAL:
            return False
        if first is not None and (first.start_byte, first.end_byte) != (child.start_byte, child.end_byte):
            return False
        child, p = p, p.parent
    return True


def _spelled(node: Node, var: str, new: str, aliases: Aliases) -> str:
    """`node`'s text at the step `new`: the loop variable renamed and each alias spelled as its
    initializer converted to its type (the value it holds there)."""
    edits = []
    for n in walk(node):
        if n.type != "identifier":
            continue
        name = txt(n)
        if name == var:
            edits.append(Edit(n.start_byte - node.start_byte, n.end_byte - node.start_byte, new))
        elif name in aliases:
            _, typ, value = aliases[name]
            inner = _spelled(value, var, new, aliases)
            edits.append(Edit(n.start_byte - node.start_byte, n.end_byte - node.start_byte,
                              f"(({typ})({inner}))" if typ else f"({inner})"))
    return apply_edits(txt(node), edits)


def _renamed(node: Node, var: str, new: str, replace: dict[tuple[int, int], str] | None = None) -> str:
    """`node`'s text with the loop variable renamed, and the nodes of `replace` put in."""
    edits = [Edit(n.start_byte - node.start_byte, n.end_byte - node.start_byte, new)
             for n in walk(node) if n.type == "identifier" and txt(n) == var]
    for (s, e), t in (replace or {}).items():
        edits = [x for x in edits if not (s <= x.start + node.start_byte < e)]
        edits.append(Edit(s - node.start_byte, e - node.start_byte, t))
    return apply_edits(txt(node), edits)


class BatchLoads(base.Transform):
    name = "batch_loads"
    title = "K steps of a strided loop at a time, their loads issued together"
    note = "several steps of the loop at a time, their loads issued before the first step's work"
    expected = ("a thread with many steps of a strided loop waits for each step's load before its work; "
                "issuing K steps' loads together keeps K times the bytes in flight, for latency-bound loops "
                "on a grid the program fixes")

    def rewrite(self, text: str, ctx: Context, sc: base.Scope, params: dict) -> Rewrite | None:
        steps = params.get("steps", 4)
        if steps not in STEPS:
            return None
        pure = _pure_macros(sc, ctx)
        kb = body(sc.kernel)
        params_ = pointer_params(sc.kernel)
        read_only = writes.read_only(kb, params_)
        shared, private = writes.shared_roots(kb, set(params_))
        pointers = set(params_) | writes.pointer_locals(kb)
        extent = _same_extent(sc.spec, set(params_), kb)
        data = text.encode("utf-8")
        edits, changes = [], []
        reach = base.collective_helpers(sc, COLLECTIVE)
        for loop in (n for n in walk(kb) if n.type in ("for_statement", "while_statement")):
            m = _match(loop, pure) if loop.type == "for_statement" else _match_while(loop, kb, pure)
            if m is None or base.calls_collective(m.stmts, reach, COLLECTIVE) or not self._enough_steps(m, ctx, steps):
                continue
            aliases = _aliases(m, pure)
            reads = _reads(m, read_only, pure, aliases, extent)
            if not reads:
                continue
            arrays = {txt(r) for n in reads for r in walk(n) if r.type == "identifier" and txt(r) in read_only}
            if not all(read_only[a] for a in arrays) and \
                    not writes.writes_only_private(m.stmts, sc, shared | private, pointers):
                continue
            edits.append(Edit(loop.start_byte, loop.end_byte, self._batched(m, reads, aliases, steps,
                                                                          line_indent(data, loop.start_byte))))
            changes.append(f"the loop over `{m.var}`: {steps} steps a trip, the loads of "
                           + ", ".join(f"`{a}`" for a in sorted(arrays)) + " of all of them issued first")
        if not edits:
            return None
        return Rewrite(self.name, apply_edits(text, edits), tuple(changes), {"steps": steps})

    @staticmethod
    def _enough_steps(m: _Loop, ctx: Context, steps: int) -> bool:
        """At the largest bench size each thread takes at least `steps` steps (when that can be
        told: a bound that is a scalar the spec sizes, a grid- or block-stride loop)."""
        n = ctx.row_elements.get(txt(unparenthesized(m.bound)))
        stride = txt(m.stride)
        threads = None
        if ctx.block_threads and "gridDim" in stride:
            threads = ctx.block_threads * (ctx.grid_blocks or 0)
        elif ctx.block_threads and "blockDim" in stride:
            threads = ctx.block_threads
        return n is None or not threads or n >= steps * threads

    @staticmethod
    def _batched(m: _Loop, reads: list[Node], aliases: Aliases, steps: int, ind: str) -> str:
        v, typ, st, bound = m.var, m.typ, txt(m.stride), txt(m.bound)
        i1, i2 = ind + "  ", ind + "    "
        lines = [f"// astra: {steps} steps of the loop a trip, the loads of all of them issued before the first "
                 "step's work (more bytes in flight); the rest in the loop as written", f"{ind}{{"]
        if m.start is not None:
            lines.append(f"{i1}{typ} {v} = {m.start};")
        lines += [f"{i1}for (;;) {{", f"{i2}const {typ} astra_s0 = {v};"]
        for k in range(1, steps):
            lines.append(f"{i2}const {typ} astra_s{k} = astra_s{k - 1} + ({st});")
        conds = " && ".join(f"astra_s{k} < ({bound})" for k in range(steps))
        lines.append(f"{i2}if (!({conds})) break;")
        names: dict[tuple[int, int], str] = {}
        for j, r in enumerate(reads):
            names[(r.start_byte, r.end_byte)] = f"astra_ld{j}"
        for k in range(steps):
            for j, r in enumerate(reads):
                lines.append(f"{i2}const auto astra_ld{j}_{k} = {_spelled(r, v, f'astra_s{k}', aliases)};")
        for k in range(steps):
            mapping = {span: f"{name}_{k}" for span, name in names.items()}
            copies = [_renamed(s, v, v, {sp: t for sp, t in mapping.items() if s.start_byte <= sp[0] and sp[1] <= s.end_byte})
                      for s in m.stmts]
            uses = any(n.type == "identifier" and txt(n) == v and
                       not any(a <= n.start_byte and n.end_byte <= b for a, b in names)
                       for s in m.stmts for n in walk(s))
            lines.append(f"{i2}{{")
            if uses:   # the step's own index, where the body still uses it after its reads moved up
                lines.append(f"{i2}  const {typ} {v} = astra_s{k};")
            lines += [f"{i2}  {c}" for c in copies]
            lines.append(f"{i2}}}")
        lines.append(f"{i2}{v} = astra_s{steps - 1} + ({st});")
        lines.append(f"{i1}}}")
        if m.start is None:
            lines.append(f"{i1}{txt(m.loop)}")
        else:
            cond, upd = txt(m.loop.child_by_field_name("condition")), txt(m.loop.child_by_field_name("update"))
            lines.append(f"{i1}for (; {cond}; {upd}) {txt(m.body)}")
        lines.append(f"{ind}}}")
        return "\n".join(lines)

    def alternatives(self, rw: Rewrite, ctx: Context) -> list[dict]:
        """More steps first (a latency-bound loop wants more loads in flight; the suite's tuner
        tries two points), then fewer."""
        cur = rw.params.get("steps", 4)
        return [{"steps": s} for s in STEPS if s > cur] + [{"steps": s} for s in reversed(STEPS) if s < cur]
