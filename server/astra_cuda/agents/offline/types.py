"""Element types of a kernel's pointer parameters, in bytes.

Real kernels rarely spell `__half` or `float` where they use it: the element type hides behind a
typedef (`typedef __nv_bfloat16 floatX;`), a `using` alias, or a template parameter
(`scalar_t`, bound by the spec's `instantiate`). The size is found through those, and where the
file's own definitions disagree (a typedef chosen by `#ifdef`) the harness spec's element type
for that buffer decides — it is what the gate allocates.
"""
from __future__ import annotations

from tree_sitter import Node

from .tree import txt, walk

SIZES = {
    "__half": 2, "half": 2, "__nv_bfloat16": 2, "nv_bfloat16": 2, "float": 4, "double": 8,
    "__half2": 4, "half2": 4, "__nv_bfloat162": 4, "nv_bfloat162": 4, "float2": 8, "float4": 16,
    "double2": 16, "int": 4, "unsigned int": 4, "unsigned": 4, "int32_t": 4, "uint32_t": 4, "int64_t": 8,
    "uint64_t": 8, "long long": 8, "unsigned long long": 8, "short": 2, "int16_t": 2, "uint16_t": 2,
    "char": 1, "int8_t": 1, "uint8_t": 1, "unsigned char": 1, "signed char": 1, "bool": 1,
    "int2": 8, "int4": 16, "uint2": 8, "uint4": 16,
}
# Two-wide types: one of their elements is a pair of scalars (the vector width counts pairs).
PAIRS = {"__half2", "half2", "__nv_bfloat162", "nv_bfloat162", "float2"}
FLOATING = {"__half", "half", "__nv_bfloat16", "nv_bfloat16", "float", "double"}


def base_name(type_text: str) -> str:
    """`const floatX` -> `floatX`; `unsigned  int` -> `unsigned int`."""
    words = [w for w in type_text.replace("\n", " ").split() if w not in ("const", "volatile", "struct")]
    return " ".join(words)


def aliases(root: Node) -> dict[str, set[str]]:
    """Every non-pointer typedef and `using` alias in the file: name -> the types it stands for
    (more than one when `#if` branches define it differently)."""
    out: dict[str, set[str]] = {}
    for n in walk(root):
        if n.type == "type_definition":
            t = n.child_by_field_name("type")
            for d in n.children_by_field_name("declarator"):
                if d.type == "type_identifier" and t is not None:
                    out.setdefault(txt(d), set()).add(base_name(txt(t)))
        elif n.type == "alias_declaration":
            name, t = n.child_by_field_name("name"), n.child_by_field_name("type")
            if name is not None and t is not None and "*" not in txt(t) and "&" not in txt(t):
                out.setdefault(txt(name), set()).add(base_name(txt(t)))
    return out


def resolve(type_text: str, table: dict[str, set[str]], template_args: dict[str, str] | None = None) -> str | None:
    """The built-in type name behind `type_text`, or None when it is unknown or ambiguous."""
    name = base_name(type_text)
    seen = set()
    while name not in SIZES:
        if name in seen:
            return None
        seen.add(name)
        if template_args and name in template_args:
            name = base_name(template_args[name])
            continue
        options = table.get(name)
        if not options or len(options) != 1:
            return None
        name = next(iter(options))
    return name


def element_bytes(type_text: str, table: dict[str, set[str]], template_args: dict[str, str] | None,
                  spec_bytes: int | None) -> int | None:
    """Bytes of one element behind a pointer of `type_text`: the resolved type's size; failing
    that, the spec's element size for the buffer (None when neither is known)."""
    name = resolve(type_text, table, template_args)
    if name is not None:
        return SIZES[name]
    return spec_bytes


def is_floating(type_text: str, table: dict[str, set[str]], template_args: dict[str, str] | None) -> bool:
    name = resolve(type_text, table, template_args)
    return name in FLOATING if name is not None else False
