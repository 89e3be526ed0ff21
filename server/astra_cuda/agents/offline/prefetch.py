"""Row kernels that read their weights only after the block reductions: the weights' reads moved
into the first pass over the row, before the barriers (`prefetch`).

A row norm (exllamav2's rms_norm_kernel and layer_norm_kernel) reads its row in an unrolled loop,
reduces through shared memory and `__syncthreads()`, and only then reads the weights in a second
loop with the same header: two memory round trips per block, the second one exposed after the
barrier. Recognises, in the kernel body,

    for (int i = 0; i < N; i++) {          N: a template constant or a literal (so `pre` is an
        int c = E;                            array of registers); the same header, the same first
        if (G) break;   (or return)           statement and the same guard in both loops
        ...                                (no other jump)
    }
    ...                                    (no `return`, no `goto`)
    for (int i = 0; i < N; i++) { int c = E; if (G) break/return; ... P[c] ... }

where the first loop either precedes the second in a block around it or is in both branches of
an `if` that does, and `P[c]` is a read of a buffer the kernel never writes. The read moves into
the first loop, right after its guard, as `pre[i] = P[c];` under the same `if` conditions that
surround it in the second (those up to the block the two loops share), and the second loop reads
`pre[i]`.

Why it is exact: N is a constant, so `pre` has an entry per step; `i` runs 0..N-1 in both loops
and the body changes neither `i` nor `c`; E, G and the conditions use only `i`, `c`, builtins,
literals and names declared once and never assigned (parameters, top-level locals declared
before the first loop), without calls or memory reads, so at step `i` they have the same value in
both loops. The second loop reaches its read at step `i` only when G failed at every step up to
`i`, which is exactly when the first loop passed its guard at step `i` (it has no other jump), and
no `return` between the loops can stop the thread after the early read: the same element is read,
under the same conditions, by the same threads. The read returns the same value because nothing
writes P: the kernel never writes through it and it is `__restrict__` (or the kernel writes only
shared memory and its own arrays, so no alias of P can be written either). Anything else is left
alone.
"""
from __future__ import annotations

from tree_sitter import Node

from . import base, writes
from .base import Context, Rewrite, body, pointer_params
from .tree import Edit, apply_edits, assigned_names, declared_name, is_lvalue, line_indent, squashed, txt, walk

JUMPS = {"break_statement", "continue_statement", "return_statement", "goto_statement", "labeled_statement"}
BUILTINS = {"threadIdx", "blockIdx", "blockDim", "gridDim"}
PURE = {"identifier", "number_literal", "true", "false", "null", "unary_expression", "binary_expression",
        "parenthesized_expression", "field_identifier", "comment"}
# a read under any of these is under a condition the rule does not copy
UNSUPPORTED = {"conditional_expression", "switch_statement", "lambda_expression", "sizeof_expression",
               "for_statement", "while_statement", "do_statement", "for_range_loop", "case_statement"}


def _cond(ifn: Node) -> Node:
    """An `if`'s condition expression (inside its parentheses)."""
    c = ifn.child_by_field_name("condition")
    if c is not None and c.type == "condition_clause":
        v = c.child_by_field_name("value")
        c = v if v is not None else c.named_children[-1]
    return c


class _Form:
    """A loop `for (int i = 0; i < N; i++) { int c = E; if (G) break|return; ... }`."""

    def __init__(self, loop: Node, var: str, count: str, col: str, stmts: list[Node]):
        self.loop, self.var, self.count, self.col, self.stmts = loop, var, count, col, stmts
        self.key = (squashed(loop.child_by_field_name("initializer")), squashed(loop.child_by_field_name("condition")),
                    squashed(loop.child_by_field_name("update")), squashed(stmts[0]), squashed(_cond(stmts[1])))


