"""Unswitching an unrolled loop's bounds guard: one check before the loop instead of one a step.

    #pragma unroll                                   if (<the guard at the first and the last step>) {
    for (int it = 0; it < ITERS; it += V) {            #pragma unroll
      int idx = V * lane + it * 32;          ->        for (int it = 0; it < ITERS; it += V) { int idx = ...; <then> }
      if (idx < n) { <load, compute> }               } else {
      else { <fill> }                                  <the loop as written>
    }                                                }

Warp-per-row softmax kernels (one register array of ITERS elements a thread, filled by an
unrolled loop whose every step loads under `if (element_index < element_count)`) keep each step's
load inside a branch the compiler does not if-convert once the step does more than a plain copy
(a mask read and a select): each load is then waited for before the next is issued, one memory
round trip a step. Without the guard the unrolled steps are straight-line code and their loads are
issued together.

Exact: the guard is a conjunction of comparisons whose sides are sums of products in which the
loop variable appears at most linearly, over signed integer names the loop never changes (locals
declared at the top of the body are read through their initializers). A linear function of the
step is between its values at the first and the last step, so where every comparison holds at
both (computed in 64 bits: no wrap) it holds at every step, and the copy without the guard runs
exactly the steps the original runs its `then` branch on. Everywhere else the original runs. The
check differs between threads, so a loop with a barrier or a warp collective is left alone.

A guard that leaves the loop before the step's loads, `if (column >= dim / 2) break;` (or
`return;`: exllamav2's norms), is the same argument turned over: each comparison of a disjunction
false at the first and the last step is false at every step, so the copy without it runs every
step the original does. A bound may be a signed template parameter (`template <int bpw>`).

Where the bound is a row length set from the block index (a causal mask's `blockIdx.x + 1`), most
rows are partial and one check for the whole loop would rarely pass: the loop is then checked a
chunk of 8 steps at a time (`chunk`, tuned among 0 = whole, 8, 4), each chunk the same argument
over its own first and last step; not for a loop with a `break`, which would leave only its chunk.
"""
from __future__ import annotations

from tree_sitter import Node

from . import base
from .base import Context, Rewrite, body, pointer_params, variable_types
from .tree import (Edit, apply_edits, assigned_names, calls, declared_name, line_indent,
                   preceded_by_marker, txt, unparenthesized, walk)

SIGNED = {"int", "long", "long int", "long long", "long long int", "int64_t", "int32_t", "ptrdiff_t",
          "signed", "signed int", "index_t"}
NARROW = {"int", "int32_t", "signed", "signed int"}        # 32 bits: a value read through one must fit
COLLECTIVE = ("sync", "shfl", "ballot", "activemask", "__match", "__reduce", "barrier", "tiled_partition")
COMPARE = {"<", "<=", ">", ">="}
ARITH = {"+", "-", "*"}
CONST_ONLY = {"/", "%", "<<", ">>"}
INT32 = ("-2147483648LL", "2147483647LL")
CHUNK = 8          # steps a check where the bound differs row by row


class _Loop:
    """A matched loop: its variable, header parts, the guarding `if` and the names it reads."""

    def __init__(self, loop: Node, pragma: Node, var: str, start: Node, end: Node, step: str, guard: Node,
                 locals_: dict[str, tuple[str, Node]], var_type: str, types: dict[str, str]):
        self.loop, self.pragma, self.var, self.start, self.end, self.step = loop, pragma, var, start, end, step
        self.guard, self.locals, self.var_type, self.types = guard, locals_, var_type, types
        # `if (c) break;` / `if (c) return;`: the steps after it run while c is false (its comparisons
        # are the disjuncts of c, each to be false at every step), not the steps inside it
        self.exits = _exit_guard(guard)

    def comparisons(self) -> list[Node]:
        cond = self.guard.child_by_field_name("condition")
        return _conjuncts(cond, "||" if self.exits else "&&")


