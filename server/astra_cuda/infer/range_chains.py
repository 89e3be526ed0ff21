"""Integer parameters that end, in turn, the ranges one counter walks: loops one after another
over the same counter, each up to its own parameter and all within one bound of the problem,

    while (k < rows_8 && k < end_k) { …; k += 32; }     // end_k = min(offset_k + 128, size_k)
    while (k < rows_6 && k < end_k) { …; k += 32; }
    …

(exllamav2's `reconstruct_kernel`: the host's running sums of the rows of each bit width, the
last equal to the height). Free sizes drawn apart (`rows_8 = 1`, `rows_2 = 333`) leave the rows
past the largest unwritten, so each is taken as the bound: the first range then holds every row,
which is the program's own split for a matrix of one width. Separate because it is one reading of
the kernel's tree that the draft turns into values."""
from __future__ import annotations

from tree_sitter import Node

from ..model import access
from ..model.source import Kernel
from ..model.syntax import field, text, walk
from .launch_paths import initialiser_nodes, unparen

_LOOPS = ("while_statement", "for_statement")


def _bounds(cond: Node | None) -> list[tuple[str, Node]]:
    """(counter, limit) of each `counter < limit` conjunct of a loop's condition."""
    cond = unparen(cond)
    if cond is None or cond.type != "binary_expression":
        return []
    op = field(cond, "operator").type
    left, right = cond.child_by_field_name("left"), cond.child_by_field_name("right")
    if op == "&&":
        return _bounds(left) + _bounds(right)
    if op == "<" and left is not None and left.type == "identifier" and right is not None:
        return [(text(left), right)]
    return []


def _bound_size(limit: Node, sizes: set[str], locals_: dict[str, Node], depth: int = 0) -> str | None:
    """The one size a loop's other limit is made of (`end_k = min(offset_k + 128, size_k)` -> size_k),
    through the kernel's locals."""
    found: set[str] = set()
    for n in walk(limit):
        if n.type != "identifier":
            continue
        name = text(n)
        if name in sizes:
            found.add(name)
        elif name in locals_ and depth < 4:
            inner = _bound_size(locals_[name], sizes, locals_, depth + 1)
            found.update({inner} if inner else set())
    return next(iter(found)) if len(found) == 1 else None


def range_thresholds(kernel: Kernel, size_names: list[str]) -> list[tuple[str, str, str]]:
    """(threshold parameter, the size that bounds the whole walk, the note) for each chain of two or more
    loops in one block over one counter, each loop up to a different integer parameter of the
    kernel and all up to the same other limit made of one size (see the module's text)."""
    body = access.kernel_body(kernel)
    if body is None:
        return []
    sizes = set(size_names)
    locals_ = initialiser_nodes(body)
    out: dict[str, tuple[str, str, list[str], int]] = {}
    for block in (n for n in walk(body) if n.type == "compound_statement"):
        chain: list[tuple[str, str, str, int]] = []   # (counter, threshold, bound, line) of consecutive loops
        for s in (c for c in block.named_children if c.type != "comment"):
            limits = _bounds(s.child_by_field_name("condition")) if s.type in _LOOPS else []
            own = [(c, text(lim)) for c, lim in limits if lim.type == "identifier" and text(lim) in sizes]
            rest = [(c, _bound_size(lim, sizes, locals_)) for c, lim in limits
                    if not (lim.type == "identifier" and text(lim) in sizes)]
            link = None
            if len(own) == 1 and len(rest) == 1 and rest[0][1] is not None and rest[0][0] == own[0][0]:
                link = (own[0][0], own[0][1], rest[0][1], s.start_point[0] + 1)
            if link is not None and chain and (chain[-1][0], chain[-1][2]) == (link[0], link[2]):
                chain.append(link)
                continue
            _take(chain, out)
            chain = [link] if link is not None else []
        _take(chain, out)
    return [(t, b, f"`{t}` = {b}: the kernel's loops over `{c}` run in turn up to {', '.join(f'`{x}`' for x in ts)}, "
                   f"each within `{b}` (line {line}): each taken as `{b}`, so the first range holds every row "
                   f"and none is left unwritten — CHECK the split the program uses")
            for t, (b, c, ts, line) in out.items()]


def _take(chain: list[tuple[str, str, str, int]], out: dict[str, tuple[str, str, list[str], int]]) -> None:
    thresholds = [t for _, t, _, _ in chain]
    if len(chain) >= 2 and len(set(thresholds)) == len(thresholds) and not any(t == b for _, t, b, _ in chain):
        for counter, t, bound, _ in chain:
            out.setdefault(t, (bound, counter, thresholds, chain[0][3]))
