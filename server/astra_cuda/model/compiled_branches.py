"""Which branches of a kernel an instance compiles: an `if constexpr` over its template arguments,
a plain `if` those arguments alone decide, the `#if` blocks its macros rule out. Separate because
the access walk and inference's readers of the launcher ask the same question of a tree."""
from __future__ import annotations

from collections.abc import Collection

from tree_sitter import Node

from . import syntax
from .access_nodes import unparen


def constexpr_branch(st: Node, values: dict[str, int]) -> bool | None:
    """Which branch of an `if constexpr` over the template's arguments an instance compiles
    (`use_vec`, `!flag`, `NUM_DIMS == 2`, with `values` the arguments), None for any other `if`
    or a condition not read."""
    cond = unparen(st.child_by_field_name("condition"))
    if cond is None or not any(c.type == "constexpr" for c in st.children):
        return None

    def value(n: Node | None) -> int | None:
        n = unparen(n)
        if n is None:
            return None
        if n.type in ("true", "false"):
            return int(n.type == "true")
        if n.type == "identifier":
            return values.get(syntax.text(n))
        if n.type == "number_literal" and syntax.text(n).rstrip("uUlL").isdigit():
            return int(syntax.text(n).rstrip("uUlL"))
        return None
    op = cond.child_by_field_name("operator") if cond.type in ("unary_expression", "binary_expression") else None
    if cond.type == "unary_expression" and op is not None and op.type == "!":
        v = value(cond.child_by_field_name("argument"))
        return None if v is None else not v
    if cond.type == "binary_expression" and op is not None and op.type in ("==", "!="):
        a, b = value(cond.child_by_field_name("left")), value(cond.child_by_field_name("right"))
        return None if a is None or b is None else (a == b) == (op.type == "==")
    v = value(cond)
    return None if v is None else bool(v)


def truth_of(cond: Node | None, values: dict[str, int], probed: Collection[str] = frozenset()) -> bool | None:
    """A plain `if`'s condition decided by the template's arguments alone (`flag && i < n` with
    flag false is false, `!flag || ...` with flag false true), None where the sizes decide it:
    the branch an argument rules out is dead code in this instance."""
    cond = unparen(cond)
    if cond is None:
        return None
    if cond.type in ("true", "false"):
        return cond.type == "true"
    if cond.type == "identifier":
        v = values.get(syntax.text(cond))
        return None if v is None else bool(v)
    op = cond.child_by_field_name("operator")
    if cond.type == "unary_expression" and op is not None and op.type == "!":
        v = truth_of(cond.child_by_field_name("argument"), values, probed)
        return None if v is None else not v
    if cond.type == "binary_expression" and op is not None and op.type in ("==", "!="):
        # a pointer the spec passes as null (values 0) against null: `cu_seqlens != nullptr`
        left, right = unparen(cond.child_by_field_name("left")), unparen(cond.child_by_field_name("right"))
        if left is not None and left.type == "null":
            left, right = right, left
        if right is not None and right.type == "null" and left is not None and left.type == "identifier" \
                and syntax.text(left) in values:
            return (values[syntax.text(left)] == 0) == (op.type == "==")
    if cond.type == "binary_expression" and op is not None and op.type in ("==", "!=", "<", "<=", ">", ">="):
        # `if (DATA_TYPE > 0)`: two template arguments or numbers, compared; never a kernel argument
        # (`probed`), whose value here is a probe's (`mode == 2` with the mode taken 0 is still read)
        a, b = _argument_value(cond.child_by_field_name("left"), values, probed), \
            _argument_value(cond.child_by_field_name("right"), values, probed)
        if a is None or b is None:
            return None
        return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op.type]
    if cond.type == "binary_expression" and op is not None and op.type in ("&&", "||"):
        a, b = truth_of(cond.child_by_field_name("left"), values, probed), \
            truth_of(cond.child_by_field_name("right"), values, probed)
        short = op.type == "||"   # the value either side settles it at
        if a is short or b is short:
            return short
        return (not short) if a is not None and b is not None else None
    return None


def _argument_value(n: Node | None, values: dict[str, int], probed: Collection[str]) -> int | None:
    """A template argument's value (`values`, not one of the `probed` names) or a decimal number, else None."""
    n = unparen(n)
    if n is not None and n.type == "identifier":
        return None if syntax.text(n) in probed else values.get(syntax.text(n))
    text = syntax.text(n).rstrip("uUlL") if n is not None and n.type == "number_literal" else ""
    return int(text) if text.isdigit() else None


def not_compiled(root: Node, values: dict[str, int]) -> list[tuple[int, int]]:
    """(start, end) bytes of the `if constexpr` branches an instance with template arguments
    `values` does not compile."""
    out = []
    for n in syntax.walk(root):
        if n.type != "if_statement":
            continue
        taken = constexpr_branch(n, values)
        if taken is None:
            continue
        dead = n.child_by_field_name("alternative") if taken else n.child_by_field_name("consequence")
        if dead is not None:
            out.append((dead.start_byte, dead.end_byte))
    return out