def _template_constants(fn: Node) -> set[str]:
    p = fn.parent
    if p is None or p.type != "template_declaration":
        return set()
    plist = p.child_by_field_name("parameters")
    out = set()
    for d in (plist.named_children if plist is not None else []):
        if d.type in ("parameter_declaration", "optional_parameter_declaration"):
            t = txt(d.child_by_field_name("type"))
            name, ptr = declared_name(d.child_by_field_name("declarator"))
            if name and not ptr and t in ("int", "unsigned", "unsigned int", "size_t", "long", "short"):
                out.add(name)
    return out


def _form(loop: Node, consts: set[str]) -> _Form | None:
    init, cond, upd, b = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update", "body"))
    if init is None or cond is None or upd is None or b is None or b.type != "compound_statement" or \
            init.type != "declaration":
        return None
    decls = init.children_by_field_name("declarator")
    if len(decls) != 1 or decls[0].type != "init_declarator" or \
            squashed(decls[0].child_by_field_name("value")) != "0":
        return None
    var, _ = declared_name(decls[0])
    if var is None or decls[0].child_by_field_name("declarator").type != "identifier":
        return None
    if cond.type != "binary_expression" or txt(cond.child_by_field_name("operator")) != "<" or \
            txt(cond.child_by_field_name("left")) != var:
        return None
    count = cond.child_by_field_name("right")
    if not (count.type == "number_literal" and txt(count).isdigit() and int(txt(count)) > 0) and \
            not (count.type == "identifier" and txt(count) in consts):
        return None   # the steps must be a compile-time count: `pre` is an array of that many
    if squashed(upd) not in (f"{var}++", f"++{var}", f"{var}+=1"):
        return None
    stmts = [c for c in b.named_children if c.type != "comment"]
    if len(stmts) < 3 or stmts[0].type != "declaration" or stmts[1].type != "if_statement":
        return None
    cdecl = stmts[0].children_by_field_name("declarator")
    if len(cdecl) != 1 or cdecl[0].type != "init_declarator" or \
            cdecl[0].child_by_field_name("declarator").type != "identifier":
        return None
    col = txt(cdecl[0].child_by_field_name("declarator"))
    guard = stmts[1]
    cons = guard.child_by_field_name("consequence")
    if guard.child_by_field_name("alternative") is not None or cons is None or \
            cons.type not in ("break_statement", "return_statement") or cons.named_child_count:
        return None
    rest = stmts[2:]
    if any(n.type in JUMPS or "asm" in n.type for s in rest for n in walk(s)):
        return None   # another way out of the loop: a step past it would not reach the early read
    if {var, col} & (assigned_names(b) | {txt(n) for s in rest for n in walk(s) if n.type == "identifier" and
                                          is_lvalue(n)} | _declared(rest)):
        return None
    return _Form(loop, var, txt(count), col, stmts)


def _declared(nodes: list[Node]) -> set[str]:
    out = set()
    for s in nodes:
        for n in walk(s):
            if n.type in ("declaration", "parameter_declaration"):
                for d in n.children_by_field_name("declarator"):
                    name, _ = declared_name(d)
                    if name:
                        out.add(name)
    return out


class _Names:
    """Which names keep one value through the kernel: declared at most once (parameters, or a
    top-level local of the body), never assigned, never with their address taken."""

    def __init__(self, fn: Node, kb: Node):
        self.params = {declared_name(p.child_by_field_name("declarator"))[0] for p in
                       (c for c in fn.child_by_field_name("declarator").child_by_field_name("parameters").named_children)}
        self.count: dict[str, int] = {}
        self.top: dict[str, Node] = {}
        for n in walk(kb):
            if n.type in ("declaration", "parameter_declaration"):
                for d in n.children_by_field_name("declarator"):
                    name, _ = declared_name(d)
                    if name:
                        self.count[name] = self.count.get(name, 0) + 1
                        if n.parent == kb:
                            self.top[name] = n
        self.changed = assigned_names(kb) | {txt(n) for n in walk(kb) if n.type == "identifier" and is_lvalue(n)}

    def stable(self, name: str, before: Node) -> bool:
        if name in self.changed:
            return False
        c = self.count.get(name, 0)
        if c == 0:
            return True     # a parameter, a builtin, a macro or a template constant
        return name not in self.params and c == 1 and name in self.top and self.top[name].end_byte <= before.start_byte


