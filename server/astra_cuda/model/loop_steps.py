"""Where a loop's body moves a pointer, read off its tree for `access`'s walker: the GPTQ/exllama
pattern `while (k < end_k) { for (j = 0; j < 4; j++) { load(*b_ptr); b_ptr += size_n; } k += 32; }`
moves `b_ptr` by 4 rows a trip of the `while`, which its body, walked once, does not show.

Pure: nodes in, nodes and names out; the walker evaluates what they say (a step's value, a bound's).
"""
from __future__ import annotations

from tree_sitter import Node

from . import syntax

LOOPS = ("for_statement", "while_statement", "do_statement")
# statements under which an update may run on some trips only: its pointer's steps are not counted
_CONDITIONAL = ("if_statement", "switch_statement", "conditional_expression", "case_statement")
_JUMPS = ("break_statement", "continue_statement", "return_statement", "goto_statement")


def jumps(body: Node) -> bool:
    """The body leaves a trip early somewhere (`break`, `continue`, `return`, `goto`): a step after it
    may not run on every trip."""
    return any(n.type in _JUMPS for n in syntax.walk(body))


def for_parts(loop: Node) -> tuple[str, Node, str, Node, Node] | None:
    """`for (int j = START; j < BOUND; j++ | j += STEP)` as (j, START, '<' or '<=', BOUND, the update),
    else None."""
    init, cond, update = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update"))
    if init is None or cond is None or update is None:
        return None
    name, start = None, None
    for n in syntax.walk(init):
        if n.type in ("init_declarator", "assignment_expression"):
            lhs = n.child_by_field_name("declarator") or n.child_by_field_name("left")
            rhs = n.child_by_field_name("value") or n.child_by_field_name("right")
            if lhs is not None and rhs is not None and lhs.type == "identifier":
                name, start = syntax.text(lhs), rhs
                break
    counted = _compared(cond, name) if name is not None else None
    if name is None or start is None or counted is None or _updated(update) != name:
        return None
    return name, start, counted[0], counted[1], update


def while_counter(loop: Node) -> tuple[str, Node, str, list[Node]] | None:
    """`while (k < A && k < B) { ...; k += STEP; }`: (k, its one update, '<' or '<=', the bounds of
    its conjuncts) where the body updates k exactly once, on every trip (not under a condition nor a
    nested loop), else None."""
    cond, body = loop.child_by_field_name("condition"), loop.child_by_field_name("body")
    if cond is None or body is None:
        return None
    updates: dict[str, list[Node]] = {}
    for n in syntax.walk(body):
        if n.type in ("update_expression", "assignment_expression"):
            name = _updated(n)
            if name is not None:
                updates.setdefault(name, []).append(n)
    for name, ups in updates.items():
        if len(ups) != 1 or _guarded(ups[0], loop) != []:   # once a trip: in no condition nor inner loop
            continue
        bounds = [b for c in _conjuncts(cond) if (b := _compared(c, name)) is not None]
        ops = {op for op, _ in bounds}
        if bounds and len(ops) == 1:
            return name, ups[0], ops.pop(), [b for _, b in bounds]
    return None


def pointer_steps(loop: Node, pointers: set[str]) -> dict[str, list[tuple[Node, list[Node]]]]:
    """Each of `pointers` the loop's body moves (`p += e`, `p++`), with every update and the `for`
    loops between it and `loop` (innermost first). A pointer moved under a condition, in a loop
    other than a `for`, or assigned another way is left out: its steps per trip are not fixed."""
    body = loop.child_by_field_name("body")
    out: dict[str, list[tuple[Node, list[Node]]]] = {}
    bad: set[str] = set()
    for n in syntax.walk(body) if body is not None else ():
        if n.type not in ("update_expression", "assignment_expression"):
            continue
        target = n.child_by_field_name("argument") or n.child_by_field_name("left")
        name = syntax.text(target) if target is not None and target.type == "identifier" else None
        if name not in pointers:
            continue
        inner = _guarded(n, loop)
        op = n.child_by_field_name("operator")
        if inner is None or (n.type == "assignment_expression" and (op is None or op.type != "+=")) \
                or (n.type == "update_expression" and "++" not in syntax.text(n)):
            bad.add(name)
            continue
        out.setdefault(name, []).append((n, inner))
    return {k: v for k, v in out.items() if k not in bad}


def _guarded(n: Node, loop: Node) -> list[Node] | None:
    """The `for` loops between `n` and `loop` (innermost first), or None where a condition, another
    kind of loop or a function body lies between them."""
    fors = []
    cur = n.parent
    while cur is not None and cur != loop:
        if cur.type in _CONDITIONAL or cur.type in ("while_statement", "do_statement", "lambda_expression",
                                                    "function_definition"):
            return None
        if cur.type == "for_statement":
            fors.append(cur)
        cur = cur.parent
    return fors if cur == loop else None


def _updated(n: Node) -> str | None:
    """The identifier an update (`i++`, `i += s`) changes."""
    target = n.child_by_field_name("argument") or n.child_by_field_name("left")
    if target is None or target.type != "identifier":
        return None
    if n.type == "update_expression" or n.type == "assignment_expression" and \
            (op := n.child_by_field_name("operator")) is not None and op.type == "+=":
        return syntax.text(target)
    return None


def _conjuncts(cond: Node) -> list[Node]:
    cond = _unparen(cond)
    op = cond.child_by_field_name("operator") if cond.type == "binary_expression" else None
    if op is not None and op.type == "&&":
        return _conjuncts(syntax.field(cond, "left")) + _conjuncts(syntax.field(cond, "right"))
    return [cond]


def _compared(cond: Node, name: str) -> tuple[str, Node] | None:
    """`name < X` or `name <= X` as ('<' or '<=', X)."""
    cond = _unparen(cond)
    op = cond.child_by_field_name("operator") if cond.type == "binary_expression" else None
    left = _unparen(syntax.field(cond, "left")) if op is not None else None
    if op is None or op.type not in ("<", "<=") or left is None or left.type != "identifier" \
            or syntax.text(left) != name:
        return None
    return op.type, syntax.field(cond, "right")


def _unparen(n: Node) -> Node:
    while n.type in ("parenthesized_expression", "condition_clause") and n.named_child_count == 1:
        n = n.named_children[0]
    return n
