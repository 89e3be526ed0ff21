"""The unit a stride parameter counts in. A stride added to an index before the sum is scaled by a
size (DeepSpeed's rotary `k_offset = (cur_seq_idx + (head_idx / seq_len) * max_out_tokens) *
head_size`) counts rows of `head_size` elements, not elements: its contiguous value is the extent
the kernel reaches inside it divided by `head_size` (`seq_len`), where taking the extent in
elements (`seq_len * head_size`) spaces the rows `head_size` times too far apart."""
from __future__ import annotations

from tree_sitter import Node

from ..model import access, source, syntax
from ..model.syntax import walk

_SUM = ("+", "-")


def _op(n: Node) -> str | None:
    o = n.child_by_field_name("operator") if n.type == "binary_expression" else None
    return o.type if o is not None else None


def _bare(n: Node | None) -> Node | None:
    while n is not None and n.type == "parenthesized_expression" and n.named_child_count == 1:
        n = n.named_children[0]
    return n


def _scale(use: Node, sizes: set[str]) -> str | None:
    """The size that scales the sum `use` (an occurrence of the stride) is a term of:
    `(a + i * s) * h` -> 'h'. None where the use is no such term."""
    n, up = use, use.parent
    while up is not None and up.type == "parenthesized_expression":
        n, up = up, up.parent
    if up is None or _op(up) != "*":   # `i * s`: the stride times its index
        return None
    n, up, summed = up, up.parent, False
    while up is not None and (up.type == "parenthesized_expression" or _op(up) in _SUM):
        summed = summed or _op(up) in _SUM
        n, up = up, up.parent
    if not summed or up is None or _op(up) != "*":
        return None
    left, right = up.child_by_field_name("left"), up.child_by_field_name("right")
    other = _bare(right if left is not None and left.start_byte == n.start_byte else left)
    if other is None or other.type != "identifier" or syntax.text(other) not in sizes:
        return None
    return syntax.text(other)


def unit(kernel: source.Kernel, stride: str, size_names: list[str]) -> str | None:
    """The size every use of `stride` in the kernel's body is scaled by after being added to an
    index, or None (a use of another form, or none)."""
    body = access.kernel_body(kernel)
    if body is None:
        return None
    sizes = set(size_names) - {stride}
    found = {_scale(n, sizes) for n in walk(body) if n.type == "identifier" and syntax.text(n) == stride}
    return found.pop() if len(found) == 1 and None not in found else None