def _pure(n: Node, ok: set[str], names: _Names, before: Node) -> bool:
    """Arithmetic over literals, builtins and names with one value (no call, no memory read)."""
    for c in (c for c in walk(n) if c.is_named):
        if c.type not in PURE and c.type != "field_expression":
            return False
        if c.type == "field_expression" and txt(c.child_by_field_name("argument")) not in BUILTINS:
            return False
        if c.type == "identifier" and txt(c) not in ok and not names.stable(txt(c), before):
            return False
    return True


def _covers(s: Node, forms: dict[int, _Form], key: tuple) -> list[_Form] | None:
    """The loops of `key` of which one runs whenever `s` completes."""
    f = forms.get(s.id)
    if f is not None:
        return [f] if f.key == key else None
    if s.type == "compound_statement":
        for c in s.named_children:
            got = _covers(c, forms, key)
            if got:
                return got
        return None
    if s.type == "if_statement":
        cons, alt = s.child_by_field_name("consequence"), s.child_by_field_name("alternative")
        if alt is not None and alt.type == "else_clause":
            alt = alt.named_children[-1] if alt.named_children else None
        a = _covers(cons, forms, key) if cons is not None else None
        b = _covers(alt, forms, key) if alt is not None else None
        return a + b if a and b else None
    return None


def _path(later: Node, kb: Node) -> list[Node] | None:
    """`later`'s ancestors up to the body, when each is a block or an `if` (so it runs once)."""
    out, p = [], later.parent
    while p is not None and p != kb:
        if p.type not in ("compound_statement", "if_statement", "else_clause"):
            return None
        out.append(p)
        p = p.parent
    return None if p is None else out + [kb]


def _first_cover(later: _Form, kb: Node, forms: dict[int, _Form]) -> tuple[Node, list[Node], list[_Form]] | None:
    """The earliest statement before `later` of which one of the same loops runs on every way to
    it, its block, and those loops; None also when a `return` may stop the thread in between."""
    chain = _path(later.loop, kb)
    if chain is None:
        return None
    child_of = {p.id: c for c, p in zip([later.loop] + chain, chain)}
    for blk in reversed(chain):
        if blk.type != "compound_statement":
            continue
        stop = child_of[blk.id]
        for i, s in enumerate(blk.named_children):
            if s.start_byte >= stop.start_byte:
                break
            got = _covers(s, forms, later.key)
            if got:
                between = [x for x in blk.named_children[i + 1:] if x.start_byte < stop.start_byte]
                for b2 in chain[:chain.index(blk)]:
                    if b2.type == "compound_statement":
                        sc = child_of[b2.id]
                        between += [x for x in b2.named_children if x.start_byte < sc.start_byte]
                first = min(f.loop.start_byte for f in got)
                if any(n.type in ("return_statement", "goto_statement") for x in between for n in walk(x)) or \
                        any(n.type == "return_statement" and n.start_byte > first for n in walk(s)):
                    return None
                return s, chain[chain.index(blk):], got
    return None


def _conditions(read: Node, loop: Node, upto: Node) -> list[tuple[int, bool, Node]] | None:
    """The `if`s around `read` (in `loop`) up to `upto`: (node id, in its then-branch, condition)."""
    out, n = [], read
    while n.parent is not None and n != upto:
        p = n.parent
        if p.type in UNSUPPORTED and p != loop or \
                (p.type == "binary_expression" and txt(p.child_by_field_name("operator")) in ("&&", "||")):
            return None
        if p.type == "if_statement":
            cond = _cond(p)
            if cond.type == "condition_clause":
                return None   # a declaration in the condition
            if n == p.child_by_field_name("consequence"):
                out.append((p.id, True, cond))
            elif n.type == "else_clause" or n == p.child_by_field_name("alternative"):
                out.append((p.id, False, cond))
        n = p
    return out[::-1]


