"""Keep a row on chip between two passes: a row-norm kernel that sums squares over its row in one
block-stride loop, reduces across the block, then normalises in a second loop with the same header
reads the row from global memory twice. The first pass now leaves each element it reads (or the
value it writes there) in a static shared-memory buffer, slot = the loop variable, and the second
pass reads that slot instead; elements past the buffer's end are read from global memory as
before, so the rewrite is right at any row length. The slot is written and read by the same thread
(identical loop headers), so no barrier is needed for it.

Passes over a kernel unless every use of the array in the two loops and between them is a
subscript by the same index expression, a store only in the first pass, at the top level of its
body, of a plain name (the value cached is the value stored, and the last store wins), no store
in the second pass or between the passes, and every other pointer written there provably apart
from it (both `__restrict__`)."""
from __future__ import annotations

from tree_sitter import Node

from . import base
from .base import Context, Edit, Rewrite, body
from .loops import match_loop
from .tree import (apply_edits, assigned_names, declared_name, declared_names, function_name, functions, is_kernel,
                   is_lvalue, line_indent, squashed, txt, unparenthesized, walk)

BUDGET = 16384      # bytes of static shared memory for the row: 8192 half or 4096 float elements
CONDITIONAL = {"if_statement", "conditional_expression", "switch_statement", "lambda_expression"}


class RowCache(base.Transform):
    name = "row_cache"
    title = "keep the row in shared memory between the two passes"
    note = "the first pass keeps the row in shared memory; the second reads it there, not global memory"
    expected = "one global read of the row instead of two: about a third less traffic for a row norm"

    def rewrite(self, text: str, ctx: Context, sc: base.Scope, params: dict) -> Rewrite | None:
        budget = int(params.get("bytes", BUDGET)) // 16 * 16   # whole 16-byte words (the buffer's type)
        if budget <= 0 or budget > 32768:
            return None
        edits: list[Edit] = []
        changes: list[str] = []
        # every overload of the kernel's name (`enable_if` variants: the spec may instantiate any)
        for fn in (f for f in functions(sc.root) if is_kernel(f) and function_name(f) == function_name(sc.kernel)):
            if "astra_row_words" in txt(fn):
                return None     # the row is cached already
            pointers = _pointers(fn)
            plan = next((p for f, s, b in _loop_pairs(body(fn)) if (p := _plan(f, s, b, pointers))), None)
            if plan is not None:
                edits += _edits(text, plan, budget)
                changes.append(f"the first pass keeps {plan.what} in shared memory ({budget} bytes); the second pass "
                               f"reads `{plan.array}[{plan.index}]` there instead of global memory, past the buffer's "
                               "end as before")
        return Rewrite(self.name, apply_edits(text, edits), tuple(changes), {"bytes": budget}) if edits else None

    def alternatives(self, rw: Rewrite, ctx: Context) -> list[dict]:
        return [{"bytes": b} for b in (8192, 32768) if b != rw.params.get("bytes")]


class _Plan:   # the passes, the array kept, its element type, its index, the loop variable (the slot), and where
    def __init__(self, first: Node, second: Node, array: str, elem: str, index: str, var: str):
        self.first, self.second, self.array, self.elem, self.index, self.var = first, second, array, elem, index, var
        self.stores: list[tuple[Node, str]] = []     # pass-1 statements `A[E] = x;` and their x
        self.loads1: list[Node] = []                 # pass-1 reads of A[E] (used when nothing is stored)
        self.loads2: list[Node] = []                 # pass-2 reads of A[E]
        self.what = ""


def _pointers(fn: Node) -> dict[str, tuple[str | None, bool, set[str]]]:
    """Pointer name -> (element type, declared `__restrict__`, names it is derived from): the
    kernel's pointer parameters and local pointer declarations. The element type is None where
    it cannot be read (an `auto` pointer not initialised by a cast)."""
    out: dict[str, tuple[str | None, bool, set[str]]] = {}
    for p in base.pointer_params(fn).values():
        out[p.name] = (_unconst(p.elem), p.restrict, set())
    for d in (n for n in walk(body(fn)) if n.type == "declaration"):
        t = d.child_by_field_name("type")
        for decl in d.children_by_field_name("declarator"):
            name, ptr = declared_name(decl)
            if not (name and ptr):
                continue
            inner = decl.child_by_field_name("declarator") if decl.type == "init_declarator" else decl
            value = decl.child_by_field_name("value") if decl.type == "init_declarator" else None
            if inner is not None and inner.type == "array_declarator":
                continue    # a local or shared array: never global memory
            elem = None if t is None or t.type == "placeholder_type_specifier" else _unconst(txt(t))
            if elem is None and value is not None:
                elem = _cast_type(value)
            if inner is None or inner.type != "pointer_declarator" or txt(inner).count("*") != 1:
                elem = None     # an array of pointers, a pointer to pointer: not a row
            derived = {txt(n) for n in walk(value) if n.type == "identifier"} if value is not None else set()
            out[name] = (elem, "__restrict__" in txt(inner), derived)
    return out


