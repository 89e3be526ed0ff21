"""`__ldg` (the read-only data path) for loads from pointers the kernel declares `const T*
__restrict__` and never writes.

Only those: `__restrict__` and `const` are the user's promise that nothing else writes the data
while the kernel runs. The parameter list itself is never changed (the gate would refuse it, and
adding `__restrict__` would be a promise about the callers that Astra cannot check); kernels
without it are vectorized behind a runtime overlap check instead (vectorize.py)."""
from __future__ import annotations

from typing import Any

from . import base
from .base import Context, Edit, Rewrite, body, pointer_params, written_pointers
from .tree import apply_edits, is_lvalue, txt, walk

LDG_TYPES = {"float", "double", "int", "unsigned int", "__half", "__nv_bfloat16", "float2", "float4", "int2",
             "int4", "uint2", "uint4", "__half2", "__nv_bfloat162", "char", "short", "long long"}


class RestrictLdg(base.Transform):
    name = "restrict_ldg"
    title = "__ldg read-only loads from const __restrict__ pointers"
    note = "__ldg: read-only inputs (const __restrict__) load through the read-only cache"
    expected = "loads through the read-only data path the parameters' `const __restrict__` already allows"

    def rewrite(self, text: str, ctx: Context, sc: base.Scope, params: dict[str, Any]) -> Rewrite | None:
        fn = sc.kernel
        ptrs = pointer_params(fn)
        written = written_pointers(fn, set(ptrs))
        edits = []
        for n in walk(body(fn)):
            if n.type != "subscript_expression":
                continue
            arr = txt(n.child_by_field_name("argument"))
            p = ptrs.get(arr)
            if p is None or not (p.const and p.restrict) or arr in written or p.elem not in LDG_TYPES or is_lvalue(n):
                continue
            parent = n.parent
            if parent is not None and parent.type == "pointer_expression":
                continue
            if parent is not None and parent.type == "argument_list" and parent.parent is not None and \
                    txt(parent.parent.child_by_field_name("function")) == "__ldg":
                continue
            edits.append(Edit(n.start_byte, n.end_byte, f"__ldg(&{txt(n)})"))
        if not edits:
            return None
        return Rewrite(self.name, apply_edits(text, edits), (f"{len(edits)} read-only load(s) through `__ldg`",))