def _merged(conds: list[list[tuple[int, bool, Node]]]) -> list[list[tuple[int, bool, Node]]]:
    """Reads of one buffer in both branches of an `if` are one read under the `if`'s own conditions."""
    out = [list(c) for c in conds]
    changed = True
    while changed:
        changed = False
        for a in out:
            for b in out:
                if a is not b and len(a) == len(b) and a and a[:-1] == b[:-1] and a[-1][0] == b[-1][0] and \
                        a[-1][1] != b[-1][1]:
                    out = [c for c in out if c is not a and c is not b] + [a[:-1]]
                    changed = True
                    break
            if changed:
                break
        uniq: list[list[tuple[int, bool, Node]]] = []
        for c in out:
            if all(c != u for u in uniq):
                uniq.append(c)
        out = uniq
    return out


def _cond_text(conds: list[tuple[int, bool, Node]]) -> str:
    seen: set[tuple[bool, str]] = set()
    c = []
    for k in conds:   # an `if` inside another on the same condition says it once
        if (k[1], squashed(k[2])) not in seen:
            seen.add((k[1], squashed(k[2])))
            c.append(k)
    if len(c) == 1 and c[0][1]:
        return txt(c[0][2])
    return " && ".join(f"({txt(n)})" if pos else f"!({txt(n)})" for _, pos, n in c)