def _cast_type(value: Node) -> str | None:
    """T of `reinterpret_cast<T*>(p)` / `(T*) p` (the pointed-to type, without const)."""
    v = unparenthesized(value)
    desc = None
    if v.type == "cast_expression":
        desc = v.child_by_field_name("type")
    elif v.type == "call_expression" and v.child_by_field_name("function").type == "template_function":
        f = v.child_by_field_name("function")
        if txt(f.child_by_field_name("name")) in ("reinterpret_cast", "static_cast"):
            args = [c for c in f.child_by_field_name("arguments").named_children if c.type == "type_descriptor"]
            desc = args[0] if len(args) == 1 else None
    decl, t = (None, None) if desc is None else (desc.child_by_field_name("declarator"), desc.child_by_field_name("type"))
    if decl is None or t is None or decl.type != "abstract_pointer_declarator" or decl.named_child_count:
        return None
    return _unconst(txt(t))


def _unconst(t: str) -> str | None:
    words = [w for w in t.replace("__restrict__", " ").split() if w not in ("const", "volatile")]
    return " ".join(words) or None


def _loop_pairs(fn_body: Node):
    """(first, second, the statements between) block-stride loops in one block with the same
    header, first before second (between them, in a row norm: the block's reduction)."""
    for block in (n for n in walk(fn_body) if n.type == "compound_statement"):
        stmts = [c for c in block.named_children if c.type != "comment"]
        for i, a in enumerate(stmts):
            ma = match_loop(a)    # a block-stride loop: row-relative slots, one row a block
            if ma is None or (ma.start.replace(" ", ""), ma.stride.replace(" ", "")) != ("threadIdx.x", "blockDim.x"):
                continue
            for j in range(i + 1, len(stmts)):
                if stmts[j].type == "for_statement" and _header(a) == _header(stmts[j]) and match_loop(stmts[j]):
                    yield a, stmts[j], stmts[i + 1:j]
                    break


def _header(loop: Node) -> str:
    return "".join(squashed(loop.child_by_field_name(f)) for f in ("initializer", "condition", "update"))


def _plan(first: Node, second: Node, between: list[Node], pointers: dict) -> _Plan | None:
    """The array to cache and where, or None when no array the second pass reads may be cached."""
    var = match_loop(first).var   # type: ignore[union-attr]  # _loop_pairs matched it
    regions = [first, *between, second]
    seen: list[str] = []
    for n in walk(second.child_by_field_name("body")):
        if n.type == "subscript_expression" and n.child_by_field_name("argument").type == "identifier":
            a = txt(n.child_by_field_name("argument"))
            if a not in seen and pointers.get(a, (None,))[0] is not None:
                seen.append(a)
    for a in seen:
        plan = _plan_for(a, var, first, second, between, regions, pointers)
        if plan is not None:
            return plan
    return None


def _plan_for(a: str, var: str, first: Node, second: Node, between: list[Node], regions: list[Node],
              pointers: dict) -> _Plan | None:
    elem, restrict, made_from = pointers[a]
    bases = made_from & set(pointers)
    if any(a in declared_names(r) for r in regions):
        return None     # a pointer of that name declared in a pass: another row in each
    subs: list[tuple[Node, Node]] = []      # (subscript, the region it is in)
    for r in regions:
        for n in walk(r):
            if n.type != "identifier" or (txt(n) != a and txt(n) not in bases):
                continue
            p = n.parent
            if txt(n) != a or p is None or p.type != "subscript_expression" or p.child_by_field_name("argument") != n:
                return None     # the array (or what it is made from) used otherwise: passed, offset, aliased
            subs.append((p, r))
    index = {squashed(s.child_by_field_name("indices")) for s, _ in subs}
    if len(index) != 1 or not any(r is first for _, r in subs):
        return None
    sample = subs[0][0].child_by_field_name("indices")
    plan = _Plan(first, second, a, elem, txt(sample)[1:-1].strip(), var)
    if not _same_element(sample, var, first, second, regions):
        return None
    fbody = first.child_by_field_name("body")
    for s, r in subs:
        if is_lvalue(s):
            stmt = s.parent.parent if s.parent is not None else None
            rhs = s.parent.child_by_field_name("right") if s.parent is not None else None
            if r is not first or s.parent.type != "assignment_expression" or txt(
                    s.parent.child_by_field_name("operator")) != "=" or stmt is None or \
                    stmt.type != "expression_statement" or stmt.parent != fbody or rhs is None or \
                    rhs.type != "identifier" or txt(rhs) == a:
                return None     # written where the cache cannot follow it
            plan.stores.append((stmt, txt(rhs)))
        elif r is first:
            plan.loads1.append(s)
        elif r is second:
            plan.loads2.append(s)
        else:
            return None         # read between the passes: leave such kernels alone
    if not plan.loads2 or (not plan.stores and not all(_unconditional(s, fbody) for s in plan.loads1)):
        return None             # the first pass may not read every element the second reads
    plan.what = f"what it stores in `{a}`" if plan.stores else f"each element of `{a}` it reads"
    return plan if _others_apart(a, restrict, regions, pointers) else None


