"""The order of a shape of two sizes, read off the kernel's offsets. Fitting the extent a pointer
reaches to a product of sizes finds [A, B] and [B, A] alike (A·B elements either way), and the
fit lists them in the parameters' order: sgl-kernel's per_token_quant_fp8_kernel takes
`hidden_dim, num_tokens`, so its `output_q` came out [hidden_dim, num_tokens]. The order matters
beyond the name: the innermost size is what a vector access must divide (16 fp8 values a store:
`hidden_dim % 16`, not `num_tokens % 16`) and what a row is to the tests and to the coding agent.
A size that multiplies an index added to the pointer (`output_q + token_id * hidden_dim`, or
`x[row * C + col]`) is the length of the rows the kernel steps over: the innermost dimension.
Separate because it is a reading of the tree, none of the fit's arithmetic."""
from __future__ import annotations

from tree_sitter import Node

from ..model import access
from ..model.source import Kernel
from ..model.syntax import text, walk

_WRAPPERS = ("parenthesized_expression", "cast_expression")


def _bare(n: Node | None) -> Node | None:
    while n is not None and n.type == "parenthesized_expression" and n.named_child_count == 1:
        n = n.named_children[0]
    return n


def _op(n: Node | None) -> str | None:
    o = n.child_by_field_name("operator") if n is not None and n.type == "binary_expression" else None
    return o.type if o is not None else None


def _aliases(body: Node, pointer: str) -> set[str]:
    """`pointer` and the pointer locals declared from it (`T* row = pointer + i * n;`, casts
    included, and locals declared from those) — not a value loaded from it (`float v = p[i];`),
    whose sums are arithmetic, not offsets: one pass in source order, as C++ declares a name
    before its use (a fixed point over every declaration would be quadratic in a hostile file's)."""
    names = {pointer}
    for d in walk(body):
        if d.type != "init_declarator":
            continue
        name, is_pointer = d.child_by_field_name("declarator"), False
        while name is not None and name.type != "identifier":
            is_pointer = is_pointer or name.type == "pointer_declarator"
            name = name.child_by_field_name("declarator")
        value = d.child_by_field_name("value")
        if name is None or value is None or not (is_pointer or _auto_address(d, value)):
            continue
        if any(n.type == "identifier" and text(n) in names for n in walk(value)):
            names.add(text(name))
    return names


def _auto_address(declarator: Node, value: Node) -> bool:
    """`auto row = p + i * n;`: an `auto` local whose value is an address, not an element read
    (`p[i]`, `*p`) or a call's result."""
    decl = declarator.parent
    typ = decl.child_by_field_name("type") if decl is not None else None
    v = value
    while v.type in ("parenthesized_expression", "cast_expression"):
        v = v.child_by_field_name("value") or v.named_children[-1]
    return typ is not None and text(typ) == "auto" and v.type not in ("subscript_expression", "call_expression") \
        and not (v.type == "pointer_expression" and text(v.child(0)) == "*")


def _offsets(body: Node, names: set[str]) -> list[Node]:
    """The index expressions added to one of `names` (`p + e`, `e + p`, `p[e]`)."""
    out = []
    for n in walk(body):
        if n.type != "identifier" or text(n) not in names:
            continue
        at, up = n, n.parent
        while up is not None and up.type in _WRAPPERS:
            at, up = up, up.parent
        if up is None:
            continue
        if _op(up) in ("+", "-"):
            left, right = up.child_by_field_name("left"), up.child_by_field_name("right")
            other = right if left is not None and left.start_byte == at.start_byte else left
            if other is not None:
                out.append(other)
        elif up.type == "subscript_expression" and up.child_by_field_name("argument") is not None \
                and up.child_by_field_name("argument").start_byte == at.start_byte:
            idx = up.child_by_field_name("indices") or up.child_by_field_name("index")
            if idx is not None and idx.type == "subscript_argument_list":
                idx = next((c for c in idx.named_children if c.type != "comment"), None)
            if idx is not None:
                out.append(idx)
    return out


def row_lengths(kernel: Kernel, pointer: str, sizes: set[str]) -> set[str]:
    """Of `sizes`, those that multiply an index added to `pointer` (or to a local made from it)."""
    body = access.kernel_body(kernel)
    if body is None:
        return set()
    found: set[str] = set()
    for off in _offsets(body, _aliases(body, pointer)):
        for m in walk(off):
            if _op(m) != "*":
                continue
            for side in (m.child_by_field_name("left"), m.child_by_field_name("right")):
                s = _bare(side)
                if s is not None and s.type == "identifier" and text(s) in sizes:
                    found.add(text(s))
    return found


def rows_first(kernel: Kernel, pointer: str, shape: list[str], size_names: list[str]) -> list[str]:
    """`shape` with its two sizes swapped where it is two distinct plain sizes, the kernel steps
    `pointer` by exactly one of them, and that one was listed first."""
    if len(shape) == 2 and shape[0] != shape[1] and all(d in size_names for d in shape) \
            and row_lengths(kernel, pointer, set(shape)) == {shape[0]}:
        return [shape[1], shape[0]]
    return shape