class Unswitch(base.Transform):
    name = "unswitch"
    title = "one bounds check before an unrolled loop instead of a guard at every step"
    note = "the bounds guard checked once before the unrolled loop, so its loads are issued together"
    expected = ("an unrolled loop whose every step loads under a bounds branch waits for each load before "
                "the next; checked once, the steps' loads are issued together")

    def rewrite(self, text: str, ctx: Context, sc: base.Scope, params: dict) -> Rewrite | None:
        fn = sc.kernel
        kb = body(fn)
        types = {**_template_ints(fn), **variable_types(fn)}
        counts: dict[str, int] = {}
        for n in walk(kb):
            if n.type == "declaration":
                for d in n.children_by_field_name("declarator"):
                    name, _ = declared_name(d)
                    if name:
                        counts[name] = counts.get(name, 0) + 1
        if any(n.type == "reference_declarator" for n in walk(kb)):
            return None     # a reference could change a name the check reads
        taken = {txt(n.child_by_field_name("argument")) for n in walk(kb)
                 if n.type == "pointer_expression" and txt(n.child(0)) == "&"}
        shared = {name for n in walk(kb) if n.type == "declaration" and "__shared__" in txt(n)
                  for d in n.children_by_field_name("declarator") for name in [declared_name(d)[0]] if name}
        pointers = set(pointer_params(fn)) | {
            name for n in walk(kb) if n.type == "pointer_declarator"
            for name in [declared_name(n)[0]] if name}
        collective = base.collective_helpers(sc, COLLECTIVE)
        data = text.encode("utf-8")
        edits: list[Edit] = []
        changes = []
        used_chunk = 0
        for loop in (n for n in walk(kb) if n.type == "for_statement"):
            if any(e.start <= loop.start_byte < e.end for e in edits):
                continue     # inside a loop already unswitched
            m = _match(loop, types, counts, taken | shared, pointers, collective)
            if m is None:
                continue
            chunk = params.get("chunk")
            if chunk is None:
                chunk = CHUNK if _row_bound(m, kb) else 0
            elif not isinstance(chunk, int) or isinstance(chunk, bool) or not 0 <= chunk <= 64:
                return None      # not a step count: no rewrite rather than a guess
            if chunk and (m.exits or any(n.type == "break_statement" for n in walk(m.loop.child_by_field_name("body")))):
                chunk = 0     # a break would leave only its chunk
            used_chunk = max(used_chunk, int(chunk))
            new = _unswitched(m, data, len(edits), int(chunk))
            if new is None:
                continue
            edits.append(Edit(m.pragma.start_byte, loop.end_byte, new))
            where = f"once every {chunk} steps" if chunk else "once before it (at its first and last step)"
            changes.append(f"the guard `{txt(m.guard.child_by_field_name('condition'))[1:-1].strip()}` of the "
                           f"unrolled loop over `{m.var}` checked {where}")
        if not edits:
            return None
        return Rewrite(self.name, apply_edits(text, edits), tuple(changes), {"chunk": used_chunk})

    def alternatives(self, rw: Rewrite, ctx: Context) -> list[dict]:
        """The whole loop under one check, or one check every 8 or 4 steps (rows whose length
        differs row by row: the steps of a short row's leading chunks still issue together)."""
        return [{"chunk": c} for c in (0, 8, 4) if c != rw.params.get("chunk")]


def _template_ints(fn: Node) -> dict[str, str]:
    """The kernel's signed integer template parameters (`template <int blocks_per_warp>`) and their
    types: constants of each instantiation, so as invariant in a loop as a parameter."""
    t = fn.parent
    plist = t.child_by_field_name("parameters") if t is not None and t.type == "template_declaration" else None
    out = {}
    for p in plist.named_children if plist is not None else ():
        d = p.child_by_field_name("declarator")
        typ = " ".join(txt(p.child_by_field_name("type")).split()) if p.child_by_field_name("type") else ""
        if p.type in ("parameter_declaration", "optional_parameter_declaration") and d is not None and \
                d.type == "identifier" and typ in SIGNED:
            out[txt(d)] = typ
    return out


