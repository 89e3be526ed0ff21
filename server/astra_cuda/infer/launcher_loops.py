"""A launcher's loop read as the trips it makes: one that steps a counter to a constant bound, or
one that keeps the launch within a device limit (none).

FasterTransformer's transpose launcher halves its grid while it can, up to four rows a block:
`int per_block = 1; grid.x = rows / per_block; while (per_block < 4 && grid.x % 2 == 0) { grid.x /= 2;
per_block *= 2; }`. Such a loop is rewritten as its trips written out — the counter a number at each,
its final value at its declaration — each trip after an `assert` of the loop's other conditions at
that trip (`rows % 2 == 0`, then `rows / 2 % 2 == 0`): the launch is read for the sizes where every
trip runs, and those conditions become the spec's `require` like any check the launcher makes. The
lines of the file are kept (a launch's line is where it is written).
"""
from __future__ import annotations

from collections.abc import Callable

from tree_sitter import Node

from ..model import dim3, source
from ..model.syntax import declarator_name, field, function_declarator, text as _text, walk as _walk

MAX_TRIPS = 8   # a loop the bound does not stop within this many trips is left as it is
_STEPS: dict[str, Callable[[int, int], int | None]] = {"*=": lambda v, k: v * k, "+=": lambda v, k: v + k, "<<=": lambda v, k: v << k,
          "-=": lambda v, k: v - k, "/=": lambda v, k: v // k if k else None, ">>=": lambda v, k: v >> k}
_BOUNDS: dict[str, Callable[[int, int], bool]] = {"<": lambda v, k: v < k, "<=": lambda v, k: v <= k, ">": lambda v, k: v > k,
           ">=": lambda v, k: v >= k, "!=": lambda v, k: v != k}


def unrolled(text: str, kernel: str) -> tuple[str, set[str]] | None:
    """The text with every such loop unrolled in the host functions that launch `kernel` before
    the launch, and the names of those functions; None when there is none."""
    data = text.encode("utf-8")
    root = source.parser().parse(data).root_node
    edits: list[tuple[int, int, str]] = []
    changed: set[str] = set()
    for fn in (n for n in _walk(root) if n.type == "function_definition"):
        launches = [n.start_byte for n in _walk(fn) if n.type == "kernel_call_syntax"
                    and kernel in _text((n.parent.child_by_field_name("function") if n.parent is not None else None) or n)]
        if not launches:
            continue
        for loop in (n for n in _walk(fn) if n.type == "while_statement" and n.end_byte <= max(launches)):
            found = _unroll(fn, loop) or _within_limit(loop)
            if found is not None:
                edits += found
                name = declarator_name(function_declarator(fn.child_by_field_name("declarator")))[0]
                changed.add((name or "").split("::")[-1])
    if not edits:
        return None
    for start, end, new in sorted(edits, reverse=True):
        data = data[:start] + new.encode("utf-8") + data[end:]
    return data.decode("utf-8", errors="replace"), changed


# CUDA's launch limits, the same on every GPU since compute capability 3.0: threads per block,
# blocks along y and z, blocks along x
DEVICE_LIMITS = (1024, 65535, 65536, 2147483647)
_NEGATED = {">": "<=", ">=": "<", "<": ">=", "<=": ">"}


def _within_limit(loop: Node) -> list[tuple[int, int, str]] | None:
    """A loop that keeps a launch within a device limit (exllamav2's rope: `while (DIVIDE(rows,
    threads_y) > 65535) threads_y *= 2;` moves rows from the grid into the block past 65535 of
    them) runs no trip at the sizes a spec tests: it becomes an `assert` of the limit (a `require`),
    so what it would change keeps its value from before."""
    body, cond = loop.child_by_field_name("body"), loop.child_by_field_name("condition")
    parts = _conjuncts(cond) if cond is not None else []
    if body is None or len(parts) != 1 or parts[0].type != "binary_expression":
        return None
    stmts = [c for c in body.named_children if c.type != "comment"] if body.type == "compound_statement" else [body]
    if not stmts or any(s.type != "expression_statement" for s in stmts):
        return None
    left, op, right = (parts[0].child_by_field_name(f) for f in ("left", "operator", "right"))
    if left is None or op is None or right is None or op.type not in _NEGATED:
        return None
    if left.type == "number_literal" and right.type != "number_literal":   # `65535 < x`: x > 65535
        left, right, flipped = right, left, {"<": ">", "<=": ">=", ">": "<", ">=": "<="}[op.type]
    else:
        flipped = op.type
    if right.type != "number_literal" or flipped not in (">", ">="):
        return None
    try:
        limit = int(_text(right).rstrip("uUlL"), 0)
    except ValueError:
        return None
    if limit not in DEVICE_LIMITS:
        return None
    return [(loop.start_byte, loop.end_byte,
             f"assert({_text(left)} {_NEGATED[flipped]} {limit});" + "\n" * _text(loop).count("\n"))]


def _conjuncts(cond: Node) -> list[Node]:
    while cond.type in ("condition_clause", "parenthesized_expression") and len(cond.named_children) == 1:
        cond = cond.named_children[0]
    op = cond.child_by_field_name("operator") if cond.type == "binary_expression" else None
    if op is not None and op.type == "&&":
        return _conjuncts(field(cond, "left")) + _conjuncts(field(cond, "right"))
    return [cond]


def _counter_step(stmt: Node) -> tuple[str, str, int] | None:
    """(name, operator, step) of `c *= 2;`, `c += 1;`, `c++;`, `++c;`."""
    e = next((c for c in stmt.named_children if c.type != "comment"), None) if stmt.type == "expression_statement" else None
    if e is None:
        return None
    if e.type == "update_expression":
        arg = e.child_by_field_name("argument")
        op = e.child_by_field_name("operator")
        if arg is not None and arg.type == "identifier" and op is not None:
            return _text(arg), "+=" if op.type == "++" else "-=", 1
        return None
    left, op, right = (e.child_by_field_name(f) for f in ("left", "operator", "right"))
    if e.type != "assignment_expression" or left is None or op is None or right is None or left.type != "identifier" \
            or op.type not in _STEPS or right.type != "number_literal":
        return None
    try:
        return _text(left), op.type, int(_text(right).rstrip("uUlL"), 0)
    except ValueError:
        return None


def _declaration(fn: Node, name: str, loop: Node) -> tuple[Node, int, Node] | None:
    """The number a counter is declared with where the loop sees it (the declaration C++ finds:
    the innermost before the loop in a block around it; another branch's is another variable),
    as (its value node, its number, the block it is declared in)."""
    seen = []
    for n in _walk(fn):
        if n.type in ("parameter_declaration", "optional_parameter_declaration") \
                and declarator_name(n.child_by_field_name("declarator"))[0] == name:
            return None
        if n.type == "init_declarator" and declarator_name(n)[0] == name:
            decl = n.parent
            scope = decl.parent if decl is not None else None
            if scope is not None and n.end_byte <= loop.start_byte and loop.end_byte <= scope.end_byte:
                seen.append((scope.start_byte, n.child_by_field_name("value"), scope))
    if not seen:
        return None
    _, value, scope = max(seen, key=lambda x: x[0])
    if value is None or value.type != "number_literal":
        return None
    try:
        return value, int(_text(value).rstrip("uUlL"), 0), scope
    except ValueError:
        return None


def _unroll(fn: Node, loop: Node) -> list[tuple[int, int, str]] | None:
    """The edits that write out the loop's trips (see the module's doc), or None when it is no
    loop of that form: a body of assignments only, one of them stepping a counter declared once
    with a number, the condition bounding that counter by a number."""
    body, cond = loop.child_by_field_name("body"), loop.child_by_field_name("condition")
    if body is None or cond is None:
        return None
    stmts = [c for c in body.named_children if c.type != "comment"] if body.type == "compound_statement" else [body]
    if not stmts or any(s.type != "expression_statement" for s in stmts):
        return None
    steps = [st for s in stmts if (st := _counter_step(s)) is not None]
    for name, op, k in steps:
        bounds = [c for c in _conjuncts(cond) if c.type == "binary_expression"
                  and _text(c.child_by_field_name("left")) == name
                  and field(c, "right").type == "number_literal"
                  and field(c, "operator").type in _BOUNDS]
        decl = _declaration(fn, name, loop)
        if len(bounds) != 1 or decl is None or sum(s[0] == name for s in steps) != 1:
            continue
        # no other change of the counter in the block that declares it
        others = [n for n in _walk(decl[2]) if n.type in ("assignment_expression", "update_expression")
                  and _text(n.child_by_field_name("left") or n.child_by_field_name("argument") or n) == name
                  and not (loop.start_byte <= n.start_byte < loop.end_byte)]
        if others:
            continue
        bound = bounds[0]
        limit = int(_text(bound.child_by_field_name("right")).rstrip("uUlL"), 0)
        test = _BOUNDS[field(bound, "operator").type]
        value, trips = decl[1], list[int]()
        while test(value, limit) and len(trips) < MAX_TRIPS:
            trips.append(value)
            stepped = _STEPS[op](value, k)
            if stepped is None:
                return None
            value = stepped
        if test(value, limit):
            return None    # not stopped by its bound within MAX_TRIPS
        return _edits(fn, loop, stmts, cond, bound, name, decl[0], trips, value, decl[2])
    return None


def _edits(fn: Node, loop: Node, stmts: list[Node], cond: Node, bound: Node, name: str, init: Node,
           trips: list[int], final: int, scope: Node) -> list[tuple[int, int, str]] | None:
    dims = _dim3_values(fn, loop)
    if dims is None:
        return None
    others = [c for c in _conjuncts(cond) if (c.start_byte, c.end_byte) != (bound.start_byte, bound.end_byte)]
    out: list[str] = []
    for at in trips:
        for c in others:
            read = _dim3_read(c, dims)
            if read is None:
                return None
            out.append(f"assert({_with(read, name, at)});")
        for s in stmts:
            if _counter_step(s) is not None and _counter_step(s)[0] == name:   # type: ignore[index]
                continue
            for d, values in dims.items():
                changes = {n for n in _walk(s) if n.type == "identifier" and _text(n) == d and dim3.may_change(n)}
                if changes:
                    after = dim3.run_members(d, s, values, changes)
                    if after is None:
                        return None
                    dims[d] = {k: _with(v, name, at) for k, v in after.items()}
            out.append(_with(_text(s), name, at))
    # the loop becomes its trips (on its first line, the lines after it kept), the counter
    # its number where the lines before the loop read it and its final value at its declaration
    edits = [(loop.start_byte, loop.end_byte, " ".join(out) + "\n" * _text(loop).count("\n")),
             (init.start_byte, init.end_byte, str(final))]
    for n in _walk(scope):
        if n.type == "identifier" and _text(n) == name and init.end_byte <= n.start_byte < loop.start_byte:
            edits.append((n.start_byte, n.end_byte, str(trips[0] if trips else final)))
    return edits


def _with(text: str, name: str, value: int) -> str:
    """C++ text with the identifier `name` replaced by a number."""
    data = text.encode("utf-8")
    root = source.parser().parse(b"void __astra_u() { " + data + b"; }").root_node
    spots = [(n.start_byte - 19, n.end_byte - 19) for n in _walk(root) if n.type == "identifier" and _text(n) == name]
    for start, end in sorted(spots, reverse=True):
        data = data[:start] + str(value).encode() + data[end:]
    return data.decode("utf-8", errors="replace")


def _dim3_values(fn: Node, loop: Node) -> dict[str, dict[str, str]] | None:
    """The members of each dim3 the loop's body changes, as they are when the loop starts: set in
    its declaration and by assignments to its members on the way down to the loop (as a launch
    reads them); None when one is changed any other way there."""
    out: dict[str, dict[str, str]] = {}
    for n in _walk(loop):
        if n.type != "identifier" or not dim3.may_change(n) or n.parent is None or n.parent.type != "field_expression":
            continue
        name = _text(n)
        if name in out:
            continue
        decl = next(((d, dd) for d, dd in dim3.local_declarations(name, fn) if dim3.declares_dim3(d, dd)), None)
        scope = decl[0].parent if decl is not None else None
        if decl is None or scope is None or not (decl[0].end_byte <= loop.start_byte and loop.end_byte <= scope.end_byte):
            return None
        args = list(dim3.dim3_args(*decl) or ())
        if not args:
            return None
        left = {m for m in _walk(scope) if m.type == "identifier" and _text(m) == name and dim3.may_change(m)
                and decl[0].end_byte <= m.start_byte < loop.start_byte}
        values = dim3.run_until(name, scope, loop, dict(zip("xyz", args + ["1"] * (3 - len(args)))), left)
        if values is None or left:
            return None
        out[name] = values
    return out


def _dim3_read(cond: Node, dims: dict[str, dict[str, str]]) -> str | None:
    """The condition's text with each member of those dim3s it reads replaced by its value."""
    text: str | None = _text(cond)
    for name, values in dims.items():
        if any(n.type == "identifier" and _text(n) == name for n in _walk(cond)):
            expr = source.parse_expression(text)
            text = dim3.members_read(expr, name, values) if expr is not None else None
            if text is None:
                return None
    return text
