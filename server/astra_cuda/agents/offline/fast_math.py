"""Fast-math intrinsics: `expf`→`__expf`, float `x / y`→`__fdividef(x, y)`, `1.0f / sqrtf(x)`→
`rsqrtf(x)`, in the kernel and the device functions it calls. Kept only if the gate passes
(the dtype-aware tolerances decide whether the lost ulps matter)."""
from __future__ import annotations

from tree_sitter import Node

from . import base
from .base import Context, Edit, Rewrite, body, expr_kind, pointer_params, return_types, variable_types
from .tree import apply_edits, callee, txt, unparenthesized

ONE = {"1.0f", "1.f", "1.0F", "1.F"}


def _rewrite(node: Node, types, ptrs, rets, counts: dict) -> str | None:
    """The fast-math text of `node`, or None when nothing inside it changes."""
    t = node.type
    if t == "call_expression" and callee(node) == "expf":
        args = node.child_by_field_name("arguments")
        inner = _children_text(args, types, ptrs, rets, counts)
        counts["expf"] = counts.get("expf", 0) + 1
        return "__expf" + inner
    if t == "binary_expression" and txt(node.child_by_field_name("operator")) == "/":
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        r = unparenthesized(right)
        if txt(left) in ONE and r.type == "call_expression" and callee(r) == "sqrtf":
            counts["rsqrtf"] = counts.get("rsqrtf", 0) + 1
            return "rsqrtf" + _children_text(r.child_by_field_name("arguments"), types, ptrs, rets, counts)
        kl, kr = expr_kind(left, types, ptrs, rets), expr_kind(right, types, ptrs, rets)
        if "float" in (kl, kr) and kl in ("float", "int") and kr in ("float", "int"):
            counts["fdividef"] = counts.get("fdividef", 0) + 1
            a = _children_text(_arg(left), types, ptrs, rets, counts)
            b = _children_text(_arg(right), types, ptrs, rets, counts)
            return f"__fdividef({a}, {b})"
    return None


def _arg(n: Node) -> Node:
    """An operand as a call argument: `(1.0f + e)` needs no parentheses there (a comma
    expression keeps them)."""
    inner = unparenthesized(n)
    return n if inner.type == "comma_expression" else inner


def _children_text(node: Node, types, ptrs, rets, counts) -> str:
    """Text of `node` with rewrites applied inside it."""
    whole = _rewrite(node, types, ptrs, rets, counts)
    if whole is not None:
        return whole
    data = node.text
    out, pos = [], 0
    for c in node.children:
        sub = _children_text(c, types, ptrs, rets, counts)
        ct = c.text
        if sub != ct.decode("utf-8", errors="replace"):
            out.append(data[pos:c.start_byte - node.start_byte].decode())
            out.append(sub)
            pos = c.end_byte - node.start_byte
    out.append(data[pos:].decode())
    return "".join(out)


class FastMath(base.Transform):
    name = "fast_math"
    title = "fast-math intrinsics (__expf, __fdividef, rsqrtf)"
    note = "fast intrinsics (__expf, __fdividef): fewer instructions per element, slightly less exact"
    expected = "fewer instructions per element: SFU approximations instead of accurate libm paths"

    def rewrite(self, text: str, ctx: Context, sc: base.Scope, params: dict) -> Rewrite | None:
        rets = return_types(sc.root)
        edits, counts = [], {}
        for fn in sc.functions:
            types, ptrs = variable_types(fn), pointer_params(fn)
            b = body(fn)
            new = _children_text(b, types, ptrs, rets, counts)
            if new != txt(b):
                edits.append(Edit(b.start_byte, b.end_byte, new))
        if not edits:
            return None
        names = {"expf": "`expf`→`__expf`", "fdividef": "float division→`__fdividef`", "rsqrtf": "`1/sqrtf`→`rsqrtf`"}
        changes = tuple(f"{names[k]} ({v}×)" for k, v in counts.items())
        return Rewrite(self.name, apply_edits(text, edits), changes)
