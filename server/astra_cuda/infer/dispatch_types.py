"""What a dispatch macro around the launch binds its type name to (`scalar_t`: float where it
dispatches over float, else the first type its cases name), read through the macros it expands
to. Separate because it reads the launcher's macros, not the kernel's template."""
from __future__ import annotations

import re

from ..model import source, syntax
from ..model.source import Item, LaunchSite, SourceModel
from ..model.syntax import walk as _walk


DISPATCH_TYPE = "float"   # what a dispatch macro's scalar_t becomes in the proposal
_DISPATCH_NAMES = ("scalar_t", "scalar_type", "input_t", "output_t")


# torch's ScalarType names -> the C++ element type a dispatch macro binds for them
_SCALAR_TYPES = {"Float": "float", "Double": "double", "Half": "c10::Half", "BFloat16": "c10::BFloat16",
                 "Char": "int8_t", "Byte": "uint8_t", "Short": "int16_t", "Int": "int32_t", "Long": "int64_t",
                 "Float8_e4m3fn": "c10::Float8_e4m3fn", "Float8_e5m2": "c10::Float8_e5m2", "Bool": "bool"}
_SCALAR_CASE = re.compile(r"\bScalarType::(\w+)")


def dispatch_type(site: LaunchSite | None, site_model: SourceModel | None, items: list[Item]) -> str:
    """What the scalar_t of the dispatch macro around the launch is taken as: float where the
    macro dispatches over float (or is not read), else the first type its cases name (vLLM's
    VLLM_DISPATCH_QUANT_TYPES: Float8_e4m3fn, Char — a float there is no instance its kernel has)."""
    if site is None or site_model is None or "DISPATCH" not in site_model.text:
        return DISPATCH_TYPE
    macros = {next(iter(it.defines)): it.text for it in [*site_model.items, *items]
              if it.kind == "macro" and len(it.defines) == 1}
    root = source.parser().parse(site_model.text.encode("utf-8")).root_node
    line = site.span.start_line
    around = [n for n in _walk(root) if n.type == "call_expression" and n.start_point[0] <= line <= n.end_point[0]
              and (f := n.child_by_field_name("function")) is not None and "DISPATCH" in syntax.text(f)]
    for call in sorted(around, key=lambda n: n.start_byte, reverse=True):   # the innermost first
        cases = _macro_cases(syntax.text(syntax.field(call, "function")), macros, 0)
        if cases:
            if "Float" in cases or not any(c in _SCALAR_TYPES for c in cases):
                return DISPATCH_TYPE
            return next(_SCALAR_TYPES[c] for c in cases if c in _SCALAR_TYPES)
    return DISPATCH_TYPE


def _macro_cases(name: str, macros: dict[str, str], depth: int) -> list[str]:
    """The ScalarType cases a dispatch macro expands to, through the macros it names."""
    body = macros.get(name)
    if body is None or depth > 6:
        return []
    out = _SCALAR_CASE.findall(body)
    for word in re.findall(r"\b[A-Z][A-Z0-9_]+\b", body.split(")", 1)[-1] if "(" in body.split()[1] else body):
        if word != name and word in macros:
            out += [c for c in _macro_cases(word, macros, depth + 1) if c not in out]
    return list(dict.fromkeys(out))


def dispatch_names(arg: str) -> list[str]:
    """The names in `arg` that dispatch macros give the element type (`scalar_t`, apex's
    `scalar_t_0`, `scalar_t_1`)."""
    node = source.parse_expression(f"__astra_k<{arg}>")
    names = {syntax.text(n) for n in _walk(node) if n.type in ("identifier", "type_identifier")} if node else set()
    return sorted(n for n in names if n in _DISPATCH_NAMES or (n.startswith("scalar_t_") and n[9:].isdigit()))
