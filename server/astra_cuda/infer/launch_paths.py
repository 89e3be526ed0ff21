"""A launcher's scalar locals that are set more than once, followed along the launch's own path
where every `if` that sets them is decided: by the numbers known so far, and by the value a
parameter takes when its 0 asks the launcher to choose (`auto_zero_params`).

vLLM's `awq_dequantize(…, thx, thy)` is called with `thx = thy = 0` and then sizes the launch
itself: `int x_thread = thx; … if (thx == 0 && thy == 0) { x_thread = 8; x_blocks = qout_c / 8; }`.
Read as "a block size the caller chooses", its launch had one grid dimension over the wrong size
and the kernel read past its buffers. Separate from `launch_locals` (one declaration, no change)
because this one runs the statements in order."""
from __future__ import annotations

import re

from tree_sitter import Node

from ..model import exprs
from ..model.syntax import declarator_name, text, walk
from .program import param_names

_LOOPS = ("for_statement", "for_range_loop", "while_statement", "do_statement")


def unparen(node: Node | None) -> Node | None:
    while node is not None and node.type in ("condition_clause", "parenthesized_expression") \
            and len(node.named_children) == 1:
        node = node.named_children[0]
    return node


def _conjuncts(cond: Node | None) -> list[Node]:
    cond = unparen(cond)
    if cond is None:
        return []
    op = cond.child_by_field_name("operator") if cond.type == "binary_expression" else None
    if op is not None and op.type == "&&":
        return _conjuncts(cond.child_by_field_name("left")) + _conjuncts(cond.child_by_field_name("right"))
    return [cond]


def _tests_zero(cond: Node, name: str) -> bool:
    """`name == 0` (either side)."""
    op = cond.child_by_field_name("operator") if cond.type == "binary_expression" else None
    if op is None or op.type != "==":
        return False
    sides = {text(cond.child_by_field_name("left")), text(cond.child_by_field_name("right"))}
    return sides == {name, "0"}


def _assigned(node: Node) -> list[str]:
    """The plain names a statement assigns (`x = …`, `x += …`, `x++`)."""
    out = []
    for n in walk(node):
        if n.type in ("assignment_expression", "update_expression"):
            t = n.child_by_field_name("left") or n.child_by_field_name("argument")
            if t is not None and t.type == "identifier":
                out.append(text(t))
    return out


def initialiser_nodes(fn: Node) -> dict[str, Node]:
    """Each local's initialiser (`int x_thread = thx` -> {'x_thread': <thx>})."""
    out: dict[str, Node] = {}
    for n in walk(fn):
        if n.type == "declaration":
            for d in n.children_by_field_name("declarator"):
                value = d.child_by_field_name("value") if d.type == "init_declarator" else None
                name = declarator_name(d)[0]
                if name and value is not None:
                    out[name] = value
    return out


def _initialisers(fn: Node) -> dict[str, str]:
    """Each local's initialiser as written (`int x_thread = thx` -> {'x_thread': 'thx'})."""
    return {name: text(value) for name, value in initialiser_nodes(fn).items()}


def auto_zero_params(fn: Node) -> list[str]:
    """The launcher's parameters whose 0 asks it to choose for itself: an `if (p == 0)` (alone or
    in a conjunction) whose branch sets `p` or a local declared from `p` (`int x_thread = thx; if
    (thx == 0) x_thread = qout_c;`). The launcher states what it does then, from the sizes it is
    given, so 0 is a call the program makes without choosing a launch of its own."""
    params = [p for p in param_names(fn) if p]
    init = _initialisers(fn)
    out: list[str] = []
    for n in walk(fn):
        if n.type != "if_statement" or (then := n.child_by_field_name("consequence")) is None:
            continue
        conjuncts = _conjuncts(n.child_by_field_name("condition"))
        tested = [p for p in params if any(_tests_zero(c, p) for c in conjuncts)]
        # every conjunct a `p == 0` (`if (row_a == 0 && row_b == 0) row_b = height;`: both 0 ask
        # for every row), and the branch sets one of them or a local declared from one
        if tested and len(tested) == len(conjuncts) and any(
                t in tested or init.get(t, "").strip() in tested for t in _assigned(then)):
            out.extend(p for p in tested if p not in out)
    return out


def _word(text_: str, name: str, by: str) -> str:
    return re.sub(rf"\b{re.escape(name)}\b", lambda _: by, text_)


