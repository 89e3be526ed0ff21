"""Conditions a vector step of vectorize.py runs under.

Where a statement of the loop body runs under a condition that is the same for every step of
the loop (`if (RESIDUAL_NUM == 1)`, `bias == nullptr ? 0 : bias[i]`), a vector step loads or
stores a whole vector under that condition, as the original touched each element under it —
never a load the original guarded away (a null pointer behind `p == nullptr`). `path` gives the
condition as C++ text ("" for always), or None where an enclosing condition changes within the
loop or may have an effect (a call, a memory read, an assignment).

In a template the vector step is sized for the spec's instantiation (`T` = float: four a step);
`template_sizes` makes the vector path require those element sizes, so another instantiation of
the same template (`T` = half) runs the loop element by element instead of overrunning its
registers."""
from __future__ import annotations

from tree_sitter import Node

from .loops import StridedLoop
from .tree import txt, unparenthesized, walk
from .types import SIZES

# What a condition evaluated once, before the step, may hold: names, numbers, operators and
# compile-time type queries (`std::is_same<T, U>::value`); no call, memory read or assignment.
_EFFECTS = {"call_expression", "subscript_expression", "pointer_expression", "field_expression",
            "assignment_expression", "update_expression", "comma_expression", "lambda_expression",
            "new_expression", "delete_expression"}


def steady(m: StridedLoop, cond: Node) -> bool:
    """`cond` has one value through the whole loop and evaluating it again changes nothing."""
    return m.invariant(cond) and not any(n.type in _EFFECTS for n in walk(cond))


def path(m: StridedLoop, node: Node) -> str | None:
    """The condition under which `node` (inside the loop's body) runs, as C++ text; "" where it
    always runs; None where that is not a steady condition."""
    terms: list[str] = []
    child, p = node, node.parent
    while p is not None and p != m.body:
        cond = None
        if p.type == "if_statement":
            c = p.child_by_field_name("condition")
            if child == p.child_by_field_name("consequence"):
                cond = c, True
            elif child.type == "else_clause":
                cond = c, False
            elif child != c:
                return None
        elif p.type == "conditional_expression":
            c = p.child_by_field_name("condition")
            if child == p.child_by_field_name("consequence"):
                cond = c, True
            elif child == p.child_by_field_name("alternative"):
                cond = c, False
        elif p.type == "binary_expression" and txt(p.child_by_field_name("operator")) in ("&&", "||") \
                and child == p.child_by_field_name("right"):
            cond = p.child_by_field_name("left"), txt(p.child_by_field_name("operator")) == "&&"
        elif p.type in ("switch_statement", "case_statement", "lambda_expression"):
            return None
        if cond is not None:
            c, holds = cond
            if c is None:
                return None
            inner = [n for n in c.named_children if n.type != "comment"] if c.type == "condition_clause" else [c]
            if len(inner) != 1 or inner[0].type == "declaration" or not steady(m, inner[0]):
                return None
            e = txt(unparenthesized(inner[0]))
            terms.append(f"({e})" if holds else f"!({e})")
        child, p = p, p.parent
    return " && ".join(reversed(terms))


def either(paths: list[str]) -> str:
    """The condition that any of `paths` holds ("" when one always does)."""
    if any(p == "" for p in paths):
        return ""
    distinct = list(dict.fromkeys(paths))
    return distinct[0] if len(distinct) == 1 else " || ".join(f"({p})" for p in distinct)


def wrap(lines: list[str], at: int, paths: list[str], indent: str) -> None:
    """`lines[at:]` run only where one of `paths` holds."""
    cond = either(paths)
    if cond:
        lines[at:] = [f"{indent}if ({cond}) {{", *(f"  {x}" for x in lines[at:]), f"{indent}}}"]


def template_sizes(loop: Node, arrays: dict[str, tuple[str, int | None]]) -> list[str]:
    """`sizeof(*p) == n` for each array (its element type as written, its size for the spec's
    instantiation) of a template function around `loop` whose element type is not a fixed one."""
    fn = loop.parent
    while fn is not None and fn.type != "function_definition":
        fn = fn.parent
    if fn is None or fn.parent is None or fn.parent.type != "template_declaration":
        return []
    return [f"sizeof(*{arr}) == {size}" for arr, (elem, size) in arrays.items()
            if size and " ".join(w for w in elem.split() if w not in ("const", "volatile")) not in SIZES]