def _match(loop: Node, types: dict[str, str], counts: dict[str, int], unsafe: set[str], pointers: set[str],
           collective: set[str]) -> _Loop | None:
    pragma = loop.prev_sibling
    if pragma is None or pragma.type != "preproc_call" or txt(pragma).split() != ["#pragma", "unroll"]:
        return None     # only fully unrolled loops: their steps become straight-line code
    if preceded_by_marker(pragma) or preceded_by_marker(loop):
        return None
    init, cond, upd, b = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update", "body"))
    if init is None or cond is None or upd is None or b is None or init.type != "declaration" or \
            b.type != "compound_statement":
        return None
    decls = init.children_by_field_name("declarator")
    if len(decls) != 1 or decls[0].type != "init_declarator" or \
            decls[0].child_by_field_name("declarator").type != "identifier":
        return None
    var = txt(decls[0].child_by_field_name("declarator"))
    var_type = " ".join(txt(init.child_by_field_name("type")).split())
    if var_type not in SIGNED:
        return None
    start = decls[0].child_by_field_name("value")
    cond = unparenthesized(cond)
    if cond.type != "binary_expression" or txt(cond.child_by_field_name("operator")) != "<" or \
            txt(unparenthesized(cond.child_by_field_name("left"))) != var:
        return None
    end = cond.child_by_field_name("right")
    step = _step(upd, var)
    if step is None or base.calls_collective([b], collective, COLLECTIVE):
        return None
    if any(n.type in ("gnu_asm_expression", "asm_statement") for n in walk(b)):
        return None
    changed = assigned_names(b) | unsafe | _passed(b)
    if var in changed:
        return None
    stmts = [c for c in b.named_children if c.type != "comment"]
    locals_: dict[str, tuple[str, Node]] = {}
    guard = None
    for s in stmts:
        if s.type == "if_statement":
            guard = s
            break
        if s.type != "declaration":
            return None
        for d in s.children_by_field_name("declarator"):
            name, ptr = declared_name(d)
            value = d.child_by_field_name("value") if d.type == "init_declarator" else None
            typ = " ".join(txt(s.child_by_field_name("type")).split())
            if name and not ptr and value is not None and d.child_by_field_name("declarator").type == "identifier" \
                    and typ in SIGNED and name not in changed:
                locals_[name] = (typ, value)
    if guard is None or guard.child_by_field_name("condition") is None:
        return None
    then = guard.child_by_field_name("consequence")
    # what the guard keeps: its `then` branch, or, where it leaves the loop, the statements after it
    kept = stmts[stmts.index(guard) + 1:] if _exit_guard(guard) else [then]
    if then is None or not any(n.type == "identifier" and txt(n) in pointers for k in kept for n in walk(k)):
        return None     # the guard keeps no memory access: nothing to issue together
    invariant = lambda name: (name not in changed and counts.get(name, 0) <= 1 and  # noqa: E731
                              (types.get(name) in SIGNED or (name not in types and name.isupper())))
    body_names = {n for s in stmts[:stmts.index(guard)] for d in s.children_by_field_name("declarator")
                  for n in [declared_name(d)[0]] if n}
    m = _Loop(loop, pragma, var, start, end, step, guard, locals_, var_type, types)
    for part in (start, end):
        if _linear(part, var, locals_, invariant, body_names) != "const":
            return None
    if step != "1" and _linear(upd.child_by_field_name("right"), var, locals_, invariant, body_names) != "const":
        return None
    for c in m.comparisons():
        if c.type != "binary_expression" or txt(c.child_by_field_name("operator")) not in COMPARE:
            return None
        if any(_linear(c.child_by_field_name(s), var, locals_, invariant, body_names) is None
               for s in ("left", "right")):
            return None
    return m


def _step(upd: Node, var: str) -> str | None:
    if upd.type == "update_expression" and txt(upd.child_by_field_name("argument")) == var and "++" in txt(upd):
        return "1"
    if upd.type == "assignment_expression" and txt(upd.child_by_field_name("operator")) == "+=" and \
            txt(upd.child_by_field_name("left")) == var:
        return txt(upd.child_by_field_name("right"))
    return None


def _passed(b: Node) -> set[str]:
    """Names passed as a whole argument (a callee may take them by reference)."""
    return {txt(unparenthesized(a)) for c in calls(b) for args in [c.child_by_field_name("arguments")]
            if args is not None for a in args.named_children if unparenthesized(a).type == "identifier"}


def _exit_guard(guard: Node) -> bool:
    """`if (c) break;` or `if (c) return;` (braced or not), no `else`."""
    then = guard.child_by_field_name("consequence")
    if then is None or guard.child_by_field_name("alternative") is not None:
        return False
    inner = [c for c in then.named_children if c.type != "comment"] if then.type == "compound_statement" else [then]
    return len(inner) == 1 and (inner[0].type == "break_statement" or
                                (inner[0].type == "return_statement" and not inner[0].named_children))