class Prefetch(base.Transform):
    name = "prefetch"
    title = "the weights of a row norm read in the first pass over the row, before the barriers"
    note = "reads of never-written buffers moved from a loop after the block reduction into the first loop"
    expected = ("a row kernel that reads its weights only after its reduction's barriers pays a second "
                "exposed memory round trip per block; reading them with the row overlaps it with the reduction")

    def rewrite(self, text: str, ctx: Context, sc: base.Scope, params: dict) -> Rewrite | None:
        kb = body(sc.kernel)
        if any(n.type in ("goto_statement", "labeled_statement") or "asm" in n.type for n in walk(kb)):
            return None
        params_ = pointer_params(sc.kernel)
        read_only = writes.read_only(kb, params_)
        shared, private = writes.shared_roots(kb, set(params_))
        quiet = writes.writes_only_private([kb], sc, shared | private, set(params_) | writes.pointer_locals(kb))
        consts = _template_constants(sc.kernel)
        names = _Names(sc.kernel, kb)
        forms = {n.id: f for n in walk(kb) if n.type == "for_statement" and (f := _form(n, consts)) is not None}
        types = self._elem_types(sc.kernel, kb)
        plans: dict[tuple, tuple[Node, list[_Form], dict[str, list[tuple[Node, list]]]]] = {}
        for later in forms.values():
            cover = _first_cover(later, kb, forms)
            if cover is None:
                continue
            x, chain, early = cover
            ok = {later.var, later.col}
            value = later.stmts[0].children_by_field_name("declarator")[0].child_by_field_name("value")
            if not _pure(value, {later.var}, names, x) or \
                    not _pure(_cond(later.stmts[1]), ok, names, x) or \
                    any(f.stmts[1].child_by_field_name("consequence").type != "break_statement" for f in early):
                continue   # the index and guard must mean the same in both loops; the first loop must not end the thread
            by_buf: dict[str, list[tuple[Node, list]]] = {}
            for s in later.stmts[2:]:
                for n in walk(s):
                    if n.type != "subscript_expression":
                        continue
                    arr = n.child_by_field_name("argument")
                    idx = n.child_by_field_name("indices") or n.child_by_field_name("index")
                    if arr is None or idx is None or arr.type != "identifier" or squashed(idx) not in \
                            (later.col, f"[{later.col}]"):
                        continue
                    p = txt(arr)
                    if p not in read_only or p not in types or not (read_only[p] or quiet) or \
                            not names.stable(p, x) or writes.written(n) or (
                            n.parent is not None and n.parent.type in ("field_expression", "subscript_expression",
                                                                       "pointer_expression")):
                        continue
                    conds = _conditions(n, later.loop, chain[0])
                    if conds is None or not all(_pure(c, ok, names, x) for _, _, c in conds):
                        continue
                    by_buf.setdefault(p, []).append((n, conds))
            if not by_buf:
                continue
            entry = plans.setdefault((x.id, later.key), (x, early, {}))
            for p, reads in by_buf.items():
                entry[2].setdefault(p, []).extend(reads)
        if not plans:
            return None
        grouped = []
        for x, early, bufs in plans.values():
            loads: dict[tuple[str, str], list[Node]] = {}
            for p, reads in bufs.items():
                merged = sorted(_merged([c for _, c in reads]), key=len)
                for n, c in reads:   # each read under the shortest merged conditions it lies under
                    conds = next(m for m in merged if c[:len(m)] == m)
                    loads.setdefault((p, _cond_text(conds)), []).append(n)
            grouped.append((x, early, loads))
        data = text.encode("utf-8")
        edits, changes, k = [], [], 0
        for x, early, reads in grouped:
            count = early[0].count
            decls, loads = [], []
            for (p, ctext), nodes in reads.items():
                name = f"astra_pre{k}"
                while name in text:
                    k += 1
                    name = f"astra_pre{k}"
                k += 1
                decls.append(f"{types[p]} {name}[{count}];")
                loads.append((p, ctext, name))
                for n in nodes:
                    edits.append(Edit(n.start_byte, n.end_byte, f"{name}[{early[0].var}]"))
                changes.append(f"`{p}[{early[0].col}]`" + (f" (when {ctext})" if ctext else "") +
                               " read in the first loop, before the reduction")
            at = x
            while at.prev_sibling is not None and at.prev_sibling.type == "preproc_call":
                at = at.prev_sibling   # a `#pragma unroll` belongs to the loop after it
            ind = line_indent(data, at.start_byte)
            edits.append(Edit(at.start_byte, at.start_byte,
                              "// astra: reads of never-written buffers issued with the row, before the barriers\n"
                              + "".join(f"{ind}{d}\n" for d in decls) + ind))
            for f in early:
                guard = f.stmts[1]
                gi = line_indent(data, guard.start_byte)
                lines = "".join(f"\n{gi}" + (f"if ({c}) " if c else "") + f"{name}[{f.var}] = {p}[{f.col}];"
                                for p, c, name in loads)
                edits.append(Edit(guard.end_byte, guard.end_byte, lines))
        return Rewrite(self.name, apply_edits(text, edits), tuple(changes), {})

    @staticmethod
    def _elem_types(fn: Node, kb: Node) -> dict[str, str]:
        """The element type of each one-level pointer parameter and local (qualifiers left out)."""
        out: dict[str, str] = {}
        decls = [p for p in fn.child_by_field_name("declarator").child_by_field_name("parameters").named_children
                 if p.type == "parameter_declaration"]
        for d in decls + [n for n in walk(kb) if n.type == "declaration"]:
            t = d.child_by_field_name("type")
            for dd in ([d.child_by_field_name("declarator")] if d.type == "parameter_declaration"
                       else d.children_by_field_name("declarator")):
                core = dd.child_by_field_name("declarator") if dd is not None and dd.type == "init_declarator" else dd
                if t is None or core is None or core.type != "pointer_declarator":
                    continue
                inner = core.child_by_field_name("declarator")
                if inner is not None and inner.type == "identifier":
                    out[txt(inner)] = txt(t)
        return out
