"""Whether a kernel's loop steps over the whole grid (`i += blockDim.x * gridDim.x`, or through
locals: `stride = gridDim.x * threads; … i += stride`): such a loop covers its elements with any
block count, so a block count the caller chooses is a launch size of its own, not one thread per
element (`launches`)."""
from __future__ import annotations

from tree_sitter import Node

from ..model import source
from ..model.syntax import walk

_LOOPS = ("for_statement", "while_statement", "do_statement")


def _names(node: Node) -> set[str]:
    return {n.text.decode() for n in walk(node) if n.type == "identifier"}


def _grid_names(root: Node) -> set[str]:
    """`gridDim` and the locals computed from it, through other such locals (`numCtas = gridDim.x;
    stride = numCtas * size;`), declared or assigned (`=`) anywhere in the kernel."""
    found = {"gridDim"}
    pairs: list[tuple[str, set[str]]] = []
    for n in walk(root):
        if n.type == "init_declarator":
            target, value = n.child_by_field_name("declarator"), n.child_by_field_name("value")
        elif n.type == "assignment_expression" and n.child_by_field_name("operator").type == "=":
            target, value = n.child_by_field_name("left"), n.child_by_field_name("right")
        else:
            continue
        # a step's own update (`i = i + stride`) makes no local of the grid's size
        if target is not None and value is not None and target.type == "identifier" \
                and target.text.decode() not in _names(value):
            pairs.append((target.text.decode(), _names(value)))
    grew = True
    while grew:
        grew = False
        for name, used in pairs:
            if name not in found and used & found:
                found.add(name)
                grew = True
    return found


def strides_over_grid(kernel_text: str) -> bool:
    """A loop of the kernel advances a variable by a step that reads the grid's size: `x += s`
    or `x = x + s` inside the loop (its update or its body), `s` naming `gridDim` or a local
    computed from it."""
    root = source.parser().parse(kernel_text.encode("utf-8")).root_node
    grid = _grid_names(root)
    for loop in (n for n in walk(root) if n.type in _LOOPS):
        for a in (n for n in walk(loop) if n.type == "assignment_expression"):
            left, right, op = a.child_by_field_name("left"), a.child_by_field_name("right"), \
                a.child_by_field_name("operator")
            if left is None or right is None or op is None or left.type != "identifier":
                continue
            var = left.text.decode()
            step = _names(right) - {var}
            if (op.type == "+=" or op.type == "=" and var in _names(right)) and step & grid and var not in grid:
                return True
    return False