class _Run:
    """The statements before the launch, run over text values (see `path_locals`)."""

    def __init__(self, fixed: dict[str, int], tracked: set[str]):
        self.fixed, self.tracked = fixed, tracked
        self.values: dict[str, str] = {}
        self.lost: set[str] = set()

    def read(self, expr: str) -> str:
        """`expr` with each tracked local's value so far and each fixed parameter's number."""
        for name in self.tracked:
            if name in self.values:
                expr = _word(expr, name, f"({self.values[name]})")
        for name, v in self.fixed.items():
            expr = _word(expr, name, str(v))
        return expr

    def decide(self, cond: Node | None) -> bool | None:
        c = unparen(cond)
        if c is None:
            return None
        try:
            env = {k: int(n) for k, v in self.values.items() if re.fullmatch(r"-?\d+", n := v.strip("() "))}
            return bool(exprs.evaluate(self.read(text(c)), env))
        except (exprs.ExprError, ValueError, TypeError, ZeroDivisionError):
            return None

    def lose(self, node: Node) -> None:
        self.lost.update(n for n in _assigned(node) if n in self.tracked)

    def statement(self, s: Node, call: Node) -> bool:
        """Run `s`; True when the launch `call` was reached inside it (stop there)."""
        inside = s.start_byte <= call.start_byte < s.end_byte
        if s.type == "compound_statement":
            for c in s.named_children:
                if c.type != "comment" and self.statement(c, call):
                    return True
            return False
        if s.type == "if_statement":
            then, other = s.child_by_field_name("consequence"), s.child_by_field_name("alternative")
            branch = next((c for c in other.named_children if c.type != "comment"), None) if other is not None else None
            if inside:   # the launch's own branch: no value changes here by the test
                taken = then if then is not None and then.start_byte <= call.start_byte < then.end_byte else branch
                return taken is not None and self.statement(taken, call)
            way = self.decide(s.child_by_field_name("condition"))
            if way is None:
                self.lose(s)
            elif way and then is not None:
                self.statement(then, call)
            elif not way and branch is not None:
                self.statement(branch, call)
            return False
        if inside:
            if s.type in _LOOPS:   # a launch in a loop may see what a later trip sets
                self.lost.update(self.tracked)
            else:   # a statement not run here (a `switch` around the launch: bitsandbytes'
                # optimizerStatic8bitBlockwise sets num_blocks in its case): what it sets is not known,
                # rather than the declaration's `num_blocks = 0` taken as the launch's grid
                self.lose(s)
            return True
        if s.type == "declaration":
            for d in s.children_by_field_name("declarator"):
                name = declarator_name(d)[0]
                value = d.child_by_field_name("value") if d.type == "init_declarator" else None
                if name in self.tracked and value is not None and value.type not in ("initializer_list", "argument_list"):
                    self.values[name] = self.read(text(value))
            return False
        assign = next((c for c in s.named_children if c.type != "comment"), None) if s.type == "expression_statement" else None
        if assign is not None and assign.type == "assignment_expression":
            target, right, op = (assign.child_by_field_name(f) for f in ("left", "right", "operator"))
            name = text(target) if target is not None and target.type == "identifier" else None
            if name in self.tracked and right is not None and op is not None:
                given = self.read(text(right))
                if op.type != "=":
                    given = f"({self.values[name]}) {op.type[:-1]} ({given})" if name in self.values else ""
                if given:
                    self.values[name] = given
                    return False
        self.lose(s)
        return False


def path_locals(fn: Node, call: Node, fixed: dict[str, int]) -> dict[str, str]:
    """The launcher's scalar locals set more than once (`int x_thread = thx; … x_thread = 8;`), each
    as the launch `call` sees it: the statements before it run in order, an `if` followed into the
    branch its test takes — decided by `fixed` (parameter -> number) and the numbers known so far
    —, a local set in an `if` that cannot be decided, a loop or any other statement left out."""
    counts: dict[str, int] = {p: 1 for p in param_names(fn) if p}
    shapes: set[str] = set()   # dim3 locals: a changed one is `launch_locals`' to refuse, not a number
    for n in walk(fn):
        if n.type == "declaration":
            kind = text(n.child_by_field_name("type")).split("::")[-1].strip()
            for d in n.children_by_field_name("declarator"):
                if (name := declarator_name(d)[0]):
                    counts[name] = counts.get(name, 0) + 1
                    if kind == "dim3":
                        shapes.add(name)
    tracked = {k for k, v in counts.items() if v == 1 and k not in shapes} & set(_assigned(fn))
    body = fn.child_by_field_name("body")
    if not (tracked or fixed) or body is None or not (body.start_byte <= call.start_byte < body.end_byte):
        return {}
    run = _Run(fixed, tracked)
    # a parameter the launcher sets (`row_b = height` under `if (row_a == 0 && row_b == 0)`) starts
    # as the caller's value: its own name, or the number it is read as
    run.values.update({p: str(fixed.get(p, p)) for p in param_names(fn) if p in tracked})
    run.statement(body, call)
    out = {k: v for k, v in run.values.items() if k not in run.lost and k in tracked and v != k}
    return {**{p: str(v) for p, v in fixed.items()}, **out}
