"""Pointers a kernel instance never touches: those its body names only inside branches the
instance's template arguments (or constant parameters) rule out. Apart from `roles` because the
draft asks it too, before any shape is fitted."""
from __future__ import annotations

from ..model import access, compiled_branches, syntax
from ..model.source import Kernel
from ..model.syntax import walk


def only_in_dead_branches(kernel: Kernel, pointers: list[str], constants: dict[str, int]) -> set[str]:
    """The pointers the kernel's body names only inside branches its template arguments rule out
    (`if (STOCHASTIC) ... rand[i]` with STOCHASTIC 0): this instance never touches them. A pointer
    named anywhere else (copied into a local table, say) may be touched where the walk cannot see."""
    body = access.kernel_body(kernel)
    if body is None:
        return set()
    dead: list[tuple[int, int]] = []
    for n in walk(body):
        if n.type != "if_statement" or any(s <= n.start_byte < e for s, e in dead):
            continue
        taken = compiled_branches.constexpr_branch(n, constants)
        cond = n.child_by_field_name("condition")
        if taken is None and cond is not None:
            taken = compiled_branches.truth_of(cond, constants, {p.name for p in kernel.params if not p.is_pointer})
        if taken is None:
            continue
        gone = n.child_by_field_name("alternative" if taken else "consequence")
        if gone is not None:
            dead.append((gone.start_byte, gone.end_byte))
    named = {p: False for p in pointers}
    for n in walk(body):
        # any token spelled so (`View c_(c, m, n)` is read as a declaration whose `c` is a type)
        if n.child_count == 0 and syntax.text(n) in named and not any(s <= n.start_byte < e for s, e in dead):
            named[syntax.text(n)] = True
    return {p for p, live in named.items() if not live}
