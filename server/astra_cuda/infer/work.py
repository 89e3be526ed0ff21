"""The loop trips a test case asks of a kernel: each thread's `for` loops counted from their bounds
at the case's sizes (nested loops multiply, one after another add), times the launch's threads.
A case past `MAX_THREAD_TRIPS` or `MAX_CASE_TRIPS` would run for minutes — a top-k kernel looping
`k` times over `num_experts / TPB` experts and, inside, over the `k_idx` winners so far (vLLM's
moeTopK: k·k·num_experts/256 trips a thread, hours at k = num_experts = 4096 on the CPU) — so
`sizes.repair` shrinks it like a case of too many bytes. A loop whose bound or step cannot be
read at the sizes counts once: this bounds only what it can read. `idle`: a case at which the launch
starts every loop past its end, so no thread works (a test size the program cannot mean)."""
from __future__ import annotations

from collections.abc import Callable

from tree_sitter import Node

from ..model import syntax

MAX_THREAD_TRIPS = 1 << 22   # one thread's iterations (on a GPU a thread's loop runs serially)
MAX_CASE_TRIPS = 1 << 33     # all threads' together (the CPU backend runs every one of them)

_DIMS = {"x": 0, "y": 1, "z": 2}
_OPS: dict[str, Callable[[int, int], int | None]] = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
        "/": lambda a, b: int(a / b) if b else None, "%": lambda a, b: a - b * int(a / b) if b else None,
        "<<": lambda a, b: a << b if 0 <= b < 64 else None, ">>": lambda a, b: a >> b if 0 <= b < 64 else None}


def value(n: Node | None, env: dict[str, int]) -> int | None:
    """An integer expression's value where every name in it is in `env` (threadIdx and blockIdx
    at 0, blockDim and gridDim the launch's), else None."""
    if n is None:
        return None
    t = n.type
    if t == "number_literal":
        s = syntax.text(n).rstrip("uUlL")
        try:
            return int(s, 0)
        except ValueError:
            return None
    if t == "identifier":
        return env.get(syntax.text(n))
    if t in ("parenthesized_expression", "cast_expression"):
        inner = n.child_by_field_name("value") if t == "cast_expression" else None
        return value(inner if inner is not None else (n.named_children[-1] if n.named_children else None), env)
    if t == "field_expression":
        arg, field = n.child_by_field_name("argument"), n.child_by_field_name("field")
        if arg is not None and field is not None and syntax.text(field) in _DIMS:
            return env.get(f"{syntax.text(arg)}.{syntax.text(field)}")
        return None
    if t == "binary_expression":
        op = n.child_by_field_name("operator")
        a, b = value(n.child_by_field_name("left"), env), value(n.child_by_field_name("right"), env)
        f = _OPS.get(op.type if op is not None else "")
        return f(a, b) if f is not None and a is not None and b is not None else None
    if t == "call_expression":   # min/max of the sizes (`min(n, 1024)`)
        fn = syntax.text(n.child_by_field_name("function")).split("::")[-1]
        args = n.child_by_field_name("arguments")
        vals = [value(a, env) for a in (args.named_children if args is not None else [])]
        if fn in ("min", "max") and len(vals) == 2 and None not in vals:
            return min(vals) if fn == "min" else max(vals)   # type: ignore[type-var]
    return None