def _conjuncts(cond: Node, op: str = "&&") -> list[Node]:
    """The parts of `a && b && ...` (`op` "||": of a disjunction, a guard that leaves the loop, each
    part then to be false at every step; the other operator's expression is one part, refused as
    no comparison: where `a && b` is false is no interval)."""
    c = unparenthesized(cond)
    if c.type == "condition_clause":
        inner = [x for x in c.named_children if x.type != "comment"]
        if len(inner) != 1:
            return [c]
        c = unparenthesized(inner[0])
    if c.type == "binary_expression" and txt(c.child_by_field_name("operator")) == op:
        return _conjuncts(c.child_by_field_name("left"), op) + _conjuncts(c.child_by_field_name("right"), op)
    return [c]


def _is_int_literal(s: str) -> bool:
    return s.rstrip("lL").isdigit()


def _linear(n: Node | None, var: str, locals_: dict[str, tuple[str, Node]], invariant, body_names: set[str],
            depth: int = 0) -> str | None:
    """'const', 'linear' (in `var`) or None: signed integer arithmetic on invariant names only."""
    if n is None or depth > 8:
        return None
    n = unparenthesized(n)
    t = n.type
    if t == "number_literal":
        return "const" if _is_int_literal(txt(n)) else None
    if t == "identifier":
        name = txt(n)
        if name == var:
            return "linear"
        if name in locals_:
            return _linear(locals_[name][1], var, locals_, invariant, body_names, depth + 1)
        if name in body_names:
            return None
        return "const" if invariant(name) else None
    if t == "unary_expression" and txt(n.child(0)) in ("-", "+"):
        return _linear(n.child_by_field_name("argument"), var, locals_, invariant, body_names, depth)
    if t == "binary_expression":
        op = txt(n.child_by_field_name("operator"))
        a = _linear(n.child_by_field_name("left"), var, locals_, invariant, body_names, depth)
        b = _linear(n.child_by_field_name("right"), var, locals_, invariant, body_names, depth)
        if a is None or b is None:
            return None
        if op in ("+", "-"):
            return "linear" if "linear" in (a, b) else "const"
        if op == "*":
            return None if a == b == "linear" else "linear" if "linear" in (a, b) else "const"
        if op in CONST_ONLY:
            return "const" if a == b == "const" else None
    return None


def _render(n: Node, mapping: dict[str, str]) -> str:
    """The expression's text with each identifier in `mapping` replaced by `(its text)`."""
    edits = [Edit(x.start_byte - n.start_byte, x.end_byte - n.start_byte, f"({mapping[txt(x)]})")
             for x in walk(n) if x.type == "identifier" and txt(x) in mapping]
    return apply_edits(txt(n), edits)


def _at(n: Node, m: _Loop, value: str, used: list[tuple[str, str]]) -> str:
    """`n` at the step where the loop variable is `value` (a 64-bit expression), its body's locals
    read through their initializers; the 32-bit locals read so go to `used` (they must fit)."""
    mapping = {m.var: value}
    for name, (typ, init) in m.locals.items():     # in declaration order: later ones read earlier ones
        mapping[name] = _render(init, mapping)
    todo = [n]
    seen: set[str] = set()
    while todo:                                    # every local the comparison reads, directly or not
        for x in walk(todo.pop()):
            name = txt(x)
            if x.type == "identifier" and name in m.locals and name not in seen:
                seen.add(name)
                todo.append(m.locals[name][1])
                if m.locals[name][0] in NARROW and _wider(m.locals[name][1], m):
                    used.append((name, mapping[name]))
    return _render(n, mapping)


def _row_bound(m: _Loop, kb: Node) -> bool:
    """Whether a bound the guard compares with is set, through at most three locals, from the
    block's index (a causal row's length, `blockIdx.x + 1`): rows then differ in length and most
    are partial."""
    inits: dict[str, list[Node]] = {}
    for n in walk(kb):
        if n.type == "declaration":
            for d in n.children_by_field_name("declarator"):
                v = d.child_by_field_name("value") if d.type == "init_declarator" else None
                name = declared_name(d)[0]
                if name and v is not None:
                    inits.setdefault(name, []).append(v)
    names = {txt(x) for c in m.comparisons() for x in walk(c)
             if x.type == "identifier" and txt(x) not in m.locals and txt(x) != m.var}
    for _ in range(3):
        values = [x for name in names for v in inits.get(name, []) for x in _values(v)]
        if any("blockIdx" in txt(v) for v in values):
            return True
        names = {txt(x) for v in values for x in walk(v) if x.type == "identifier"}
    return False


