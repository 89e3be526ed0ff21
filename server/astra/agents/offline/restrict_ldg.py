"""`__restrict__` and `const` on pointer parameters, `__ldg` for read-only loads.

Only pointers the kernel provably never writes get `const` and `__ldg` (every use is a read
subscript); `__restrict__` promises no aliasing between the kernel's pointers, which is what the
harness spec's separate buffers test."""
from __future__ import annotations

from .base import Context, Edit, Rewrite, body, pointer_params, written_pointers
from .tree import apply_edits, is_lvalue, txt, walk
from . import base

LDG_TYPES = {"float", "double", "int", "unsigned int", "__half", "__nv_bfloat16", "float2", "float4", "int2",
             "int4", "uint2", "uint4", "__half2", "__nv_bfloat162", "char", "short", "long long"}


class RestrictLdg(base.Transform):
    name = "restrict_ldg"
    title = "__restrict__/const pointer parameters and __ldg read-only loads"
    expected = "lets the compiler use the read-only data path and keep loaded values in registers"

    def apply(self, text: str, ctx: Context) -> Rewrite | None:
        sc = base.scope(text, ctx.kernel)
        if sc is None:
            return None
        fn = sc.kernel
        ptrs = pointer_params(fn)
        written = written_pointers(fn, set(ptrs))
        edits, changes = [], []
        for p in ptrs.values():
            decl = p.node.child_by_field_name("declarator")
            if not p.restrict and decl is not None and decl.type == "pointer_declarator":
                star = decl.child(0)
                edits.append(Edit(star.end_byte, star.end_byte, " __restrict__"))
                changes.append(f"`__restrict__` on `{p.name}`")
            if not p.const and p.name not in written:
                t = p.node.child_by_field_name("type")
                edits.append(Edit(t.start_byte, t.start_byte, "const "))
                changes.append(f"`const` on read-only `{p.name}`")
        ldg = 0
        for n in walk(body(fn)):
            if n.type != "subscript_expression":
                continue
            arr = txt(n.child_by_field_name("argument"))
            p = ptrs.get(arr)
            if p is None or arr in written or p.elem not in LDG_TYPES or is_lvalue(n):
                continue
            parent = n.parent
            if parent is not None and parent.type == "pointer_expression":
                continue
            if parent is not None and parent.type == "argument_list" and parent.parent is not None and \
                    txt(parent.parent.child_by_field_name("function")) == "__ldg":
                continue
            edits.append(Edit(n.start_byte, n.end_byte, f"__ldg(&{txt(n)})"))
            ldg += 1
        if ldg:
            changes.append(f"{ldg} read-only load(s) through `__ldg`")
        if not edits:
            return None
        return Rewrite(self.name, apply_edits(text, edits), tuple(changes))