def _loop(n: Node, env: dict[str, int]) -> tuple[str, int, int] | None:
    """(variable, its largest value, trips) of `for (int i = a; i < b; i += s)` (also `<=`, `!=`,
    `++i`, `i = i + s`) where a, b and s can be read; None otherwise."""
    init, cond, step = (n.child_by_field_name(f) for f in ("initializer", "condition", "update"))
    if init is None or cond is None or step is None or cond.type != "binary_expression":
        return None
    decl = init.named_children[-1] if init.type == "declaration" and init.named_children else init
    if decl.type not in ("init_declarator", "assignment_expression"):
        return None
    var = syntax.text(decl.child_by_field_name("declarator") or decl.child_by_field_name("left"))
    start = value(decl.child_by_field_name("value") or decl.child_by_field_name("right"), env)
    op = cond.child_by_field_name("operator")
    if syntax.text(cond.child_by_field_name("left")) != var or op is None or op.type not in ("<", "<=", "!="):
        return None
    end = value(cond.child_by_field_name("right"), env)
    if step.type == "update_expression" and "++" in syntax.text(step):
        stride: int | None = 1
    elif step.type == "assignment_expression" and syntax.text(step.child_by_field_name("left")) == var:
        op2, right = step.child_by_field_name("operator"), step.child_by_field_name("right")
        if op2 is not None and op2.type == "+=":
            stride = value(right, env)
        elif op2 is not None and op2.type == "=" and right is not None and right.type == "binary_expression" \
                and syntax.text(right.child_by_field_name("left")) == var \
                and (o := right.child_by_field_name("operator")) is not None and o.type == "+":
            stride = value(right.child_by_field_name("right"), env)
        else:
            return None
    else:
        return None
    if start is None or end is None or stride is None or stride < 1:
        return None
    last = end if op.type == "<=" else end - 1
    return var, last, max(0, (last - start) // stride + 1)


def thread_trips(body: Node | None, env: dict[str, int]) -> int:
    """One thread's innermost iterations: a loop's trips times its body's (at least one), the
    statements of a block added. An outer loop's variable is its largest value in the loops
    inside it (`prior < k_idx` runs up to k - 1 times)."""
    if body is None:
        return 0
    if body.type == "for_statement":
        found = _loop(body, env)
        inner_env = {**env, found[0]: found[1]} if found is not None else env
        inner = thread_trips(body.child_by_field_name("body"), inner_env)
        return (found[2] if found is not None else 1) * max(1, inner)
    total = 0
    for c in body.named_children:
        if c.type in ("function_definition", "lambda_expression"):
            continue
        total += thread_trips(c, env)
    return total


_MONOTONE = {"number_literal", "identifier", "field_expression", "parenthesized_expression", "cast_expression",
             "binary_expression"}


def _least_at_zero(n: Node) -> bool:
    """Whether an expression of the thread's and block's indices takes its least value at index 0:
    built of sums and products of names, numbers and launch dimensions only (no difference,
    division or call that could make a later thread start lower)."""
    if n.type not in _MONOTONE:
        return False
    if n.type == "binary_expression":
        op = n.child_by_field_name("operator")
        if op is None or op.type not in ("+", "*"):
            return False
    return all(_least_at_zero(c) for c in n.named_children if c.type not in ("field_identifier", "primitive_type",
                                                                               "type_descriptor"))


def _outer_loops(n: Node) -> list[Node]:
    out: list[Node] = []
    for c in n.named_children:
        if c.type in ("function_definition", "lambda_expression"):
            continue
        out += [c] if c.type == "for_statement" else _outer_loops(c)
    return out


def idle(body: Node | None, env: dict[str, int]) -> bool:
    """Whether no thread of the launch makes a single trip of any of the kernel's loops because the
    launch's dimensions start every loop past its end (`for (i = threadIdx.x + blockDim.x; i < n; …)`
    at n ≤ blockDim.x): each outermost loop read, its start least at thread 0 of block 0 and no trip
    there, one start naming blockDim or gridDim; a `while` or `do` loop, or one not read: False."""
    if body is None or syntax.nodes_of(body, ("while_statement", "do_statement")):
        return False
    loops = _outer_loops(body)
    launch_bound = False
    for loop in loops:   # no trip whatever the step: the condition is false at the start
        init, cond = loop.child_by_field_name("initializer"), loop.child_by_field_name("condition")
        decl = init.named_children[-1] if init is not None and init.type == "declaration" and init.named_children \
            else init
        if decl is None or cond is None or cond.type != "binary_expression" \
                or decl.type not in ("init_declarator", "assignment_expression"):
            return False
        var = syntax.text(decl.child_by_field_name("declarator") or decl.child_by_field_name("left"))
        start_node = decl.child_by_field_name("value") or decl.child_by_field_name("right")
        op = cond.child_by_field_name("operator")
        start, end = value(start_node, env), value(cond.child_by_field_name("right"), env)
        if start_node is None or start is None or end is None or op is None or op.type not in ("<", "<=") \
                or syntax.text(cond.child_by_field_name("left")) != var or not _least_at_zero(start_node):
            return False
        if start < end or (op.type == "<=" and start == end):
            return False
        launch_bound |= any(d in syntax.text(start_node) for d in ("blockDim", "gridDim"))
    return bool(loops) and launch_bound