def _values(v: Node) -> list[Node]:
    """The expressions a value can be: both branches of a conditional (its test is no part of it)."""
    v = unparenthesized(v)
    if v.type == "conditional_expression":
        return _values(v.child_by_field_name("consequence")) + _values(v.child_by_field_name("alternative"))
    return [v]


def _wider(init: Node, m: _Loop) -> bool:
    """Whether the initializer may compute in more than 32 bits (a 32-bit result then need not
    hold its value): a name of a wider or unknown type, or a long literal. Arithmetic on 32-bit
    names only either fits or overflows, and an overflow is undefined in the original too."""
    for x in walk(init):
        if x.type == "number_literal" and not (txt(x).isdigit() and int(txt(x)) <= 2**31 - 1):
            return True
        if x.type == "identifier" and txt(x) not in m.locals and \
                (m.var_type if txt(x) == m.var else m.types.get(txt(x))) not in NARROW:
            return True
    return False


def _unswitched(m: _Loop, data: bytes, k: int, chunk: int = 0) -> str | None:
    ind = line_indent(data, m.loop.start_byte)
    tag = "" if k == 0 else str(k)
    last_name = f"astra_last{tag}"
    start, end, step = txt(m.start), txt(m.end), m.step
    first = "0LL" if txt(m.start) == "0" else f"(long long)({start})"
    base_ = "" if txt(m.start) == "0" else f"{first} + "
    if step == "1":
        last = f"{base_}((long long)({end}) - 1{'' if not base_ else f' - {first}'})"
    else:
        last = f"{base_}((long long)({end}) - 1{'' if not base_ else f' - {first}'}) / ({step}) * ({step})"
    lo, hi = first, last_name
    checks = [f"{start} < {end}"]
    if chunk:          # the first and last step of this chunk
        lo, hi, checks = f"(long long)astra_c{tag}", f"astra_cl{tag}", []
    if not _is_int_literal(step):
        checks.append(f"{step} > 0")
    fits: list[tuple[str, str]] = []
    for c in m.comparisons():
        for value in (lo, hi):
            at = _at(c, m, value, fits)
            checks.append(f"!({at})" if m.exits else at)
    for _, v in dict.fromkeys(fits):
        checks.append(f"{INT32[0]} <= {v} && {v} <= {INT32[1]}")
    checks = list(dict.fromkeys(checks))
    loop_text = data[m.loop.start_byte:m.loop.end_byte].decode("utf-8")
    fast = _without_guard(m, data)
    if fast is None:
        return None
    deeper = lambda s, n=1: "\n".join(("  " * n + ln) if ln.strip() else "" for ln in s.split("\n"))[2 * n:]  # noqa: E731
    pragma = txt(m.pragma).strip()
    lead = "" if line_indent(data, m.pragma.start_byte) == ind else ind
    if not chunk:
        cond = f"\n{ind}    && ".join(checks)
        holds = "false" if m.exits else "true"      # a guard that leaves the loop must never fire
        return (f"{lead}// astra: the loop's bounds guard is linear in `{m.var}`: {holds} at its first and last step, "
                f"it is {holds}\n{ind}// at every step, so one check replaces it and the steps' loads issue together; "
                f"else the loop as written\n"
                f"{ind}const long long {last_name} = {last};\n"
                f"{ind}if ({cond}) {{\n{ind}  {pragma}\n{ind}  {deeper(fast)}\n{ind}}} else {{\n"
                f"{ind}  {pragma}\n{ind}  {deeper(loop_text)}\n{ind}}}")
    body_at = m.loop.child_by_field_name("body").start_byte - m.loop.start_byte
    typ, var, cvar = m.var_type, m.var, f"astra_c{tag}"
    span = f"{chunk} * ({step})"
    header = f"for ({typ} {var} = {cvar}; {var} < {end} && {var} - {cvar} < {span}; {var} += {step})"
    fast_body = fast.encode("utf-8")[body_at:].decode("utf-8")
    slow_body = loop_text.encode("utf-8")[body_at:].decode("utf-8")
    cond = f"\n{ind}      && ".join(checks)
    return (f"{lead}// astra: the loop's bounds guard is linear in `{m.var}`: true at the first and last step of a "
            f"chunk of {chunk}\n{ind}// steps, it is true at each of them, so one check a chunk replaces it and "
            f"the chunk's loads issue together;\n{ind}// else the chunk as written\n"
            f"{ind}const long long {last_name} = {last};\n"
            f"{ind}{pragma}\n"
            f"{ind}for ({typ} {cvar} = {start}; {cvar} < {end}; {cvar} += {span}) {{\n"
            f"{ind}  const long long astra_cl{tag} = (long long){cvar} + ({chunk} - 1) * (long long)({step}) < "
            f"{last_name} ? (long long){cvar} + ({chunk} - 1) * (long long)({step}) : {last_name};\n"
            f"{ind}  if ({cond}) {{\n{ind}    {pragma}\n{ind}    {header} {deeper(fast_body, 2)}\n"
            f"{ind}  }} else {{\n{ind}    {pragma}\n{ind}    {header} {deeper(slow_body, 2)}\n{ind}  }}\n{ind}}}")