def _same_element(index: Node, var: str, first: Node, second: Node, regions: list[Node]) -> bool:
    """Every name in the index means the same in both passes: the loop variable, a name no region
    declares or assigns, or a local declared by the same statement at the top of both bodies and
    never assigned, whose own names mean the same (followed through); no calls, no memory reads."""
    b1, b2 = first.child_by_field_name("body"), second.child_by_field_name("body")
    assigned = set().union(*(assigned_names(r) for r in regions))
    declared = set().union(*(declared_names(r) for r in regions))
    todo, done = [index], set()
    while todo:
        for n in walk(todo.pop()):
            name = txt(n)
            if n.type in ("call_expression", "subscript_expression", "pointer_expression") or txt(n) == "->":
                return False    # an index read from memory may differ between the passes
            if n.type != "identifier" or name == var or name in done:
                continue
            if name in assigned:
                return False
            done.add(name)
            d1, d2 = _top_declaration(b1, name), _top_declaration(b2, name)
            if d1 is None or d2 is None:
                if name in declared:
                    return False
            elif squashed(d1) != squashed(d2) or len(d1.children_by_field_name("declarator")) != 1:
                return False
            else:
                todo.append(d1.children_by_field_name("declarator")[0])
    return True


def _top_declaration(b: Node, name: str) -> Node | None:
    return next((st for st in b.named_children if st.type == "declaration" and
                 any(declared_name(d)[0] == name for d in st.children_by_field_name("declarator"))), None)


def _unconditional(sub: Node, fbody: Node) -> bool:
    p = sub.parent
    while p is not None and p != fbody:
        if p.type in CONDITIONAL or (p.type == "binary_expression" and
                                     txt(p.child_by_field_name("operator")) in ("&&", "||")):
            return False
        p = p.parent
    return True


def _others_apart(a: str, restrict: bool, regions: list[Node], pointers: dict) -> bool:
    """Every other pointer the passes write, or hand to a call, provably does not reach the row:
    both declared `__restrict__`, neither made from the other."""
    def apart(w: str) -> bool:
        if w not in pointers:
            return True         # a shared or local array: never global memory
        _, w_restrict, w_bases = pointers[w]
        return bool(restrict and w_restrict and a not in w_bases and w not in pointers[a][2])
    for r in regions:
        for n in walk(r):
            if n.type in ("subscript_expression", "pointer_expression") and is_lvalue(n):
                target = n.child_by_field_name("argument")
                if target is None or target.type != "identifier":
                    return False
                if txt(target) != a and not apart(txt(target)):
                    return False
            elif n.type == "call_expression":
                args = n.child_by_field_name("arguments")
                if args is None or any(c.type == "identifier" and txt(c) in pointers and not _read(c) and
                                       not apart(txt(c)) for c in walk(args)):
                    return False
    return True


def _read(n: Node) -> bool:
    """`n` is the array of a subscript read (an element passed by value, not the pointer)."""
    p = n.parent
    return p is not None and p.type == "subscript_expression" and p.child_by_field_name("argument") == n \
        and not is_lvalue(p)


def _edits(text: str, plan: _Plan, budget: int) -> list[Edit]:
    data = text.encode("utf-8")
    first, second = plan.first, plan.second
    ind = line_indent(data, first.start_byte)
    t, v, a, e = plan.elem, plan.var, plan.array, plan.index
    guard = f"{v} < astra_row_cap"
    edits = [Edit(first.start_byte, first.start_byte,
                  f"// astra: the row kept in shared memory for the second pass (past its end: global memory)\n"
                  # 16-byte words: aligned for any element, and no constructor (c10::Half's) runs in shared
                  # memory; `__align__` before the type is no C++ the parsers read
                  f"{ind}__shared__ float4 astra_row_words[{budget // 16}];\n"
                  f"{ind}{t}* const astra_row = reinterpret_cast<{t}*>(astra_row_words);\n"
                  f"{ind}constexpr int astra_row_cap = (int)({budget} / sizeof({t}));\n{ind}")]
    if plan.stores:
        for stmt, x in plan.stores:
            edits.append(Edit(stmt.end_byte, stmt.end_byte,
                              f"\n{line_indent(data, stmt.start_byte)}if ({guard}) astra_row[{v}] = {x};"))
    else:
        fbody = first.child_by_field_name("body")
        top = plan.loads1[0]
        while top.parent != fbody:
            top = top.parent
        sind = line_indent(data, top.start_byte)
        edits.append(Edit(top.start_byte, top.start_byte,
                          f"{t} astra_row_v = {a}[{e}];\n{sind}if ({guard}) astra_row[{v}] = astra_row_v;\n{sind}"))
        edits += [Edit(s.start_byte, s.end_byte, "astra_row_v") for s in plan.loads1]
    edits.append(Edit(second.start_byte, second.start_byte,
                      f"// astra: the second pass reads the row kept in shared memory\n{line_indent(data, second.start_byte)}"))
    return edits + [Edit(s.start_byte, s.end_byte, f"({guard} ? astra_row[{v}] : {txt(s)})") for s in plan.loads2]
