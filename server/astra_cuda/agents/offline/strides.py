"""Unit-stride specialization: a kernel taking element strides at run time gets a contiguous copy
of its body for the case the spec tests (stride 1), behind a runtime check.

    if (elem_stride == 1) { ...  x[row * ld + i]  ... }        // `i * elem_stride` -> `i`
    else                  { ...  x[row * ld + i * elem_stride]  ... }   // the original

Scalar parameters whose spec value is the literal 1 and that the kernel only multiplies with
qualify. The contiguous copy can then be vectorized; callers passing other strides run the
original code. The branch is uniform (a kernel argument), so barriers inside stay legal.
"""
from __future__ import annotations

from tree_sitter import Node

from . import base
from .base import Context, Edit, Rewrite, body
from .tree import apply_edits, assigned_names, line_indent, txt, unparenthesized, walk

INTEGER = {"int", "long", "long long", "unsigned", "unsigned int", "int64_t", "int32_t", "size_t",
           "unsigned long", "ptrdiff_t", "uint32_t", "uint64_t", "index_t"}


def _product_with(n: Node, names: set[str]) -> Node | None:
    """For `X * s` or `s * X` (s in names): X."""
    if n.type != "binary_expression" or txt(n.child_by_field_name("operator")) != "*":
        return None
    left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
    if unparenthesized(right).type == "identifier" and txt(unparenthesized(right)) in names:
        return left
    if unparenthesized(left).type == "identifier" and txt(unparenthesized(left)) in names:
        return right
    return None


class UnitStride(base.Transform):
    name = "unit_stride"
    title = "a contiguous path for element strides the spec fixes to 1 (runtime check)"
    note = "a contiguous path when the strides are 1, so the copy can use wide accesses"
    expected = "strided indexing hides contiguous rows from vectorization; the stride-1 copy can use wide accesses"
    # little faster alone (the same scalar accesses): what it is for is the vector path on top of it
    enables = ("vectorize", "vectorize64", "vectorize32")

    def rewrite(self, text: str, ctx: Context, sc: base.Scope, params: dict) -> Rewrite | None:
        fn = sc.kernel
        kb = body(fn)
        if "__shared__" in txt(kb) or "astra: contiguous copy" in txt(kb):
            return None
        from .tree import declared_name, params as fn_params
        ints = {}
        for p in fn_params(fn):
            name, is_ptr = declared_name(p.child_by_field_name("declarator"))
            typ = " ".join(w for w in txt(p.child_by_field_name("type")).split() if w != "const")
            if name and not is_ptr and typ in INTEGER:
                ints[name] = typ
        ones = {n for n in ints if ctx.scalar_exprs.get(n, "").strip() == "1"} - assigned_names(kb)
        edits, used = [], set()
        for n in walk(kb):
            x = _product_with(n, ones)
            if x is None:
                continue
            if any(e.start <= n.start_byte < e.end for e in edits):
                continue   # inside a product already rewritten
            stride = next(txt(unparenthesized(c)) for c in (n.child_by_field_name("left"), n.child_by_field_name("right"))
                          if unparenthesized(c).type == "identifier" and txt(unparenthesized(c)) in ones and c is not x)
            used.add(stride)
            inner = txt(x)
            edits.append(Edit(n.start_byte, n.end_byte,
                              inner if x.type in ("identifier", "number_literal", "parenthesized_expression",
                                                  "call_expression", "subscript_expression") else f"({inner})"))
        if not edits:
            return None
        data = text.encode("utf-8")
        open_, close = kb.children[0], kb.children[-1]
        inner_start, inner_end = open_.end_byte, close.start_byte
        first = next((c for c in kb.named_children if c.type != "comment"), None)
        ind = line_indent(data, first.start_byte) if first is not None else "  "
        rel = [Edit(e.start - inner_start, e.end - inner_start, e.text) for e in edits]
        original = data[inner_start:inner_end].decode("utf-8")
        contiguous = apply_edits(original, rel)
        deeper = lambda s: s.replace("\n" + ind, "\n" + ind + "  ").rstrip()  # noqa: E731
        cond = " && ".join(f"{s} == 1" for s in sorted(used))
        new_body = (f"\n{ind}// astra: contiguous copy for {', '.join(sorted(used))} == 1 (what the spec tests); "
                    f"the original for any other stride\n"
                    f"{ind}if ({cond}) {{{deeper(contiguous)}\n{ind}}} else {{{deeper(original)}\n{ind}}}\n"
                    + _closing_indent(data, close.start_byte))
        new = apply_edits(text, [Edit(inner_start, inner_end, new_body)])
        return Rewrite(self.name, new, (f"contiguous path when {cond} (the spec's value); strided accesses "
                                        f"`X * {'`/`'.join(sorted(used))}` read as `X` there",))


def _closing_indent(data: bytes, byte: int) -> str:
    return line_indent(data, byte)