def _without_guard(m: _Loop, data: bytes) -> str | None:
    """The loop's text with its guarding `if` replaced by its `then` branch, and the body's locals
    only the guard read dropped."""
    loop_start = m.loop.start_byte
    then = m.guard.child_by_field_name("consequence")
    b = m.loop.child_by_field_name("body")
    stmts = [c for c in b.named_children if c.type != "comment"]
    at = stmts.index(next(x for x in stmts if x.start_byte == m.guard.start_byte))
    if m.exits:
        repl = ""        # never taken on this path: the guard goes, the steps after it stay
    elif then.type != "compound_statement":
        repl = txt(then)
    else:
        inner = [c for c in then.named_children if c.type != "comment"]
        later = {declared_name(d)[0] for s in stmts[:at] + stmts[at + 1:] if s.type == "declaration"
                 for d in s.children_by_field_name("declarator")}
        mine = {declared_name(d)[0] for s in inner if s.type == "declaration"
                for d in s.children_by_field_name("declarator")}
        if at != len(stmts) - 1 or (later & mine) or not inner:
            repl = txt(then)     # kept as a block: its names stay in their own scope
        else:
            outer = line_indent(data, m.guard.start_byte)
            deep = line_indent(data, next((c for c in inner if c.type != "preproc_call"), inner[0]).start_byte)
            text = data[inner[0].start_byte:then.children[-1].start_byte].decode("utf-8").rstrip()
            repl = text.replace("\n" + deep, "\n" + outer) if deep.startswith(outer) else text
    g0, g1 = m.guard.start_byte, m.guard.end_byte
    line_start = data.rfind(b"\n", 0, g0) + 1
    if m.exits and not data[line_start:g0].strip() and data[g1:g1 + 1] == b"\n":
        g0, g1 = line_start, g1 + 1       # the guard's whole line goes
    edits = [Edit(g0 - loop_start, g1 - loop_start, repl)]
    # a local only the guard read is unused without it: dropped (one declarator, read by nothing else)
    single = {declared_name(s.children_by_field_name("declarator")[0])[0]: s for s in stmts[:at]
              if len(s.children_by_field_name("declarator")) == 1}
    drop = {name for name in single if name in m.locals}
    while True:
        kept = ([] if m.exits else [then]) + stmts[at + 1:] + [s for name, s in single.items() if name not in drop] + \
            [s for s in stmts[:at] if s not in single.values()]
        read = {txt(x) for k in kept for x in walk(k) if x.type == "identifier"}
        if not drop & read:
            break
        drop -= read
    for name in drop:
        s = single[name]
        start, end = s.start_byte, s.end_byte
        line_start = data.rfind(b"\n", 0, start) + 1
        if not data[line_start:start].strip() and data[end:end + 1] == b"\n":
            start, end = line_start, end + 1
            if data[end:end + 1] == b"\n" and data[:start].rstrip(b" ").endswith(b"{\n"):
                end += 1      # nor a blank line left right after the opening brace
        edits.append(Edit(start - loop_start, end - loop_start, ""))
    # the byte offsets are into the UTF-8 text: edit bytes, then decode
    raw = data[m.loop.start_byte:m.loop.end_byte]
    out, pos = [], 0
    for e in sorted(edits, key=lambda e: e.start):
        out.append(raw[pos:e.start] + e.text.encode("utf-8"))
        pos = e.end
    return (b"".join(out) + raw[pos:]).decode("utf-8")
